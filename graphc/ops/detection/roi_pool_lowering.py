"""roi_pool: each bin's max found separably (over W within the bin's columns, then over H),
the first maximum in row-major order as Paddle's kernel; Out is gathered at that index so
the gradient flows to it alone."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering


def _bins(start, end, pooled, size):
    """[R, pooled] start and end cells of each bin, clamped to [0, size] (Paddle's rule)."""
    length = jnp.maximum(end - start + 1, 1).astype(jnp.float32)
    p = jnp.arange(pooled, dtype=jnp.float32)
    bin_ = (length / pooled)[:, None]
    lo = jnp.floor(p * bin_).astype(jnp.int32) + start[:, None]
    hi = jnp.ceil((p + 1) * bin_).astype(jnp.int32) + start[:, None]
    return jnp.clip(lo, 0, size), jnp.clip(hi, 0, size)


def _round(v):  # C's round: half away from zero
    return (jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)).astype(jnp.int32)


def roi_pool(x, rois, batch, ph, pw, scale):
    _, _, h, w = x.shape
    box = _round(rois * scale)
    hs, he = _bins(box[:, 1], box[:, 3], ph, h)
    ws, we = _bins(box[:, 0], box[:, 2], pw, w)
    img = x[batch]  # [R, C, H, W]
    cols = jnp.arange(w)
    in_w = (cols >= ws[:, :, None]) & (cols < we[:, :, None])  # [R, pw, W]
    row_vals = jnp.where(in_w[:, None, None], img[:, :, :, None, :], -jnp.inf)
    best_w = jnp.argmax(row_vals, axis=-1)  # [R, C, H, pw]: first max of each row
    row_max = jnp.max(row_vals, axis=-1)
    rows = jnp.arange(h)
    in_h = (rows >= hs[:, :, None]) & (rows < he[:, :, None])  # [R, ph, H]
    col_vals = jnp.where(in_h[:, None, :, :, None], row_max[:, :, None], -jnp.inf)
    best_h = jnp.argmax(col_vals, axis=3)  # [R, C, ph, pw]: first row holding the max
    at_w = jnp.take_along_axis(best_w, best_h, axis=2)  # the column of that max
    empty = ((he <= hs)[:, :, None] | (we <= ws)[:, None, :])[:, None]  # [R, 1, ph, pw]
    r, c = jnp.arange(img.shape[0]), jnp.arange(img.shape[1])
    out = img[r[:, None, None, None], c[None, :, None, None], best_h, at_w]
    out = jnp.where(empty, 0, out)
    argmax = jnp.where(empty, -1, best_h * w + at_w).astype(jnp.int64)
    return out, argmax


@lowering("roi_pool")
def _roi_pool(c, X, ROIs, RoisLod):
    args = (c["pooled_height"], c["pooled_width"], c["spatial_scale"])
    if RoisLod is None:
        batch = jnp.minimum(ROIs.segment_ids(), X.shape[0] - 1)
        out, arg = roi_pool(X, ROIs.data, batch, *args)
        return {"Out": ROIs.masked(out), "Argmax": ROIs.masked(arg)}
    ends = RoisLod[1:].astype(jnp.int32)
    batch = jnp.searchsorted(ends, jnp.arange(ROIs.shape[0]), side="right")
    out, arg = roi_pool(X, ROIs, jnp.minimum(batch, X.shape[0] - 1), *args)
    return {"Out": out, "Argmax": arg}
