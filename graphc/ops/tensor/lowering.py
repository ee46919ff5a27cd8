"""Lowering rules for reshape, transpose, concat, split, cast and tensor creation.

Random initialisers draw from keys fixed by the op's seed (or the program's) and its name.
"""

from __future__ import annotations

import math as pymath

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


def _xshape(x):
    return jnp.zeros((0,) + tuple(x.shape), x.dtype)


@lowering("reshape2")
def _reshape2(c, X):
    target = [X.shape[i] if d == 0 else d for i, d in enumerate(c["shape"])]
    if -1 in target:
        known = pymath.prod(d for d in target if d != -1)
        target[target.index(-1)] = X.size // known
    return {"Out": X.reshape(target), "XShape": _xshape(X)}


@lowering("transpose2")
def _transpose2(c, X):
    return {"Out": jnp.transpose(X, c["axis"]), "XShape": _xshape(X)}


@lowering("concat")
def _concat(c, X):
    return {"Out": jnp.concatenate(X, axis=c["axis"])}


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
def _fill_constant(c):
    return {"Out": jnp.full(c["shape"], c["value"], c["dtype"])}


@lowering("fill_zeros_like")
def _fill_zeros_like(c, X):
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
def _random_init(c):
    key = c.rng(c["seed"])
    if c.attrs.get("row_keyed") and len(c["shape"]) >= 1:
        return {"Out": draw_rows(c.op_type, c.attrs, key, jnp.arange(c["shape"][0]))}
    return {"Out": _draw(c.op_type, c.attrs, key, tuple(c["shape"])).astype(c["dtype"])}


# -- issue 24: initializers (truncated_gaussian_random)
@lowering("truncated_gaussian_random")
def _truncated_gaussian(c):
    z = jax.random.truncated_normal(c.rng(c["seed"]), -2.0, 2.0, tuple(c["shape"]), jnp.float32)
    return {"Out": (z * c["std"] + c["mean"]).astype(c["dtype"])}
