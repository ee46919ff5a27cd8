"""hierarchical-allreduce: make every all-reduce hierarchical (Horovod's scheme) on a 2-D mesh
of replicas, ``(nranks // inter_nranks)`` groups of ``inter_nranks``.

Matches every ``c_allreduce`` and ``c_fused_allreduce`` (so it runs after fuse-all-reduce-ops,
on the buckets). Sets their ``inter_nranks``: the backend then reduce-scatters inside each group
(mesh axis ``dp_local``), all-reduces the 1/inter_nranks pieces across groups (``dp_cross``) and
all-gathers inside the group, so the links between groups carry 1/inter_nranks of the buffer.
The sum is the same; only the order of additions differs. The executor builds its mesh with
groups of ``BuildStrategy.hierarchical_allreduce_inter_nranks`` (the same number).

Declines (``skipped: ...``): row-sparse gradients' ``c_allgather_rows`` (an all-gather has
no reduction to split into levels: it stays flat); ``inter_nranks`` 0 or 1, equal to nranks,
more than nranks (the seeds' 8 on a 4-device job), or not dividing it (one level would do, or
the mesh cannot be formed); an all-reduce already hierarchical with another group size.
Declined all-reduces stay flat, and the backend then maps the devices as one flat group
(``backends.lowering.replica_groups``). Stats: ``hierarchical``.
"""

from __future__ import annotations

from ..ir.graph import Graph
from .infra.base import Pass, PassContext, register_pass

ALLREDUCES = ("c_allreduce", "c_fused_allreduce")


@register_pass
class HierarchicalAllReduce(Pass):
    """Reduce-scatter in groups, all-reduce across groups, all-gather in groups."""

    name = "hierarchical-allreduce"
    regions = "decline"
    regions_reason = ("collectives inside a body run once per iteration of one XLA loop; the "
                      "pass works on the outer graph's collectives, where a region op is one op")
    inter_nranks: int = 0  # replicas per group (BuildStrategy.hierarchical_allreduce_inter_nranks)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        gathers = sum(op.type == "c_allgather_rows" for op in graph.ops())
        if gathers:  # nothing to reduce-scatter: each replica's rows are already a piece
            ctx.decline("c_allgather_rows: a row-sparse gradient's all-gather stays flat",
                        gathers)
        ops = [op for op in graph.ops() if op.type in ALLREDUCES]
        if not ops:
            ctx.decline("no all-reduce ops")
            return
        inter = self.inter_nranks
        for op in ops:
            nranks = op.attrs["nranks"]
            reason = None
            if inter <= 1:
                reason = f"inter_nranks={inter}: groups of one are a flat all-reduce"
            elif inter == nranks:
                reason = f"inter_nranks={inter} equals nranks: one group is a flat all-reduce"
            elif inter > nranks:
                reason = (f"inter_nranks={inter} is more than nranks={nranks}: no group can "
                          "form, the all-reduce stays flat")
            elif nranks % inter:
                reason = f"nranks={nranks} is not divisible by inter_nranks={inter}"
            elif op.attrs["inter_nranks"] not in (0, inter):
                reason = f"already hierarchical over groups of {op.attrs['inter_nranks']}"
            if reason:
                ctx.decline(reason)
                continue
            if op.attrs["inter_nranks"] != inter:
                ctx.rewriter.set_attr(op, "inter_nranks", inter)
                ctx.count("hierarchical")
