"""backward-optimizer-op-deps: optimizer ops wait for the last backward op, so no parameter
is updated while gradients are still being computed (enable_backward_optimizer_op_deps).

As in Paddle, it matters only with several devices or trainers, where the update of one
parameter could otherwise overlap another's gradient communication; on one device it
declines (``skipped: single device``). Optimizer ops keep their relative order.
"""

from __future__ import annotations

from ..ir.graph import Graph
from .infra.base import Pass, PassContext, register_pass
from .infra.control_deps import add_dependency


@register_pass
class BackwardOptimizerOpDeps(Pass):
    """Make every optimizer op wait until the whole backward pass has run."""

    name = "backward-optimizer-op-deps"
    regions = "decline"
    regions_reason = ("optimizer and backward ops are ordered in the outer graph, where a region "
                      "op is one op")
    force: bool = False  # apply even on one device (tests, and users who want the order)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        if ctx.num_devices <= 1 and not self.force:
            ctx.decline("single device")
            return
        order = graph.ops()
        backward = [op for op in order if op.role == "backward"]
        optimize = [op for op in order if op.role == "optimize"]
        if not backward or not optimize:
            ctx.decline("no backward or no optimizer ops")
            return
        last = backward[-1]
        for op in optimize:
            if add_dependency(ctx, op, last):
                ctx.count("dependencies added")
