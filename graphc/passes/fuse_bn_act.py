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
from .infra.base import (
    Pass,
    PassContext,
    members_of,
    register_pass,
    single_user,
    user_count_reason,
)

_BN_INS = ("X", "Scale", "Bias", "Mean", "Variance")
_BN_OUTS = ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance")
_GRAD_INS = ("X", "Scale", "Bias", "SavedMean", "SavedVariance")
_GRAD_OUTS = tuple(s + GRAD_SUFFIX for s in ("X", "Scale", "Bias"))


# batch_norm has a LoD rule (statistics over the real tokens); the fused op has none
_LOD = "batch_norm on a LoD value (fused_batch_norm_act takes dense values)"


def _frozen_stats(attrs: dict) -> bool:
    return bool(attrs.get("is_test") or attrs.get("use_global_stats"))


def control_deps(ops: list[Op], dropped: set[Value]) -> list[Value]:
    """The control dependencies of ``ops``, for the op replacing them (minus dropped values)."""
    deps: list[Value] = []
    for op in ops:
        for v in op.inputs.get(CONTROL_SLOT, []):
            if v not in dropped and v not in deps:
                deps.append(v)
    return deps


@register_pass
class FuseBatchNormAct(Pass):
    """Fuse batch_norm + activation (forward and backward) into fused_batch_norm_act ops."""

    name = "fuse-bn-act"
    act_types: list[str] = list(FUSED_BN_ACTS)

    _check = members_of("act_types", FUSED_BN_ACTS, "activations")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        for op in list(graph.ops()):
            if op.type == "batch_norm":
                self._forward(graph, ctx, op)
            elif op.type == "sync_batch_norm" and any(
                    get_op_def(u.type).has_trait(ACTIVATION) for u in graph.user_ops(
                        op.output("Y"))):
                # the fused op's statistics are one replica's; sync-batch-norm ran first
                ctx.decline("sync_batch_norm is not fused (its statistics span replicas)")
        for op in list(graph.ops()):
            if op.type == "batch_norm_grad":
                self._backward(graph, ctx, op)
            elif op.type == "sync_batch_norm_grad" and self._after_activation_grad(op):
                ctx.decline("sync_batch_norm is not fused (its statistics span replicas)")

    # -- forward ----------------------------------------------------------------------
    def _forward(self, graph: Graph, ctx: PassContext, bn: Op) -> None:
        y = bn.output("Y")
        users = graph.users(y)
        acts = [u for u, slot, _ in users if slot == "X"
                and get_op_def(u.type).has_trait(ACTIVATION)]
        if acts and bn.input("X").type.lod_level:
            ctx.decline(_LOD)
            return
        if not acts:
            return  # not a candidate: no activation follows
        act = next((u for u in acts if u.type in self.act_types), None)
        if act is None:
            ctx.decline(f"activation {acts[0].type} not in act_types")
            return
        if y in ctx.keep or graph.is_output(y):
            ctx.decline("batch_norm output " + user_count_reason(graph, y, ctx.keep)
                        .removeprefix("intermediate "))
            return
        act_grads = []  # leaky_relu_grad ops reading y: rewired to the activation's output
        others = []
        for u, slot, _ in users:
            if u is act:
                continue
            if (act.type == "leaky_relu" and u.type == "leaky_relu_grad" and slot == "X"
                    and u.attrs == act.attrs):
                act_grads.append(u)
            else:
                others.append(u)
        if others:
            ctx.decline(f"batch_norm output has {len(users)} users")
            return
        if act_grads and act.attrs["alpha"] < 0:
            ctx.decline("leaky_relu_grad reads the pre-activation (alpha < 0)")
            return

        rw = ctx.rewriter
        out = act.output("Out")
        for g in act_grads:
            rw.set_input(g, "X", 0, out)
            ctx.count("rewired leaky_relu_grad")
        inputs = {s: bn.input(s) for s in _BN_INS}
        outputs = {"Y": out, **{s: bn.output(s) for s in _BN_OUTS}}
        attrs = {**bn.attrs, **act.attrs, "act_type": act.type}
        deps = control_deps([bn, act], {y})
        rw.erase_op(act, erase_outputs=False)
        rw.erase_op(bn, erase_outputs=False)
        rw.erase_value(y)
        rw.create_op("fused_batch_norm_act", {**inputs, CONTROL_SLOT: deps}, outputs, attrs,
                     derived_from=[bn, act])
        ctx.count("fused")

    # -- backward ---------------------------------------------------------------------
    def _backward(self, graph: Graph, ctx: PassContext, bn_grad: Op) -> None:
        d_inter = bn_grad.input("Y" + GRAD_SUFFIX)
        act_grad = d_inter.producer if d_inter is not None else None
        act = forward_type(act_grad.type) if act_grad is not None else None
        if act is None or not get_op_def(act).has_trait(ACTIVATION):
            return  # not a candidate
        if act not in self.act_types:
            ctx.decline(f"activation gradient {act_grad.type} not in act_types")
            return
        if bn_grad.input("X").type.lod_level:
            ctx.decline(_LOD)
            return
        if act_grad.output("X" + GRAD_SUFFIX) is not d_inter:
            return
        if not single_user(graph, d_inter, ctx.keep):
            ctx.decline("activation gradient " + user_count_reason(graph, d_inter, ctx.keep)
                        .removeprefix("intermediate "))
            return
        y = self._activation_output(graph, act_grad)
        if isinstance(y, str):
            ctx.decline(y)
            return
        extra = [s for s in bn_grad.outputs if s not in _GRAD_OUTS]
        if extra:
            ctx.decline(f"batch_norm_grad computes {extra[0]}")
            return

        rw = ctx.rewriter
        inputs = {s: bn_grad.input(s) for s in _GRAD_INS}
        inputs.update({"Y": y, "Y" + GRAD_SUFFIX: act_grad.input("Out" + GRAD_SUFFIX)})
        if _frozen_stats(bn_grad.attrs):
            inputs.update(Mean=bn_grad.input("Mean"), Variance=bn_grad.input("Variance"))
        outputs = {s: bn_grad.output(s) for s in _GRAD_OUTS}
        attrs = {**bn_grad.attrs, **act_grad.attrs, "act_type": act}
        deps = control_deps([act_grad, bn_grad], {d_inter})
        rw.erase_op(bn_grad, erase_outputs=False)
        rw.erase_op(act_grad, erase_outputs=False)
        rw.erase_value(d_inter)
        rw.create_op("fused_batch_norm_act_grad", {**inputs, CONTROL_SLOT: deps}, outputs,
                     attrs, derived_from=[act_grad, bn_grad])
        ctx.count("fused grad")

    @staticmethod
    def _after_activation_grad(bn_grad: Op) -> bool:
        d_inter = bn_grad.input("Y" + GRAD_SUFFIX)
        act_grad = d_inter.producer if d_inter is not None else None
        act = forward_type(act_grad.type) if act_grad is not None else None
        return act is not None and get_op_def(act).has_trait(ACTIVATION)

    @staticmethod
    def _activation_output(graph: Graph, act_grad: Op) -> Value | str:
        """The activation's output, which the fused grad reads as Y; or why it is unknown."""
        if act_grad.type != "leaky_relu_grad":
            out = act_grad.input("Out")
            return out if out is not None else f"{act_grad.type} does not read Out"
        if act_grad.attrs["alpha"] < 0:
            return "leaky_relu_grad reads the pre-activation (alpha < 0)"
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
