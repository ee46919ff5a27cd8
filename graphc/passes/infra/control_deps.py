"""Shared by the passes that order ops without data flow: add control dependencies through
the ``_deps`` input slot every op has (rules never read it; the order does)."""

from __future__ import annotations

from ...ir.graph import Graph, Op
from ...ir.opdef import CONTROL_SLOT
from .base import PassContext


def token(op: Op):
    """A value ``op`` defines, which another op can wait for; None for ops without outputs."""
    outs = op.output_values()
    return outs[0] if outs else None


def depends(graph: Graph, op: Op, on: Op) -> bool:
    """Whether ``op`` already reads (data or control) a value ``on`` defines."""
    return graph.reads_output_of(op, on)


def add_dependency(ctx: PassContext, op: Op, on: Op) -> bool:
    """Make ``op`` wait for ``on``; returns whether an edge was added."""
    graph = ctx.graph
    tok = token(on)
    if tok is None or on is op or depends(graph, op, on):
        return False
    deps = graph.op_inputs(op).get(CONTROL_SLOT, [])
    ctx.rewriter.add_input(op, CONTROL_SLOT, tok)
    return len(graph.op_inputs(op)[CONTROL_SLOT]) == len(deps) + 1
