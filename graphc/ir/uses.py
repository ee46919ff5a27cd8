"""What passes ask a Graph about uses (how many, which ops, what an op defines), so that no
pass reads the networkx maps; mixed into ``Graph`` (graph.py) to keep that module small."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .graph import Op, Value


class UseQueries:
    """Use queries over ``self._succ``/``self._pred`` (Graph's read-only adjacency dicts);
    ``producer``, ``users`` and ``user_ops`` live on Graph itself."""

    __slots__ = ()

    def has_value(self, value: Value) -> bool:
        """Whether ``value`` is (still) a value of this graph: not erased, not another's."""
        return self.values.get(value.name) is value

    def num_uses(self, value: Value) -> int:
        """How many operands read ``value`` (an op reading it in two slots counts twice)."""
        return sum(len(keys) for keys in self._succ[value].values())

    def has_users(self, value: Value) -> bool:
        """Whether any op reads ``value`` (O(1): dce and the memory planner ask per value)."""
        return bool(self._succ[value])

    def sole_user(self, value: Value) -> Op | None:
        """The one op reading ``value`` (in one or more slots); None for none or several."""
        users = self._succ[value]
        return next(iter(users)) if len(users) == 1 else None

    def values_defined_by(self, op: Op) -> list[Value]:
        """The values ``op`` writes, not grouped by slot (cheaper than ``op.outputs`` in a
        sweep over every op, which should not fill each op's operand cache)."""
        return list(self._succ[op])

    def reads_output_of(self, op: Op, other: Op) -> bool:
        """Whether ``op`` reads (as data or control) any value ``other`` writes."""
        produced = self._succ[other]
        return any(v in produced for v in self._pred[op])

    @property
    def revision(self) -> int:
        """A number every change to the graph increases: a cached analysis is current while
        the revision it was computed at is."""
        return self._version
