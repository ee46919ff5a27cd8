"""Lowering rules for fused_batch_norm_act and its gradient (from the fuse-bn-act pass).

Each applies the rules of the ops it replaced, in their order and with their output casts, so
a fused graph computes exactly what the unfused one did (bit for bit in the interpreter).
"""

from __future__ import annotations

from ...backends.lowering import apply_rule, lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ...ir.opdef import get_op_def
from ...ir.types import TensorType
from .defs import BN_ATTRS


def run_as(c, op_type: str, attr_names, ins: dict, out_types: dict) -> dict:
    """Run the rule of ``op_type`` as the unfused op would have run (apply_rule casts too)."""
    attrs = {k: c.attrs[k] for k in attr_names}
    ins = {slot: [v] for slot, v in ins.items() if v is not None}
    out = apply_rule(op_type, attrs, ins, out_types, c.where, c.seed_key, c.step, c.replicas)
    return {slot: vals[0] for slot, vals in out.items()}


def type_of(arr) -> list[TensorType]:
    return [TensorType(tuple(arr.shape), str(arr.dtype))]


def _act_attrs(act: str) -> tuple[str, ...]:
    return tuple(get_op_def(act).attrs)


@lowering("fused_batch_norm_act")
def _fused_batch_norm_act(c, X, Scale, Bias, Mean, Variance):
    act = c["act_type"]
    bn = run_as(c, "batch_norm", BN_ATTRS,
              dict(X=X, Scale=Scale, Bias=Bias, Mean=Mean, Variance=Variance), c.out_types)
    y = run_as(c, act, _act_attrs(act), {"X": bn["Y"]}, {"Out": c.out_types["Y"]})["Out"]
    return {**bn, "Y": y}


@lowering("fused_batch_norm_act_grad")
def _fused_batch_norm_act_grad(c, **kw):
    act = c["act_type"]
    y, dy = kw["Y"], kw["Y" + GRAD_SUFFIX]
    # leaky_relu's grad reads X; for alpha >= 0 (the pass checks) X > 0 exactly where Y > 0,
    # and the gradient depends on nothing else, so Y stands in for X.
    act_ins = {"X" if act == "leaky_relu" else "Out": y, "Out" + GRAD_SUFFIX: dy}
    d_inter = run_as(c, act + "_grad", _act_attrs(act), act_ins,
                   {"X" + GRAD_SUFFIX: type_of(y)})["X" + GRAD_SUFFIX]
    bn_ins = {s: kw.get(s) for s in ("X", "Scale", "Bias", "Mean", "Variance", "SavedMean",
                                     "SavedVariance")}
    bn_ins["Y" + GRAD_SUFFIX] = d_inter
    return run_as(c, "batch_norm_grad", BN_ATTRS, bn_ins, c.out_types)
