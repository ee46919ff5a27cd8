"""filter_by_instag with static shapes: the kept instances' rows packed at the front of a
buffer as large as Ins; Out, LossWeight and IndexMap are LoD values with device lengths."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import lowering


@lowering("filter_by_instag")
def _filter_by_instag(c, Ins, Ins_tag, Filter_tag):
    if isinstance(Ins, LoDArray):
        data, lengths = Ins.data, Ins.lengths[0].astype(LENGTHS_DTYPE)
    else:  # every row is an instance
        data, lengths = Ins, jnp.ones(Ins.shape[0], LENGTHS_DTYPE)
    n, cap = lengths.shape[0], data.shape[0]
    tags = Ins_tag.data.reshape(-1)
    seg = Ins_tag.segment_ids()  # padding tag rows get segment n
    hit = jnp.any(tags[:, None] == Filter_tag.reshape(-1)[None, :], axis=1)
    kept = jnp.zeros(n + 1, bool).at[seg].max(hit)[:n]
    # kept instances first, in their order; dropped ones after as empty sequences
    order = jnp.argsort(~kept, stable=True)
    out_len = jnp.where(kept, lengths, 0)[order]
    in_start = (jnp.cumsum(lengths) - lengths)[order]
    out_start = jnp.cumsum(out_len) - out_len
    total = jnp.sum(out_len)
    rows = jnp.arange(cap)
    j = jnp.minimum(token_segments(out_len, cap), n - 1)
    src = jnp.clip(in_start[j] + rows - out_start[j], 0, cap - 1)
    valid = rows < total
    out = jnp.where(valid[:, None], data[src], jnp.zeros((), data.dtype))
    count = jnp.sum(kept)
    empty = count == 0
    # none kept: Paddle's single row of out_val_if_empty, loss weight 0, index [0, 1, 1]
    fill = jnp.asarray(c["out_val_if_empty"]).astype(data.dtype)
    out = out.at[0].set(jnp.where(empty, fill, out[0]))
    out_len = out_len.at[0].set(jnp.where(empty, 1, out_len[0]))
    # LossWeight and IndexMap: one row per kept instance (a sequence of one row each)
    first = jnp.arange(n) < count
    per = first.astype(LENGTHS_DTYPE).at[0].set(1)
    weight = first.astype(jnp.float32)[:, None]
    index = jnp.stack([out_start, in_start, out_len], axis=1).astype(jnp.int64)
    index = jnp.where(first[:, None], index, 0)
    index = index.at[0].set(jnp.where(empty, jnp.array([0, 1, 1], jnp.int64), index[0]))
    return {"Out": LoDArray(out, (out_len,)), "LossWeight": LoDArray(weight, (per,)),
            "IndexMap": LoDArray(index, (per,))}
