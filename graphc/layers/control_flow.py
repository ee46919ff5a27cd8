"""Fluid's loops and tensor arrays: ``While`` (its block becomes the body region of one
``while`` op), ``while_loop``, ``create_array``/``array_write``/``array_read``/``array_length``.

Paddle's ops inside ``with While(cond).block():`` write outer variables in place; here those
variables are the loop's carried values (docs/control_flow.md).
"""

from __future__ import annotations

import math

from ..ir import unique_name
from ..ir.default_programs import default_main_program
from ..ir.errors import ArgumentTypeError, ArgumentValueError, ProgramError, ShapeError
from ..ir.program import Variable
from ..ir.regions import BlockMark, body_text, drop_locals, take
from ..ir.source import user_source
from ..ir.types import FLOAT_DTYPES, normalize_dtype
from . import array_mix
from .helper import LayerHelper, check_variable

_COMPARES = {"less_than": (lambda a, b, s: math.ceil((b - a) / s)),
             "less_equal": (lambda a, b, s: math.floor((b - a) / s) + 1)}


def _check_cond(layer: str, cond) -> None:
    check_variable(layer, "cond", cond)
    if cond.dtype != "bool" or cond.shape is None or math.prod(cond.shape) != 1 or \
            cond.is_array:
        raise ArgumentTypeError(f"{layer}: cond ({cond.name}) must be a bool tensor of one "
                                f"element, got {cond.dtype} {cond.shape} at {user_source()}")


class While:
    """``with While(cond).block():`` the body, repeated while ``cond`` (a bool of one element,
    which the body must update) is true. ``max_iterations`` (graphc's) bounds the loop for
    its gradient; without it graphc derives the trip count of a counter loop (``i < n`` with
    constants) or uses 128 (docs/control_flow.md)."""

    def __init__(self, cond, is_test=False, name=None, *, max_iterations=None):
        _check_cond("While", cond)
        if max_iterations is not None and not (isinstance(max_iterations, int)
                                               and max_iterations >= 1):
            raise ProgramError(f"While: max_iterations must be a positive int, got "
                               f"{max_iterations!r}")
        self.cond, self.is_test, self.max_iterations = cond, is_test, max_iterations
        self.helper = LayerHelper("while", name)
        self._used = False

    def block(self):
        if self._used:
            raise ProgramError("While.block() can be entered once per While")
        self._used = True
        return _WhileBlock(self)


class _WhileBlock:
    def __init__(self, loop: While):
        self.loop = loop

    def __enter__(self):
        program = default_main_program()
        self.source = user_source()
        self.mark = BlockMark.of(program.current_block())
        program._open_regions = getattr(program, "_open_regions", 0) + 1
        # the open bodies, innermost last: values read inside one fold only when made in it
        program._open_whiles = (*getattr(program, "_open_whiles", ()), self)
        return self

    def declare_outer(self, *variables) -> None:
        """Variables created inside the block that belong to the enclosing one (Paddle's
        arrays created "out of the while" by dynamic_decode): writes to them are carried."""
        mark = self.mark
        self.mark = BlockMark(mark.block, mark.start,
                              mark.names | {v.name for v in variables})

    def __exit__(self, exc_type, exc, tb):
        program = self.mark.block.program
        program._open_regions -= 1
        program._open_whiles = program._open_whiles[:-1]
        captured = take(self.mark)
        if exc_type is None:
            _finish_while(self.loop, self.mark, captured, self.source,
                          outermost=program._open_regions == 0)
        return False


def _written_before(block, upto: int, name: str) -> bool:
    var = block.var(name)
    if var.is_data or var.persistable:
        return True
    return any(name in op.output_arg_names for op in block.ops[:upto])


def _last_writer(block, upto: int, name: str):
    return next((op for op in reversed(block.ops[:upto]) if name in op.output_arg_names), None)


def _constant(block, upto: int, name: str):
    op = _last_writer(block, upto, name)
    if op is not None and op.type == "fill_constant" and not op.input_arg_names:
        return op.attrs.get("value")
    return None


def _trip_count(block, mark, captured, cond_name: str) -> int:
    """The trip count of a counter loop (``cond = i < n``, ``increment(i, s)`` in the body,
    i and n constants before the loop), else 0 (not known)."""
    compare = next((op for op in reversed(captured.ops) if cond_name in op.output_arg_names),
                   None)
    if compare is None or compare.type not in _COMPARES:
        return 0
    i, n = compare.input("X")[0], compare.input("Y")[0]
    steps = [op.attrs.get("step", 1.0) for op in captured.ops
             if op.type == "increment" and op.input("X") == [i] and op.output("Out") == [i]]
    writes_i = sum(i in op.output_arg_names for op in captured.ops)
    i0, limit = _constant(block, mark.start, i), _constant(block, mark.start, n)
    if len(steps) != 1 or writes_i != 1 or i0 is None or limit is None or n in \
            captured.writes or steps[0] <= 0:
        return 0
    return max(int(_COMPARES[compare.type](i0, limit, steps[0])), 1)


def _finish_while(loop: While, mark: BlockMark, captured, source, outermost: bool) -> None:
    block, cond = mark.block, loop.cond
    if cond.name not in captured.writes:
        raise ProgramError(f"While at {source}: the body never updates its condition "
                           f"'{cond.name}', so the loop would never end (write it with "
                           "less_than(..., cond=) or assign)")
    carried = list(captured.writes)
    read_only = [n for n in captured.reads if n not in carried]
    # a carried variable with no value before the loop starts as zeros (Paddle's step
    # scopes would read it uninitialised; graphc gives it a defined value)
    inits = []
    for name in carried:
        var = block.var(name)
        if not _written_before(block, mark.start, name):
            if name in captured.reads:
                raise ProgramError(f"While at {source}: the body reads '{name}' before any "
                                   "op gives it a value")
            inits.append(var)
    helper = loop.helper
    for var in inits:
        _zeros_into(helper, var, source)
        if var.is_array:  # the body's first write made a new array: it extends the carried one
            for op in captured.ops:
                if op.type == "write_to_array" and op.output("Out") == [var.name]:
                    if "Array" not in op.inputs:
                        op.inputs["Array"] = [var.name]
                    break
    float_carry = [n for n in carried if _is_float(block.var(n))]
    aux = [n for n in carried if n not in float_carry]
    xs = [n for n in read_only if _is_float(block.var(n))]
    xaux = [n for n in read_only if n not in xs]
    order = [*float_carry, *aux, *xs, *xaux]
    body = body_text(block, captured.ops, [block.var(n) for n in order],
                     [*float_carry, *aux], "body", f"While at {source}")
    bound = loop.max_iterations or _trip_count(block, mark, captured, cond.name)
    # backward follows one writer per differentiable variable, and the loop's gradient
    # replays it from the values it started with: at the outermost loop, the carried
    # values before it take names of their own (the loop's outputs keep the user's
    # variables); inner loops are differentiated inside their region
    operands, aux_operands = list(float_carry), list(aux)
    if outermost:
        operands = [_rename_before(helper, block, n) for n in float_carry]
        aux_operands = [_rename_before(helper, block, n) for n in aux]
    helper.append_op("while", {"Carry": [block.var(n) for n in operands],
                               "Aux": [block.var(n) for n in aux_operands],
                               "X": [block.var(n) for n in xs],
                               "XAux": [block.var(n) for n in xaux]},
                     {"Out": [block.var(n) for n in float_carry],
                      "AuxOut": [block.var(n) for n in aux]},
                     {"body": body, "cond_index": aux.index(cond.name),
                      "max_iterations": bound})
    drop_locals(mark, captured)


def _is_float(var) -> bool:
    return var.dtype in FLOAT_DTYPES


def _zeros_into(helper, var, source) -> None:
    if var.is_array:
        # an element whose batch size is unknown takes it from the Variable its maker named
        # (dynamic_decode: the decoder's `finished`), as fill_constant_batch_size_like does
        like = getattr(var, "_batch_like", None)
        ins = {"Input": like} if like is not None and var.shape[1:2] == (-1,) else {}
        attrs = {"shape": list(var.shape), "dtype": var.dtype}
        if var.element_lod:  # arr2lod: LoD steps written in the body
            attrs["element_lod"] = var.element_lod
        helper.append_op("empty_array", ins, {"Out": var}, attrs)
        return
    if var.shape is None or any(d < 0 for d in var.shape):
        raise ProgramError(f"While at {source}: '{var.name}' is written in the body but has "
                           f"no value before the loop and no static shape ({var.shape}); "
                           "give it one before the loop (fill_constant, assign)")
    helper.append_op("fill_constant", {}, {"Out": var},
                     {"shape": list(var.shape), "dtype": var.dtype, "value": 0.0})


def _rename_before(helper, block, name: str) -> str:
    """A variable holding ``name``'s value before the loop, which nothing later writes: the
    ops so far that read or write ``name`` use a new variable instead (a fed or persistable
    ``name`` keeps its name: a copy is taken)."""
    var = block.var(name)
    new = unique_name.generate(f"{name}.before_while")
    copy = block.create_var(new, var.shape, var.dtype, lod_level=var.lod_level,
                            stop_gradient=var.stop_gradient)
    copy.is_array, copy.element_lod = var.is_array, var.element_lod
    if var.is_data or var.persistable:
        helper.append_op("assign", {"X": var}, {"Out": copy})
        return new
    for op in block.ops:
        for slots in (op.inputs, op.outputs):
            for slot, names in slots.items():
                if name in names:
                    slots[slot] = [new if n == name else n for n in names]
    block.program._bump()
    return new


def while_loop(cond, body, loop_vars, is_test=False, name=None):
    """Paddle 1.8's ``while_loop``: ``loop_vars = body(*loop_vars)`` while
    ``cond(*loop_vars)``; returns the final ``loop_vars``. A body that changes a loop
    variable's shape or dtype on its first iteration only (Paddle allows it) has that
    iteration built before the loop when the condition is known true while building."""
    if not callable(cond) or not callable(body):
        raise ArgumentTypeError("while_loop: cond and body must be callables, got "
                                f"{type(cond).__name__} and {type(body).__name__}")
    if not isinstance(loop_vars, list | tuple):
        raise ArgumentTypeError(f"while_loop: loop_vars must be a list or tuple, got "
                                f"{type(loop_vars).__name__}")
    if not loop_vars:
        raise ArgumentValueError("while_loop: loop_vars is empty")
    return _while_loop(cond, body, loop_vars, is_test, name, may_peel=True)


class _PeelFirst(Exception):  # noqa: N818 - a signal, caught in _while_loop
    """The body's first iteration goes before the loop: its ops and what it returned."""

    def __init__(self, ops: list, out: list):
        super().__init__("peel")
        self.ops, self.out = ops, out


def _same_type(a, b) -> bool:
    return a.dtype == b.dtype and a.is_array == b.is_array and a.shape is not None and \
        b.shape is not None and len(a.shape) == len(b.shape) and \
        all(x == y or -1 in (x, y) for x, y in zip(a.shape, b.shape))


def _while_loop(cond, body, loop_vars, is_test, name, may_peel: bool):
    from .tensor import assign
    from .utils import flatten, pack_sequence_as
    flat = flatten(list(loop_vars))
    for v in flat:
        check_variable("while_loop", "loop_vars", v)
    pre = cond(*loop_vars)
    _check_cond("while_loop", pre)
    block = default_main_program().current_block()
    params = {n for n, v in block.vars.items() if v.persistable}
    loop = While(pre, is_test, name)
    try:
        with loop.block() as window:
            out = body(*loop_vars)
            out = list(out) if isinstance(out, list | tuple) else [out]
            try:
                out_flat = flatten(out)
            except Exception:  # noqa: BLE001  (any malformed structure: say what was expected)
                out_flat = None
            if out_flat is None or len(out_flat) != len(flat):
                got = "a malformed structure" if out_flat is None else \
                    f"{len(out)} values ({len(out_flat)} tensors)"
                raise ArgumentValueError(f"while_loop: body returns {got} for "
                                         f"{len(loop_vars)} loop_vars ({len(flat)} tensors); "
                                         "it must return the same structure")
            for new in out_flat:
                check_variable("while_loop", "body output", new)
            changed = [(k, o, n) for k, (o, n) in enumerate(zip(flat, out_flat))
                       if not _same_type(o, n)]
            if changed:
                _peel_or_refuse(block, window.mark, params, changed, pre, may_peel, out)
            for old, new in zip(flat, out_flat):
                if new.name != old.name:
                    assign(new, old)
            now = cond(*pack_sequence_as(list(loop_vars), flat))
            _check_cond("while_loop", now)
            assign(now, pre)
    except _PeelFirst as peel:
        # the first iteration, built as straight-line ops; the loop runs on its results
        block.ops.extend(peel.ops)
        block.program._bump()
        return _while_loop(cond, body, peel.out, is_test, name, may_peel=False)
    return pack_sequence_as(list(loop_vars), flat)


def _peel_or_refuse(block, mark, params, changed, pre, may_peel: bool, out) -> None:
    """A body changing a loop variable's type: its first iteration is built before the loop
    (``_PeelFirst``) when the loop surely runs it (``pre`` known true while building, the
    body making no state, which a second build would duplicate); else a ShapeError."""
    from .host_fold import host_value
    k, old, new = changed[0]
    made = [n for n, v in block.vars.items() if v.persistable and n not in params]
    # the condition as it is before the loop: in the body enclosing it, if any
    enclosing = block.program._open_whiles[:-1]
    runs = host_value(pre, mark.start, enclosing) if may_peel and not made else None
    if runs is not None and bool(runs.reshape(-1)[0]):
        raise _PeelFirst(list(block.ops[mark.start:]), out)
    why = ("the body creates state (" + ", ".join(made) + ")" if made else
           "it changes again on the next iteration" if not may_peel else
           "the loop's condition is not known while building")
    raise ShapeError(f"while_loop: the body turns loop variable {k} ({old.name}) from "
                     f"{old.dtype}{list(old.shape or [])} into {new.dtype}"
                     f"{list(new.shape or [])}; a loop carries each value in one type (XLA's "
                     f"while_loop). graphc builds a first iteration that changes the type "
                     f"before the loop only when the loop surely runs it, and not here: {why} "
                     f"(at {user_source()})")


# -- tensor arrays ---------------------------------------------------------------------
def create_array(dtype, *, capacity=None):
    """An empty tensor array of ``dtype`` (its element shape is its first write's).
    ``capacity`` (graphc's) is the most elements it can hold: 128 when not given."""
    if capacity is not None and not (isinstance(capacity, int) and capacity >= 1):
        raise ProgramError(f"create_array: capacity must be a positive int, got {capacity!r}")
    helper = LayerHelper("array")
    var = helper.main_program.current_block().create_var(
        unique_name.generate("array"), None, normalize_dtype(dtype))
    var.is_array = True
    var._array_capacity = capacity
    return var


def _check_array(layer: str, array) -> None:
    if not isinstance(array, Variable):
        raise ProgramError(f"{layer}: 'array' must be a Variable, got {type(array).__name__}")
    if not array.is_array:
        raise ProgramError(f"{layer}: array ({array.name}) is not a tensor array (make one "
                           "with create_array)")


def _check_index(layer: str, i) -> None:
    check_variable(layer, "i", i)
    if i.dtype not in ("int32", "int64") or i.shape is None or math.prod(i.shape) != 1:
        raise ProgramError(f"{layer}: i ({i.name}) must be an integer tensor of one element, "
                           f"got {i.dtype} {i.shape}")


def array_write(x, i, array=None):
    """Write ``x`` at index ``i`` of ``array`` (a new array when None); returns the array."""
    check_variable("array_write", "x", x)
    _check_index("array_write", i)
    helper = LayerHelper("array_write")
    if array is None:
        array = create_array(x.dtype)
    _check_array("array_write", array)
    ins = {"X": x, "I": i}
    attrs = {}
    if array_mix.mixes(array, x):  # dense elements so far, now a LoD value of their rows
        source = user_source()
        array_mix.promote(helper.main_program.current_block(), array, x.lod_level,
                          "array_write" + (f" at {source}" if source else ""))
    if array.shape is not None:
        # backward follows one writer per variable: outside a region the array's value
        # before this write takes a name of its own (inside one, the body is SSA already)
        block = helper.main_program.current_block()
        before = array.name
        if not getattr(helper.main_program, "_open_regions", 0):
            before = _rename_before(helper, block, array.name)
        ins["Array"] = block.var(before)
    else:
        attrs["capacity"] = getattr(array, "_array_capacity", None) or 0
        if array.dtype != x.dtype:
            raise ProgramError(f"array_write: x is {x.dtype} but the array ({array.name}) "
                               f"holds {array.dtype}")
    helper.append_op("write_to_array", ins, {"Out": array}, attrs)
    return array


def array_read(array, i):
    """Element ``i`` of ``array``."""
    _check_array("array_read", array)
    _check_index("array_read", i)
    if array.shape is None:
        raise ProgramError(f"array_read: array ({array.name}) has no element written yet")
    helper = LayerHelper("array_read")
    out = helper.create_variable_for_type_inference(array.dtype)
    helper.append_op("read_from_array", {"X": array, "I": i}, {"Out": out})
    return out


def array_length(array):
    """The number of elements of ``array`` (one past the highest index written), int64 [1]."""
    _check_array("array_length", array)
    helper = LayerHelper("array_length")
    out = helper.create_variable_for_type_inference("int64")
    out.stop_gradient = True
    if array.shape is None:
        helper.append_op("fill_constant", {}, {"Out": out},
                         {"shape": [1], "dtype": "int64", "value": 0.0})
        return out
    helper.append_op("lod_array_length", {"X": array}, {"Out": out})
    return out


__all__ = ["While", "while_loop", "create_array", "array_write", "array_read",
           "array_length"]
