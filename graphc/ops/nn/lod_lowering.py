"""LoD rules of reductions over tokens (reduce_mean/max/min) and of batch_norm: statistics of
the real tokens only, never of the padding rows (docs/lod.md). layer_norm needs none: it
normalises each token by itself, so its dense rule on the tokens is already exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import lod_lowering
from ...ir.grad_defs import GRAD_SUFFIX

_REDUCERS = {"reduce_mean": jnp.mean, "reduce_max": jnp.max, "reduce_min": jnp.min}


def _reduced_dims(c, rank: int) -> tuple[int, ...]:
    return tuple(range(rank)) if c["reduce_all"] else tuple(sorted({d % rank for d in c["dim"]}))


def _lod_reduce(c, op: str, x: LoDArray):
    """The reduction over real tokens; a LoDArray when the token dim is kept."""
    data = x.data
    dims = _reduced_dims(c, data.ndim)
    if 0 not in dims:  # per token: padding rows stay zero
        out = _REDUCERS[op](data, axis=dims, keepdims=c["keep_dim"])
        return x.masked(out)
    keep = x.valid().reshape((-1,) + (1,) * (data.ndim - 1))
    if op == "reduce_mean":  # padding holds zeros: scale the buffer mean to the token count
        out = jnp.mean(data, axis=dims, keepdims=c["keep_dim"])
        out = out * (x.capacity / jnp.maximum(x.token_count(), 1)).astype(data.dtype)
    else:
        fill = -jnp.inf if op == "reduce_max" else jnp.inf
        out = _REDUCERS[op](jnp.where(keep, data, jnp.asarray(fill, data.dtype)), axis=dims,
                            keepdims=c["keep_dim"])
    return out.reshape(out.shape or (1,))


def _reduce_rule(op):
    def rule(c, X):
        return {"Out": _lod_reduce(c, op, X)}

    def grad(c, **kw):
        x = kw["X"]
        dout = unwrap(kw["Out" + GRAD_SUFFIX])
        out, vjp = jax.vjp(lambda d: unwrap(_lod_reduce(c, op, x.with_data(d))), x.data)
        (dx,) = vjp(dout.astype(out.dtype).reshape(out.shape))
        return {"X" + GRAD_SUFFIX: x.masked(dx)}

    lod_lowering(op)(rule)
    lod_lowering(op + "_grad")(grad)


for _op in _REDUCERS:
    _reduce_rule(_op)


# -- batch_norm over the real tokens ---------------------------------------------------------

def _channel(layout: str, rank: int) -> int:
    return rank - 1 if layout == "NHWC" else 1


def _bn_train(x: LoDArray, scale, bias, eps, layout):
    """batch_norm_train over the tokens: the masked sums divided by the real element count."""
    data = x.data.astype(scale.dtype)
    ch = _channel(layout, data.ndim)
    axes = tuple(i for i in range(data.ndim) if i != ch)
    shape = [1] * data.ndim
    shape[ch] = -1
    per_token = 1
    for i in axes[1:]:
        per_token *= data.shape[i]
    count = jnp.maximum(x.token_count() * per_token, 1).astype(data.dtype)
    keep = x.valid().reshape((-1,) + (1,) * (data.ndim - 1))
    mean = jnp.sum(data, axis=axes) / count  # padding rows are zero
    centred = jnp.where(keep, data - mean.reshape(shape), 0)
    var = jnp.sum(jnp.square(centred), axis=axes) / count
    inv = jax.lax.rsqrt(var + jnp.asarray(eps, var.dtype))
    y = centred * (inv * scale).reshape(shape) + bias.reshape(shape)
    return y.astype(x.data.dtype), mean, var


def _bn_y(c, x: LoDArray, scale, bias, mean, variance):
    if c["is_test"] or c["use_global_stats"]:
        shape = [1] * x.data.ndim
        shape[_channel(c["data_layout"], x.data.ndim)] = -1
        inv = jax.lax.rsqrt(variance + jnp.asarray(c["epsilon"], variance.dtype))
        y = (x.data.astype(scale.dtype) - mean.reshape(shape)) * (inv * scale).reshape(shape) \
            + bias.reshape(shape)
        return x.masked(y.astype(x.data.dtype)), mean, variance
    y, m, v = _bn_train(x, scale, bias, c["epsilon"], c["data_layout"])
    return x.masked(y), m, v


@lod_lowering("batch_norm")
def _batch_norm(c, X, Scale, Bias, Mean, Variance):
    y, mean, var = _bn_y(c, X, Scale, Bias, Mean, Variance)
    inv = jax.lax.rsqrt(var + jnp.asarray(c["epsilon"], var.dtype))
    if c["is_test"] or c["use_global_stats"]:
        return {"Y": y, "MeanOut": Mean, "VarianceOut": Variance, "SavedMean": Mean,
                "SavedVariance": inv}
    m = jnp.asarray(c["momentum"], Mean.dtype)
    return {"Y": y, "MeanOut": Mean * m + mean * (1 - m),
            "VarianceOut": Variance * m + var * (1 - m), "SavedMean": mean,
            "SavedVariance": inv}


@lod_lowering("batch_norm_grad")
def _batch_norm_grad(c, **kw):
    x, dy = kw["X"], unwrap(kw["Y" + GRAD_SUFFIX])
    mean, variance = kw.get("Mean"), kw.get("Variance")

    def f(data, scale, bias):
        return _bn_y(c, x.with_data(data), scale, bias, mean, variance)[0].data

    y, vjp = jax.vjp(f, x.data, kw["Scale"], kw["Bias"])
    dx, dscale, dbias = vjp(dy.astype(y.dtype).reshape(y.shape))
    grads = {"X": x.masked(dx), "Scale": dscale, "Bias": dbias}
    return {s + GRAD_SUFFIX: g for s, g in grads.items() if s + GRAD_SUFFIX in c.out_types}
