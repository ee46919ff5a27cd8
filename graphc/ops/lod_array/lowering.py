"""Lowering rules of lod_tensor_to_array, array_to_lod_tensor and shrink_rnn_memory over
LoDArrays and TensorArrays: every step in static buffers, row counts as device lengths.

Gradients: each is the vjp of its forward rule with respect to the rows (a gather, so the vjp
scatters back; Paddle's lod_tensor_to_array and array_to_lod_tensor are each other's
gradient, which is what these vjps compute). Lengths are integers: no gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.arrays import TensorArray
from ...backends.data_checks import ignored, report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import LoweringError, lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ..lod_control.lowering import _permute, _take, table_rows


def _rank_table(c, RankTable, n: int | None = None):
    """(sequence index, length) of each rank, the indices checked against ``n`` sequences
    (a deeper level's table: its unused entries, length -1, as empty ones)."""
    RankTable, _ = table_rows(RankTable)
    order = RankTable[:, 0].astype(LENGTHS_DTYPE)
    length = jnp.maximum(RankTable[:, 1].astype(LENGTHS_DTYPE), 0)
    size = order.shape[0]
    if n is not None and size != n:
        raise LoweringError(f"{c.where}: the rank table holds {size} sequences but X holds "
                            f"{n}; split X by its own lod_rank_table")
    report_invalid(c, "RankTable", (order < 0) | (order >= size), order,
                   f"sequence indices in [0, {size})")
    return jnp.clip(order, 0, max(size - 1, 0)), length


def _masked_rows(rows, keep):
    return jnp.where(keep.reshape((-1,) + (1,) * (rows.ndim - 1)), rows,
                     jnp.zeros((), rows.dtype))


# -- lod_tensor_to_array ---------------------------------------------------------------------

def _to_array(c, X: LoDArray, RankTable, cap: int) -> TensorArray:
    coarse = len(table_rows(RankTable)[1])
    if coarse:  # a level-k table: x's level-k entries are the sequences split
        X = LoDArray(X.data, X.lengths[coarse:])
    n = X.num_sequences
    order, length = _rank_table(c, RankTable, n)
    lengths0 = X.lengths[0].astype(LENGTHS_DTYPE)
    report_invalid(c, "RankTable", length != _take(lengths0, order), length,
                   "X's sequence lengths (a rank table of X: lod_rank_table(X))")
    longest = jnp.max(length, initial=0)
    report_invalid(c, "X", jnp.reshape(longest > cap, (1,)), jnp.reshape(longest, (1,)),
                   f"sequences of at most {cap} steps, the array's capacity "
                   "(lod_tensor_to_array(capacity=) raises it, docs/control_flow.md)")
    first = _take(jnp.cumsum(lengths0) - lengths0, order)  # each rank's first level-1 entry

    def element(t):
        keep = length > t  # the sequences that last: a prefix of the ranks
        index, lengths = first + t, [keep.astype(LENGTHS_DTYPE)]
        for level in range(1, X.lod_level):  # the entry's own entries, down to its tokens
            deeper = level + 1 < X.lod_level
            size = X.lengths[level + 1].shape[0] if deeper else X.capacity
            index, keep, new = _permute(X.lengths[level], index, keep, size)
            lengths.append(new)
        # a level-1 x: N rows, one per sequence, so a step lines up with an [N, ...] memory
        # (shrink_memory's); deeper: x's own token buffer, which holds any step's tokens
        return LoDArray(_masked_rows(_take(X.data, index), keep), tuple(lengths))

    if n == 0:  # no sequences: nothing to gather, every element empty
        sizes = [0] * min(X.lod_level, 2) + [v.shape[0] for v in X.lengths[2:]]
        rows = X.capacity if X.lod_level > 1 else 0
        stacked = LoDArray(jnp.zeros((cap, rows, *X.data.shape[1:]), X.data.dtype),
                           tuple(jnp.zeros((cap, s), LENGTHS_DTYPE) for s in sizes))
    else:
        stacked = jax.vmap(element)(jnp.arange(cap, dtype=LENGTHS_DTYPE))
    return TensorArray(stacked, jnp.minimum(longest, cap).astype(jnp.int32), ranked=True)


@lowering("lod_tensor_to_array")
def _lod_tensor_to_array(c, X: LoDArray, RankTable):
    return {"Out": _to_array(c, X, RankTable, c.out_types["Out"][0].capacity)}


@lowering("lod_tensor_to_array_grad")
def _lod_tensor_to_array_grad(c, X: LoDArray, RankTable, **kw):
    dout = kw["Out" + GRAD_SUFFIX]
    with ignored():  # the forward checked its input already
        _, vjp = jax.vjp(lambda d: _to_array(c, X.with_data(d), RankTable,
                                             dout.capacity).data.data, X.data)
    d = dout.data.data if isinstance(dout.data, LoDArray) else dout.data
    (dx,) = vjp(d.astype(X.data.dtype))
    return {"X" + GRAD_SUFFIX: X.masked(dx)}


# -- array_to_lod_tensor ---------------------------------------------------------------------

def _exclusive(lengths):
    return jnp.cumsum(lengths, axis=-1) - lengths


def _to_tensor(c, X: TensorArray, RankTable) -> LoDArray:
    n = RankTable.shape[0]
    order, length = _rank_table(c, RankTable)
    report_invalid(c, "RankTable", length > X.length, length,
                   "lengths of at most the array's length (the steps written)")
    cap, elems = X.capacity, X.data
    rank = jnp.zeros(n, LENGTHS_DTYPE).at[order].set(jnp.arange(n, dtype=LENGTHS_DTYPE))
    out_lengths = [_take(length, rank)]  # sequence i lasts as long as the table says
    dense = not isinstance(elems, LoDArray)
    rows = elems.shape[1] if dense else elems.data.shape[1]
    entries = rows if dense else elems.lengths[0].shape[1]
    if (entries < n) if dense else (entries != n):
        raise LoweringError(f"{c.where}: the rank table holds {n} sequences but the array's "
                            f"elements hold {entries} {'rows' if dense else 'entries'}; turn "
                            "an array back with the rank table that split it")
    # slots of level 1: (sequence i, step t), i.e. element t's entry rank(i)
    size = cap * rows if dense or elems.lod_level == 1 else cap * elems.lengths[1].shape[1]
    _fits(c, out_lengths[0], size, "steps")
    seg = token_segments(out_lengths[0], size)
    i = jnp.clip(seg, 0, max(n - 1, 0))
    valid = seg < n
    t = jnp.clip(jnp.arange(size, dtype=LENGTHS_DTYPE) - _exclusive(out_lengths[0])[i], 0,
                 cap - 1)
    j = _take(rank, i)
    if dense:  # element t's row rank(i)
        j = jnp.clip(j, 0, rows - 1)
        return LoDArray(_masked_rows(elems[t, j], valid), tuple(out_lengths))
    one = elems.lengths[0][t, j]
    report_invalid(c, "X", valid & (one != 1), one,
                   "one entry at level 0 for each rank (1 while its sequence lasts), as "
                   "lod_tensor_to_array's elements hold")
    e = _exclusive(elems.lengths[0])[t, j]  # the entry's one level-1 entry (a level-1 X: row)
    for level in range(1, elems.lod_level):
        new = jnp.where(valid, elems.lengths[level][t, e], 0)
        out_lengths.append(new)
        deeper = level + 1 < elems.lod_level
        size = cap * elems.lengths[level + 1].shape[1] if deeper else rows
        _fits(c, new, size, f"level-{level + 1} entries" if deeper else "rows")
        seg = token_segments(new, size)
        q = jnp.clip(seg, 0, new.shape[0] - 1)
        valid = seg < new.shape[0]
        pos = jnp.arange(size, dtype=LENGTHS_DTYPE) - _exclusive(new)[q]
        t = t[q]
        e = _exclusive(elems.lengths[level])[t, e[q]] + pos
    e = jnp.clip(e, 0, rows - 1)
    return LoDArray(_masked_rows(elems.data[t, e], valid), tuple(out_lengths))


def _fits(c, lengths, size: int, what: str) -> None:
    total = jnp.sum(lengths)
    report_invalid(c, "X", jnp.reshape(total > size, (1,)), jnp.reshape(total, (1,)),
                   f"at most {size} {what} in all: Out's buffer is one element's "
                   "(an array of lod_tensor_to_array's form always fits)")


@lowering("array_to_lod_tensor")
def _array_to_lod_tensor(c, X: TensorArray, RankTable):
    out = _to_tensor(c, X, RankTable)
    coarse = table_rows(RankTable)[1]
    if coarse:  # a level-k table puts back the levels above its entries
        out = LoDArray(out.data, (*coarse, *out.lengths))
    return {"Out": out}


@lowering("array_to_lod_tensor_grad")
def _array_to_lod_tensor_grad(c, X: TensorArray, RankTable, **kw):
    dout = kw["Out" + GRAD_SUFFIX]
    lod = isinstance(X.data, LoDArray)
    buf = X.data.data if lod else X.data

    def forward(d):
        data = X.data.with_data(d) if lod else d
        return _to_tensor(c, TensorArray(data, X.length, X.ranked), RankTable).data

    with ignored():
        _, vjp = jax.vjp(forward, buf)
    d = dout.data if isinstance(dout, LoDArray) else dout
    (dx,) = vjp(d.astype(buf.dtype))
    return {"X" + GRAD_SUFFIX: TensorArray(X.data.with_data(dx) if lod else dx, X.length,
                                           X.ranked)}


# -- shrink_rnn_memory -----------------------------------------------------------------------

def _shrink(X, RankTable, I):
    RankTable, _ = table_rows(RankTable)
    k = jnp.sum(RankTable[:, 1] > jnp.reshape(I, ()).astype(RankTable.dtype))
    if not isinstance(X, LoDArray):  # one row per entry
        keep = jnp.arange(X.shape[0]) < k
        return LoDArray(_masked_rows(X, keep), (keep.astype(LENGTHS_DTYPE),))
    lengths = []
    for v in X.lengths:  # the first k entries, then the entries and rows they hold
        new = jnp.where(jnp.arange(v.shape[0]) < k, v, 0)
        lengths.append(new)
        k = jnp.sum(new)
    return LoDArray(X.data, tuple(lengths)).masked()


@lowering("shrink_rnn_memory")
def _shrink_rnn_memory(c, X, RankTable, I):
    return {"Out": _shrink(X, RankTable, I)}


@lowering("shrink_rnn_memory_grad")
def _shrink_rnn_memory_grad(c, X, RankTable, I, **kw):
    """The rows kept take Out's gradient, the others zero (Paddle's shrink_rnn_memory_grad)."""
    dout = kw["Out" + GRAD_SUFFIX]
    d = dout.data if isinstance(dout, LoDArray) else dout
    kept = _shrink(X, RankTable, I)
    dx = _masked_rows(d, kept.valid()).astype(X.dtype)
    return {"X" + GRAD_SUFFIX: X.with_data(dx) if isinstance(X, LoDArray) else dx}
