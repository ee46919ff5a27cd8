"""JAX rules of fused_embedding_seq_pool and its gradient: the slots' ids side by side in one
``[slots, T_cap]`` block, one gather of W's rows, one sorted segment sum into
``slots * (N + 1)`` segments (each slot's padding rows fall in its own dropped segment)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.data_checks import checks_collected, report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import lowering
from ...backends.narrow import index32
from ...backends.selected_rows import ROWS_DTYPE, SelectedRows
from ...ir.grad_defs import GRAD_SUFFIX


def layout(ids: list[LoDArray]):
    """(ids ``[k, cap]``, valid ``[k, cap]``, flat segment ids ``[k * cap]``, each slot's
    first segment, segment count): slot s's sequence j is segment ``base[s] + j`` and its
    padding rows segment ``base[s] + N_s``, which no output reads. With equal sequence
    counts (one batch of samples) the segment ids come from one batched scatter."""
    cap = max(x.capacity for x in ids)
    data = jnp.stack([jnp.pad(x.data.reshape(x.capacity), (0, cap - x.capacity))
                      for x in ids])
    counts = [x.num_sequences for x in ids]
    bases = [sum(n + 1 for n in counts[:s]) for s in range(len(ids))]
    if len(set(counts)) == 1:
        n = counts[0]
        lengths = jnp.stack([x.lengths[0] for x in ids]).astype(LENGTHS_DTYPE)
        ends = jnp.cumsum(lengths, axis=1)
        slot = jnp.arange(len(ids), dtype=LENGTHS_DTYPE)[:, None]
        marks = jnp.zeros((len(ids), cap), LENGTHS_DTYPE).at[slot, ends].add(1, mode="drop")
        local = jnp.cumsum(marks, axis=1, dtype=LENGTHS_DTYPE)
        valid = local < n
        seg = local + slot * (n + 1)
    else:
        local = jnp.stack([token_segments(x.lengths[0], cap) for x in ids])
        valid = local < jnp.asarray(counts, LENGTHS_DTYPE)[:, None]
        seg = local + jnp.asarray(bases, LENGTHS_DTYPE)[:, None]
    return data, valid, seg.reshape(-1), bases, bases[-1] + counts[-1] + 1


def _index(ids, height: int, pad: int):
    # 32-bit gather indices where the table allows (XLA's index arithmetic stays narrow),
    # exact for every id even with the checks off (backends/narrow.py)
    return index32(ids, height, () if pad == -1 else (pad,), checked=checks_collected())


def _check_ids(c, ids, valid, height: int, pad: int) -> None:
    bad = valid & ((ids < 0) | (ids >= height))
    if pad != -1:
        bad = bad & (ids != pad)
    padding = f" or padding_idx {pad}" if pad != -1 else ""
    # one check for every slot, tokens first and slots last ("Ids[*]": the executor names
    # the slot's feed from the last index; a data-parallel split stays on the first axis)
    report_invalid(c, "Ids[*]", bad.T, ids.T,
                   f"ids in [0, {height}) (the table's rows){padding}")


@lowering("fused_embedding_seq_pool")
def _fused(c, W, Ids):
    height = W.shape[0]
    ids, valid, seg, bases, total = layout(Ids)
    pad = c["padding_idx"]
    _check_ids(c, ids, valid, height, pad)
    flat = ids.reshape(-1)
    rows = jnp.take(W, _index(flat, height, pad), axis=0)
    if pad != -1:
        rows = jnp.where((flat == pad)[:, None], jnp.zeros((), W.dtype), rows)
    pooled = jax.ops.segment_sum(rows, seg, num_segments=total, indices_are_sorted=True)
    return {"Out": [pooled[b:b + x.num_sequences] for b, x in zip(bases, Ids)]}


@lowering("fused_embedding_seq_pool_grad")
def _fused_grad(c, **kw):
    """W@GRAD: one row per token of every slot, its value the pooled gradient of its
    sequence; padding tokens and ids at padding_idx are padding rows (row = height)."""
    table, ids_list, douts = kw["W"], kw["Ids"], kw["Out" + GRAD_SUFFIX]
    height, width = table.shape
    ids, valid, seg, _, _ = layout(ids_list)
    # each slot's pooled gradients then one zero row: the segment its padding rows fall in
    stacked = jnp.concatenate([part for d in douts for part in
                               (d.reshape(-1, width).astype(table.dtype),
                                jnp.zeros((1, width), table.dtype))])
    values = jnp.take(stacked, seg, axis=0)
    flat, keep = ids.reshape(-1), valid.reshape(-1)
    pad = c["padding_idx"]
    if pad != -1:
        keep = keep & (flat != pad)
        values = jnp.where(keep[:, None], values, jnp.zeros((), values.dtype))
    rows = jnp.where(keep, flat.astype(ROWS_DTYPE), jnp.asarray(height, ROWS_DTYPE))
    if c["is_sparse"]:
        return {"W" + GRAD_SUFFIX: SelectedRows(rows, values, height)}
    return {"W" + GRAD_SUFFIX: jnp.zeros_like(table).at[rows].add(values, mode="drop")}
