"""Global-norm clipping on parameter servers: find the sum of squared gradient norms that reads
every parameter's gradient, which no server can compute from its own blocks alone.

``GradientClipByGlobalNorm`` builds, per gradient, ``square -> reduce_sum (-> cast)`` and one
``sum`` of them all. ps-server-graph replaces that ``sum`` on each server by the sum of the
same chains over the blocks it owns and a ``ps_server_sum`` over every server (one small
all-reduce per round), so the norm, and so the clip, equals the local one; Paddle computes a
norm per server instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.graph import Graph, Op, Value

CHAIN_OPS = ("square", "reduce_sum", "cast")


@dataclass
class NormSum:
    """The ``sum`` op of a global norm and, per backward gradient it reads, the chain of
    ops from that gradient to the sum's input (program order)."""

    op: Op
    chains: dict  # backward gradient Value -> [Op]


def _chain(graph: Graph, v: Value) -> tuple[Value, list[Op]]:
    ops = []
    while True:
        p = graph.producer(v)
        if p is None or p.type not in CHAIN_OPS or p.role != "optimize":
            return v, ops
        ops.insert(0, p)
        v = p.inputs["X"][0]


def norm_sums(graph: Graph, grads) -> list[NormSum]:
    """Every optimize-role ``sum`` whose inputs are each a squared-norm chain of one of
    ``grads`` (the backward gradients the optimizers update with)."""
    grads, found = set(grads), []
    for op in graph.ops():
        if op.type != "sum" or op.role != "optimize":
            continue
        chains = {}
        for v in op.inputs["X"]:
            source, ops = _chain(graph, v)
            if not ops or source not in grads or source in chains:
                break
            chains[source] = ops
        else:
            if chains:
                found.append(NormSum(op, chains))
    return found
