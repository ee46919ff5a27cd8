"""Lowering rules for linspace, eye, diag, the random gaussian_random_batch_size_like and
sampling_id (keys from c.rng: the op's seed, else the program's rule), unique and shard_index."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering


@lowering("linspace")
def _linspace(c):
    # Paddle's formula, start + i * step, in the output's dtype (jnp.linspace interpolates
    # differently and can miss values such as 2.0 by an ulp)
    dtype, num = jnp.dtype(c["dtype"]), c["num"]
    start = jnp.asarray(c["start"], dtype)
    step = (jnp.asarray(c["stop"], dtype) - start) / max(num - 1, 1)
    return {"Out": start + step * jnp.arange(num, dtype=dtype)}


@lowering("eye")
def _eye(c):
    return {"Out": jnp.eye(c["num_rows"], c["num_columns"] if c["num_columns"] >= 0 else None,
                           dtype=c["dtype"])}


@lowering("diag")
def _diag(c, Diagonal):
    return {"Out": jnp.diag(Diagonal)}


@lowering("gaussian_random_batch_size_like")
def _gaussian_batch_size_like(c, Input):
    shape = list(c["shape"])
    shape[c["output_dim_idx"]] = Input.shape[c["input_dim_idx"]]
    out = jax.random.normal(c.rng(c["seed"]), shape, jnp.float32) * c["std"] + c["mean"]
    return {"Out": out.astype(c["dtype"])}


@lowering("sampling_id")
def _sampling_id(c, X):
    r = jax.random.uniform(c.rng(c["seed"]), (X.shape[0], 1), X.dtype, c["min"], c["max"])
    # Paddle subtracts the probabilities from r one by one and stops once it is negative:
    # the first j whose running sum exceeds r, the last class when none does
    below = jnp.sum(jnp.cumsum(X, axis=1) <= r, axis=1)
    return {"Out": jnp.minimum(below, X.shape[1] - 1).astype(jnp.int64)}


@lowering("unique", "unique_with_counts")
def _unique(c, X):
    n = X.shape[0]
    order = jnp.argsort(X, stable=True)
    xs = X[order]
    new = jnp.concatenate([jnp.ones((min(n, 1),), bool), xs[1:] != xs[:-1]])
    group = jnp.cumsum(new) - 1  # each sorted element's value class
    # a class's first appearance is its smallest original position (the sort is stable);
    # classes that do not exist get n and sort last
    first = jnp.full((n,), n, order.dtype).at[group].min(order)
    rank = jnp.argsort(jnp.argsort(first, stable=True), stable=True)
    index = jnp.zeros((n,), rank.dtype).at[order].set(rank[group])
    out = {"Out": jnp.zeros_like(X).at[index].set(X), "Index": index.astype(c["dtype"])}
    if c.op_type == "unique_with_counts":
        out["Count"] = jnp.zeros((n,), c["dtype"]).at[index].add(1)
    return out


@lowering("shard_index")
def _shard_index(c, X):
    size = -(-c["index_num"] // c["nshards"])
    inside = X // size == c["shard_id"]
    return {"Out": jnp.where(inside, X % size, jnp.asarray(c["ignore_value"], X.dtype))}


@lowering("is_empty")
def _is_empty(c, X):
    if isinstance(X, LoDArray):  # the buffer has padding rows: count the tokens
        return {"Out": jnp.reshape((X.token_count() == 0) | (X.data.size == 0), (1,))}
    return {"Out": jnp.full((1,), X.size == 0)}
