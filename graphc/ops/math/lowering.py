"""Lowering rules for elementwise, activation, matrix, reduction and metric ops.

Formulas are Paddle's (e.g. leaky_relu's alpha, scale's bias_after_scale, mean -> [1]).
"""

from __future__ import annotations

import math as pymath

import jax
import jax.numpy as jnp
from jax.scipy.special import erf

from ...backends.lod import LoDArray, pad_to_tokens
from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows, add_to_dense, concat_rows
from ...ir.shapes import align_for_axis
from .defs import matmul_out_dims


def broadcast_y(x, y, axis: int):
    """Reshape X and Y so numpy broadcasting does what Paddle's ``axis`` asks."""
    xs, ys = align_for_axis(tuple(x.shape), tuple(y.shape), axis)
    return x.reshape(xs), y.reshape(ys)


_BINARY = {
    "elementwise_add": jnp.add, "elementwise_sub": jnp.subtract,
    "elementwise_mul": jnp.multiply, "elementwise_max": jnp.maximum,
    "elementwise_min": jnp.minimum, "elementwise_pow": jnp.power,
}


def _div(x, y):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.floor_divide(x, y)  # Paddle's integer elementwise_div truncates
    return x / y


@lowering(*_BINARY, "elementwise_div")
def _elementwise(c, X, Y):
    if isinstance(X, SelectedRows):  # elementwise_mul only (its definition): a scaled copy
        return {"Out": X.with_values(X.values * Y.reshape(()).astype(X.dtype))}
    fn = _BINARY.get(c.op_type, _div)
    x, y = broadcast_y(X, Y, c["axis"])
    return {"Out": fn(x, y)}


_UNARY = {
    "relu": lambda x: jnp.maximum(x, 0), "sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh,
    "exp": jnp.exp, "sqrt": jnp.sqrt, "square": jnp.square, "abs": jnp.abs,
    "softsign": lambda x: x / (1 + jnp.abs(x)),
}


@lowering(*_UNARY)
def _unary(c, X):
    return {"Out": _UNARY[c.op_type](X)}


@lowering("gelu")
def _gelu(c, X):
    return {"Out": jax.nn.gelu(X, approximate=c["approximate"])}


@lowering("leaky_relu")
def _leaky_relu(c, X):
    return {"Out": jnp.where(X > 0, X, X * jnp.asarray(c["alpha"], X.dtype))}


@lowering("scale")
def _scale(c, X):
    s, b = jnp.asarray(c["scale"], X.dtype), jnp.asarray(c["bias"], X.dtype)
    return {"Out": X * s + b if c["bias_after_scale"] else (X + b) * s}


@lowering("softmax")
def _softmax(c, X):
    return {"Out": jax.nn.softmax(X, axis=c["axis"])}


@lowering("sum")
def _sum(c, X):
    sparse = [x for x in X if isinstance(x, SelectedRows)]
    dense = [x for x in X if not isinstance(x, SelectedRows)]
    if not dense:
        return {"Out": concat_rows(sparse)}
    out = dense[0]
    for x in dense[1:]:
        out = out + x
    for x in sparse:
        out = add_to_dense(out, x)
    return {"Out": out}


@lowering("assign")
def _assign(c, X):
    return {"Out": X}


@lowering("mul")
def _mul(c, X, Y):
    xn, yn = c["x_num_col_dims"], c["y_num_col_dims"]
    x2 = X.reshape(pymath.prod(X.shape[:xn]), -1)
    y2 = Y.reshape(pymath.prod(Y.shape[:yn]), -1)
    return {"Out": (x2 @ y2).reshape(X.shape[:xn] + Y.shape[yn:])}


@lowering("matmul")
def _matmul(c, X, Y):
    # a 1-D X is a row, a 1-D Y a column, before the transposes (Paddle's rule; defs.py)
    x = X[None, :] if X.ndim == 1 else X
    y = Y[:, None] if Y.ndim == 1 else Y
    if c["transpose_X"]:
        x = jnp.swapaxes(x, -1, -2)
    if c["transpose_Y"]:
        y = jnp.swapaxes(y, -1, -2)
    out = jnp.matmul(x, y)
    if c["alpha"] != 1.0:
        out = out * jnp.asarray(c["alpha"], out.dtype)
    dims = matmul_out_dims(out.shape[:-2], out.shape[-2], out.shape[-1], X.ndim == 1,
                           Y.ndim == 1)
    return {"Out": out.reshape(dims)}


@lowering("mean")
def _mean(c, X):
    return {"Out": jnp.mean(X).reshape(1)}


_REDUCE = {"reduce_sum": jnp.sum, "reduce_mean": jnp.mean, "reduce_max": jnp.max}


@lowering(*_REDUCE)
def _reduce(c, X):
    dims = tuple(range(X.ndim)) if c["reduce_all"] else tuple(d % X.ndim for d in c["dim"])
    out = _REDUCE[c.op_type](X, axis=dims, keepdims=c["keep_dim"])
    return {"Out": out.reshape(out.shape or (1,))}


@lowering("top_k")
def _top_k(c, X):
    values, indices = jax.lax.top_k(X, c["k"])
    return {"Out": values, "Indices": indices.astype(jnp.int64)}


@lowering("accuracy")
def _accuracy(c, Out, Indices, Label):
    valid = Indices.valid() if isinstance(Indices, LoDArray) else None
    if valid is not None and not isinstance(Label, LoDArray):  # one dense label per token
        Label = pad_to_tokens(c, "Label", Label, Indices)[0]
    Indices, Label = (getattr(v, "data", v) for v in (Indices, Label))
    hit = jnp.any(Indices == Label.reshape(-1, 1).astype(Indices.dtype), axis=1)
    if valid is None:
        total = jnp.asarray(Indices.shape[0], jnp.int32)
    else:  # LoD rows: the padding rows of the packed buffer are no samples
        hit, total = hit & valid, jnp.sum(valid).astype(jnp.int32)
    correct = jnp.sum(hit).astype(jnp.int32)
    acc = correct.astype(jnp.float32) / jnp.maximum(total, 1).astype(jnp.float32)
    return {"Accuracy": acc.reshape(1), "Correct": correct.reshape(1), "Total": total.reshape(1)}


# -- gradient rules ---------------------------------------------------------------------
# Paddle's relu/sigmoid/tanh grads read Out, not X: written out, not through jax.vjp
def _dout(kw, slot="Out"):
    return kw[slot + "@GRAD"]


@lowering("relu_grad")
def _relu_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jnp.maximum(kw["X"], 0)
    return {"X@GRAD": jnp.where(out > 0, _dout(kw), jnp.zeros((), out.dtype))}


@lowering("sigmoid_grad")
def _sigmoid_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jax.nn.sigmoid(kw["X"])
    return {"X@GRAD": _dout(kw) * out * (1 - out)}


@lowering("tanh_grad")
def _tanh_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jnp.tanh(kw["X"])
    return {"X@GRAD": _dout(kw) * (1 - out * out)}


# -- issue 24: math activations (Paddle 1.8's formulas; attributes as its op makers name them)
def _attr(c, x, name):
    return jnp.asarray(c[name], x.dtype)


def _selu(c, x):
    scale, alpha = _attr(c, x, "scale"), _attr(c, x, "alpha")
    return scale * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _elu(c, x):
    # max(0, x) + min(0, alpha * (e^x - 1)). With alpha >= 0 the second term is 0 for x > 0,
    # so e^x - 1 is taken at min(x, 0): a large x cannot overflow into a NaN gradient
    e = jnp.expm1(jnp.minimum(x, 0) if c["alpha"] >= 0 else x)
    return jnp.maximum(x, 0) + jnp.minimum(0, _attr(c, x, "alpha") * e)


def _soft_relu(c, x):
    t = _attr(c, x, "threshold")
    return jnp.log1p(jnp.exp(jnp.clip(x, -t, t)))


def _hard_swish(c, x):
    t, s, o = (_attr(c, x, k) for k in ("threshold", "scale", "offset"))
    return x * jnp.clip(x + o, 0, t) / s


def _softshrink(c, x):
    lam = _attr(c, x, "lambda")
    return jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, jnp.zeros((), x.dtype)))


def _zero_grad(fn):
    # Paddle's round/ceil/floor grads are zero; stop_gradient says so to jax.vjp too
    return lambda c, x: jax.lax.stop_gradient(fn(x))


_ACTIVATIONS = {
    "selu": _selu, "elu": _elu,
    "relu6": lambda c, x: jnp.clip(x, 0, _attr(c, x, "threshold")),
    "stanh": lambda c, x: _attr(c, x, "scale_b") * jnp.tanh(_attr(c, x, "scale_a") * x),
    "hard_sigmoid": lambda c, x: jnp.clip(_attr(c, x, "slope") * x + _attr(c, x, "offset"),
                                          0, 1),
    "swish": lambda c, x: x * jax.nn.sigmoid(_attr(c, x, "beta") * x),
    "brelu": lambda c, x: jnp.clip(x, _attr(c, x, "t_min"), _attr(c, x, "t_max")),
    "soft_relu": _soft_relu, "hard_swish": _hard_swish,
    "thresholded_relu": lambda c, x: jnp.where(x > _attr(c, x, "threshold"), x,
                                               jnp.zeros((), x.dtype)),
    "softshrink": _softshrink,
    "hard_shrink": lambda c, x: jnp.where(jnp.abs(x) > _attr(c, x, "threshold"), x,
                                          jnp.zeros((), x.dtype)),
    "logsigmoid": lambda c, x: jax.nn.log_sigmoid(x),
    "softplus": lambda c, x: jax.nn.softplus(x),
    "tanh_shrink": lambda c, x: x - jnp.tanh(x),
    "erf": lambda c, x: erf(x),
    "atan": lambda c, x: jnp.arctan(x), "rsqrt": lambda c, x: jax.lax.rsqrt(x),
    "cos": lambda c, x: jnp.cos(x), "acos": lambda c, x: jnp.arccos(x),
    "asin": lambda c, x: jnp.arcsin(x), "sin": lambda c, x: jnp.sin(x),
    "reciprocal": lambda c, x: 1 / x,
    "ceil": _zero_grad(jnp.ceil), "floor": _zero_grad(jnp.floor),
    # Paddle rounds halves away from zero (std::round), not to even as jnp.round does
    "round": _zero_grad(lambda x: jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5)),
}


@lowering(*_ACTIVATIONS)
def _activation(c, X):
    return {"Out": _ACTIVATIONS[c.op_type](c, X)}
