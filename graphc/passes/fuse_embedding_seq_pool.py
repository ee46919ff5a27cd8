"""fuse-embedding-seq-pool: the lookups of one table that are each sum-pooled per sequence
(CTR-DNN's slots) become one fused_embedding_seq_pool, and their gradients one op.

Matches, for each ``W``: ops ``e_i = lookup_table(W, Ids_i)`` with a level-1 LoD ``Ids_i``,
each ``e_i`` read only by ``p_i = sequence_pool(e_i) {pooltype="SUM"}`` (and, in a training
graph, by that pool's gradient). Members agree on the lookup's attributes. At least
``min_slots`` members (default 2) become

    (Out=[p_1, ..., p_k]) = fused_embedding_seq_pool(W=W, Ids=[Ids_1, ..., Ids_k])

which keeps the pooled values (every reader, fetch and gradient of them is untouched). Paddle
fused one slot (its fuse_embedding_seq_pool pass, fused_embedding_seq_pool op); here a group
of slots shares one gather and one segment sum (ops/fused_embedding), which is what shrinks
the compiled step. In a training graph each member's ``sequence_pool_grad ->
lookup_table_grad`` pair and the ``sum`` joining the table's row gradients become one
``fused_embedding_seq_pool_grad`` writing the same ``W@GRAD`` (the sum keeps any other
addends). Forward and backward fuse together or not at all: the grad pair reads ``e_i``.

Declines (stat ``skipped: <reason>``): ``Ids is not a level-1 LoD value``, ``Ids is not
[tokens] or [tokens, 1]``, ``pooltype X (only SUM fuses)``, ``sequence_pool pad_value is not
0``, ``embedding output has other users`` / ``is fetched`` / ``is a graph output``,
``is_distributed lookup``,
``gradient is not the pool's then the lookup's``, ``control dependencies``, ``only N pooled
lookup(s) of W (min_slots M)``.

Stats: ``fused slots`` (lookups fused), ``fused groups``, ``fused grad groups``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from pydantic import Field

from ..ir.graph import Graph, Op, Value
from ..ir.opdef import CONTROL_SLOT
from .infra.base import Pass, PassContext, register_pass

OP = "fused_embedding_seq_pool"
GRAD_OP = OP + "_grad"
D_OUT, D_X, D_W = "Out@GRAD", "X@GRAD", "W@GRAD"


@dataclass
class _Slot:
    lookup: Op
    pool: Op
    pool_grad: Op | None = None
    lookup_grad: Op | None = None

    @property
    def ids(self) -> Value:
        return self.lookup.input("Ids")

    @property
    def row_grad(self) -> Value | None:
        return self.lookup_grad.output(D_W) if self.lookup_grad is not None else None


def _has_deps(graph: Graph, op: Op) -> bool:
    if op.inputs.get(CONTROL_SLOT):
        return True
    return any(slot == CONTROL_SLOT for v in graph.values_defined_by(op)
               for _, slot, _ in graph.users(v))


def _backward(graph: Graph, slot: _Slot, emb: Value) -> str | None:
    """Fill in the slot's grad pair (sequence_pool_grad reading ``emb``, then the
    lookup_table_grad of its X@GRAD); None when it fits, or why not."""
    grads = [u for u in graph.user_ops(emb) if u is not slot.pool]
    if not grads:
        return None  # no gradient flows here (inference, or a frozen branch)
    g1 = grads[0]
    if (len(grads) != 1 or g1.type != "sequence_pool_grad" or g1.input("X") is not emb
            or g1.attrs["pooltype"] != "SUM" or g1.input(D_OUT) is None):
        return "embedding output has other users"
    d_emb = g1.output(D_X)
    g2 = graph.sole_user(d_emb) if d_emb is not None else None
    lookup = slot.lookup
    if (g2 is None or graph.num_uses(d_emb) != 1 or g2.type != "lookup_table_grad"
            or g2.input(D_OUT) is not d_emb or g2.input("Ids") is not slot.ids
            or g2.input("W") is not lookup.input("W") or g2.attrs != lookup.attrs
            or set(g2.outputs) != {D_W} or graph.is_output(d_emb)):
        return "gradient is not the pool's then the lookup's"
    slot.pool_grad, slot.lookup_grad = g1, g2
    return None


def _candidate(graph: Graph, ctx: PassContext, lookup: Op) -> _Slot | str | None:
    """The lookup's slot when it fits, a decline reason, or None (no pooled lookup)."""
    emb = lookup.output("Out")
    pools = [u for u in graph.user_ops(emb) if u.type == "sequence_pool"]
    if not pools:
        return None
    ids = lookup.input("Ids")
    if ids.type.lod_level != 1:
        return "Ids is not a level-1 LoD value"
    if ids.type.rank > 2 or (ids.type.rank == 2 and ids.type.shape[1] not in (1, -1)):
        # fluid.embedding of [tokens, 1] ids looks up [tokens, 1, 1]: each token's row stays
        # [1, D], which the fused op (one [D] row per token) does not make
        return "Ids is not [tokens] or [tokens, 1]"
    pool = pools[0]
    if len(pools) != 1 or pool.input("X") is not emb:
        return "embedding output has other users"
    if pool.attrs["pooltype"] != "SUM":
        return f"pooltype {pool.attrs['pooltype']} (only SUM fuses)"
    if pool.attrs["pad_value"] != 0.0:
        return "sequence_pool pad_value is not 0"
    if lookup.attrs["is_distributed"] or lookup.attrs["remote_prefetch"]:
        return "is_distributed lookup"
    if emb in ctx.keep:
        return "embedding output is fetched"
    if graph.is_output(emb):
        return "embedding output is a graph output"
    slot = _Slot(lookup, pool)
    why = _backward(graph, slot, emb)
    if why:
        return why
    ops = [o for o in (lookup, pool, slot.pool_grad, slot.lookup_grad) if o is not None]
    if any(_has_deps(graph, o) for o in ops):
        return "control dependencies"
    return slot


def _sum_of(graph: Graph, slot: _Slot) -> Op | None:
    """The ``sum`` joining the slot's row gradient with the table's others (reading it
    once), or None when the row gradient is read as it is (the table's whole gradient)."""
    g = slot.row_grad
    user = graph.sole_user(g) if g is not None else None
    if user is not None and user.type == "sum" and graph.num_uses(g) == 1 \
            and not graph.is_output(g):
        return user
    return None


def _groups(graph: Graph, ctx: PassContext) -> list[list[_Slot]]:
    """Fusible slots grouped by table, lookup attributes, id dtype, and the sum their row
    gradients meet in (a slot whose gradient is read directly stands alone)."""
    groups: dict[tuple, list[_Slot]] = defaultdict(list)
    for op in graph.ops():
        if op.type != "lookup_table":
            continue
        found = _candidate(graph, ctx, op)
        if found is None:
            continue
        if isinstance(found, str):
            ctx.decline(found)
            continue
        joined = _sum_of(graph, found)
        if joined is None and found.row_grad is not None:
            joined = found.row_grad  # the table's whole gradient: a group of its own
        attrs = tuple(sorted(op.attrs.items()))
        key = (op.input("W"), attrs, found.ids.type.dtype, op.role,
               found.pool_grad is not None, joined)
        groups[key].append(found)
    return list(groups.values())


def _fuse_forward(ctx: PassContext, slots: list[_Slot]) -> None:
    rw, first = ctx.rewriter, slots[0].lookup
    attrs = {"combiner": "sum", "is_sparse": first.attrs["is_sparse"],
             "padding_idx": first.attrs["padding_idx"]}
    pooled = [s.pool.output("Out") for s in slots]
    for s in slots:
        rw.erase_op(s.pool, erase_outputs=False)
        rw.erase_op(s.lookup)
    rw.create_op(OP, {"W": first.input("W"), "Ids": [s.ids for s in slots]},
                 {"Out": pooled}, attrs,
                 derived_from=[op for s in slots for op in (s.lookup, s.pool)])


def _fuse_backward(graph: Graph, ctx: PassContext, slots: list[_Slot]) -> None:
    rw, first = ctx.rewriter, slots[0].lookup
    attrs = {"combiner": "sum", "is_sparse": first.attrs["is_sparse"],
             "padding_idx": first.attrs["padding_idx"]}
    ins = {"W": first.input("W"), "Ids": [s.ids for s in slots],
           D_OUT: [s.pool_grad.input(D_OUT) for s in slots]}
    derived = [op for s in slots for op in (s.pool_grad, s.lookup_grad)]
    row_grads = [s.row_grad for s in slots]
    joined = graph.sole_user(row_grads[0])
    for s in slots:
        rw.erase_op(s.lookup_grad, erase_outputs=False)
        rw.erase_op(s.pool_grad)
    if joined is None or joined.type != "sum":  # one slot: its row gradient is W@GRAD
        rw.create_op(GRAD_OP, ins, {D_W: row_grads[0]}, attrs, derived_from=derived)
        return
    addends = joined.inputs["X"]
    others = [v for v in addends if v not in row_grads]
    out = joined.output("Out")
    rw.erase_op(joined, erase_outputs=False)
    for v in row_grads:
        rw.erase_value(v)
    if not others:  # the sum joined exactly these slots: the fused op writes its result
        rw.create_op(GRAD_OP, ins, {D_W: out}, attrs, derived_from=[*derived, joined])
        return
    fused = rw.create_op(GRAD_OP, ins, {D_W: "fused_embedding_seq_pool.w_grad"}, attrs,
                         derived_from=derived)
    rw.create_op("sum", {"X": [*others, fused.output(D_W)]}, {"Out": out},
                 dict(joined.attrs), derived_from=[joined])


@register_pass
class FuseEmbeddingSeqPool(Pass):
    """Fuse the sum-pooled LoD lookups of one table (forward and backward) into one op."""

    name = "fuse-embedding-seq-pool"
    regions = "decline"
    regions_reason = ("the pooled lookups it fuses read a step's LoD feeds, which loop and "
                      "branch bodies do not hold")
    min_slots: int = Field(2, ge=1)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        for slots in _groups(graph, ctx):
            if len(slots) < self.min_slots:
                table = slots[0].lookup.input("W").name
                ctx.decline(f"only {len(slots)} pooled lookup(s) of {table} "
                            f"(min_slots {self.min_slots})", len(slots))
                continue
            if slots[0].pool_grad is not None:  # first: the grad pair reads the lookups
                _fuse_backward(graph, ctx, slots)
                ctx.count("fused grad groups")
            _fuse_forward(ctx, slots)
            ctx.count("fused groups")
            ctx.count("fused slots", len(slots))
