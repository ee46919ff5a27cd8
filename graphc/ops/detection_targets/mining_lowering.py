"""mine_hard_examples with static shapes: per image a stable descending sort of the eligible
priors' losses, the first k selected, their indices packed ascending as a LoD value."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering


def pack_rows(keep, values):
    """Pack the kept ``values`` [N, P, ...] of each image (mask ``keep`` [N, P]) in order
    into a LoD value of capacity N * P: image i's rows at offset sum(count[:i])."""
    n, p = keep.shape
    counts = jnp.sum(keep, axis=1).astype(jnp.int32)
    start = jnp.cumsum(counts) - counts
    rank = jnp.cumsum(keep, axis=1) - 1
    target = jnp.where(keep, start[:, None] + rank, n * p)
    tail = values.shape[2:]
    data = jnp.zeros((n * p + 1, *tail), values.dtype).at[target.reshape(-1)].set(
        values.reshape(n * p, *tail), mode="drop")
    return LoDArray(data[:n * p], (counts,))


@lowering("mine_hard_examples")
def _mine_hard_examples(c, ClsLoss, LocLoss, MatchIndices, MatchDist):
    n, p = MatchIndices.shape
    hard = c["mining_type"] == "hard_example"
    matched = MatchIndices != -1
    if hard:
        eligible = jnp.ones((n, p), bool)
        loss = ClsLoss if LocLoss is None else ClsLoss + LocLoss
        limit = jnp.full((n,), c["sample_size"])
    else:
        eligible = ~matched & (MatchDist < c["neg_dist_threshold"])
        loss = ClsLoss
        # Paddle truncates num_pos * neg_pos_ratio (a float32 product) toward zero
        limit = (jnp.sum(matched, 1).astype(jnp.float32)
                 * jnp.float32(c["neg_pos_ratio"])).astype(jnp.int32)
    limit = jnp.minimum(limit, jnp.sum(eligible, 1))
    # eligible first, then by loss descending; ties keep prior order
    key = jnp.where(eligible, -loss, jnp.inf)
    order = jnp.argsort(key, axis=1, stable=True)
    rank = jnp.zeros((n, p), jnp.int32).at[jnp.arange(n)[:, None], order].set(
        jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (n, p)))
    selected = eligible & (rank < limit[:, None])
    updated = MatchIndices
    neg = selected
    if hard:
        updated = jnp.where(matched & ~selected, -1, MatchIndices)
        neg = selected & ~matched
    idx = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32)[:, None], (p, 1))
    return {"NegIndices": pack_rows(neg, jnp.broadcast_to(idx, (n, p, 1))),
            "UpdatedMatchIndices": updated.astype(jnp.int32)}
