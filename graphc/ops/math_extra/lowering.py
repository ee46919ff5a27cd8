"""Lowering rules for log, sign, pow, clip, clip_by_norm, norm, comparisons, logical ops,
reduce_min/prod/all/any, elementwise_mod/floordiv, arg_max/arg_min and argsort."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering
from ..math.lowering import broadcast_y


@lowering("log")
def _log(c, X):
    return {"Out": jnp.log(X)}


@lowering("sign")
def _sign(c, X):
    return {"Out": jnp.sign(X)}


@lowering("pow")
def _pow(c, X):
    return {"Out": jnp.power(X, jnp.asarray(c["factor"], X.dtype))}


@lowering("clip")
def _clip(c, X):
    lo, hi = jnp.asarray(c["min"], X.dtype), jnp.asarray(c["max"], X.dtype)
    return {"Out": jnp.minimum(jnp.maximum(X, lo), hi)}


@lowering("clip_by_norm")
def _clip_by_norm(c, X):
    norm = jnp.sqrt(jnp.sum(jnp.square(X)))
    max_norm = jnp.asarray(c["max_norm"], X.dtype)
    # the untaken branch divides by a safe norm, so its gradient is finite too
    scale = jnp.where(norm > max_norm, max_norm / jnp.where(norm > max_norm, norm, 1), 1)
    return {"Out": X * scale.astype(X.dtype)}


@lowering("norm")
def _norm(c, X):
    norm = jnp.sqrt(jnp.sum(jnp.square(X), axis=c["axis"], keepdims=True)
                    + jnp.asarray(c["epsilon"], X.dtype))
    return {"Out": X / norm, "Norm": norm}


_REDUCE = {"reduce_min": jnp.min, "reduce_prod": jnp.prod, "reduce_all": jnp.all,
           "reduce_any": jnp.any}


@lowering(*_REDUCE)
def _reduce(c, X):
    dims = tuple(range(X.ndim)) if c["reduce_all"] else tuple(d % X.ndim for d in c["dim"])
    out = _REDUCE[c.op_type](X, axis=dims, keepdims=c["keep_dim"])
    return {"Out": out.reshape(out.shape or (1,))}


def _mod(x, y):
    return jnp.remainder(x, y)  # Paddle's elementwise_mod: the result takes Y's sign


_BINARY = {
    "elementwise_mod": _mod, "elementwise_floordiv": jnp.floor_divide,
    "equal": jnp.equal, "not_equal": jnp.not_equal, "less_than": jnp.less,
    "less_equal": jnp.less_equal, "greater_than": jnp.greater,
    "greater_equal": jnp.greater_equal,
}


@lowering(*_BINARY)
def _binary(c, X, Y):
    x, y = broadcast_y(X, Y, c["axis"])
    return {"Out": _BINARY[c.op_type](x, y)}


_LOGICAL = {"logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
            "logical_xor": jnp.logical_xor}


@lowering(*_LOGICAL)
def _logical(c, X, Y):
    return {"Out": _LOGICAL[c.op_type](X, Y)}


@lowering("logical_not")
def _logical_not(c, X):
    return {"Out": jnp.logical_not(X)}


@lowering("arg_max", "arg_min")
def _arg(c, X):
    fn = jnp.argmax if c.op_type == "arg_max" else jnp.argmin
    if c["flatten"]:
        return {"Out": fn(X.reshape(-1)).reshape(1)}
    out = fn(X, axis=c["axis"] % X.ndim, keepdims=c["keepdims"])
    return {"Out": out.reshape(out.shape or (1,))}


@lowering("argsort")
def _argsort(c, X):
    axis = c["axis"] % X.ndim
    # a stable sort of -X keeps equal elements in their order, as Paddle's descending sort
    idx = jnp.argsort(-X if c["descending"] else X, axis=axis, stable=True)
    return {"Out": jnp.take_along_axis(X, idx, axis=axis), "Indices": idx}
