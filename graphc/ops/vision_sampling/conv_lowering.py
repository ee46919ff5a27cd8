"""deformable_conv (v1, v2) as bilinear gathers into columns and a grouped contraction, and
im2sequence's patches with the per-image real sizes packed as a LoD value."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering
from .lowering import bilinear


def deformable_conv(x, offset, mask, flt, c):
    """Kernel point (i, j) of deformable group g at output (oh, ow) samples its group's
    channels at (oh * s - p + i * d + dy, ow * s - p + j * d + dx), the offsets read from
    Offset's channels g * 2K + 2 (i * kw + j) (dy) and + 1 (dx), times Mask's g * K + i * kw
    + j; im2col_step only batches Paddle's kernel and changes no value."""
    n, ch, _, _ = x.shape
    m, _, kh, kw = flt.shape
    (sh, sw), (ph, pw), (dh, dw) = c["strides"], c["paddings"], c["dilations"]
    g, dg = c["groups"], c["deformable_groups"]
    oh, ow = offset.shape[2], offset.shape[3]
    k = kh * kw
    off = offset.reshape(n, dg, k, 2, oh, ow)
    ki, kj = jnp.arange(k) // kw, jnp.arange(k) % kw
    base_y = (jnp.arange(oh) * sh - ph)[None, :, None] + (ki * dh)[:, None, None]  # [K, oh, 1]
    base_x = (jnp.arange(ow) * sw - pw)[None, None, :] + (kj * dw)[:, None, None]  # [K, 1, ow]
    ys = base_y.astype(x.dtype) + off[:, :, :, 0]  # [N, dg, K, oh, ow]
    xs = base_x.astype(x.dtype) + off[:, :, :, 1]
    grp = jnp.arange(ch) // (ch // dg)
    ys, xs = ys[:, grp], xs[:, grp]  # [N, C, K, oh, ow]
    cols = bilinear(x, jnp.arange(n)[:, None, None, None, None],
                    jnp.arange(ch)[None, :, None, None, None], ys, xs)
    if mask is not None:
        cols = cols * mask.reshape(n, dg, k, oh, ow)[:, grp]
    cols = cols.reshape(n, g, ch // g, k, oh, ow)
    w = flt.reshape(g, m // g, ch // g, k)
    out = jnp.einsum("ngckhw,gmck->ngmhw", cols, w)
    return out.reshape(n, m, oh, ow)


@lowering("deformable_conv")
def _deformable_conv(c, Input, Offset, Mask, Filter):
    return {"Output": deformable_conv(Input, Offset, Mask, Filter, c)}


@lowering("deformable_conv_v1")
def _deformable_conv_v1(c, Input, Offset, Filter):
    return {"Output": deformable_conv(Input, Offset, None, Filter, c)}


def _patches(x, kernels, strides, paddings):
    """[N, oh, ow, C * kh * kw] patches (channel, then kernel row, then column), zero padded."""
    (kh, kw), (sh, sw), (pu, pl, pd, pr) = kernels, strides, paddings
    xp = jnp.pad(x, ((0, 0), (0, 0), (pu, pd), (pl, pr)))
    n, ch, hp, wp = xp.shape
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    rows = (jnp.arange(oh) * sh)[:, None] + jnp.arange(kh)[None, :]  # [oh, kh]
    cols = (jnp.arange(ow) * sw)[:, None] + jnp.arange(kw)[None, :]  # [ow, kw]
    p = xp[:, :, rows[:, None, :, None], cols[None, :, None, :]]  # [N, C, oh, ow, kh, kw]
    return jnp.transpose(p, (0, 2, 3, 1, 4, 5)).reshape(n, oh, ow, ch * kh * kw)


def im2sequence(x, y, c):
    """(packed rows [N * oh * ow, C * kh * kw], rows per image)."""
    k, s, p = c["kernels"], c["strides"], c["paddings"]
    patches = _patches(x, k, s, p)
    n, oh, ow, d = patches.shape
    if y is None or n == 1:  # Paddle reads Y only for a batch of more than one image
        return patches.reshape(n * oh * ow, d), jnp.full((n,), oh * ow, jnp.int32)
    # image i's grid is that of its real size ceil(int(Y) / out_stride): its first rows and
    # columns of the full grid, packed row-major at offset sum(counts[:i])
    stride = jnp.asarray(c["out_stride"], jnp.int32)
    real = -(-y.astype(jnp.int32) // stride)
    rh = jnp.clip((real[:, 0] + p[0] + p[2] - k[0]) // s[0] + 1, 0, oh)
    rw = jnp.clip((real[:, 1] + p[1] + p[3] - k[1]) // s[1] + 1, 0, ow)
    counts = rh * rw
    start = jnp.cumsum(counts) - counts
    i, j = jnp.arange(oh)[:, None], jnp.arange(ow)[None, :]
    inside = (i[None] < rh[:, None, None]) & (j[None] < rw[:, None, None])  # [N, oh, ow]
    pos = start[:, None, None] + i[None] * rw[:, None, None] + j[None]
    target = jnp.where(inside, pos, n * oh * ow).reshape(-1)
    data = jnp.zeros((n * oh * ow + 1, d), x.dtype).at[target].set(patches.reshape(-1, d))
    return data[:n * oh * ow], counts.astype(jnp.int32)


@lowering("im2sequence")
def _im2sequence(c, X, Y):
    data, counts = im2sequence(X, Y, c)
    return {"Out": LoDArray(data, (counts,))}


@lowering("im2sequence_grad")
def _im2sequence_grad(c, **kw):
    """The vjp of the packed rows (the generic grad cannot take a LoD cotangent whose bucket
    differs from the forward's rows)."""
    x, y, dout = kw["X"], kw.get("Y"), kw["Out@GRAD"]
    data, vjp = jax.vjp(lambda v: im2sequence(v, y, c)[0], x)
    g = (dout.data if isinstance(dout, LoDArray) else dout).astype(x.dtype)
    rows = data.shape[0]
    g = jnp.pad(g, ((0, max(rows - g.shape[0], 0)), (0, 0)))[:rows]
    return {"X@GRAD": vjp(g)[0]}
