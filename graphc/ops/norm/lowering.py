"""Lowering rules for instance_norm, group_norm, lrn and affine_channel (biased variances,
Paddle's SavedVariance = 1/sqrt(var + eps))."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


def _per_channel(v, ndim, axis):
    shape = [1] * ndim
    shape[axis] = -1
    return v.reshape(shape)


@lowering("instance_norm")
def _instance_norm(c, X, Scale, Bias):
    axes = tuple(range(2, X.ndim))
    mean = jnp.mean(X, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(X - mean), axis=axes, keepdims=True)
    inv = jax.lax.rsqrt(var + jnp.asarray(c["epsilon"], X.dtype))
    y = (X - mean) * inv
    if Scale is not None:
        y = y * _per_channel(Scale, X.ndim, 1)
    if Bias is not None:
        y = y + _per_channel(Bias, X.ndim, 1)
    return {"Y": y, "SavedMean": mean.reshape(-1), "SavedVariance": inv.reshape(-1)}


@lowering("group_norm")
def _group_norm(c, X, Scale, Bias):
    nhwc = c["data_layout"] == "NHWC"
    x = jnp.moveaxis(X, -1, 1) if nhwc else X
    n, g = x.shape[0], c["groups"]
    xg = x.reshape(n, g, -1)
    mean = jnp.mean(xg, axis=2, keepdims=True)
    var = jnp.mean(jnp.square(xg - mean), axis=2, keepdims=True)
    y = ((xg - mean) * jax.lax.rsqrt(var + jnp.asarray(c["epsilon"], X.dtype))).reshape(x.shape)
    if Scale is not None:
        y = y * _per_channel(Scale, x.ndim, 1)
    if Bias is not None:
        y = y + _per_channel(Bias, x.ndim, 1)
    y = jnp.moveaxis(y, 1, -1) if nhwc else y
    return {"Y": y, "Mean": mean.reshape(n, g), "Variance": var.reshape(n, g)}


@lowering("lrn")
def _lrn(c, X):
    axis = 3 if c["data_format"] == "NHWC" else 1
    size = c["n"]
    sq = jnp.square(X)
    pads = [(0, 0)] * 4
    pads[axis] = ((size - 1) // 2, size - 1 - (size - 1) // 2)
    window = [1] * 4
    window[axis] = size
    total = jax.lax.reduce_window(sq, 0.0, jax.lax.add, window, [1] * 4, pads)
    mid = jnp.asarray(c["k"], X.dtype) + jnp.asarray(c["alpha"], X.dtype) * total
    return {"Out": X * jnp.power(mid, -jnp.asarray(c["beta"], X.dtype)), "MidOut": mid}


@lowering("affine_channel")
def _affine_channel(c, X, Scale, Bias):
    axis = X.ndim - 1 if c["data_layout"] == "NHWC" else 1
    return {"Out": X * _per_channel(Scale, X.ndim, axis) + _per_channel(Bias, X.ndim, axis)}
