"""Graph analyses shared by several passes: whether replacing a group of ops by one op would
close a cycle (the fusions of optimizer ops and of collectives both ask)."""

from __future__ import annotations

from ...ir.graph import Graph, Op
from ...ir.opdef import CONTROL_SLOT

DATA_EDGE = "reads another member's output"
THROUGH_OTHERS = "depends on another member through other ops"


def fusion_cycle(graph: Graph, members: list[Op]) -> str | None:
    """Why one op in place of ``members`` would close a cycle, or None when it would not:
    ``DATA_EDGE`` when a member reads another's output as data, ``THROUGH_OTHERS`` when it
    depends on one through ops outside the group. A direct control dependency between
    members is fine: the fused op drops it."""
    group = set(members)
    seen: set[Op] = set()
    stack: list[Op] = []
    for m in members:
        for v in graph.values_defined_by(m):
            for user, slot, _ in graph.users(v):
                if user in group:
                    if slot != CONTROL_SLOT:
                        return DATA_EDGE
                elif user not in seen:
                    seen.add(user)
                    stack.append(user)
    while stack:
        op = stack.pop()
        for v in graph.values_defined_by(op):
            for user in graph.user_ops(v):
                if user in group:
                    return THROUGH_OTHERS
                if user not in seen:
                    seen.add(user)
                    stack.append(user)
    return None
