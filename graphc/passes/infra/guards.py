"""Guards of the pattern layer: data that checks a match and, failing, gives the standard
decline reason the passes report (``<noun> is fetched``, ``<noun> has N users``, ...).

A guard on a name bound to None (an absent optional part) passes. Reasons are formatted
with the match, so ``"activation {act.type} not in act_types"`` names the op found.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from ...ir.graph import Graph, Value
from ...ir.opdef import CONTROL_SLOT
from .base import PassContext
from .pattern import Match


class Guard:
    """``reason(match, ctx)``: None when the match may be rewritten, else why not."""

    def reason(self, m: Match, ctx: PassContext) -> str | None:
        raise NotImplementedError


def use_reason(graph: Graph, value: Value, keep: Collection, noun: str) -> str:
    """``<noun> is fetched`` / ``is a graph output`` / ``has N users`` (N operand reads)."""
    if value in keep:
        return f"{noun} is fetched"
    if graph.is_output(value):
        return f"{noun} is a graph output"
    return f"{noun} has {graph.num_uses(value)} users"


@dataclass(frozen=True)
class NotFetched(Guard):
    """``value`` is neither fetched nor a graph output."""

    value: str
    noun: str = "intermediate"

    def reason(self, m, ctx):
        v = m[self.value]
        if v is None or (v not in ctx.keep and not ctx.graph.is_output(v)):
            return None
        return use_reason(ctx.graph, v, ctx.keep, self.noun)


@dataclass(frozen=True)
class SingleUse(Guard):
    """Exactly one operand reads ``value`` and it is neither fetched nor a graph output."""

    value: str
    noun: str = "intermediate"

    def reason(self, m, ctx):
        v, graph = m[self.value], ctx.graph
        if v is None or (graph.num_uses(v) == 1 and v not in ctx.keep
                         and not graph.is_output(v)):
            return None
        return use_reason(graph, v, ctx.keep, self.noun)


@dataclass(frozen=True)
class OnlyReadBy(Guard):
    """``value`` is read exactly once through each ``(op, slot)`` of ``readers`` that the
    match binds and that does read it there, by nothing else, and is not fetched or a graph
    output. ``also(op, slot, match)`` admits further readers (each once)."""

    value: str
    readers: tuple[tuple[str, str], ...]
    noun: str = "intermediate"
    also: Callable | None = None

    def reason(self, m, ctx):
        v, graph = m[self.value], ctx.graph
        if v is None:
            return None
        allowed = {(op, slot) for name, slot in self.readers for op in m.ops(name)
                   if v in op.inputs.get(slot, ())}
        reads = [(op, slot) for op, slot, _ in graph.users(v)]
        if self.also is not None:
            extra = [r for r in reads if r not in allowed and self.also(r[0], r[1], m)]
            allowed.update(extra)
        if (v not in ctx.keep and not graph.is_output(v) and len(reads) == len(allowed)
                and set(reads) == allowed):
            return None
        return use_reason(graph, v, ctx.keep, self.noun)


@dataclass(frozen=True)
class SameRole(Guard):
    """The bound ops share one role (forward, backward, optimize)."""

    ops: tuple[str, ...]
    text: str = "ops have different roles"

    def reason(self, m, ctx):
        roles = {op.role for op in m.ops(*self.ops)}
        return None if len(roles) <= 1 else self.text


@dataclass(frozen=True)
class NoControlDeps(Guard):
    """No op of ``ops`` waits on anything through ``_deps``, and nothing waits on a value of
    ``values`` (those the rewrite removes)."""

    ops: tuple[str, ...]
    values: tuple[str, ...] = ()
    text: str = "control dependencies"

    def reason(self, m, ctx):
        if any(op.inputs.get(CONTROL_SLOT) for op in m.ops(*self.ops)):
            return self.text
        for name in self.values:
            v = m[name]
            if v is not None and any(slot == CONTROL_SLOT for _, slot, _ in
                                     ctx.graph.users(v)):
                return self.text
        return None


@dataclass(frozen=True)
class TypeIn(Guard):
    """The bound op's type is one of ``allowed`` (a pass option such as ``act_types``)."""

    op: str
    allowed: Collection[str]
    text: str = "{op.type} not allowed"

    def reason(self, m, ctx):
        op = m[self.op]
        if op is None or op.type in self.allowed:
            return None
        return self.text.format_map(Match(m, op=op))


@dataclass(frozen=True)
class DenseValue(Guard):
    """``value`` carries no LoD (a fused op without a LoD rule cannot take it)."""

    value: str
    text: str

    def reason(self, m, ctx):
        v = m[self.value]
        return self.text.format_map(m) if v is not None and v.type.lod_level else None


@dataclass(frozen=True)
class Check(Guard):
    """A condition the other guards do not say: ``test(match, ctx)`` passes with a truthy
    result; ``text`` is the reason (formatted with the match). Without ``text``, ``test``
    returns the reason itself, or None."""

    test: Callable
    text: str | None = None

    def reason(self, m, ctx):
        result = self.test(m, ctx)
        if self.text is None:
            return result
        return None if result else self.text.format_map(m)


@dataclass(frozen=True)
class Never(Guard):
    """Always declines: a pattern that only reports a known non-candidate."""

    text: str

    def reason(self, m, ctx):
        return self.text.format_map(m)
