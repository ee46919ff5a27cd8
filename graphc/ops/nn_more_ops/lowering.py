"""Lowering rules for cvm, hash (XXH64 in uint64 arithmetic, bit-exact with the xxHash
library Paddle links), data_norm and spectral_norm."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering

_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261
# a slot whose show count is within this of 0 is empty: data_norm writes 0 for it (Paddle)
_MIN_PRECISION = 1e-7


@lowering("cvm")
def _cvm(c, X, CVM):
    if not c["use_cvm"]:
        return {"Y": X[:, 2:]}
    show = jnp.log(X[:, :1] + 1)
    click = jnp.log(X[:, 1:2] + 1) - show
    return {"Y": jnp.concatenate([show, click, X[:, 2:]], axis=1)}


@lowering("cvm_grad")
def _cvm_grad(c, X, CVM, **kw):
    dy = kw["Y@GRAD"]
    # Paddle passes CVM itself as the gradient of the show and click columns
    rest = dy[:, 2:] if c["use_cvm"] else dy
    return {"X@GRAD": jnp.concatenate([CVM.astype(dy.dtype), rest], axis=1)}


def _u64(v: int):
    return jnp.uint64(v & 0xFFFFFFFFFFFFFFFF)


def _rotl(x, r: int):
    return (x << jnp.uint64(r)) | (x >> jnp.uint64(64 - r))


def _round(acc, lane):
    return _rotl(acc + lane * _u64(_P2), 31) * _u64(_P1)


def _merge(h, v):
    return (h ^ _round(_u64(0), v)) * _u64(_P1) + _u64(_P4)


def xxh64_lanes(lanes, tail, nbytes: int, seed: int):
    """XXH64 of rows given as little-endian uint64 lanes [..., L] and an optional trailing
    uint32 word [...] (None), ``nbytes`` long, with ``seed``; elementwise over the rows."""
    n = lanes.shape[-1]
    i = 0
    if nbytes >= 32:
        v = [_u64(seed + _P1 + _P2), _u64(seed + _P2), _u64(seed), _u64(seed - _P1)]
        v = [jnp.broadcast_to(a, lanes.shape[:-1]) for a in v]
        while i + 4 <= n:
            v = [_round(v[k], lanes[..., i + k]) for k in range(4)]
            i += 4
        h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
        for a in v:
            h = _merge(h, a)
    else:
        h = jnp.broadcast_to(_u64(seed + _P5), lanes.shape[:-1])
    h = h + _u64(nbytes)
    for k in range(i, n):
        h = _rotl(h ^ _round(_u64(0), lanes[..., k]), 27) * _u64(_P1) + _u64(_P4)
    if tail is not None:
        h = _rotl(h ^ (tail.astype(jnp.uint64) * _u64(_P1)), 23) * _u64(_P2) + _u64(_P3)
    h = (h ^ (h >> jnp.uint64(33))) * _u64(_P2)
    h = (h ^ (h >> jnp.uint64(29))) * _u64(_P3)
    return h ^ (h >> jnp.uint64(32))


@lowering("hash")
def _hash(c, X):
    k = X.shape[-1]
    if X.dtype == jnp.int64:
        lanes, tail = jax.lax.bitcast_convert_type(X, jnp.uint64), None
    else:  # two int32 values make one little-endian 64-bit lane; an odd one is the tail
        words = jax.lax.bitcast_convert_type(X, jnp.uint32).astype(jnp.uint64)
        pairs = k // 2
        lanes = words[..., 0:2 * pairs:2] | (words[..., 1:2 * pairs:2] << jnp.uint64(32))
        tail = words[..., -1] if k % 2 else None
    nbytes = k * X.dtype.itemsize
    mod = _u64(c["mod_by"])
    outs = [xxh64_lanes(lanes, tail, nbytes, i) % mod for i in range(c["num_hash"])]
    return {"Out": jnp.stack(outs, axis=-1)[..., None].astype(X.dtype)}


@lowering("data_norm")
def _data_norm(c, X, BatchSize, BatchSum, BatchSquareSum, scale_w=None, bias=None):
    means = BatchSum / BatchSize
    scales = jnp.sqrt(BatchSize / BatchSquareSum)
    y = (X - means.astype(X.dtype)) * scales.astype(X.dtype)
    if scale_w is not None:
        y = y * scale_w.astype(y.dtype) + bias.astype(y.dtype)
    slot_dim = c["slot_dim"]
    n, ch = X.shape
    if slot_dim > 0:  # an empty slot (show 0) is written as zeros, bias included
        live = _live(X, slot_dim)
        y = jnp.where(live, y, jnp.zeros((), y.dtype))
    out = {"Y": y, "Means": means.astype(X.dtype), "Scales": scales.astype(X.dtype)}
    if "BatchSizeOut" not in c.out_types:
        return out
    if c["is_test"]:
        return {**out, "BatchSizeOut": BatchSize, "BatchSumOut": BatchSum,
                "BatchSquareSumOut": BatchSquareSum}
    xs = jax.lax.stop_gradient(X).astype(BatchSize.dtype)
    eps = jnp.asarray(c["epsilon"], BatchSize.dtype)
    if slot_dim > 0:  # Paddle's slot statistics: per-row means over the live rows
        w = live.astype(BatchSize.dtype)
        count = w.sum(axis=0)
        has = count >= 1
        per = jnp.maximum(count, 1)
        size = jnp.where(has, 1.0, 0.0).astype(BatchSize.dtype)
        total = jnp.where(has, (xs * w).sum(axis=0) / per, 0)
        square = jnp.where(has, (((xs - means) ** 2) * w).sum(axis=0) / per + count * eps, 0)
    else:
        size = jnp.full((ch,), n, BatchSize.dtype)
        total = xs.sum(axis=0)
        square = ((xs - means) ** 2).sum(axis=0) + size * eps
    decay = jnp.asarray(c["summary_decay_rate"], BatchSize.dtype)
    return {**out, "BatchSizeOut": BatchSize * decay + size,
            "BatchSumOut": BatchSum * decay + total,
            "BatchSquareSumOut": BatchSquareSum * decay + square}


def _live(X, slot_dim):
    """[N, C] bool: the columns of the slots whose show (first) column is not ~0."""
    return jnp.repeat(jnp.abs(X[:, ::slot_dim]) >= _MIN_PRECISION, slot_dim, axis=1)


@lowering("data_norm_grad")
def _data_norm_grad(c, X, Means, Scales, scale_w=None, bias=None, **kw):
    dy = kw["Y@GRAD"]
    if c["slot_dim"] > 0 and scale_w is not None:
        # Paddle masks empty slots' gradient only with scale and shift (else dX = dY*scale)
        dy = jnp.where(_live(X, c["slot_dim"]), dy, jnp.zeros((), dy.dtype))
    out = {}
    if scale_w is not None:
        norm = (X - Means) * Scales
        out["scale_w@GRAD"] = jnp.sum(dy * norm, axis=0).astype(scale_w.dtype)
        out["bias@GRAD"] = jnp.sum(dy, axis=0).astype(bias.dtype)
        dy = dy * scale_w.astype(dy.dtype)
    out["X@GRAD"] = (dy * Scales).astype(X.dtype)
    return {k: v for k, v in out.items() if k in c.out_types}


@lowering("spectral_norm")
def _spectral_norm(c, Weight, U, V):
    dim, eps = c["dim"], c["eps"]
    w = jnp.moveaxis(Weight, dim, 0) if dim else Weight
    mat = w.reshape(w.shape[0], -1)
    u, v = U.astype(mat.dtype), V.astype(mat.dtype)
    for _ in range(c["power_iters"]):
        v = mat.T @ u
        v = v / (jnp.sqrt(jnp.sum(v * v)) + eps)
        u = mat @ v
        u = u / (jnp.sqrt(jnp.sum(u * u)) + eps)
    # Paddle's gradient treats the power iteration's u and v as constants
    u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
    sigma = u @ (mat @ v)
    return {"Out": Weight / sigma}
