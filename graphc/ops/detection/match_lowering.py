"""bipartite_match with static shapes: each LoD sequence padded to the token bucket, the
greedy matching as a fori_loop that takes the largest free (row, column) entry per step."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering

_EPS = 1e-6  # Paddle skips distances below this


def _padded(dist):
    """[N, R, M] per-instance matrices and the [N, R] mask of real rows."""
    if not isinstance(dist, LoDArray):
        return dist[None], jnp.ones((1, dist.shape[0]), bool)
    n, cap = dist.lengths[0].shape[0], dist.capacity
    seg = dist.segment_ids()
    pos = jnp.arange(cap) - jnp.concatenate([dist.offsets(), jnp.zeros(1, jnp.int32)])[seg]
    mats = jnp.zeros((n, cap, dist.data.shape[1]), dist.data.dtype)
    mats = mats.at[seg, pos].set(dist.data, mode="drop")
    real = jnp.zeros((n, cap), bool).at[seg, pos].set(True, mode="drop")
    return mats, real


def _match_one(d, real, per_prediction, threshold):
    r, m = d.shape
    usable = real[:, None] & (d >= _EPS)

    def step(_, carry):
        idx, val, free = carry
        ok = usable & free[:, None] & (idx < 0)[None, :]
        # the first maximum scanning columns, then rows (Paddle's loop order)
        flat = jnp.where(ok, d, -1.0).T.reshape(-1)
        k = jnp.argmax(flat)
        found = flat[k] > -1
        col, row = k // r, k % r
        idx = jnp.where(found, idx.at[col].set(row.astype(jnp.int32)), idx)
        val = jnp.where(found, val.at[col].set(flat[k]), val)
        free = jnp.where(found, free.at[row].set(False), free)
        return idx, val, free
    idx, val, _ = jax.lax.fori_loop(0, min(r, m), step, (jnp.full(m, -1, jnp.int32),
                                                         jnp.zeros(m, d.dtype),
                                                         jnp.ones(r, bool)))
    if per_prediction:
        cand = jnp.where(usable & (d >= threshold), d, -1.0)
        best = jnp.argmax(cand, axis=0)
        best_val = jnp.max(cand, axis=0)
        take = (idx < 0) & (best_val > -1)
        idx = jnp.where(take, best.astype(jnp.int32), idx)
        val = jnp.where(take, best_val, val)
    return idx, val


@lowering("bipartite_match")
def _bipartite_match(c, DistMat):
    mats, real = _padded(DistMat)
    idx, val = jax.vmap(lambda d, r: _match_one(d, r, c["match_type"] == "per_prediction",
                                                c["dist_threshold"]))(mats, real)
    return {"ColToRowMatchIndices": idx, "ColToRowMatchDist": val}


@lowering("target_assign")
def _target_assign(c, X, MatchIndices, NegIndices):
    n, m = MatchIndices.shape
    p = X.data.shape[1]
    starts = X.offsets()
    matched = MatchIndices > -1
    rows = jnp.clip(starts[:, None] + MatchIndices, 0, X.capacity - 1)
    picked = X.data[rows, jnp.arange(m)[None, :] % p]  # [N, M, K]
    fill = jnp.asarray(c["mismatch_value"], X.data.dtype)
    out = jnp.where(matched[..., None], picked, fill)
    weight = matched.astype(jnp.float32)
    if NegIndices is not None:
        seg = NegIndices.segment_ids()  # padding tokens point past the last instance: dropped
        col = NegIndices.data.reshape(-1).astype(jnp.int32)
        out = out.at[seg, col].set(fill, mode="drop")
        weight = weight.at[seg, col].set(1.0, mode="drop")
    return {"Out": out, "OutWeight": weight[..., None]}
