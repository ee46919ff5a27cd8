"""The SSA graph: op and value nodes in one networkx MultiDiGraph, lowered from a Program.

Every value is defined once; re-written variables get versions (``w#1``). Edges carry
``(slot, position)`` keys. ``Rewriter`` (rewriter.py) is the only way passes edit a graph.
"""

from __future__ import annotations

import functools
import gc
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from .errors import ProgramError
from .opdef import get_op_def
from .types import TensorType
from .uses import UseQueries

VAR_KINDS = ("feed", "param", "persistable", "temp")


@dataclass
class VarInfo:
    """What is shared by all versions of one variable: its name, kind and flags."""

    name: str
    kind: str = "temp"  # feed | param | persistable | temp
    stop_gradient: bool = False
    trainable: bool = True
    learning_rate: float = 1.0
    lod_level: int = 0
    # (nranks, whole shape): each data-parallel replica holds only its [1, c] shard of this
    # variable (ir/shapes.py shard_shape); the runtime keeps the whole in the scope's view
    shard: tuple[int, tuple[int, ...]] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # e.g. regularizer

    @property
    def persistable(self) -> bool:
        return self.kind in ("param", "persistable")


class Value:
    """One SSA value: a version of a variable with a static type."""

    __slots__ = ("name", "var", "version", "type", "graph")

    def __init__(self, graph: Graph, name: str, var: VarInfo, version: int, type: TensorType):
        self.graph, self.name, self.var, self.version, self.type = graph, name, var, version, type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def producer(self) -> Op | None:
        return self.graph.producer(self)

    @property
    def users(self) -> list[tuple[Op, str, int]]:
        return self.graph.users(self)

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


class Op:
    """One op node. Operands live on the graph's edges; ``inputs``/``outputs`` read them."""

    __slots__ = ("id", "type", "attrs", "source", "role", "seq", "provenance", "graph", "_io",
                 "stream_key")

    def __init__(self, graph: Graph, id: int, type: str, attrs: dict[str, Any],
                 source: str | None, role: str, seq: tuple, provenance: tuple = ()):
        self.graph, self.id, self.type, self.attrs = graph, id, type, attrs
        self.source, self.role, self.seq, self.provenance = source, role, seq, provenance
        self._io = None  # cached (inputs, outputs); dropped by every edge change
        # the name a random op's numbers are keyed by when its program has no seed: its first
        # output's name as lowered, kept by an op a pass rebuilds from it (amp renames the
        # output of a dropout it runs in bfloat16; the mask must not change)
        self.stream_key: str | None = None

    def random_stream_key(self) -> str:
        """``stream_key``, else the first output's name (else the op type)."""
        if self.stream_key is not None:
            return self.stream_key
        outs = self.output_values()
        return outs[0].name if outs else self.type

    @property
    def opdef(self):
        return get_op_def(self.type, self.where)

    @property
    def where(self) -> str:
        return f"op {self.type}" + (f" at {self.source}" if self.source else "")

    @property
    def inputs(self) -> dict[str, list[Value]]:
        return self.graph.op_inputs(self)

    @property
    def outputs(self) -> dict[str, list[Value]]:
        return self.graph.op_outputs(self)

    def input(self, slot: str) -> Value | None:
        vals = self.inputs.get(slot)
        return vals[0] if vals else None

    def output(self, slot: str) -> Value | None:
        vals = self.outputs.get(slot)
        return vals[0] if vals else None

    def input_values(self) -> list[Value]:
        return [v for vs in self.inputs.values() for v in vs]

    def output_values(self) -> list[Value]:
        return [v for vs in self.outputs.values() for v in vs]

    def __repr__(self) -> str:
        return f"<Op #{self.id} {self.type}" + (f" at {self.source}>" if self.source else ">")


def _seq_key(op: Op) -> tuple:
    return (op.seq, op.id)


def _group_slots(adjacent: dict, slot_order) -> dict[str, list[Value]]:
    """An op's adjacency ``{value: {(slot, pos): attrs}}`` -> {slot: [values by pos]}, in the
    op definition's slot order."""
    by_slot: dict[str, list] = {}
    for value, keys in adjacent.items():
        for slot, pos in keys:
            by_slot.setdefault(slot, []).append((pos, value))
    out = {}
    for slot in slot_order:
        if slot in by_slot:
            out[slot] = _by_position(by_slot.pop(slot))
    for slot, pvs in by_slot.items():  # unknown slots (a corrupt graph): keep for the verifier
        out[slot] = _by_position(pvs)
    return out


def _by_position(pvs: list[tuple[int, Value]]) -> list[Value]:
    if len(pvs) == 1:  # the common case, worth skipping the sort for
        return [pvs[0][1]]
    pvs.sort(key=_position)
    return [v for _, v in pvs]


def _position(pv: tuple[int, Value]) -> int:
    return pv[0]


class Graph(UseQueries):
    """An SSA graph. Read freely; change only through ``graph.rewriter()``."""

    def __init__(self, name: str = "main"):
        # networkx (~0.3 s to import) is loaded by the first graph, not by ``import graphc``:
        # building a program needs no graph, and a script that only builds or saves one never
        # pays for it
        import networkx as nx

        self.name = name
        self.nx = nx.MultiDiGraph()
        self.vars: dict[str, VarInfo] = {}
        self.values: dict[str, Value] = {}
        self._versions: dict[str, dict[int, Value]] = {}  # var name -> {version: value}
        self.ops_by_id: dict[int, Op] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self._output_set: tuple[int, frozenset] = (-1, frozenset())
        self._outputs_version = 0  # bumped by every change to ``outputs``
        self.random_seed = 0
        self.memory_plan = None  # set by the enable-inplace / memory-optimize analyses
        # called as listener(kind, info) by every rewriter of this graph (passes included)
        self.listeners: list = []
        self._ids = itertools.count()
        self._version = 0
        self._order: list[Op] | None = None
        self._order_version = -1

    # networkx's adjacency views cost about a microsecond per lookup, which dominates
    # printing and verifying 100k-op graphs, so read paths use the dicts beneath them
    # (networkx's documented layout: node -> neighbour -> {edge key: attrs}). Read only:
    # every edit goes through the methods of ``self.nx``.
    @property
    def _succ(self) -> dict:
        return self.nx._succ

    @property
    def _pred(self) -> dict:
        return self.nx._pred

    # -- queries (O(degree)) -----------------------------------------------------------
    def op_inputs(self, op: Op) -> dict[str, list[Value]]:
        if op._io is None:
            op._io = self._io_uncached(op)
        return op._io[0]

    def op_outputs(self, op: Op) -> dict[str, list[Value]]:
        if op._io is None:
            op._io = self._io_uncached(op)
        return op._io[1]

    def _io_for_reading(self, op: Op):
        """(inputs, outputs) from the cache when filled, else computed without filling it:
        a sweep over every op (printing) should not grow a big graph by a cache per op."""
        return op._io or self._io_uncached(op)

    def _io_uncached(self, op: Op):
        opdef = get_op_def(op.type, op.where)
        ins = _group_slots(self._pred[op], opdef.input_names)
        outs = _group_slots(self._succ[op], opdef.output_names)
        return ins, outs

    def producer(self, value: Value) -> Op | None:
        for op in self._pred[value]:
            return op
        return None

    def users(self, value: Value) -> list[tuple[Op, str, int]]:
        return [(op, slot, pos) for op, keys in self._succ[value].items()
                for (slot, pos) in keys]

    def user_ops(self, value: Value) -> list[Op]:
        return list(self._succ[value])

    def is_output(self, value: Value) -> bool:
        """Whether ``value`` is a graph output (O(1): passes ask this for every candidate)."""
        if self._output_set[0] != self._outputs_version:
            self._output_set = (self._outputs_version, frozenset(self.outputs))
        return value in self._output_set[1]

    def value(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise ProgramError(f"graph has no value '%{name}'") from None

    def latest(self, var_name: str) -> Value:
        """The last version of a variable (the value the program leaves in it)."""
        versions = self._versions.get(var_name)
        if not versions:
            raise ProgramError(f"graph has no variable '{var_name}'")
        return versions[max(versions)]

    @property
    def num_ops(self) -> int:
        return len(self.ops_by_id)

    def ops(self) -> list[Op]:
        """Ops in a stable topological order: program order wherever the edges allow."""
        if self._order is None or self._order_version != self._version:
            self._order = self._stable_topo_order()
            self._order_version = self._version
        return self._order

    def _stable_topo_order(self) -> list[Op]:
        succ, pred = self._succ, self._pred
        # Rank ops by (seq, id) once, with C-speed tuple comparisons in sort(); the heap
        # below then orders plain ints (comparing seq tuples in heapq cost ~20 us per op).
        by_rank = sorted(self.ops_by_id.values(), key=_seq_key)
        rank = {op: r for r, op in enumerate(by_rank)}
        indeg = {}
        ready = []
        for op in by_rank:
            # count operand edges whose value has a producer (graph inputs are always ready)
            n = sum(len(keys) for v, keys in pred[op].items() if pred[v])
            indeg[op] = n
            if n == 0:
                ready.append(rank[op])  # ascending already: a valid heap
        order = []
        while ready:
            op = by_rank[heapq.heappop(ready)]
            order.append(op)
            for value in succ[op]:
                for user, keys in succ[value].items():
                    indeg[user] -= len(keys)
                    if indeg[user] == 0:
                        heapq.heappush(ready, rank[user])
        if len(order) != len(self.ops_by_id):
            from .errors import VerifyError
            stuck = sorted((op for op in self.ops_by_id.values() if indeg[op] > 0),
                           key=lambda o: (o.seq, o.id))
            raise VerifyError(f"graph has a cycle through {len(stuck)} ops, first {stuck[0].where}",
                              op=stuck[0])
        return order

    def stats(self) -> dict[str, int]:
        """Op counts by type, most frequent first."""
        counts: dict[str, int] = {}
        for op in self.ops_by_id.values():
            counts[op.type] = counts.get(op.type, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    # -- low-level edits (used by lowering, parsing and the Rewriter only) ------------------
    def _touch(self, *ops: Op) -> None:
        self._version += 1
        for op in ops:
            op._io = None

    def _new_var(self, info: VarInfo) -> VarInfo:
        if info.name in self.vars:
            raise ProgramError(f"variable '{info.name}' already exists in the graph")
        self.vars[info.name] = info
        return info

    def _new_value(self, var: VarInfo, version: int, type: TensorType) -> Value:
        name = var.name if version == 0 else f"{var.name}#{version}"
        if name in self.values:
            raise ProgramError(f"value '%{name}' is defined twice")
        v = Value(self, name, var, version, type)
        self.values[name] = v
        self._versions.setdefault(var.name, {})[version] = v
        self.nx.add_node(v)
        self._version += 1
        return v

    def _remove_value(self, v: Value) -> None:
        """Drop a value from the tables (and its variable with its last version)."""
        self.nx.remove_node(v)
        del self.values[v.name]
        versions = self._versions[v.var.name]
        del versions[v.version]
        if not versions:
            del self._versions[v.var.name]
            self.vars.pop(v.var.name, None)
        self._version += 1

    def _new_op(self, type: str, attrs: dict, source, role: str, seq: tuple,
                provenance: tuple = ()) -> Op:
        op = Op(self, next(self._ids), type, attrs, source, role, seq, provenance)
        self.ops_by_id[op.id] = op
        self.nx.add_node(op)
        self._version += 1
        return op

    def _connect(self, op: Op, inputs: dict[str, list[Value]], outputs: dict[str, list[Value]]):
        for slot, vals in inputs.items():
            for pos, v in enumerate(vals):
                self.nx.add_edge(v, op, key=(slot, pos))
        for slot, vals in outputs.items():
            for pos, v in enumerate(vals):
                if self._pred[v]:
                    raise ProgramError(f"value '%{v.name}' already has a producer")
                self.nx.add_edge(op, v, key=(slot, pos))
        self._touch(op)

    # -- conversions and display ----------------------------------------------------------
    def rewriter(self, origin: str | None = None):
        from .rewriter import Rewriter
        return Rewriter(self, origin)

    def to_text(self, show_source: bool = False) -> str:
        from .text import print_graph
        return print_graph(self, show_source=show_source)

    def verify(self) -> Graph:
        from .verify import verify
        verify(self)
        return self

    def to_program(self):
        from .to_program import graph_to_program
        return graph_to_program(self)

    def structurally_equal(self, other: Graph, check_source: bool = False) -> bool:
        """Same ops, values, types, attrs, variables and order, whatever the node identities.
        Source lines are debug information and compared only with ``check_source``."""
        from .text import structural_key
        return structural_key(self, check_source) == structural_key(other, check_source)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return (f"<Graph @{self.name}: {self.num_ops} ops, {len(self.values)} values, "
                f"{len(self.inputs)} inputs, {len(self.outputs)} outputs>")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(repr(self) if cycle else self.to_text(show_source=True))

    def _repr_html_(self) -> str:
        from .text import graph_html
        return graph_html(self)


def gc_paused(fn):
    """Run ``fn`` with the cyclic garbage collector paused.

    Building a graph allocates a few dozen containers per op, none of them garbage, and
    each full collection they trigger walks every live object: for a 100k-op graph that
    was half the time of lowering or parsing it. Reference counting still frees as usual.
    """
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return run


@gc_paused
def lower(program) -> Graph:
    """Lower a Program's global block to SSA. Feeds, parameters and persistables read before
    being written become graph inputs; the last version of each persistable is an output."""
    from .program import Parameter, Program
    if not isinstance(program, Program):
        raise ProgramError(f"lower expects a Program, got {type(program).__name__}")
    if program.num_blocks > 1 and any(b.ops for b in program.blocks[1:]):
        raise ProgramError("graphc lowers single-block programs; this one has ops in sub-blocks")
    block = program.global_block()
    g = Graph()
    g.random_seed = program.random_seed
    latest: dict[str, Value] = {}
    types: dict[TensorType, TensorType] = {}  # one object per distinct type: less for the GC

    def type_of(var) -> TensorType:
        t = var.type
        return types.setdefault(t, t)

    def info_for(var) -> VarInfo:
        if var.name in g.vars:
            return g.vars[var.name]
        if isinstance(var, Parameter):
            info = VarInfo(var.name, "param", var.stop_gradient, var.trainable,
                           var.optimize_attr.get("learning_rate", 1.0), var.lod_level)
            if var.regularizer is not None:
                info.extra["regularizer"] = var.regularizer
        elif var.is_data:
            info = VarInfo(var.name, "feed", var.stop_gradient, lod_level=var.lod_level)
        else:
            info = VarInfo(var.name, "persistable" if var.persistable else "temp",
                           var.stop_gradient, lod_level=var.lod_level)
        return g._new_var(info)

    written, read_first = set(), set()
    for op in block.ops:
        for n in op.input_arg_names:
            if n not in written:
                read_first.add(n)
        written.update(op.output_arg_names)

    # graph inputs, in declaration order: state and feeds read before written, or never touched
    for var in block.vars.values():
        if not (var.persistable or var.is_data):
            continue
        if var.name in read_first or var.name not in written:
            if var.shape is None:
                raise ProgramError(f"variable '{var.name}' has no shape")
            v = g._new_value(info_for(var), 0, type_of(var))
            g.inputs.append(v)
            latest[var.name] = v

    for i, pop in enumerate(block.ops):
        ins = {}
        for slot, names in pop.inputs.items():
            vals = []
            for n in names:
                if n not in latest:
                    var = block.var(n)
                    raise ProgramError(
                        f"{pop.where}: input '{slot}' reads '{n}' before any op writes it, and "
                        f"'{n}' is neither fed (data) nor persistable")
                vals.append(latest[n])
            ins[slot] = vals
        outs = {}
        seen = set()
        for slot, names in pop.outputs.items():
            vals = []
            for n in names:
                if n in seen:
                    raise ProgramError(f"{pop.where}: writes '{n}' twice")
                seen.add(n)
                var = block.var(n)
                prev = latest.get(n)
                v = g._new_value(info_for(var), 0 if prev is None else prev.version + 1,
                                 type_of(var))
                vals.append(v)
            outs[slot] = vals
        op = g._new_op(pop.type, dict(pop.attrs), pop.source, pop.role, (i,))
        g._connect(op, ins, outs)
        for vals in outs.values():
            for v in vals:
                latest[v.var.name] = v

    g._outputs_version += 1
    g.outputs = [latest[var.name] for var in block.vars.values()
                 if var.persistable and var.name in latest]
    return g
