"""Lowering rules for the tensor manipulation ops (slice, squeeze, expand, gather, scatter,
stack, one_hot, where_index, shape, creation) and the hand-written gradients of gather/scatter."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.data_checks import report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray
from ...backends.lowering import lowering
from .defs import slice_bounds, squeeze_shape, unsqueeze_shape


def _xshape(x):
    return jnp.zeros((0,) + tuple(x.shape), x.dtype)


def _decrease(x, c):
    dec = [d % x.ndim for d in c["decrease_axis"]] if x.ndim else []
    out = x.reshape([d for i, d in enumerate(x.shape) if i not in dec]) if dec else x
    return out.reshape(out.shape or (1,))


@lowering("slice")
def _slice(c, Input):
    index = [slice(None)] * Input.ndim
    for a, s, e in zip(c["axes"], c["starts"], c["ends"]):
        a %= Input.ndim
        index[a] = slice(*slice_bounds(Input.shape[a], s, e))
    return {"Out": _decrease(Input[tuple(index)], c)}


@lowering("strided_slice")
def _strided_slice(c, Input):
    index = [slice(None)] * Input.ndim
    for a, s, e, st in zip(c["axes"], c["starts"], c["ends"], c["strides"]):
        index[a % Input.ndim] = slice(s, e, st)
    return {"Out": _decrease(Input[tuple(index)], c)}


@lowering("squeeze2")
def _squeeze2(c, X):
    shape = squeeze_shape(tuple(X.shape), c["axes"]) or (1,)
    return {"Out": X.reshape(shape), "XShape": _xshape(X)}


@lowering("unsqueeze2")
def _unsqueeze2(c, X):
    return {"Out": X.reshape(unsqueeze_shape(tuple(X.shape), c["axes"])), "XShape": _xshape(X)}


@lowering("flatten2")
def _flatten2(c, X):
    axis = c["axis"]
    rows = int(np.prod(X.shape[:axis], dtype=np.int64))
    return {"Out": X.reshape(rows, -1) if X.size else X.reshape(rows, 0),
            "XShape": _xshape(X)}


@lowering("shape")
def _shape(c, Input):
    if isinstance(Input, LoDArray):  # the tokens' shape: their count is data
        tokens = jnp.sum(Input.lengths[-1]).astype(jnp.int32)
        return {"Out": jnp.concatenate([tokens[None],
                                        jnp.asarray(Input.shape[1:], jnp.int32)])}
    return {"Out": jnp.asarray(Input.shape, jnp.int32).reshape(Input.ndim)}


@lowering("expand")
def _expand(c, X, ExpandTimes=None, expand_times_tensor=None):
    from ..tensor.lowering import host_shape
    times = host_shape(c, ExpandTimes, expand_times_tensor,
                       ("ExpandTimes", "expand_times_tensor"))
    return {"Out": jnp.tile(X, times or c["expand_times"])}


@lowering("expand_as")
def _expand_as(c, X, target_tensor):
    times = [t // x if x else 1 for t, x in zip(target_tensor.shape, X.shape)]
    return {"Out": jnp.tile(X, times)}


def _ids(index):
    return index.reshape(-1)


@lowering("gather")
def _gather(c, X, Index):
    return {"Out": jnp.take(X, _ids(Index), axis=0)}


@lowering("gather_grad")
def _gather_grad(c, **kw):
    """Paddle's: rows of Out@GRAD written back at their index, summed over a repeated index
    unless overwrite is set (then one of them lands, as in Paddle)."""
    x, ids, dout = kw["X"], _ids(kw["Index"]), kw["Out@GRAD"].astype(kw["X"].dtype)
    zeros = jnp.zeros_like(x)
    dx = zeros.at[ids].set(dout) if c["overwrite"] else zeros.at[ids].add(dout)
    return {"X@GRAD": dx}


@lowering("gather_nd")
def _gather_nd(c, X, Index):
    depth = Index.shape[-1]
    return {"Out": X[tuple(jnp.moveaxis(Index, -1, 0)[i] for i in range(depth))]}


@lowering("scatter")
def _scatter(c, X, Ids, Updates):
    ids = _ids(Ids)
    if c["overwrite"]:
        return {"Out": X.at[ids].set(Updates)}
    return {"Out": X.at[ids].set(0).at[ids].add(Updates)}


@lowering("scatter_grad")
def _scatter_grad(c, **kw):
    """Paddle's: X@GRAD is Out@GRAD with the scattered rows zeroed, Updates@GRAD those rows."""
    ids, dout = _ids(kw["Ids"]), kw["Out@GRAD"]
    out = {}
    if "X@GRAD" in c.out_types:
        out["X@GRAD"] = dout.at[ids].set(0)
    if "Updates@GRAD" in c.out_types:
        out["Updates@GRAD"] = jnp.take(dout, ids, axis=0)
    return out


@lowering("stack")
def _stack(c, X):
    return {"Y": jnp.stack(X, axis=c["axis"])}


@lowering("unstack")
def _unstack(c, X):
    axis = c["axis"] % X.ndim
    parts = [jnp.squeeze(p, axis) for p in jnp.split(X, X.shape[axis], axis=axis)]
    return {"Y": [p.reshape(p.shape or (1,)) for p in parts]}


@lowering("one_hot", "one_hot_v2")
def _one_hot(c, X):
    ids = X[..., 0] if c.op_type == "one_hot" else X
    depth = c["depth"]
    if not c["allow_out_of_range"]:
        # Paddle raises for an id outside [0, depth); jax.nn.one_hot would give a row of
        # zeros, so the step is refused instead (backends/data_checks.py)
        report_invalid(c, "X", None, X, f"ids in [0, {depth}) (depth; "
                       "allow_out_of_range=True gives rows of zeros instead)",
                       within=(0, depth, None))
    return {"Out": jax.nn.one_hot(ids, depth, dtype=c["dtype"])}


@lowering("where_index")
def _where_index(c, Condition):
    size = c["size"]
    cond = Condition != 0
    if size >= 0:
        coords = jnp.nonzero(cond, size=size, fill_value=-1)
        return {"Out": jnp.stack(coords, axis=1).astype(jnp.int64).reshape(-1, cond.ndim)}
    # the true count is data: a buffer of one row per element of Condition holds it as one
    # sequence (its length the count, zeros after it), so the step's shapes stay static
    capacity = max(cond.size, 1)
    coords = jnp.nonzero(cond, size=capacity, fill_value=0)
    rows = jnp.stack(coords, axis=1).astype(jnp.int64).reshape(capacity, cond.ndim)
    count = jnp.sum(cond, dtype=LENGTHS_DTYPE).reshape(1)
    return {"Out": LoDArray(rows, (count,)).masked()}


@lowering("range")
def _range(c):
    n = c.out_types["Out"][0].shape[0]
    out = c["start"] + c["step"] * jnp.arange(n, dtype=jnp.float64)
    return {"Out": out.astype(c["dtype"])}


@lowering("fill_any_like")
def _fill_any_like(c, X):
    return {"Out": jnp.full(X.shape, c["value"], X.dtype)}


def _like_shape(c, Input):
    shape = list(c["shape"])
    shape[c["output_dim_idx"]] = Input.shape[c["input_dim_idx"]]
    return shape


@lowering("fill_constant_batch_size_like")
def _fill_batch_size_like(c, Input):
    return {"Out": jnp.full(_like_shape(c, Input), c["value"], c["dtype"])}


@lowering("uniform_random_batch_size_like")
def _uniform_batch_size_like(c, Input):
    out = jax.random.uniform(c.rng(c["seed"]), _like_shape(c, Input), jnp.float32,
                             c["min"], c["max"])
    return {"Out": out.astype(c["dtype"])}



@lowering("assign_value")
def _assign_value(c):
    dtype = c["dtype"]
    values = c[{"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values",
                "bool": "bool_values"}[dtype]]
    return {"Out": np.asarray(values, dtype=dtype).reshape(c["shape"])}
