"""The pattern driver: runs phases of patterns over a graph in a fixed order, to a fixed point
if asked, and keeps per-pattern statistics (matched, rewritten, declined and why).

Each phase snapshots the graph's ops (stable topological order) and visits every one still
alive that some pattern of the phase is rooted at. The phase's patterns are alternatives,
tried in order on that root: the first match whose guards all pass is rewritten and ends
the visit; when none fires, the first reason found is declined once (``skipped: <reason>``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...ir.graph import Graph, Op
from .base import PassContext, PassError
from .pattern import Pattern

MAX_SWEEPS = 100


@dataclass
class PatternStats:
    """One pattern's counts over a run: roots with a structural match, rewrites, declines."""

    matched: int = 0
    rewritten: int = 0
    declined: Counter[str] = field(default_factory=Counter)


class Driver:
    """Runs ``phases`` (each a sequence of alternative patterns) in order. With
    ``fixed_point`` the phases run again while a sweep rewrote anything (at most
    ``MAX_SWEEPS``); only the last sweep's declines reach the pass's statistics, since
    those are the candidates left in the final graph."""

    def __init__(self, phases: Sequence[Sequence[Pattern]], fixed_point: bool = False):
        self.phases = [tuple(p) for p in phases]
        self.fixed_point = fixed_point
        names = [p.name for phase in self.phases for p in phase]
        if len(names) != len(set(names)):
            raise PassError(f"pattern names repeat: {names}")
        self.stats: dict[str, PatternStats] = {}
        self.sweeps = 0

    def run(self, graph: Graph, ctx: PassContext) -> dict[str, PatternStats]:
        self.stats = {p.name: PatternStats() for phase in self.phases for p in phase}
        self.sweeps = 0
        while True:
            self.sweeps += 1
            declines: list[str] = []
            changed = False
            for phase in self.phases:
                changed |= self._phase(graph, ctx, phase, declines)
            if not self.fixed_point or not changed or self.sweeps >= MAX_SWEEPS:
                break
        if self.fixed_point:
            for reason in declines:
                ctx.decline(reason)
        return self.stats

    def _phase(self, graph: Graph, ctx: PassContext, phase: tuple[Pattern, ...],
               declines: list[str]) -> bool:
        changed = False
        rooted: dict[str, list[Pattern]] = {}  # op type -> the patterns rooted at it
        roots = []
        for op in graph.ops():
            if op.type not in rooted:
                rooted[op.type] = [p for p in phase if p.root.accepts(op.type)]
            if rooted[op.type]:
                roots.append(op)
        for op in roots:
            if graph.ops_by_id.get(op.id) is not op:
                continue  # erased by an earlier rewrite of this phase
            reason = None
            for pattern in rooted[op.type]:
                result = self._try(graph, ctx, pattern, op)
                if result is True:
                    changed, reason = True, None
                    break
                reason = reason or result
                if graph.ops_by_id.get(op.id) is not op:
                    break
            if reason:
                if self.fixed_point:
                    declines.append(reason)
                else:
                    ctx.decline(reason)
        return changed

    def _try(self, graph: Graph, ctx: PassContext, pattern: Pattern, root: Op):
        """True when rewritten, else the first match's decline reason (None: no match)."""
        stats = self.stats[pattern.name]
        first_reason = None
        matched = False
        for m in pattern.matches(graph, root, ctx):
            if not matched:
                stats.matched += 1
                matched = True
            why = pattern.first_failure(m, ctx)
            if why is None and pattern.rewrite is not None:
                pattern.rewrite(m, ctx)
                if pattern.stat:
                    ctx.count(pattern.stat)
                stats.rewritten += 1
                return True
            first_reason = first_reason or why
        if first_reason:
            stats.declined[first_reason] += 1
        return first_reason


def run_patterns(graph: Graph, ctx: PassContext, *phases: Sequence[Pattern],
                 fixed_point: bool = False) -> dict[str, PatternStats]:
    """One driver over ``phases``: the usual body of a pattern-based pass's ``run``."""
    return Driver(phases, fixed_point).run(graph, ctx)
