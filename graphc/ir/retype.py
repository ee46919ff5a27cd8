"""Re-typing a built program: new types for some variables, the ops computed from them
inferred again in program order (array_mix, feed_shapes' copies, LoD demanded of a feed)."""

from __future__ import annotations

from .errors import GraphcError, ShapeError
from .opdef import get_op_def
from .types import TensorType, dims_compatible


class ReinferError(ShapeError):
    """An op refused the new types of its inputs (``op``, ``cause`` its error), or would
    give its ``output`` a type the re-typing does not allow."""

    def __init__(self, op, cause: Exception, output: str | None = None):
        super().__init__(str(cause))
        self.op, self.cause, self.output = op, cause, output


def reinfer(program, retyped: dict[str, TensorType], *, skip=(), keep=None, also=()
            ) -> dict[str, TensorType]:
    """The types of ``retyped`` and of every variable an op computes from them, inferred
    again in program order (block by block); the program is not changed (``apply`` does).

    ``skip``: op types not inferred again (an array's writers, whose output is the array
    itself). ``keep(op, var, old, new)`` decides what an output becomes when inference
    gives it another type: a type, or None to leave it; it raises to refuse (default: the
    new type, parameters left as they are). An op that refuses its new inputs
    raises ReinferError naming it. ``also``: ops inferred again whatever their inputs (their
    attributes changed)."""
    keep = keep or _any_but_parameters
    types = dict(retyped)
    for block in program.blocks:
        for op in block.ops:
            if op.type in skip or not (types.keys() & set(op.input_arg_names) or
                                       any(op is o for o in also)):
                continue
            ins = {slot: [types.get(n) or block._find_var(n).type for n in names]
                   for slot, names in op.inputs.items()}
            try:
                inferred = get_op_def(op.type, op.where).infer_types(ins, op.attrs, op.where)
            except GraphcError as exc:
                raise ReinferError(op, exc) from None
            for slot, names in op.outputs.items():
                for name, t in zip(names, inferred.get(slot) or ()):
                    var = block._find_var(name)
                    if var is None or var.shape is None and name not in types:
                        continue
                    old = types.get(name) or var.type
                    if t != old and (t := keep(op, var, old, t)) is not None and t != old:
                        types[name] = t
    return types


def apply(program, types: dict[str, TensorType]) -> None:
    """Give the variables of every block the types ``reinfer`` computed."""
    for block in program.blocks:
        for name, t in types.items():
            var = block.vars.get(name)
            if var is not None:
                var._set_type(t.shape, t.dtype, t.lod_level, t.array, t.element_lod)
    program._bump()


def _any_but_parameters(op, var, old, new):
    # (an optimizer's update writes a parameter: its type is the startup program's; other
    # persistable outputs, a unit test's values read back from the scope, follow)
    from .program import Parameter
    return None if isinstance(var, Parameter) else new


def lod_only(op, var, old, new):
    """A ``keep`` for re-typing LoD levels only: an output may gain or lose a LoD (or an
    array its elements'); another dtype, kind or an incompatible shape refuses."""
    if old.dtype != new.dtype or old.array != new.array or old.sparse != new.sparse or \
            not dims_compatible(tuple(old.shape), tuple(new.shape)):
        raise ReinferError(op, ShapeError(f"{op.where} would then give '{var.name}' the type "
                                          f"{new} instead of {old}"), var.name)
    if (old.lod_level, old.element_lod) == (new.lod_level, new.element_lod):
        return None
    return old._replace(lod_level=new.lod_level, element_lod=new.element_lod)
