"""Gradient and parameter bucketing shared by fuse-all-reduce-ops and fuse-broadcast-ops: the
bucket plan (layers, bytes, kinds), the cycle-free split and the fusion into c_fused_* ops."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ...ir.graph import Graph, Op, Value
from ...ir.opdef import CONTROL_SLOT, get_op_def
from .analysis import fusion_cycle
from .base import PassContext

GRADIENT_FUSED = {"c_allreduce": "c_fused_allreduce",
                  "c_reduce_scatter": "c_fused_reduce_scatter"}
PARAMETER_FUSED = {"c_allgather": "c_fused_allgather"}
# attributes that describe each member's tensor, concatenated in the fused op (not compared)
PER_MEMBER_ATTRS = ("shapes", "ranks")
MB = 2 ** 20
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2,
             "int32": 4, "int64": 8, "uint8": 1, "bool": 1}


# -- the plan: pure, over abstract items (property-tested without graphs) ---------------------

@dataclass(frozen=True)
class Item:
    """One collective as the planner sees it: its parameter, layer, bytes and kind."""

    param: str
    layer: str
    nbytes: int
    kind: tuple = ()


def layer_of(param: str) -> str:
    """``fc_0.w_0`` -> ``fc_0``: the layer a parameter belongs to (the name before '.')."""
    return param.split(".", 1)[0]


def param_of(value: Value) -> str:
    """The parameter a collective's tensor belongs to: ``w@GRAD`` (any version) -> ``w``."""
    return value.var.name.split("@GRAD", 1)[0]


def plan_buckets(items: Sequence[Item], max_bytes: float, max_layers: int = 0
                 ) -> list[list[int]]:
    """Indices of ``items`` (in backward order) per bucket, under the bound in the module
    docstring; buckets ordered by their first item, items in each in backward order."""
    units: dict[tuple, list[int]] = {}
    for i, it in enumerate(items):
        units.setdefault((it.kind, it.layer), []).append(i)
    by_kind: dict[tuple, list[list[int]]] = {}
    for (kind, _), members in units.items():
        by_kind.setdefault(kind, []).append(members)
    buckets: list[list[int]] = []
    for kind_units in by_kind.values():
        current: list[int] = []
        size = layers = 0
        for unit in kind_units:
            unit_bytes = sum(items[i].nbytes for i in unit)
            if unit_bytes > max_bytes:
                # a layer too big for one bucket: cut it, in its own buckets
                if current:
                    buckets.append(current)
                current, size, layers = [], 0, 0
                buckets.extend(_cut(items, unit, max_bytes))
                continue
            if current and (size + unit_bytes > max_bytes
                            or (max_layers and layers + 1 > max_layers)):
                buckets.append(current)
                current, size, layers = [], 0, 0
            current = current + unit
            size += unit_bytes
            layers += 1
        if current:
            buckets.append(current)
    # members in backward order even where a layer's gradients are not adjacent
    buckets = sorted((sorted(b) for b in buckets), key=lambda b: b[0])
    return buckets


def _cut(items: Sequence[Item], unit: list[int], max_bytes: float) -> list[list[int]]:
    """Consecutive pieces of ``unit``, each within ``max_bytes`` or a single item."""
    pieces: list[list[int]] = []
    size = 0
    for i in unit:
        if pieces and size + items[i].nbytes <= max_bytes:
            pieces[-1].append(i)
            size += items[i].nbytes
        else:
            pieces.append([i])
            size = items[i].nbytes
    return pieces


# -- graphs: which ops, and whether fusing them closes a cycle ---------------------------------

def nbytes(value: Value) -> int | None:
    """Bytes of a statically shaped tensor; None if a dimension is unknown."""
    if any(d < 0 for d in value.shape):
        return None
    n = _ITEMSIZE[value.dtype]
    for d in value.shape:
        n *= d
    return n


def _tensor(op: Op) -> Value:
    """The whole (unsharded) tensor a collective exchanges: all-gather's output, else input."""
    return op.outputs["Out"][0] if op.type in PARAMETER_FUSED else op.inputs["X"][0]


def _kind(op: Op) -> tuple:
    """What members of one bucket share: type, role, dtype, attributes."""
    attrs = tuple((k, v) for k, v in sorted(op.attrs.items()) if k not in PER_MEMBER_ATTRS)
    return (op.type, op.role, _tensor(op).dtype, attrs)


def _cycle(graph: Graph, members: list[Op]) -> bool:
    """Whether one op in place of ``members`` would close a cycle."""
    return fusion_cycle(graph, members) is not None


def _acyclic(graph: Graph, bucket: list[Op]) -> list[list[Op]]:
    """``bucket`` split, first fit in backward order, into groups whose fusion is acyclic."""
    if len(bucket) < 2 or not _cycle(graph, bucket):
        return [bucket]
    groups: list[list[Op]] = []
    for op in bucket:
        for group in groups:
            if not _cycle(graph, group + [op]):
                group.append(op)
                break
        else:
            groups.append([op])
    return groups


@dataclass
class GraphPlan:
    """The pass's decision for one graph: groups of ops (one collective each) and the ops it
    left out, with why."""

    groups: list[list[Op]] = field(default_factory=list)
    unsized: list[Op] = field(default_factory=list)
    cycle_splits: int = 0


def plan_graph(graph: Graph, op_types: Iterable[str], max_mb: float, max_layers: int
               ) -> GraphPlan:
    """Bucket the graph's ops of ``op_types`` as the passes do (see the module docstring)."""
    op_types = set(op_types)
    plan = GraphPlan()
    ops, items = [], []
    position = {op: i for i, op in enumerate(graph.ops())}
    for op in ready_order(graph, [op for op in position if op.type in op_types], position):
        size = nbytes(_tensor(op))
        if size is None:
            plan.unsized.append(op)
            continue
        param = param_of(_tensor(op))
        ops.append(op)
        items.append(Item(param, layer_of(param), size, _kind(op)))
    for bucket in plan_buckets(items, max_mb * MB, max_layers):
        groups = _acyclic(graph, [ops[i] for i in bucket])
        plan.cycle_splits += len(groups) - 1
        plan.groups.extend(groups)
    plan.groups.extend([op] for op in plan.unsized)
    first = {op: i for i, op in enumerate(ops + plan.unsized)}
    plan.groups.sort(key=lambda g: first[g[0]])
    return plan


def ready_order(graph: Graph, ops: list[Op], position: dict[Op, int]) -> list[Op]:
    """``ops`` in the order their tensors become ready: by the position of the op producing
    the input (for gradients, the backward op that finishes them: backward order even where
    Reduce mode placed the reduce-scatters with the optimizer ops), then their own."""
    def key(op: Op) -> tuple[int, int]:
        producer = graph.producer(op.inputs["X"][0])
        return (position[producer] if producer is not None else -1, position[op])
    return sorted(ops, key=key)


# -- explaining a plan --------------------------------------------------------------------------

@dataclass(frozen=True)
class Bucket:
    """One bucket: the collective that exchanges it and what it holds."""

    index: int
    collective: str
    dtype: str
    layers: tuple[str, ...]
    params: tuple[str, ...]
    nbytes: int


class BucketPlan(list):
    """A list of Buckets; ``str()`` / ``table()`` print them (bucket, layers, params, bytes).

    ``left_out``: (parameter, why) for gradients exchanged outside any bucket: row-sparse
    ones, all-gathered on their own (``c_allgather_rows``), as Paddle leaves them out too."""

    def __init__(self, buckets=(), left_out=()):
        super().__init__(buckets)
        self.left_out: list[tuple[str, str]] = list(left_out)

    def table(self) -> str:
        lines = self._bucket_lines() if self else ["no gradient collectives"]
        lines += [f"left out: {param} ({why})" for param, why in self.left_out]
        return "\n".join(lines)

    def _bucket_lines(self) -> list[str]:
        head = ("bucket", "collective", "dtype", "layers", "params", "bytes", "parameters")
        rows = [(str(b.index), b.collective, b.dtype, str(len(b.layers)), str(len(b.params)),
                 str(b.nbytes), ", ".join(b.params)) for b in self]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
        lines = ["  ".join(c.ljust(w) if i < 2 or i == 2 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(r, widths))) + "  " + r[-1]
                 for r in [head, *rows]]
        total = sum(b.nbytes for b in self)
        lines.append(f"{len(self)} buckets, {sum(len(b.params) for b in self)} tensors, "
                     f"{total} bytes ({total / MB:.3f} MB)")
        return lines

    def __str__(self) -> str:
        return self.table()


def _bucket(index: int, collective: str, tensors: list[Value]) -> Bucket:
    params = tuple(param_of(v) for v in tensors)
    return Bucket(index, collective, tensors[0].dtype,
                  tuple(dict.fromkeys(layer_of(p) for p in params)), params,
                  sum(nbytes(v) or 0 for v in tensors))


def _whole(op: Op) -> list[Value]:
    fused_parameters = set(PARAMETER_FUSED) | set(PARAMETER_FUSED.values())
    return list(op.outputs["Out"] if op.type in fused_parameters else op.inputs["X"])


def bucket_plan(graph: Graph, max_mb: float = 32.0, max_layers: int = 0,
                op_types: Iterable[str] = tuple(GRADIENT_FUSED)) -> BucketPlan:
    """The buckets fuse-all-reduce-ops would make of ``graph`` (after data-parallel, before
    fusion) with these bounds; ``print()`` the result for a table."""
    plan = plan_graph(graph, op_types, max_mb, max_layers)
    fused = {**GRADIENT_FUSED, **PARAMETER_FUSED}
    return BucketPlan((_bucket(i, fused[g[0].type] if len(g) > 1 else g[0].type,
                               [_tensor(op) for op in g]) for i, g in enumerate(plan.groups)),
                      sparse_left_out(graph))


def buckets_in(graph: Graph, op_types: Iterable[str] = (*GRADIENT_FUSED,
                                                          *GRADIENT_FUSED.values())) -> BucketPlan:
    """The buckets a (fused) graph exchanges: each collective of ``op_types`` is one bucket."""
    op_types = set(op_types)
    return BucketPlan((_bucket(i, op.type, _whole(op)) for i, op in
                       enumerate(o for o in graph.ops() if o.type in op_types)),
                      sparse_left_out(graph))


SPARSE_EXCHANGE = "c_allgather_rows"
SPARSE_WHY = "row-sparse gradient: its rows are all-gathered on their own, not bucketed"


def sparse_left_out(graph: Graph) -> list[tuple[str, str]]:
    """(parameter, why) for each row-sparse gradient's all-gather, in graph order."""
    return [(param_of(op.inputs["X"][0]), SPARSE_WHY) for op in graph.ops()
            if op.type == SPARSE_EXCHANGE]


# -- rewriting ------------------------------------------------------------------------------------

def fuse_buckets(graph: Graph, ctx: PassContext, fused_types: dict[str, str], max_mb: float,
                 max_layers: int) -> None:
    """Apply ``plan_graph`` to the graph: one fused op per group of two or more."""
    plan = plan_graph(graph, fused_types, max_mb, max_layers)
    left_out = sparse_left_out(graph)
    if left_out:
        ctx.decline(f"{SPARSE_EXCHANGE}: {SPARSE_WHY}", len(left_out))
    if not plan.groups:
        ctx.decline(f"no {' or '.join(fused_types)} ops")
        return
    if plan.cycle_splits:
        ctx.decline("bucket split: fusing would create a cycle", plan.cycle_splits)
    unsized = set(plan.unsized)
    for group in plan.groups:
        ctx.count("buckets")
        if len(group) > 1:
            _fuse(ctx, group, fused_types[group[0].type])
            continue
        (op,) = group
        if op in unsized:
            why = "tensor of unknown shape"
        elif nbytes(_tensor(op)) > max_mb * MB:
            why = "larger than max_mb alone"
        else:
            why = "alone in its bucket"
        ctx.decline(f"{op.type}: {why}")


def _fuse(ctx: PassContext, members: list[Op], fused_type: str) -> None:
    rw = ctx.rewriter
    produced = {v for m in members for v in m.outputs["Out"]}
    deps = [v for m in members for v in m.inputs.get(CONTROL_SLOT, ()) if v not in produced]
    ins: dict[str, list[Value]] = {"X": [m.inputs["X"][0] for m in members]}
    if deps:
        ins[CONTROL_SLOT] = list(dict.fromkeys(deps))
    outs = {"Out": [m.outputs["Out"][0] for m in members]}
    attrs = dict(members[0].attrs)
    for name in PER_MEMBER_ATTRS:
        if name in attrs:
            attrs[name] = [x for m in members for x in m.attrs[name]]
    # Check the fused op before the members go, so a refusal leaves the graph as it was.
    opdef = get_op_def(fused_type)
    where = f"{fused_type} replacing {members[0].where}"
    opdef.infer_types({s: [v.type for v in vs] for s, vs in ins.items()},
                      opdef.normalize_attrs(dict(attrs), where), where)
    for m in members:
        rw.erase_op(m, erase_outputs=False)
    # Right after the op that finishes the last member's input: where the whole bucket is
    # ready (Reduce mode's reduce-scatters otherwise sit with the optimizer ops).
    ready = [p for p in (ctx.graph.producer(x) for x in ins["X"]) if p is not None]
    rw.create_op(fused_type, ins, outs, attrs, derived_from=members, role=members[0].role,
                 source=members[0].source, after=ready[-1] if ready else None)
    ctx.count("fused", len(members))
