"""Lowering rules for elementwise, activation, matrix, reduction and metric ops.

Formulas are Paddle's (e.g. leaky_relu's alpha, scale's bias_after_scale, mean -> [1]).
"""

from __future__ import annotations

import math as pymath

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows, add_to_dense, concat_rows
from ...ir.shapes import align_for_axis


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
    x, y = X, Y
    if x.ndim == 1:
        x = x[:, None] if c["transpose_X"] else x[None, :]
    if y.ndim == 1:
        y = y[None, :] if c["transpose_Y"] else y[:, None]
    if c["transpose_X"]:
        x = jnp.swapaxes(x, -1, -2)
    if c["transpose_Y"]:
        y = jnp.swapaxes(y, -1, -2)
    out = jnp.matmul(x, y)
    if X.ndim == 1:
        out = out[..., 0, :]
    if Y.ndim == 1:
        out = out[..., 0]
    if c["alpha"] != 1.0:
        out = out * jnp.asarray(c["alpha"], out.dtype)
    return {"Out": out.reshape(out.shape or (1,))}


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
    hit = jnp.any(Indices == Label.reshape(-1, 1).astype(Indices.dtype), axis=1)
    correct = jnp.sum(hit).astype(jnp.int32)
    total = jnp.asarray(Indices.shape[0], jnp.int32)
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
