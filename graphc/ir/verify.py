"""The verifier: checks every SSA invariant and raises VerifyError showing the op in context.

Single definition, no cycles, every use defined, slots/attrs per op definition, types;
row-sparse values only where ops take them, and never as state, feeds or graph outputs;
every region (an op's nested graph) verifies and is isolated: it holds no state of its own.
"""

from __future__ import annotations

import functools

from .errors import GraphcError, VerifyError
from .graph import Graph, Op, Value, VarInfo
from .opdef import get_op_def, has_op_def
from .program import ROLES
from .types import DTYPES, MAX_LOD_LEVEL, TensorType, types_compatible

CONTEXT_OPS = 3


def _context(graph: Graph, op: Op, order: list[Op] | None) -> str:
    from .text import _Printer
    printer = _Printer(graph, show_source=True)
    if order is None:
        order = sorted(graph.ops_by_id.values(), key=lambda o: (o.seq, o.id))
    try:
        i = order.index(op)
    except ValueError:
        return ""
    lines = []
    for j in range(max(0, i - CONTEXT_OPS), min(len(order), i + CONTEXT_OPS + 1)):
        try:
            text = printer.op_line(order[j]).strip()
        except GraphcError:
            text = f"<{order[j].type}>"
        lines.append(("  > " if j == i else "    ") + text)
    return "\n".join(lines)


def _fail(graph: Graph, message: str, op: Op | None = None, order=None):
    where = f"{op.where}: " if op is not None else ""
    raise VerifyError(where + message, op=op,
                      context=_context(graph, op, order) if op is not None else "")


def verify(graph: Graph) -> None:
    """Raise VerifyError on the first broken invariant; return None if the graph is valid.

    Whatever a buggy pass did to the graph, the answer is VerifyError, never another
    exception: a check that trips over a malformed object reports that object."""
    if not isinstance(graph, Graph):
        raise VerifyError(f"expected a graphc Graph, got {type(graph).__name__}")
    try:
        _verify(graph)
    except VerifyError:
        raise
    except Exception as exc:  # a malformed record no explicit check anticipated
        raise VerifyError(f"the graph is malformed: {type(exc).__name__}: {exc}") from exc


_KINDS = ("feed", "param", "persistable", "temp")


def _verify_records(graph: Graph, nodes_ops: set, nodes_vals: set) -> None:
    """The fields of every op, value and variable have the types the rest assumes."""
    for v in nodes_vals:
        t, var = v.type, v.var
        if not (isinstance(t, TensorType) and isinstance(t.shape, tuple)
                and all(type(d) is int and d >= -1 for d in t.shape)
                and isinstance(t.dtype, str) and t.dtype in DTYPES
                and isinstance(t.sparse, bool)
                and type(t.lod_level) is int and 0 <= t.lod_level <= MAX_LOD_LEVEL
                and not (t.sparse and t.lod_level) and not (t.lod_level and not t.shape)):
            _fail(graph, f"value %{v.name} has a malformed type {t!r}",
                  op=graph.producer(v) if v in graph._pred else None)
        if not isinstance(var, VarInfo) or var.kind not in _KINDS:
            _fail(graph, f"value %{v.name} has a malformed variable {var!r}")
        if not (type(v.version) is int and v.version >= 0):
            _fail(graph, f"value %{v.name} has version {v.version!r}, expected an int >= 0")
        if var.kind == "param" and any(d < 0 for d in t.shape):
            _fail(graph, f"parameter '{var.name}' has shape {list(t.shape)}; parameters need "
                         "a fully known shape", op=graph.producer(v))
    for op in nodes_ops:
        if not (isinstance(op.type, str) and isinstance(op.attrs, dict)
                and all(isinstance(k, str) for k in op.attrs)
                and (op.source is None or isinstance(op.source, str))):
            _fail(graph, f"op #{op.id} has a malformed type, attrs or source "
                         f"({op.type!r}, {type(op.attrs).__name__})")


def _verify(graph: Graph) -> None:
    g = graph.nx
    succ, pred = graph._succ, graph._pred
    nodes_ops = {n for n in g.nodes if isinstance(n, Op)}
    nodes_vals = {n for n in g.nodes if isinstance(n, Value)}
    if len(nodes_ops) + len(nodes_vals) != g.number_of_nodes():
        _fail(graph, "graph holds nodes that are neither ops nor values")
    if nodes_ops != set(graph.ops_by_id.values()):
        _fail(graph, "op table and graph nodes disagree (an op was added or removed "
                     "without the rewriter)")
    if nodes_vals != set(graph.values.values()):
        _fail(graph, "value table and graph nodes disagree (a value was added or removed "
                     "without the rewriter)")
    for u, nbrs in succ.items():  # the order of g.edges(keys=True), without its views
        u_is_op = isinstance(u, Op)
        for v, keys in nbrs.items():
            if u_is_op == isinstance(v, Op):
                _fail(graph, f"edge {u!r} -> {v!r} does not join a value and an op")
            for key in keys:
                if not (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                        and isinstance(key[1], int)):
                    _fail(graph, f"edge {u!r} -> {v!r} has key {key!r}, expected "
                                 "(slot, position)")

    _verify_records(graph, nodes_ops, nodes_vals)
    if not (isinstance(graph.inputs, list) and isinstance(graph.outputs, list)
            and all(isinstance(v, Value) for v in graph.inputs + graph.outputs)):
        _fail(graph, "graph inputs and outputs must be lists of the graph's values")
    inputs = set()
    for v in graph.inputs:
        if v.var.kind == "temp":
            _fail(graph, f"graph input %{v.name} is a temporary; a graph's inputs are feeds "
                         "and state (params, persistables)")
        if v in inputs:
            _fail(graph, f"%{v.name} is listed twice as a graph input")
        inputs.add(v)
        if v not in nodes_vals:
            _fail(graph, f"graph input %{v.name} is not in the graph")
        if v.type.sparse:
            _fail(graph, f"graph input %{v.name} is row-sparse ({v.type}); feeds and state "
                         "are dense tensors")
        if v.type.lod_level and v.var.kind != "feed":
            _fail(graph, f"graph input %{v.name} is a LoD value ({v.type}) but not a feed; "
                         "state (params, persistables) holds dense tensors")
    for v in graph.outputs:
        if v not in nodes_vals:
            _fail(graph, f"graph output %{v.name} is not a value of the graph")
        if v.type.sparse:
            _fail(graph, f"graph output %{v.name} is row-sparse ({v.type}); the scope keeps "
                         "dense tensors", op=graph.producer(v))

    for v in graph.values.values():  # table order: the same report every run
        expected = v.var.name if v.version == 0 else f"{v.var.name}#{v.version}"
        if v.name != expected or graph.vars.get(v.var.name) is not v.var:
            _fail(graph, f"value %{v.name} is not named after its variable and version "
                         f"(expected %{expected})")
        producers = list(pred[v])
        if len(producers) > 1 or sum(len(k) for k in pred[v].values()) > 1:
            ops = ", ".join(p.where for p in producers)
            _fail(graph, f"%{v.name} is defined more than once (by {ops})", op=producers[-1])
        if producers and v in inputs:
            _fail(graph, f"%{v.name} is a graph input and is also defined by an op",
                  op=producers[0])
        if v.type.lod_level and v.var.persistable:
            _fail(graph, f"persistable variable '{v.var.name}' holds a LoD value "
                         f"(%{v.name}: {v.type}); state holds dense tensors (pool the "
                         "sequences first)", op=graph.producer(v))
        if v.type.sparse and v.var.persistable:
            _fail(graph, f"persistable variable '{v.var.name}' holds a row-sparse value "
                         f"(%{v.name}: {v.type}); state is dense", op=graph.producer(v))
        members = v.var.extra.get("stack_of")
        if members and (not v.var.persistable or not v.type.shape
                        or v.type.shape[0] != len(members) or graph.vars.keys() & set(members)):
            _fail(graph, f"stacked state %{v.name}: {v.type} must be persistable with one row "
                         f"per member ({len(members)}), none of them a variable of the graph "
                         "too", op=graph.producer(v))
        if not producers and v not in inputs:
            users = list(succ[v])
            if users:
                _fail(graph, f"reads %{v.name}, which no op defines and which is not a graph "
                             "input (dangling use)", op=users[0])
            _fail(graph, f"value %{v.name} has no definition and is not a graph input")

    order = graph.ops()  # raises VerifyError on a cycle
    for op in order:
        _verify_op(graph, op, order)


def _verify_op(graph: Graph, op: Op, order: list[Op]) -> None:
    if not has_op_def(op.type):
        _fail(graph, f"unknown op type '{op.type}'", op, order)
    if op.role not in ROLES:
        _fail(graph, f"op_role {op.role!r} is not one of {ROLES}", op, order)
    opdef = get_op_def(op.type)
    where = op.where
    ins, outs = graph._io_uncached(op)  # from the edges, not from a cache that may be stale
    try:
        opdef.check_slots("input", ins, where)
        opdef.check_slots("output", outs, where)
        for kind, slots, adjacent in (("input", ins, graph._pred[op]),
                                      ("output", outs, graph._succ[op])):
            positions = _positions_by_slot(adjacent)
            for slot, vals in slots.items():
                keys = sorted(positions[slot])
                if keys != list(range(len(vals))):
                    _fail(graph, f"{kind} slot '{slot}' has positions {keys}, expected "
                                 f"0..{len(vals) - 1}", op, order)
        attrs = opdef.normalize_attrs(op.attrs, where)
    except VerifyError:
        raise
    except GraphcError as exc:
        _fail(graph, str(exc).removeprefix(where + ": "), op, order)
    if attrs != op.attrs or any(type(attrs[k]) is not type(op.attrs[k]) for k in attrs):
        missing = sorted(set(attrs) - set(op.attrs))
        _fail(graph, f"attributes are not normalized (missing {missing})" if missing else
              "attributes are not normalized", op, order)
    for region in opdef.regions:  # before inference, whose rules parse the bodies again
        text = op.attrs.get(region)
        if isinstance(text, str) and text:  # an optional region left empty holds no graph
            _verify_region(graph, op, region, text, order)
    try:
        inferred = opdef.infer_types({k: [v.type for v in vs] for k, vs in ins.items()},
                                     op.attrs, where)
    except GraphcError as exc:
        _fail(graph, str(exc).removeprefix(where + ": "), op, order)
    for slot, vals in outs.items():
        types = inferred.get(slot, [])
        if len(types) != len(vals):
            _fail(graph, f"output '{slot}' has {len(vals)} values but the op produces "
                         f"{len(types)}", op, order)
        for v, t in zip(vals, types):
            if not types_compatible(v.type, t):
                what = "row-sparse and dense differ" if v.type.sparse != t.sparse \
                    else "LoD levels differ" if v.type.lod_level != t.lod_level \
                    else "shape mismatch"
                _fail(graph, f"output '{slot}' %{v.name} is declared {v.type} but the op "
                             f"produces {t} ({what})", op, order)


@functools.lru_cache(maxsize=512)  # cache: a body is verified once per distinct text
def region_graph(text: str) -> Graph:
    """A region's graph text, parsed and verified (shared: read it, never edit it)."""
    from .text import parse
    body = parse(text)
    verify(body)
    return body


def _verify_region(graph: Graph, op: Op, region: str, text: str, order: list[Op]) -> None:
    """A region verifies on its own (nested regions too) and holds no state: whatever it
    reads from outside enters as one of its graph inputs (an operand of ``op``), and what it
    updates (a loop-carried value, a state's new version) leaves only as one of its graph
    outputs, through ``op``'s results."""
    try:
        body = region_graph(text)
    except GraphcError as exc:
        _fail(graph, f"region '{region}' does not verify: {type(exc).__name__}: {exc}",
              op, order)
    state = sorted(name for name, var in body.vars.items() if var.persistable)
    if state:
        _fail(graph, f"region '{region}' declares state {state}; a region holds no state: "
                     "state enters as an operand of the op (a graph input of the region) "
                     "and its new value leaves through the op's results", op, order)


def _positions_by_slot(adjacent: dict) -> dict[str, list[int]]:
    """An op's adjacency ``{value: {(slot, pos): attrs}}`` -> {slot: [positions]}."""
    positions: dict[str, list[int]] = {}
    for keys in adjacent.values():
        for slot, pos in keys:
            positions.setdefault(slot, []).append(pos)
    return positions
