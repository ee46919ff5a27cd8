"""LoD rules of nn's ops: batch_norm's statistics of the real tokens only, never of the
padding rows, and lookup_table_grad's padding tokens that are no rows (docs/lod.md).
layer_norm needs none: it normalises each token by itself, so its dense rule is exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import get_rule, lod_lowering
from ...backends.selected_rows import ROWS_DTYPE, SelectedRows
from ...ir.grad_defs import GRAD_SUFFIX

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


# -- lookup_table_grad: padding tokens are no rows -------------------------------------------------

@lod_lowering("lookup_table_grad", "distributed_lookup_table_grad")
def _lookup_table_grad(c, **kw):
    """The dense rule on the tokens; a row-sparse gradient then marks the rows of padding
    tokens as padding rows (row = height), so an optimizer never sees them as looked up
    (lazy Adam, Adagrad would otherwise move row ``0``)."""
    ids = kw["Ids"]
    result = get_rule(c.op_type)(c, **{k: unwrap(v) for k, v in kw.items()})
    grad = result.get("W" + GRAD_SUFFIX)
    if isinstance(grad, SelectedRows) and isinstance(ids, LoDArray):
        per_token = grad.rows.shape[0] // max(ids.capacity, 1)
        valid = jnp.repeat(ids.valid(), per_token)
        rows = jnp.where(valid, grad.rows, jnp.asarray(grad.height, ROWS_DTYPE))
        result["W" + GRAD_SUFFIX] = SelectedRows(rows, grad.values, grad.height)
    return result
