"""Lowering rules for reshape, transpose, concat, split, cast and tensor creation.

Random initialisers draw from keys fixed by the op's seed (or the program's) and its name.
"""

from __future__ import annotations

import math as pymath

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.arrays import TensorArray
from ...backends.lowering import lowering
from ...ir.errors import ShapeError


def _xshape(x):
    return jnp.zeros((0,) + tuple(x.shape), x.dtype)


def host_shape(c, tensor=None, tensor_list=None, slots=("ShapeTensor", "ShapeTensorList")):
    """The dims a shape tensor (or list of [1] tensors) holds, as ints: the backend folded it
    on the host while tracing (ir/shape_values.py); None when neither is given."""
    if tensor is None and not tensor_list:
        return None
    parts = [(slots[0], tensor)] if tensor is not None else [(slots[1], t) for t in tensor_list]
    dims = []
    for slot, value in parts:
        if isinstance(value, jax.core.Tracer):
            raise ShapeError(f"{c.where}: input {slot} holds a value computed from data, not "
                             "from shapes; graphc compiles static shapes, so it must come from "
                             "layers.shape(...) (or be Python ints)")
        dims += [int(d) for d in np.asarray(value).reshape(-1)]
    return dims


@lowering("reshape2")
def _reshape2(c, X, Shape=None, ShapeTensor=None):
    shape = host_shape(c, Shape, ShapeTensor, ("Shape", "ShapeTensor")) or c["shape"]
    target = [X.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    if -1 in target:
        known = pymath.prod(d for d in target if d != -1)
        target[target.index(-1)] = X.size // known
    return {"Out": X.reshape(target), "XShape": _xshape(X)}


@lowering("transpose2")
def _transpose2(c, X):
    return {"Out": jnp.transpose(X, c["axis"]), "XShape": _xshape(X)}


@lowering("concat")
def _concat(c, X):
    # an input of another rank than the first was checked to hold the first's trailing
    # dimensions after axis (Paddle's rows-by-columns view): give it the first's rank
    axis = c["axis"] % X[0].ndim
    lead, tail = X[0].shape[:axis], X[0].shape[axis + 1:]
    xs = [x if x.ndim == X[0].ndim else x.reshape(*lead, x.shape[axis], *tail) for x in X]
    return {"Out": jnp.concatenate(xs, axis=axis)}


@lowering("split")
def _split(c, X):
    axis = c["axis"] % X.ndim
    size = X.shape[axis]
    if c["num"] > 0:
        sections = [size // c["num"]] * c["num"]
    else:
        sections = list(c["sections"])
        if -1 in sections:
            sections[sections.index(-1)] = size - sum(s for s in sections if s != -1)
    bounds = [sum(sections[:i + 1]) for i in range(len(sections) - 1)]
    return {"Out": jnp.split(X, bounds, axis=axis)}


@lowering("cast")
def _cast(c, X):
    return {"Out": X.astype(c["out_dtype"])}


@lowering("fill_constant")
def _fill_constant(c, ShapeTensor=None, ShapeTensorList=None):
    shape = host_shape(c, ShapeTensor, ShapeTensorList) or c["shape"]
    return {"Out": jnp.full(shape, c["value"], c["dtype"])}


@lowering("fill_zeros_like")
def _fill_zeros_like(c, X):
    if isinstance(X, TensorArray):  # an array's unused gradient: zeros of its length
        return {"Out": TensorArray(jnp.zeros_like(X.data), X.length)}
    return {"Out": jnp.zeros_like(X)}


def _draw(op_type: str, attrs, key, shape):
    if op_type == "uniform_random":
        return jax.random.uniform(key, shape, jnp.float32, attrs["min"], attrs["max"])
    return jax.random.normal(key, shape, jnp.float32) * attrs["std"] + attrs["mean"]


def draw_rows(op_type: str, attrs, key, rows):
    """Rows ``rows`` of a ``row_keyed`` initializer's value: row i is drawn from ``key``
    folded with i, so a server draws the rows of a distributed table it is asked for,
    equal to a local run's, without the rest of the table."""
    width = tuple(attrs["shape"][1:])
    keys = jax.vmap(lambda i: jax.random.fold_in(key, i))(rows)
    out = jax.vmap(lambda k: _draw(op_type, attrs, k, width))(keys)
    return out.astype(attrs["dtype"])


@lowering("uniform_random", "gaussian_random")
def _random_init(c, ShapeTensor=None, ShapeTensorList=None):
    key = c.rng(c["seed"])
    shape = host_shape(c, ShapeTensor, ShapeTensorList)
    attrs = c.attrs if shape is None else {**c.attrs, "shape": shape}
    if attrs.get("row_keyed") and len(attrs["shape"]) >= 1:
        return {"Out": draw_rows(c.op_type, attrs, key, jnp.arange(attrs["shape"][0]))}
    return {"Out": _draw(c.op_type, attrs, key, tuple(attrs["shape"])).astype(c["dtype"])}


# -- issue 24: initializers (truncated_gaussian_random)
@lowering("truncated_gaussian_random")
def _truncated_gaussian(c):
    z = jax.random.truncated_normal(c.rng(c["seed"]), -2.0, 2.0, tuple(c["shape"]), jnp.float32)
    return {"Out": (z * c["std"] + c["mean"]).astype(c["dtype"])}
