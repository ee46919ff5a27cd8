"""sequential-execution: chain every op to the one before it in program order, with control
dependencies, so nothing may run out of order (BuildStrategy.enable_sequential_execution).

Program order is the graph's stable topological order. Ops that already depend on their
predecessor through data get no extra edge (counted as ``already ordered``). Under XLA the
chain fixes the emitted order; the interpreter's thread pool honours it strictly.
"""

from __future__ import annotations

from ..ir.graph import Graph
from .infra.base import Pass, PassContext, register_pass
from .infra.control_deps import add_dependency


@register_pass
class SequentialExecution(Pass):
    """Run ops strictly in program order (control dependencies between neighbours)."""

    name = "sequential-execution"
    regions = "decline"
    regions_reason = ("a body's ops run in data order inside one XLA loop; the chain orders the "
                      "outer graph, where a region op is one op")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        order = list(graph.ops())
        for prev, op in zip(order, order[1:]):
            if add_dependency(ctx, op, prev):
                ctx.count("dependencies added")
            else:
                ctx.count("already ordered")
