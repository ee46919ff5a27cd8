"""Tensor arrays that mix dense rows and LoD values: a LoD write into an array of dense
elements makes it an array of LoD values, retyping what was built from it (control_flow.md)."""

from __future__ import annotations

from ..ir.errors import ShapeError
from ..ir.opdef import get_op_def
from ..ir.types import dims_compatible

# ops whose output is the array itself: their types follow the array's
_ARRAY_WRITERS = ("write_to_array",)


def mixes(array, x) -> bool:
    """Whether writing ``x`` into ``array`` (of dense elements) makes it an array of LoD
    values: ``x`` is a LoD value whose rows (shape past the first dimension) and dtype are
    the elements'."""
    if not (array.shape is not None and array.is_array and not array.element_lod
            and x.lod_level and x.shape is not None and x.dtype == array.dtype):
        return False
    element = tuple(array.shape[1:])
    return len(element) == len(x.shape) and dims_compatible(tuple(x.shape[1:]), element[1:])


def _family(program, name: str) -> set[str]:
    """``name`` and the variables holding the same array before or after a write or a copy
    (an array written outside a region gets a new name per value, control_flow.py
    _rename_before; Paddle's format copies a loop's carried arrays)."""
    family, grew = {name}, True
    while grew:
        grew = False
        for block in program.blocks:
            for op in block.ops:
                if op.type in _ARRAY_WRITERS or op.type == "assign":  # a copy: one array
                    linked = set(op.input("Array") if op.type in _ARRAY_WRITERS else
                                 op.input("X")) | set(op.output("Out"))
                    if linked & family and not linked <= family:
                        family |= linked
                        grew = True
    return family


def promote(block, array, level: int, where: str) -> None:
    """Make ``array`` (and its other names) an array of level-``level`` LoD values: its
    dense elements are stored as one-row sequences, its reads give LoD values, and the ops
    built on those reads are inferred again. An op that takes a dense value but refuses the
    LoD one, or whose outputs would change more than their LoD level, is a ShapeError."""
    program = block.program
    family = _family(program, array.name)
    for b in program.blocks:
        for name in family:
            var = b.vars.get(name)
            if var is not None and var.is_array:
                var._set_type(element_lod=level)
    changed: set[str] = set()
    for b in program.blocks:
        for op in b.ops:
            if op.type == "read_from_array" and set(op.input("X")) & family:
                for name in op.output("Out"):
                    b._find_var(name)._set_type(lod_level=level)
                    changed.add(name)
            elif op.type not in _ARRAY_WRITERS and changed & set(op.input_arg_names):
                _infer_again(b, op, changed, array.name, where)


def _infer_again(block, op, changed: set[str], array: str, where: str) -> None:
    why = (f"{where}: writing a LoD value makes the array {array} (whose first elements were "
           f"dense rows) an array of LoD values, so its reads become LoD values")
    in_types = {slot: [block._find_var(n).type for n in names]
                for slot, names in op.inputs.items()}
    try:
        inferred = get_op_def(op.type, op.where).infer_types(in_types, op.attrs, op.where)
    except ShapeError as exc:
        raise ShapeError(f"{why}; {op.where} does not take that: {exc}") from None
    for slot, names in op.outputs.items():
        for name, t in zip(names, inferred.get(slot) or ()):
            var = block._find_var(name)
            if var is None or var.type == t:
                continue
            if var.dtype != t.dtype or var.is_array != t.array or var.shape is None or \
                    not dims_compatible(tuple(var.shape), tuple(t.shape)):
                raise ShapeError(f"{why}; {op.where} would then give '{name}' the type {t} "
                                 f"instead of {var.type}")
            if (var.lod_level, var.element_lod) != (t.lod_level, t.element_lod):
                var._set_type(lod_level=t.lod_level, element_lod=t.element_lod)
                changed.add(name)
