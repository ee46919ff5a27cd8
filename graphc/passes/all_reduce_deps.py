"""all-reduce-deps: chain every communicating collective op with control dependencies in one
fixed order (the graph's stable topological order), so every replica issues them alike.

Paddle's all_reduce_deps_pass exists because its threaded executor could start collectives
in a different order on each device and hang; graphc's replicas run one program, but the
chain keeps the order explicit for the interpreter and for anything that schedules ops
concurrently (num_threads). Matches ops with the ``collective`` trait except ``c_shard``
(a local slice, no communication). Declines when there are fewer than two.
"""

from __future__ import annotations

from ..ir.graph import Graph
from ..ir.opdef import COLLECTIVE, get_op_def
from .infra.base import Pass, PassContext, register_pass
from .infra.control_deps import add_dependency

LOCAL_ONLY = {"c_shard"}  # collective ops that do not communicate


@register_pass
class AllReduceDeps(Pass):
    """Make collective ops run in one fixed order on every replica."""

    name = "all-reduce-deps"
    regions = "decline"
    regions_reason = ("collectives inside a body run once per iteration of one XLA loop; the "
                      "pass works on the outer graph's collectives, where a region op is one op")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        chain = [op for op in graph.ops() if op.type not in LOCAL_ONLY
                 and get_op_def(op.type).has_trait(COLLECTIVE)]
        if len(chain) < 2:
            ctx.decline("fewer than two collective ops")
            return
        for before, op in zip(chain, chain[1:]):
            if add_dependency(ctx, op, before):
                ctx.count("dependencies added")
