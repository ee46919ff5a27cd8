"""dce: remove ops none of whose outputs is read, fetched or a graph output.

Declines ops that are collective or call the host (Print, py_func): they act beyond their
outputs; so does a region op (a loop, a branch) whose body holds such an op. Repeats until
nothing more is dead, walking ops in reverse order so one sweep usually suffices. Inside
region bodies too (``regions = "recurse"``): there a body's graph outputs are what is live,
and its graph inputs (the op's operands) stay, read or not.
"""

from __future__ import annotations

from ..ir.grad_defs import forward_type
from ..ir.graph import Graph
from ..ir.opdef import COLLECTIVE, HOST_CALLBACK, get_op_def
from .infra.base import Pass, PassContext, register_pass
from .infra.regions import acts_in_regions


@register_pass
class DeadCodeElimination(Pass):
    """Remove ops whose results nobody reads, fetches or keeps as state."""

    name = "dce"
    regions = "recurse"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        outputs = set(graph.outputs)
        rw = ctx.rewriter
        declined: set = set()  # each kept collective is reported once, not once per sweep
        changed = True
        while changed:
            changed = False
            for op in reversed(graph.ops()):
                outs = graph.values_defined_by(op)
                if any(graph.has_users(v) or v in outputs or v in ctx.keep for v in outs):
                    continue
                opdef = get_op_def(op.type)
                fwd = forward_type(op.type)  # a host op's gradient op calls the host too
                host = opdef.has_trait(HOST_CALLBACK) or (
                    fwd is not None and get_op_def(fwd).has_trait(HOST_CALLBACK))
                region = bool(opdef.regions) and acts_in_regions(op, (COLLECTIVE, HOST_CALLBACK))
                if opdef.has_trait(COLLECTIVE) or host or region:
                    if op not in declined:
                        declined.add(op)
                        ctx.decline("collective op" if opdef.has_trait(COLLECTIVE)
                                    else "host callback" if host
                                    else "region with a collective op or host callback")
                    continue
                rw.erase_op(op)
                ctx.count("removed")
                changed = True
