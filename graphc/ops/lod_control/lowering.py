"""Lowering rules of the LoD-side control-flow ops over LoDArrays: new lengths are device
values (a LoD from a tensor is fine on XLA), buffers keep their static capacities.

Gradients: lod_reset's, reorder_lod_tensor_by_rank's, split_lod_tensor's and
merge_lod_tensor's are the generic LoD vjp of these rules (identity on the tokens, the
inverse permutation, and scatters of the gathered rows back to their sides).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.data_checks import report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import LoweringError, lowering
from ...ir.errors import ShapeError


def _fit_rows(data, capacity: int):
    """``data`` padded with zero rows or cut to ``capacity`` rows (only padding is cut when
    the row counts were checked)."""
    rows = data.shape[0]
    if rows >= capacity:
        return data[:capacity]
    return jnp.pad(data, [(0, capacity - rows)] + [(0, 0)] * (data.ndim - 1))


def _rows_of(x):
    return x.token_count() if isinstance(x, LoDArray) else jnp.asarray(x.shape[0])


def _offsets_lengths(c, slot: str, offsets, rows):
    """Lengths from Paddle offsets, with Paddle's checks (start 0, ascending, end = rows)."""
    offsets = jnp.reshape(offsets, (-1,)).astype(LENGTHS_DTYPE)
    if offsets.shape[0] < 2:
        raise LoweringError(f"{c.where}: {slot} must hold at least two offsets, got "
                            f"{offsets.shape[0]}")
    lengths = offsets[1:] - offsets[:-1]
    report_invalid(c, slot, offsets[:1] != 0, offsets[:1], "offsets starting at 0")
    report_invalid(c, slot, lengths < 0, lengths, "ascending offsets (lengths >= 0)")
    report_invalid(c, slot, jnp.reshape(offsets[-1] != rows, (1,)), offsets[-1:],
                   "a last offset equal to X's row count")
    return jnp.maximum(lengths, 0)


@lowering("lod_reset")
def _lod_reset(c, X, Y=None):
    data = X.data if isinstance(X, LoDArray) else X
    rows = _rows_of(X)
    if isinstance(Y, LoDArray):  # Y's LoD, all of it; X's rows in Y's buffer
        total = Y.token_count()
        report_invalid(c, "Y", jnp.reshape(total != rows, (1,)), jnp.reshape(total, (1,)),
                       "a LoD whose tokens are X's rows (as many)")
        return {"Out": LoDArray(_fit_rows(data, Y.capacity), Y.lengths).masked()}
    if Y is not None:
        lengths = _offsets_lengths(c, "Y", Y, rows)
    else:
        lengths = _offsets_lengths(c, "X", jnp.asarray(c["target_lod"]), rows)
    if c["append"] and isinstance(X, LoDArray):
        # X's innermost lengths now count the new entries: one per row of X
        count = jnp.sum(X.lengths[-1])
        report_invalid(c, "X", jnp.reshape(count != lengths.shape[0], (1,)),
                       jnp.reshape(count, (1,)),
                       f"{lengths.shape[0]} rows in X (one per entry of the appended level)")
        return {"Out": LoDArray(data, (*X.lengths, lengths)).masked()}
    return {"Out": LoDArray(data, (lengths,)).masked()}


# -- the rank table --------------------------------------------------------------------------------

@lowering("lod_rank_table")
def _lod_rank_table(c, X: LoDArray):
    level = c["level"]
    lengths = X.lengths[level].astype(jnp.int64)
    if level:
        # the entries of a deeper level sit in a buffer of static size; those past the count
        # the level above holds are no entries: length -1 ranks them last, and fetching the
        # table (ScopeVar.get_lod_rank_table) leaves them out
        count = jnp.sum(X.lengths[level - 1])
        lengths = jnp.where(jnp.arange(lengths.shape[0]) < count, lengths, -1)
    order = jnp.argsort(-lengths, stable=True)  # longest first, ties in batch order
    rows = jnp.stack([order.astype(jnp.int64), lengths[order]], axis=1)
    if level:  # the levels above as the table's LoD: its real rows come first, as tokens
        return {"Out": LoDArray(rows, X.lengths[:level])}
    return {"Out": rows}


def table_rows(RankTable):
    """(the rows of a rank table, the LoD levels above its own: a deeper level's table)."""
    if isinstance(RankTable, LoDArray):
        return RankTable.data, RankTable.lengths
    return RankTable, ()


@lowering("max_sequence_len")
def _max_sequence_len(c, RankTable):
    RankTable, _ = table_rows(RankTable)
    longest = jnp.max(RankTable[:, 1], initial=0) if RankTable.shape[0] else \
        jnp.zeros((), RankTable.dtype)
    return {"Out": jnp.reshape(longest, (1,)).astype(jnp.int64)}


def _take(values, index):
    """``values[index]`` along dim 0, indices clipped (callers mask what they must)."""
    return jnp.take(values, jnp.clip(index, 0, max(values.shape[0] - 1, 0)), axis=0)


def _permute(lengths, index, keep, capacity: int):
    """Entries ``index`` of the segments ``lengths`` (packed in order), those not ``keep``
    empty, laid out in a buffer of ``capacity`` slots: (source slot of each output slot,
    which output slots are filled, the new lengths)."""
    lengths = lengths.astype(LENGTHS_DTYPE)
    new = jnp.where(keep, _take(lengths, index), 0)
    n = index.shape[0]
    seg = token_segments(new, capacity)
    s = jnp.clip(seg, 0, n - 1)
    pos = jnp.arange(capacity, dtype=LENGTHS_DTYPE) - (jnp.cumsum(new) - new)[s]
    src = (jnp.cumsum(lengths) - lengths)[_take(index, s)] + pos
    valid = seg < n
    return jnp.where(valid, src, 0), valid, new


@lowering("reorder_lod_tensor_by_rank")
def _reorder(c, X, RankTable):
    RankTable, _ = table_rows(RankTable)
    index = RankTable[:, 0].astype(LENGTHS_DTYPE)
    n = X.num_sequences if isinstance(X, LoDArray) else X.shape[0]
    if index.shape[0] != n:
        raise LoweringError(f"{c.where}: the rank table holds {index.shape[0]} sequences but "
                            f"X holds {n}; reorder X by a table of as many sequences")
    report_invalid(c, "RankTable", (index < 0) | (index >= n), index,
                   f"sequence indices in [0, {n})")
    if n == 0:
        return {"Out": X}
    if not isinstance(X, LoDArray):  # no LoD: every row is a sequence of length 1
        return {"Out": _take(X, index)}
    # level by level: the chosen sequences' entries, then those entries' entries, then tokens
    keep = jnp.ones(index.shape, bool)
    new_lengths = []
    for level, lengths in enumerate(X.lengths):
        deeper = level + 1 < X.lod_level
        capacity = X.lengths[level + 1].shape[0] if deeper else X.capacity
        index, keep, new = _permute(lengths, index, keep, capacity)
        new_lengths.append(new)
    return {"Out": LoDArray(_take(X.data, index), tuple(new_lengths)).masked()}


# -- split_lod_tensor / merge_lod_tensor (ifelse26) ---------------------------------------------

def _flags(c, Mask, n: int):
    """Mask as ``[n]`` bools (non-zero is true: Paddle's kernels read the bytes as bools)."""
    m = jnp.reshape(Mask, (-1,))
    if m.shape[0] != n:
        raise ShapeError(f"{c.where}: Mask holds {m.shape[0]} flags but X has {n} rows "
                         "(a LoD X: level-0 sequences); give one flag per row (sequence)")
    return m != 0


def _side(X, keep_first, order):
    """X's rows (sequences) ``order``, those past ``keep_first`` empty: a LoDArray of X's
    capacity (a dense X: one row per sequence)."""
    n = order.shape[0]
    keep = jnp.arange(n) < keep_first
    if not isinstance(X, LoDArray):
        lengths = keep.astype(LENGTHS_DTYPE)
        return LoDArray(_take(X, order), (lengths,)).masked()
    index, new_lengths = order.astype(LENGTHS_DTYPE), []
    for level, lengths in enumerate(X.lengths):
        deeper = level + 1 < X.lod_level
        capacity = X.lengths[level + 1].shape[0] if deeper else X.capacity
        index, keep, new = _permute(lengths, index, keep, capacity)
        new_lengths.append(new)
    return LoDArray(_take(X.data, index), tuple(new_lengths)).masked()


@lowering("split_lod_tensor")
def _split_lod_tensor(c, X, Mask):
    n = X.num_sequences if isinstance(X, LoDArray) else X.shape[0]
    m = _flags(c, Mask, n)
    count = jnp.sum(m.astype(LENGTHS_DTYPE))
    # stable partitions: the flagged rows in order first (argsort of False < True is stable)
    return {"OutTrue": _side(X, count, jnp.argsort(~m, stable=True)),
            "OutFalse": _side(X, n - count, jnp.argsort(m, stable=True))}


def _top_rows(X):
    """Per level-0 entry its row count ``[n]`` and per row of the buffer its entry ``[cap]``
    (padding rows: ``n``); a dense X's entries are its rows."""
    if not isinstance(X, LoDArray):
        n = X.shape[0]
        return jnp.ones(n, LENGTHS_DTYPE), jnp.arange(n, dtype=LENGTHS_DTYPE)
    n = X.num_sequences
    counts, owner = X.lengths[0].astype(LENGTHS_DTYPE), None
    for level in range(1, X.lod_level):  # entries of level `level` -> their level-0 entry
        inner = X.lengths[level].astype(LENGTHS_DTYPE)
        seg = token_segments(X.lengths[level - 1], inner.shape[0])
        owner = seg if owner is None else jnp.append(owner, n)[seg]
        counts = jax.ops.segment_sum(inner, owner, num_segments=n + 1)[:n]
    rows = token_segments(X.lengths[-1], X.capacity)
    if owner is not None:
        rows = jnp.append(owner, n)[rows]
    return counts, rows


@lowering("merge_lod_tensor", "merge_lod_tensor_infer")
def _merge_lod_tensor(c, X, Mask, InTrue, InFalse):
    counts, rows = _top_rows(X)
    n = counts.shape[0]
    m = _flags(c, Mask, n)
    r = jnp.clip(rows, 0, max(n - 1, 0))
    pos = jnp.arange(rows.shape[0], dtype=LENGTHS_DTYPE) - (jnp.cumsum(counts) - counts)[r]
    picked = []
    for slot, src, own in (("InTrue", InTrue, m), ("InFalse", InFalse, ~m)):
        taken = jnp.where(own, counts, 0)
        start = jnp.cumsum(taken) - taken  # the next unused row of this side, per entry
        data = src.data if isinstance(src, LoDArray) else src
        have = src.token_count() if isinstance(src, LoDArray) else jnp.asarray(data.shape[0])
        need = jnp.sum(taken)
        which = "flagged" if slot == "InTrue" else "unflagged"
        report_invalid(c, slot, jnp.reshape(need > have, (1,)), jnp.reshape(have, (1,)),
                       f"{slot} rows (the count shown) for each of X's {which} rows, as "
                       "split_lod_tensor's side has")
        picked.append(_take(data, start[r] + pos))
    t, f = picked
    if t.shape[1:] != f.shape[1:]:
        raise ShapeError(f"{c.where}: InTrue rows {t.shape[1:]} and InFalse rows "
                         f"{f.shape[1:]} differ")
    own_t = jnp.append(m, False)[rows].reshape((-1,) + (1,) * (t.ndim - 1))
    out = jnp.where(own_t, t, f.astype(t.dtype))
    if isinstance(X, LoDArray):
        return {"Out": LoDArray(out, X.lengths).masked()}
    return {"Out": out}
