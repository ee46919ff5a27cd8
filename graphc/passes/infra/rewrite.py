"""Edits shared by the fusion passes (all through the Rewriter): replace a group of ops by
one op that defines their surviving values, and rebuild one op under another type."""

from __future__ import annotations

from ...ir.graph import Op, Value
from ...ir.opdef import CONTROL_SLOT, get_op_def
from ...ir.types import dims_compatible
from .base import PassContext


def control_deps(ops: list[Op], dropped: set[Value]) -> list[Value]:
    """The control dependencies of ``ops``, for the op replacing them (minus dropped values)."""
    deps: list[Value] = []
    for op in ops:
        for v in op.inputs.get(CONTROL_SLOT, []):
            if v not in dropped and v not in deps:
                deps.append(v)
    return deps


def replace_ops(ctx: PassContext, ops: list[Op], op_type: str, ins: dict, outs: dict,
                attrs: dict, drop: list[Value] = ()) -> Op:
    """Replace ``ops`` (in program order) by one ``op_type`` op that defines their surviving
    output values itself, so their readers are untouched; ``drop`` are the values only the
    replaced ops read. Slots given None are left out. The new op's inferred types are
    checked against the values it takes over before the first edit."""
    ins = {k: v for k, v in ins.items() if v is not None}
    outs = {k: v for k, v in outs.items() if v is not None}
    opdef = get_op_def(op_type)
    inferred = opdef.infer_types({k: [v.type] for k, v in ins.items()},
                                 opdef.normalize_attrs(dict(attrs), op_type), op_type)
    for slot, v in outs.items():
        t = inferred[slot][0]
        assert t.dtype == v.type.dtype and dims_compatible(t.shape, v.type.shape), \
            (op_type, slot, t, v.type)
    rw = ctx.rewriter
    for op in reversed(ops):  # readers first
        rw.erase_op(op, erase_outputs=False)
    for v in drop:
        rw.erase_value(v)
    return rw.create_op(op_type, ins, outs, attrs, derived_from=ops)


def retype(ctx: PassContext, op: Op, new_type: str, **attrs) -> Op:
    """The same op under ``new_type``: same inputs (control deps too), outputs and
    attributes, plus ``attrs``."""
    inputs = {s: list(vs) for s, vs in op.inputs.items()}
    outputs = {s: list(vs) for s, vs in op.outputs.items()}
    inputs.setdefault(CONTROL_SLOT, [])
    rw = ctx.rewriter
    rw.erase_op(op, erase_outputs=False)
    return rw.create_op(new_type, inputs, outputs, {**op.attrs, **attrs}, derived_from=[op])
