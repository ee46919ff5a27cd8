"""Values a program computes from constants alone, evaluated while it is being built with the
ops' own rules: a conditional whose predicate is one picks its branch then (control_flow.md)."""

from __future__ import annotations

import math

import numpy as np

from ..ir.default_programs import default_main_program
from ..ir.opdef import (
    COLLECTIVE,
    CONTROL_SLOT,
    HOST_CALLBACK,
    OPTIMIZER,
    RANDOM,
    STATEFUL,
    get_op_def,
)
from ..ir.program import Parameter
from ..ir.types import TensorType

# a value bigger than this is never folded: folding runs the op eagerly while building
_MAX_ELEMENTS = 4096
_MAX_DEPTH = 64
_IMPURE = (RANDOM, STATEFUL, COLLECTIVE, HOST_CALLBACK, OPTIMIZER)


def host_value(var, upto: int | None = None, loops=None) -> np.ndarray | None:
    """``var``'s value when the ops before now (the first ``upto`` ops of the block) compute
    it from constants alone (each value on the way written once, none fed, persistable or a
    parameter), else None.

    Inside an open ``While`` body (``loops``: the open bodies, innermost last; the program's
    by default) only values made in the innermost body fold: an outer value the body reads
    may be written later in the body, so it differs from one iteration to the next, while a
    value made in the body is made anew, by the same ops, before each iteration reads it."""
    block = default_main_program().current_block()
    if var.name not in block.vars:
        return None
    if loops is None:
        loops = getattr(block.program, "_open_whiles", ())
    outer = loops[-1].mark.names if loops else frozenset()
    ops = block.ops if upto is None else block.ops[:upto]
    return _value(block, ops, outer, var.name, {}, 0)


def _plain(var) -> bool:
    return (var is not None and not isinstance(var, Parameter) and not var.persistable
            and not var.is_data and not var.lod_level and not var.is_array
            and not var.selected_rows and var.shape is not None
            and all(d >= 0 for d in var.shape) and math.prod(var.shape) <= _MAX_ELEMENTS)


def _value(block, ops: list, outer, name: str, memo: dict, depth: int):
    if name in memo:
        return memo[name]
    memo[name] = None  # a cycle (an op reading what it writes) folds nothing
    var = block.vars.get(name)
    writers = [op for op in ops if name in op.output_arg_names]
    if depth > _MAX_DEPTH or name in outer or not _plain(var) or len(writers) != 1:
        return None
    op = writers[0]
    opdef = get_op_def(op.type, op.where)
    if opdef.regions or any(opdef.has_trait(t) for t in _IMPURE):
        return None
    if op.type == "shape":  # reads its input's static type, never its values
        source = block.vars.get(op.input("Input")[0])
        dims = None if source is None or source.shape is None else list(source.shape)
        if dims is None or -1 in dims or source.lod_level or source.is_array:
            return None
        memo[name] = np.asarray(dims, np.dtype(var.dtype))
        return memo[name]
    outs = {slot: [block.vars.get(n) for n in op.output(slot)] for slot in op.output_names}
    if not all(_plain(v) for vs in outs.values() for v in vs):
        return None
    ins = {}
    for slot in op.input_names:
        if slot == CONTROL_SLOT:
            continue
        ins[slot] = [_value(block, ops, outer, n, memo, depth + 1) for n in op.input(slot)]
        if any(v is None for v in ins[slot]):
            return None
    results = _apply(op, ins, {s: [TensorType(tuple(v.shape), v.dtype) for v in vs]
                               for s, vs in outs.items()})
    if results is None:
        return None
    for slot, vs in outs.items():
        for v, value in zip(vs, results.get(slot, [])):
            memo[v.name] = np.asarray(value)
    return memo.get(name)


def _apply(op, ins: dict, out_types: dict):
    """The op's rule run eagerly on host values (the interpreter's own arithmetic, so the
    folded value is what the step would compute); None when the rule cannot run here."""
    import jax

    from ..backends.lowering import apply_rule
    from ..backends.precision import graphc_x64
    from ..ops import import_lowerings
    import_lowerings()
    try:
        with graphc_x64(), jax.ensure_compile_time_eval():
            return apply_rule(op.type, op.attrs, ins, out_types, op.where)
    except Exception:  # noqa: BLE001 - an op that cannot fold is simply not folded
        return None
