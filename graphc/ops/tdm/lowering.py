"""Lowering rules of tdm_child, tdm_sampler and index_sample: gathers from the tree tables;
tdm_sampler draws each layer's negatives as the smallest uniform keys among its other nodes
(a uniformly random subset without repeats, Paddle's rejection loop in one pass)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.data_checks import report_invalid
from ...backends.lowering import lowering, random_key


@lowering("tdm_child")
def _tdm_child(c, X, TreeInfo):
    nodes = TreeInfo.shape[0]
    report_invalid(c, "X", None, X, f"node ids in [0, {nodes})", within=(0, nodes, None))
    ids = jnp.clip(X, 0, nodes - 1).astype(jnp.int32)
    n = c["child_nums"]
    children = TreeInfo[:, 3:3 + n]
    has = (ids != 0) & (TreeInfo[ids, 3] != 0)
    child = jnp.where(has[..., None], children[ids], 0)
    leaf = has[..., None] & (TreeInfo[jnp.clip(child, 0, nodes - 1), 0] != 0)
    dtype = c["dtype"]
    return {"Child": child.astype(dtype), "LeafMask": leaf.astype(dtype)}


@lowering("tdm_sampler")
def _tdm_sampler(c, X, Travel, Layer):
    leaves = Travel.shape[0]
    report_invalid(c, "X", None, X, f"leaf ids in [0, {leaves})", within=(0, leaves, None))
    ids = jnp.clip(X.reshape(-1), 0, leaves - 1).astype(jnp.int32)
    offsets, negs = c["layer_offset_lod"], c["neg_samples_num_list"]
    # a non-zero seed: the same draws every run (Paddle seeds its sampler each run)
    key = random_key(c["seed"], 0) if c["seed"] else c.rng()
    nodes = Layer.reshape(-1)
    outs, labels, masks = [], [], []
    for layer, k in enumerate(negs):
        lo, hi = offsets[layer], offsets[layer + 1]
        pos = Travel[ids, layer]  # [B]: the leaf's ancestor in this layer, 0 for padding
        out, label = [], []
        if c["output_positive"]:
            out.append(pos[:, None])
            label.append(jnp.ones_like(pos)[:, None])
        if k:
            row_nodes = nodes[lo:hi]
            u = jax.random.uniform(jax.random.fold_in(key, layer), (ids.shape[0], hi - lo))
            u = jnp.where(row_nodes[None, :] == pos[:, None], 2.0, u)  # never the positive
            _, picked = jax.lax.top_k(-u, k)
            out.append(row_nodes[picked])
            label.append(jnp.zeros_like(picked, dtype=pos.dtype))
        if not out:  # no positive and no negatives: the layer takes no slots
            continue
        live = (pos != 0)[:, None]  # a padding layer (ancestor 0): its slots 0, masked out
        out, label = jnp.concatenate(out, 1), jnp.concatenate(label, 1)
        outs.append(jnp.where(live, out, 0))
        labels.append(jnp.where(live, label, 0))
        masks.append(jnp.broadcast_to(live, out.shape))
    dtype = c["dtype"]
    return {"Out": jnp.concatenate(outs, 1).astype(dtype),
            "Labels": jnp.concatenate(labels, 1).astype(dtype),
            "Mask": jnp.concatenate(masks, 1).astype(dtype)}


@lowering("index_sample")
def _index_sample(c, X, Index):
    cols = X.shape[1]
    report_invalid(c, "Index", None, Index, f"column indices in [0, {cols})",
                   within=(0, cols, None))
    return {"Out": jnp.take_along_axis(X, jnp.clip(Index, 0, cols - 1).astype(jnp.int32), 1)}
