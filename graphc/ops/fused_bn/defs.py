"""fused_batch_norm_act and its gradient: batch_norm followed by an activation, one op each way.

Paddle's slots and attributes (fuse_bn_act_pass), for any dtype and layout: the FP16/NHWC limit
of Paddle's op came from cuDNN, not from the math. The fuse-bn-act pass creates them.
"""

from __future__ import annotations

from ...ir.grad_defs import GRAD_SUFFIX
from ...ir.opdef import STATEFUL, get_op_def, register

# Activations the fused op can apply: each one's gradient is a function of the activation's
# output (leaky_relu's only for alpha >= 0, where Out > 0 exactly when X > 0).
FUSED_BN_ACTS = ("relu", "sigmoid", "tanh", "leaky_relu")

_BN = get_op_def("batch_norm")
BN_ATTRS = tuple(_BN.attrs)
_ATTRS = {name: (a.type, a.default) for name, a in _BN.attrs.items()}
_ATTRS.update(act_type=("str", "relu"), alpha=("float", 0.02))  # alpha: leaky_relu's


def _check_act(c) -> None:
    c.check(c["act_type"] in FUSED_BN_ACTS,
            f"act_type must be one of {list(FUSED_BN_ACTS)}, got {c['act_type']!r}")


def _fused_batch_norm_act(c):
    _check_act(c)
    return _BN.infer(c)  # Y (the activation's output) has X's type, as batch_norm's Y


def _fused_batch_norm_act_grad(c):
    _check_act(c)
    c.check(c.x("Y").rank == c.x("X").rank,
            f"Y {list(c.x('Y').shape)} must have X's shape {list(c.x('X').shape)}")
    return {"X@GRAD": c.x("X"), "Scale@GRAD": c.x("Scale"), "Bias@GRAD": c.x("Bias")}


register("fused_batch_norm_act", "X Scale Bias Mean Variance",
         "Y MeanOut VarianceOut SavedMean SavedVariance", _ATTRS,
         infer=_fused_batch_norm_act, traits=(STATEFUL,),
         inplace={"MeanOut": "Mean", "VarianceOut": "Variance"},
         doc="Y = act(batch_norm(X)); the other outputs are batch_norm's")
# Mean and Variance are read only when the statistics are frozen (is_test, use_global_stats).
register("fused_batch_norm_act_grad",
         "X Y Y@GRAD Scale Bias SavedMean SavedVariance Mean? Variance?",
         "X@GRAD? Scale@GRAD? Bias@GRAD?", _ATTRS, infer=_fused_batch_norm_act_grad,
         doc="gradient of fused_batch_norm_act: act_grad(Y, Y@GRAD) into batch_norm_grad")


def _grad_maker(inputs, outputs, attrs, out_grads, in_grads):
    dy = out_grads.get("Y", [None])
    if dy[0] is None:
        return []
    ins = {s: list(inputs[s]) for s in ("X", "Scale", "Bias")}
    ins.update(Y=list(outputs["Y"]), SavedMean=list(outputs["SavedMean"]),
               SavedVariance=list(outputs["SavedVariance"]))
    ins["Y" + GRAD_SUFFIX] = list(dy)
    if attrs.get("is_test") or attrs.get("use_global_stats"):
        ins.update(Mean=list(inputs["Mean"]), Variance=list(inputs["Variance"]))
    outs = {s + GRAD_SUFFIX: names for s, names in in_grads.items()
            if s in ("X", "Scale", "Bias") and any(n is not None for n in names)}
    return [("fused_batch_norm_act_grad", ins, outs, dict(attrs))]


get_op_def("fused_batch_norm_act").grad_maker = _grad_maker
