"""Lowering rules for log, sign, pow, clip, clip_by_norm, norm, comparisons, logical ops,
reduce_min/prod/all/any, elementwise_mod/floordiv, arg_max/arg_min, argsort, prelu, maxout,
cumsum, size and isinf/isnan/isfinite."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows
from ..math.lowering import broadcast_y


@lowering("log")
def _log(c, X):
    return {"Out": jnp.log(X)}


@lowering("sign")
def _sign(c, X):
    return {"Out": jnp.sign(X)}


@lowering("pow")
def _pow(c, X):
    if jnp.issubdtype(X.dtype, jnp.integer):  # Paddle casts factor to X's integer type
        return {"Out": jnp.power(X, int(c["factor"]))}
    return {"Out": jnp.power(X, jnp.asarray(c["factor"], X.dtype))}


@lowering("clip")
def _clip(c, X):
    if isinstance(X, SelectedRows):
        # a repeated row's values are clipped after summing them, as Paddle merges first
        merged = X.merged()
        real = (merged.rows < merged.height).reshape((-1,) + (1,) * (merged.values.ndim - 1))
        # padding rows (row = height) keep zero values, whatever the bounds
        clipped = jnp.where(real, _clip(c, merged.values)["Out"], 0).astype(X.dtype)
        return {"Out": merged.with_values(clipped)}
    lo, hi = jnp.asarray(c["min"], X.dtype), jnp.asarray(c["max"], X.dtype)
    return {"Out": jnp.minimum(jnp.maximum(X, lo), hi)}


@lowering("clip_by_norm")
def _clip_by_norm(c, X):
    if isinstance(X, SelectedRows):
        # merged rows hold the dense tensor's nonzero rows once (padding rows are zeros), so
        # their norm is the dense norm
        merged = X.merged()
        return {"Out": merged.with_values(_clip_by_norm(c, merged.values)["Out"])}
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


# -- issue 24: math activations (prelu, maxout, cumsum, size, isinf/isnan/isfinite) -----------
@lowering("prelu")
def _prelu(c, X, Alpha):
    mode = c["mode"]
    if mode == "all":
        alpha = Alpha.reshape(())
    elif mode == "channel":
        alpha = Alpha.reshape((1, -1) + (1,) * (X.ndim - 2))
    else:
        alpha = Alpha.reshape((1,) + X.shape[1:])
    return {"Out": jnp.where(X > 0, X, alpha.astype(X.dtype) * X)}


@lowering("maxout")
def _maxout(c, X):
    axis, groups = c["axis"] % X.ndim, c["groups"]
    # channel i * groups + k goes to output channel i: split the axis as [C / groups, groups]
    shape = X.shape[:axis] + (X.shape[axis] // groups, groups) + X.shape[axis + 1:]
    return {"Out": jnp.max(X.reshape(shape), axis=axis + 1)}


@lowering("cumsum")
def _cumsum(c, X):
    axis = c["axis"] % X.ndim
    x = jnp.flip(X, axis) if c["reverse"] else X
    if c["exclusive"]:
        # shift by one along the axis (a leading 0): exact, unlike cumsum - x
        pads = [(1, 0) if i == axis else (0, 0) for i in range(x.ndim)]
        x = jax.lax.slice_in_dim(jnp.pad(x, pads), 0, x.shape[axis], axis=axis)
    out = jnp.cumsum(x, axis=axis, dtype=X.dtype)
    return {"Out": jnp.flip(out, axis) if c["reverse"] else out}


@lowering("size")
def _size(c, Input):
    return {"Out": jnp.full((1,), Input.size, jnp.int64)}


_OVERFLOW = {"isinf": lambda x: jnp.any(jnp.isinf(x)), "isnan": lambda x: jnp.any(jnp.isnan(x)),
             "isfinite": lambda x: jnp.all(jnp.isfinite(x))}


@lowering(*_OVERFLOW)
def _overflow(c, X):
    return {"Out": _OVERFLOW[c.op_type](X).reshape(1)}
