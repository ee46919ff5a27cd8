"""Lowering rules for fused_elemwise_activation and its gradient.

Each fused rule calls the rules of the ops it replaces, in their order and with the values
they read, so a fused graph computes exactly what the unfused one did.
"""

from __future__ import annotations

from ...backends.lowering import apply_rule, lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ...ir.opdef import get_op_def
from ...ir.types import TensorType
from .defs import BINARY, FUSED_GRAD_OP, FUSED_OP, activation_attrs, functors_of

_BINARY_GRAD = BINARY + "_grad"


def _sub(c, op_type: str, attrs: dict, ins: dict, wanted=None) -> dict:
    """Run the rule of ``op_type`` on arrays (slot -> array or None), as the interpreter
    would for that op alone; ``wanted`` limits the outputs (as a grad op's output slots)."""
    where = f"{c.where} ({op_type})"
    opdef = get_op_def(op_type, where)
    attrs = opdef.normalize_attrs(attrs, where)
    ins = {k: [v] for k, v in ins.items() if v is not None}
    in_types = {k: [TensorType(tuple(v.shape), str(v.dtype))] for k, (v,) in ins.items()}
    out_types = opdef.infer_types(in_types, attrs, where)
    if wanted is not None:
        out_types = {k: out_types[k] for k in wanted}
    result = apply_rule(op_type, attrs, ins, out_types, where, c.seed_key, c.step, c.replicas)
    return {k: v[0] for k, v in result.items()}


def _act_needs_input(act: str) -> bool:
    """Whether the activation's grad reads its input X (not only its output Out)."""
    return "X" in get_op_def(act).grad_read_slots


@lowering(FUSED_OP)
def _fused(c, X, Y):
    act, add_first, operand = functors_of(c.attrs)
    act_attrs, add_attrs = activation_attrs(c.attrs, act), {"axis": c["axis"]}
    if add_first:  # Out = act(X + Y)
        inter = _sub(c, BINARY, add_attrs, {"X": X, "Y": Y})["Out"]
        out = _sub(c, act, act_attrs, {"X": inter})["Out"]
    else:  # Out = X + act(Y), or act(X) + Y
        inter = _sub(c, act, act_attrs, {"X": Y if operand == "Y" else X})["Out"]
        ins = {"X": X, "Y": inter} if operand == "Y" else {"X": inter, "Y": Y}
        out = _sub(c, BINARY, add_attrs, ins)["Out"]
    return {"Out": out, "IntermediateOut": inter}


@lowering(FUSED_GRAD_OP)
def _fused_grad(c, **kw):
    act, add_first, operand = functors_of(c.attrs)
    act_attrs, add_attrs = activation_attrs(c.attrs, act), {"axis": c["axis"]}
    out, inter = kw.get("Out"), kw.get("IntermediateOut")
    dout, dinter_extra = kw["Out" + GRAD_SUFFIX], kw.get("IntermediateOut" + GRAD_SUFFIX)
    want = [s for s in ("X" + GRAD_SUFFIX, "Y" + GRAD_SUFFIX) if s in c.out_types]
    act_grad = act + "_grad"
    if add_first:  # Out = act(X + Y): act's grad, then the add's
        if inter is None and (out is None or _act_needs_input(act)):
            inter = _sub(c, BINARY, add_attrs, {"X": kw["X"], "Y": kw["Y"]})["Out"]
        dinter = _sub(c, act_grad, act_attrs,
                      {"X": inter, "Out": out, "Out@GRAD": dout})["X@GRAD"]
        if dinter_extra is not None:
            dinter = dinter + dinter_extra
        return _sub(c, _BINARY_GRAD, add_attrs,
                    {"X": kw["X"], "Y": kw["Y"], "Out@GRAD": dinter}, want)
    # Out = X + act(Y), or act(X) + Y: the add's grad, then act's on the unary operand
    other = "Y" if operand == "X" else "X"
    a = kw.get(operand)
    if inter is None:
        inter = _sub(c, act, act_attrs, {"X": a})["Out"]
    d_inter_slot, d_other_slot = operand + GRAD_SUFFIX, other + GRAD_SUFFIX
    wanted = [d_inter_slot] + [d_other_slot] * (d_other_slot in want)
    grads = _sub(c, _BINARY_GRAD, add_attrs,
                 {other: kw[other], operand: inter, "Out@GRAD": dout}, wanted)
    result = {d_other_slot: grads[d_other_slot]} if d_other_slot in want else {}
    if d_inter_slot in want:
        dinter = grads[d_inter_slot]
        if dinter_extra is not None:
            dinter = dinter + dinter_extra
        result[d_inter_slot] = _sub(c, act_grad, act_attrs,
                                    {"X": a, "Out": inter, "Out@GRAD": dinter})["X@GRAD"]
    return result
