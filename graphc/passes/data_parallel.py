"""data-parallel: make a training graph correct on ``nranks`` replicas that each see a slice of
the batch, by exchanging gradients (BuildStrategy.reduce_strategy: AllReduce or Reduce).

Matches: every optimizer op (OPTIMIZER trait, fused ones included) and its ``Grad`` inputs.

Produces, in **all_reduce** mode (Paddle's AllReduce): one ``c_allreduce`` per dense gradient,
right after the backward op that finishes it (so in backward order) and before anything of the
optimize role reads it (regularisation, the optimizer). Its output is a new version of the
gradient variable, so fetching ``w@GRAD`` gives the aggregated gradient. A row-sparse gradient
(an ``is_sparse`` embedding's) gets a ``c_allgather_rows`` instead: every replica's rows and
values, concatenated in replica order, which the optimizer merges; what moves scales with the
batch, not the vocabulary (Paddle reduces such gradients to one device and broadcasts them).
``reduce = mean``
(GradientScaleStrategy.CoeffNumDevice: the loss gradient counts 1/nranks per replica) or
``sum`` (One, Customized). Every replica then runs every optimizer op on equal inputs.

In **reduce** mode (Paddle's Reduce, in its modern ZeRO-1 form) each replica updates only its
shard of every parameter: the optimizer's (regularised) ``Grad`` goes through
``c_reduce_scatter``, the parameter through ``c_shard``, the optimizer op runs on the
``[1, c]`` shards, and ``c_allgather`` rebuilds the whole parameter as the optimizer's
``ParamOut`` value. Optimizer state of the parameter's shape (velocities, moments) is kept
sharded: its variable is marked ``shard=[nranks, shape]`` and holds only this replica's piece,
so optimizer memory per replica falls by ~nranks. Scalar state (Beta1Pow, ...) stays whole.
Reducing (mean) the regularised gradient equals regularising the reduced one: L2 decay is
linear and the parameter is equal on every replica.

Declines, with a ``skipped:`` statistic: graphs without optimizer ops (inference: replicas
run independently); nranks = 1. In reduce mode an optimizer op that is already fused (run
this pass before fuse-all-optimizer-ops), has state of another shape than its parameter,
reads a regularised gradient while ``reduce = sum`` (the sum would count the decay nranks
times), or reads a row-sparse gradient is not sharded: its gradients are all-reduced (sparse:
all-gathered) instead, so every replica stays equal.
"""

from __future__ import annotations

from typing import Literal

from ..ir.graph import Graph, Op, Value
from ..ir.opdef import CONTROL_SLOT, OPTIMIZER, WHOLE_TENSOR, get_op_def
from .infra.base import Pass, PassContext, register_pass


def backward_gradient(graph: Graph, grad: Value) -> Value:
    """The gradient as the backward pass finished it: walk back over optimize-role ops that
    update the same variable in place (L2 regularisation: ``w@GRAD = w@GRAD + c * w``), or
    that decay a row-sparse gradient into ``w@GRAD@NEWGRAD@`` (build/regularizer.py)."""
    v = grad
    while True:
        op = graph.producer(v)
        if op is None or op.role != "optimize":
            return v
        same = _same_gradient(op, v)
        if same is None:
            return v
        v = same


def _same_gradient(op: Op, v: Value) -> Value | None:
    """The input of ``op`` that ``v`` (its output) is a new version of: the same variable,
    or the row-sparse gradient a decay made dense (``w@GRAD`` of ``w@GRAD@NEWGRAD@``)."""
    return next((x for x in op.input_values()
                 if x.var is v.var or x.var.name + "@NEWGRAD@" == v.var.name), None)


# ops between backward and the update that are affine in the gradient (L2 decay adds a
# multiple of the parameter): a mean of their results is their result on the mean
_AFFINE_GRADIENT_OPS = frozenset({"sum", "sparse_l2_decay"})


def _nonlinear_gradient_ops(graph: Graph, grad: Value) -> list[str]:
    """Op types on the chain from ``grad`` back to the backward gradient that are not affine
    in the gradient (clip, clip_by_norm, global-norm scaling)."""
    found, v = [], grad
    while v is not backward_gradient(graph, v):
        op = graph.producer(v)
        if op.type not in _AFFINE_GRADIENT_OPS:
            found.append(op.type)
        v = _same_gradient(op, v)
    return found


def optimizer_ops(graph: Graph) -> list[Op]:
    return [op for op in graph.ops() if get_op_def(op.type).has_trait(OPTIMIZER)]


@register_pass
class DataParallel(Pass):
    """Exchange gradients between data-parallel replicas (all-reduce, or ZeRO-1 reduce)."""

    name = "data-parallel"
    regions = "decline"
    regions_reason = ("gradients are exchanged around a region op, once per step; its body "
                      "computes on the replica's slice as written")
    nranks: int = 0  # 0: the device count the pipeline runs for
    mode: Literal["all_reduce", "reduce"] = "all_reduce"
    reduce: Literal["mean", "sum"] = "mean"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        nranks = self.nranks or ctx.num_devices
        if nranks <= 1:
            ctx.decline("one replica: nothing to exchange")
            return
        optimizers = optimizer_ops(graph)
        if not optimizers:
            ctx.decline("no optimizer ops (inference: replicas run independently)")
            return
        if self.mode == "all_reduce":
            self._all_reduce(graph, ctx, optimizers, nranks)
        else:
            # an optimizer op that cannot be sharded still needs its gradients exchanged
            whole = [op for op in optimizers if not self._shard_optimizer(graph, ctx, op, nranks)]
            if whole:
                self._all_reduce(graph, ctx, whole, nranks)

    # -- AllReduce ---------------------------------------------------------------------
    def _all_reduce(self, graph: Graph, ctx: PassContext, optimizers: list[Op],
                    nranks: int) -> None:
        done: set[Value] = set()
        grads = [backward_gradient(graph, g) for op in optimizers for g in op.inputs["Grad"]]
        # backward order: the order in which the backward pass finishes the gradients
        order = {op: i for i, op in enumerate(graph.ops())}
        grads.sort(key=lambda g: order.get(graph.producer(g), -1))
        for g in grads:
            if g in done:
                continue
            done.add(g)
            rw = ctx.rewriter
            producer = graph.producer(g)
            out = rw.new_version(g)
            # a row-sparse gradient is all-gathered (rows and values), never made dense
            collective = "c_allgather_rows" if g.type.sparse else "c_allreduce"
            op = rw.create_op(collective, {"X": g}, {"Out": out},
                              {"nranks": nranks, "reduce": self.reduce}, role="backward",
                              after=producer)
            rw.replace_all_uses(g, out, except_ops=[op])
            ctx.count("all_gather_rows" if g.type.sparse else "all_reduce")

    # -- Reduce (sharded optimizer) ----------------------------------------------------
    def _shard_optimizer(self, graph: Graph, ctx: PassContext, op: Op, nranks: int) -> bool:
        """Shard ``op``'s update; False (declined, to be all-reduced instead) if it cannot."""
        opdef = get_op_def(op.type)
        ins, outs = op.inputs, op.outputs
        if any(len(v) != 1 for s, v in ins.items() if s != CONTROL_SLOT):
            ctx.decline(f"{op.type}: fused optimizer (run data-parallel before "
                        "fuse-all-optimizer-ops); all-reduced instead")
            return False
        if opdef.has_trait(WHOLE_TENSOR):
            # LAMB's trust ratio, LARS's local rate: a norm over the whole parameter
            ctx.decline(f"{op.type}: its update reads norms of the whole parameter, so a "
                        "shard's update is not a shard of the update; all-reduced instead")
            return False
        param, grad = ins["Param"][0], ins["Grad"][0]
        if grad.type.sparse or backward_gradient(graph, grad).type.sparse:
            ctx.decline(f"{op.type}: row-sparse gradient (its rows are all-gathered, not "
                        "reduce-scattered); not sharded")
            return False
        if any(d < 0 for d in param.shape):
            ctx.decline(f"{op.type}: parameter of unknown shape; all-reduced instead")
            return False
        nonlinear = _nonlinear_gradient_ops(graph, grad)
        if nonlinear:
            # clipping must see the mean of every replica's gradient; a shard of the
            # clipped local gradient is not a shard of the clipped mean
            ctx.decline(f"{op.type}: its gradient passes {', '.join(nonlinear)} after backward "
                        "(clipping); all-reduced instead")
            return False
        if self.reduce == "sum" and backward_gradient(graph, grad) is not grad:
            # summing the regularised gradient would count the decay term nranks times
            ctx.decline(f"{op.type}: regularised gradient with reduce=sum; all-reduced instead")
            return False
        # state slots: inputs updated in place (inplace pairs) other than the parameter
        state = {o: i for o, i in opdef.inplace.items() if i != "Param" and i in ins}
        whole = [i for i in state.values() if ins[i][0].shape == param.shape]
        scalar = [i for i in state.values() if ins[i][0].shape != param.shape]
        if any(len(ins[i][0].shape) > 1 or ins[i][0].shape[0] != 1 for i in scalar):
            ctx.decline(f"{op.type}: state of another shape than its parameter; all-reduced "
                        "instead")
            return False
        rw = ctx.rewriter
        attrs = {"nranks": nranks}
        param_out = outs["ParamOut"][0]
        rw.erase_op(op, erase_outputs=False)
        for slot in whole:
            rw.shard_variable(ins[slot][0].var.name, nranks)
        g_shard = rw.create_op("c_reduce_scatter", {"X": grad}, {"Out": f"{grad.name}@SHARD"},
                               {**attrs, "reduce": self.reduce}, derived_from=[op]
                               ).output("Out")
        p_shard = rw.create_op("c_shard", {"X": param}, {"Out": f"{param.var.name}@SHARD"},
                               attrs, derived_from=[op]).output("Out")
        new_ins = {s: list(v) for s, v in ins.items()}
        new_ins["Param"], new_ins["Grad"] = [p_shard], [g_shard]
        new_outs = {s: list(v) for s, v in outs.items()}
        new_outs["ParamOut"] = [f"{param.var.name}@SHARD@OUT"]
        update = rw.create_op(op.type, new_ins, new_outs, op.attrs, derived_from=[op])
        rw.create_op("c_allgather", {"X": update.output("ParamOut")}, {"Out": param_out},
                     {**attrs, "shapes": list(param.shape), "ranks": [len(param.shape)]},
                     derived_from=[op])
        ctx.count("sharded optimizer ops")
        ctx.count("sharded state", len(whole))
        return True
