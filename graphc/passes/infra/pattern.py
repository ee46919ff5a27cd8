"""Declarative local rewrites: a ``Pattern`` names ops by type and slot and binds values by
name, ``guards`` (data, see guards.py) decline a match with the pass's standard reason.

Nodes after the first are found through values already bound: an output slot naming a bound
value finds its producer, an input slot the ops reading it. ``"Slot?"`` is optional: an op
without that operand fits whatever the name is bound to (None when unbound); ``"*"``
(inputs only) is any slot. A pattern may add optional ``extensions``, a second root joined
by shared values (a forward op's grad op): the first extension whose nodes match and whose
guards pass is bound, else its names are bound to None. The Driver (driver.py) owns
iteration order, fixed point and statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...ir.graph import Graph, Op, Value
from .base import PassContext, PassError

ANY_SLOT = "*"


class Match(dict):
    """Names bound by a match: op nodes to ``Op`` (a ``many`` node to a list of them, an
    absent optional one to None) and value names to ``Value`` or None. ``m.name`` reads
    ``m["name"]``; ``str.format_map(m)`` fills decline reasons (``{act.type}``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def ops(self, *names: str) -> list[Op]:
        """The bound ops of ``names`` that are present, in the order given."""
        out: list[Op] = []
        for n in names:
            v = self.get(n)
            out.extend(v if isinstance(v, list) else [] if v is None else [v])
        return out

    def holds(self, op: Op) -> bool:
        return any(v is op or (isinstance(v, list) and op in v) for v in self.values())


TypeSpec = str | Collection[str] | Callable[[str], bool]


@dataclass(frozen=True)
class Node:
    """One op of a pattern: its accepted ``type`` (a name, a collection of names or a
    predicate on the name), the values it reads (``ins``) and writes (``outs``) by slot, and
    a structural test ``where(op, match)`` that, failing, makes it no candidate (no decline).
    ``many``: bind the list of every op that fits (possibly empty) instead of one;
    ``unique``: no match unless exactly one op fits (an ambiguous pairing is no pairing)."""

    name: str
    type: TypeSpec
    ins: Mapping[str, str] = field(default_factory=dict)
    outs: Mapping[str, str] = field(default_factory=dict)
    where: Callable[[Op, Match], bool] | None = None
    many: bool = False
    unique: bool = False

    def accepts(self, op_type: str) -> bool:
        t = self.type
        if isinstance(t, str):
            return op_type == t
        if callable(t):
            return bool(t(op_type))
        return op_type in t

    def names(self) -> list[str]:
        return [self.name, *(_bare(n) for n in (*self.ins.values(), *self.outs.values()))]


def _bare(slot_or_name: str) -> str:
    return slot_or_name.removesuffix("?")


@dataclass(frozen=True)
class Extension:
    """An optional part of a pattern (a second root): bound whole, or all None."""

    nodes: tuple[Node, ...]
    guards: tuple = ()


@dataclass(frozen=True)
class Pattern:
    """``nodes[0]`` is the root the driver anchors at. When every guard passes the driver
    calls ``rewrite(match, ctx)`` and counts ``stat``; the first failing guard's reason is the
    decline. A pattern without ``rewrite`` only declines (a known non-candidate to report)."""

    name: str
    nodes: tuple[Node, ...]
    guards: tuple = ()
    rewrite: Callable[[Match, PassContext], None] | None = None
    stat: str | None = None
    extensions: tuple[Extension, ...] = ()

    def __post_init__(self) -> None:
        _check_connected(self.name, self.nodes, set())
        bound = {n for node in self.nodes for n in node.names()}
        for ext in self.extensions:
            _check_connected(self.name, ext.nodes, bound)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    def matches(self, graph: Graph, root: Op, ctx: PassContext) -> Iterator[Match]:
        """Every structural match rooted at ``root``, extensions bound (guards not run)."""
        for m in match_nodes(graph, self.nodes, Match(), root):
            yield self._extend(graph, m, ctx)

    def _extend(self, graph: Graph, m: Match, ctx: PassContext) -> Match:
        for ext in self.extensions:
            found = None
            for em in match_nodes(graph, ext.nodes, m):
                if all(g.reason(em, ctx) is None for g in ext.guards):
                    found = em
                    break
            if found is None:
                found = Match(m)
                for node in ext.nodes:
                    for n in node.names():
                        found.setdefault(n, [] if node.many and n == node.name else None)
            m = found
        return m

    def first_failure(self, m: Match, ctx: PassContext) -> str | None:
        for g in self.guards:
            why = g.reason(m, ctx)
            if why is not None:
                return why
        return None


def _check_connected(pattern: str, nodes: Sequence[Node], bound: set[str]) -> None:
    bound = set(bound)
    for i, node in enumerate(nodes):
        if i > 0 or bound:
            links = [_bare(n) for n in (*node.ins.values(), *node.outs.values())]
            if not any(n in bound for n in links):
                raise PassError(f"pattern {pattern!r}: node {node.name!r} shares no value "
                                 "with the nodes before it")
        bound.update(node.names())


def match_nodes(graph: Graph, nodes: Sequence[Node], m: Match,
                root: Op | None = None) -> Iterator[Match]:
    """Structural matches of ``nodes`` extending ``m`` (backtracking, in graph order)."""
    if not nodes:
        yield m
        return
    node, rest = nodes[0], nodes[1:]
    candidates = [root] if root is not None else _candidates(graph, node, m)
    if node.many:
        found = [op for op in candidates if _fits(node, op, m) is not None]
        yield from match_nodes(graph, rest, Match(m, **{node.name: found}))
        return
    if node.unique:
        fits = [m2 for m2 in (_fits(node, op, m) for op in candidates) if m2 is not None]
        if len(fits) == 1:
            yield from match_nodes(graph, rest, fits[0])
        return
    for op in candidates:
        m2 = _fits(node, op, m)
        if m2 is not None:
            yield from match_nodes(graph, rest, m2)


def _candidates(graph: Graph, node: Node, m: Match) -> list[Op]:
    """Ops linked to ``m`` as ``node`` says: the producer of a bound value it writes, else
    the readers (in that slot) of a bound value it reads, from the link with fewest (every
    candidate is checked against all links later). Optional slots constrain nothing, so
    when only they are bound the candidates are all their readers and producers."""
    optional: list[Op] = []
    for slot, name in node.outs.items():
        v = m.get(_bare(name))
        if isinstance(v, Value):
            p = graph.producer(v)
            found = [p] if p is not None else []
            if not slot.endswith("?"):
                return found
            optional.extend(found)
    required = []
    for slot, name in node.ins.items():
        v = m.get(_bare(name))
        if isinstance(v, Value):
            if slot.endswith("?"):
                optional.extend(_readers(graph, v, _bare(slot)))
            else:
                required.append((graph.num_uses(v), v, slot))
    if required:
        _, v, slot = min(required, key=lambda r: r[0])
        return list(dict.fromkeys(_readers(graph, v, slot)))
    return list(dict.fromkeys(optional))  # empty: linked only through absent optional values


def _readers(graph: Graph, v: Value, slot: str) -> list[Op]:
    return [op for op, s, _ in graph.users(v) if slot == ANY_SLOT or s == slot]


def _fits(node: Node, op: Op, m: Match) -> Match | None:
    """``m`` extended by ``op`` as ``node``, or None when it does not fit."""
    if not node.accepts(op.type) or m.holds(op):
        return None
    m2 = Match(m)
    if not node.many:
        m2[node.name] = op
    for io, spec in ((op.inputs, node.ins), (op.outputs, node.outs)):
        for slot, name in spec.items():
            optional, slot, name = slot.endswith("?"), _bare(slot), _bare(name)
            if slot == ANY_SLOT:
                v = m2.get(name)
                if not any(v in vals for vals in io.values()):
                    return None
                continue
            vals = io.get(slot)
            actual = vals[0] if vals else None
            if actual is None:
                if not optional:
                    return None
                m2.setdefault(name, None)  # an absent optional operand matches any binding
                continue
            if name in m2:
                if m2[name] is not actual:
                    return None
            elif not node.many:
                m2[name] = actual
    if node.where is not None and not node.where(op, m2):
        return None
    return m2
