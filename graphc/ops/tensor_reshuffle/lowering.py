"""Lowering rules for pad, pad2d, pad_constant_like, crop, crop_tensor, label_smooth,
multiplex, scatter_nd_add and the channel/space rearrangements (reshapes and transposes,
so their gradients are the generic vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


@lowering("pad")
def _pad(c, X):
    p = c["paddings"]
    widths = [(p[2 * i], p[2 * i + 1]) for i in range(X.ndim)]
    return {"Out": jnp.pad(X, widths, constant_values=jnp.asarray(c["pad_value"], X.dtype))}


@lowering("pad2d")
def _pad2d(c, X):
    p = c["paddings"]
    widths = [(0, 0)] * 4
    h, w = (2, 3) if c["data_format"] == "NCHW" else (1, 2)
    widths[h], widths[w] = (p[0], p[1]), (p[2], p[3])
    if c["mode"] == "constant":
        return {"Out": jnp.pad(X, widths, constant_values=jnp.asarray(c["pad_value"], X.dtype))}
    return {"Out": jnp.pad(X, widths, mode={"reflect": "reflect", "edge": "edge"}[c["mode"]])}


@lowering("pad_constant_like")
def _pad_constant_like(c, X, Y):
    widths = [(0, a - b) for a, b in zip(X.shape, Y.shape)]
    return {"Out": jnp.pad(Y, widths, constant_values=jnp.asarray(c["pad_value"], Y.dtype))}


@lowering("crop", "crop_tensor")
def _crop(c, X, Y=None):
    shape = list(Y.shape) if Y is not None else list(c["shape"])
    offsets = list(c["offsets"]) or [0] * X.ndim
    sizes = [d - o if s == -1 else s for d, s, o in zip(X.shape, shape, offsets)]
    return {"Out": jax.lax.slice(X, offsets, [o + s for o, s in zip(offsets, sizes)])}


@lowering("label_smooth")
def _label_smooth(c, X, PriorDist=None):
    eps = c["epsilon"]
    prior = PriorDist.reshape(-1).astype(X.dtype) if PriorDist is not None \
        else jnp.asarray(1.0 / X.shape[-1], X.dtype)
    return {"Out": (1 - eps) * X + eps * prior}


@lowering("multiplex")
def _multiplex(c, X, Ids):
    stacked = jnp.stack(X)
    rows = jnp.arange(stacked.shape[1])
    return {"Out": stacked[Ids.reshape(-1), rows]}


@lowering("scatter_nd_add")
def _scatter_nd_add(c, X, Index, Updates):
    depth = Index.shape[-1]
    where = tuple(jnp.moveaxis(Index, -1, 0)[i] for i in range(depth))
    return {"Out": X.at[where].add(Updates)}


@lowering("space_to_depth")
def _space_to_depth(c, X):
    # Paddle's kernel reads X as [N, b, b, C/b^2, H, W] and writes the buffer of
    # [N, C/b^2, H*b, W*b] (Darknet's reorg), which Out [N, C*b*b, H/b, W/b] then reshapes
    b = c["blocksize"]
    n, ch, h, w = X.shape
    y = X.reshape(n, b, b, ch // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return {"Out": y.reshape(n, ch * b * b, h // b, w // b)}


@lowering("pixel_shuffle")
def _pixel_shuffle(c, X):
    r = c["upscale_factor"]
    n, ch, h, w = X.shape
    y = X.reshape(n, ch // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return {"Out": y.reshape(n, ch // (r * r), h * r, w * r)}


@lowering("shuffle_channel")
def _shuffle_channel(c, X):
    g = c["group"]
    n, ch, h, w = X.shape
    return {"Out": X.reshape(n, g, ch // g, h, w).swapaxes(1, 2).reshape(X.shape)}


# -- port24: shuffle_batch
@lowering("shuffle_batch")
def _shuffle_batch(c, X):
    rows = X.reshape(-1, X.shape[-1])
    idx = jax.random.permutation(c.replica_rng(c["startup_seed"]), rows.shape[0])
    return {"Out": rows[idx].reshape(X.shape), "ShuffleIdx": idx.astype(jnp.int64)}


@lowering("shuffle_batch_grad")
def _shuffle_batch_grad(c, **kw):
    dout, idx = kw["Out@GRAD"], kw["ShuffleIdx"]
    rows = dout.reshape(-1, dout.shape[-1])
    return {"X@GRAD": jnp.zeros_like(rows).at[idx].set(rows).reshape(dout.shape)}
