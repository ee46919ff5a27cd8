"""fuse-bn-act: batch_norm -> activation into fused_batch_norm_act, and the activation's grad ->
batch_norm_grad into fused_batch_norm_act_grad, for any dtype and layout (Paddle: fp16 NHWC).

Matches (anchored at batch_norm, then at batch_norm_grad):
  forward   Y = act(batch_norm(X).Y), batch_norm's Y read by the activation alone;
  backward  batch_norm_grad(Y@GRAD = act_grad(...).X@GRAD), that gradient read by it alone.
Forward and backward fuse independently (as in Paddle) and the fused rules apply the unfused
ops' own rules, so either, both or neither leave every result bit for bit unchanged. Training
graphs match: relu/sigmoid/tanh grads read the activation's output and batch_norm_grad reads
X, so nothing else reads batch_norm's Y. leaky_relu_grad reads the activation's input; for
alpha >= 0 it is rewired to the output (X > 0 exactly where Out > 0, and the gradient depends
on nothing else), so leaky_relu fuses too. is_test and use_global_stats are supported: the
fused grad then also reads Mean and Variance, as batch_norm_grad does.

Declines (stats ``skipped: ...``): the activation is not in ``act_types``; batch_norm's Y is
fetched, a graph output or read by another op; leaky_relu with alpha < 0 whose gradient reads
the pre-activation; backward: the activation's gradient is fetched or read twice, the grad op
lacks the forward value it needs, or batch_norm_grad computes gradients other than X, Scale
and Bias; sync_batch_norm (and its grad) followed by an activation: its statistics span the
data-parallel replicas, which the fused op does not do. Stats: ``fused``, ``fused grad``,
``rewired leaky_relu_grad``.
"""

from __future__ import annotations

from ..ir.grad_defs import GRAD_SUFFIX, forward_type
from ..ir.graph import Graph, Op, Value
from ..ir.opdef import ACTIVATION, CONTROL_SLOT, get_op_def
from ..ops.fused_bn.defs import FUSED_BN_ACTS
from .infra.base import Pass, PassContext, members_of, register_pass
from .infra.driver import run_patterns
from .infra.guards import Check, DenseValue, Never, NotFetched, OnlyReadBy, SingleUse, TypeIn
from .infra.pattern import Match, Node, Pattern
from .infra.rewrite import control_deps

_BN_INS = ("X", "Scale", "Bias", "Mean", "Variance")
_BN_OUTS = ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance")
_GRAD_INS = ("X", "Scale", "Bias", "SavedMean", "SavedVariance")
_GRAD_OUTS = tuple(s + GRAD_SUFFIX for s in ("X", "Scale", "Bias"))
_Y_GRAD, _X_GRAD = "Y" + GRAD_SUFFIX, "X" + GRAD_SUFFIX

# batch_norm has a LoD rule (statistics over the real tokens); the fused op has none
_LOD = "batch_norm on a LoD value (fused_batch_norm_act takes dense values)"
_SYNC = "sync_batch_norm is not fused (its statistics span replicas)"
_ALPHA = "leaky_relu_grad reads the pre-activation (alpha < 0)"


def _frozen_stats(attrs: dict) -> bool:
    return bool(attrs.get("is_test") or attrs.get("use_global_stats"))


def _is_activation(op_type: str) -> bool:
    return get_op_def(op_type).has_trait(ACTIVATION)


def _is_activation_grad(op_type: str) -> bool:
    act = forward_type(op_type)
    return act is not None and _is_activation(act)


def _fuse_forward(m: Match, ctx: PassContext) -> None:
    rw, bn, act = ctx.rewriter, m.bn, m.act
    for g in m.act_grads:  # leaky_relu_grad read the pre-activation: read the output
        rw.set_input(g, "X", 0, m.out)
        ctx.count("rewired leaky_relu_grad")
    inputs = {s: bn.input(s) for s in _BN_INS}
    outputs = {"Y": m.out, **{s: bn.output(s) for s in _BN_OUTS}}
    attrs = {**bn.attrs, **act.attrs, "act_type": act.type}
    deps = control_deps([bn, act], {m.y})
    rw.erase_op(act, erase_outputs=False)
    rw.erase_op(bn, erase_outputs=False)
    rw.erase_value(m.y)
    rw.create_op("fused_batch_norm_act", {**inputs, CONTROL_SLOT: deps}, outputs, attrs,
                 derived_from=[bn, act])


def _fuse_backward(m: Match, ctx: PassContext) -> None:
    rw, bn_grad, act_grad = ctx.rewriter, m.bn_grad, m.act_grad
    inputs = {s: bn_grad.input(s) for s in _GRAD_INS}
    inputs.update({"Y": _activation_output(ctx.graph, act_grad),
                   _Y_GRAD: act_grad.input("Out" + GRAD_SUFFIX)})
    if _frozen_stats(bn_grad.attrs):
        inputs.update(Mean=bn_grad.input("Mean"), Variance=bn_grad.input("Variance"))
    outputs = {s: bn_grad.output(s) for s in _GRAD_OUTS}
    attrs = {**bn_grad.attrs, **act_grad.attrs, "act_type": forward_type(act_grad.type)}
    deps = control_deps([act_grad, bn_grad], {m.d_inter})
    rw.erase_op(bn_grad, erase_outputs=False)
    rw.erase_op(act_grad, erase_outputs=False)
    rw.erase_value(m.d_inter)
    rw.create_op("fused_batch_norm_act_grad", {**inputs, CONTROL_SLOT: deps}, outputs,
                 attrs, derived_from=[act_grad, bn_grad])


def _activation_output(graph: Graph, act_grad: Op) -> Value | str:
    """The activation's output, which the fused grad reads as Y; or why it is unknown."""
    if act_grad.type != "leaky_relu_grad":
        out = act_grad.input("Out")
        return out if out is not None else f"{act_grad.type} does not read Out"
    if act_grad.attrs["alpha"] < 0:
        return _ALPHA
    x = act_grad.input("X")
    if x is None:
        return "leaky_relu_grad does not read X"
    producer = x.producer
    if producer is not None and producer.type == "fused_batch_norm_act" \
            and producer.attrs["act_type"] == "leaky_relu" \
            and producer.attrs["alpha"] == act_grad.attrs["alpha"]:
        return x  # the forward fusion rewired it to the activation's output already
    for u in graph.user_ops(x):  # the forward leaky_relu, still unfused
        if u.type == "leaky_relu" and u.attrs == act_grad.attrs:
            return u.output("Out")
    return "leaky_relu_grad's forward op not found"


def _output_unknown(m: Match, ctx: PassContext) -> str | None:
    y = _activation_output(ctx.graph, m.act_grad)
    return y if isinstance(y, str) else None


def _extra_grads(m: Match, ctx: PassContext) -> str | None:
    extra = [s for s in m.bn_grad.outputs if s not in _GRAD_OUTS]
    return f"batch_norm_grad computes {extra[0]}" if extra else None


def _patterns(act_types: list[str]) -> tuple[list[Pattern], list[Pattern]]:
    """(forward phase, backward phase): the fusions, and sync_batch_norm declined (its
    statistics are every replica's; sync-batch-norm ran first)."""
    forward = Pattern(
        "batch_norm->act",
        (Node("bn", "batch_norm", ins={"X": "x"}, outs={"Y": "y"}),
         Node("act", _is_activation, ins={"X": "y"}, outs={"Out": "out"}),
         # leaky_relu_grad ops reading y: rewired to the activation's output
         Node("act_grads", "leaky_relu_grad", ins={"X": "y"}, many=True,
              where=lambda op, m: m.act.type == "leaky_relu" and op.attrs == m.act.attrs)),
        (DenseValue("x", _LOD),
         TypeIn("act", act_types, "activation {act.type} not in act_types"),
         NotFetched("y", "batch_norm output"),
         OnlyReadBy("y", (("act", "X"), ("act_grads", "X")), "batch_norm output"),
         Check(lambda m, ctx: not (m.act_grads and m.act.attrs["alpha"] < 0), _ALPHA)),
        _fuse_forward, stat="fused")
    sync_forward = Pattern(
        "sync_batch_norm->act",
        (Node("bn", "sync_batch_norm", outs={"Y": "y"}),
         Node("act", _is_activation, ins={"*": "y"})), (Never(_SYNC),))
    backward = Pattern(
        "act_grad->batch_norm_grad",
        (Node("bn_grad", "batch_norm_grad", ins={_Y_GRAD: "d_inter", "X": "x"}),
         Node("act_grad", _is_activation_grad, outs={_X_GRAD: "d_inter"})),
        (Check(lambda m, ctx: forward_type(m.act_grad.type) in act_types,
               "activation gradient {act_grad.type} not in act_types"),
         DenseValue("x", _LOD),
         SingleUse("d_inter", "activation gradient"),
         Check(_output_unknown),
         Check(_extra_grads)),
        _fuse_backward, stat="fused grad")
    sync_backward = Pattern(
        "act_grad->sync_batch_norm_grad",
        (Node("bn_grad", "sync_batch_norm_grad", ins={_Y_GRAD: "d_inter"}),
         Node("act_grad", _is_activation_grad, outs={_X_GRAD: "d_inter"})), (Never(_SYNC),))
    return [forward, sync_forward], [backward, sync_backward]


@register_pass
class FuseBatchNormAct(Pass):
    """Fuse batch_norm + activation (forward and backward) into fused_batch_norm_act ops."""

    name = "fuse-bn-act"
    regions = "recurse"
    act_types: list[str] = list(FUSED_BN_ACTS)

    _check = members_of("act_types", FUSED_BN_ACTS, "activations")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        run_patterns(graph, ctx, *_patterns(self.act_types))
