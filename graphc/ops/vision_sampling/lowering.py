"""RoI pooling rules of the vision-sampling family (psroi_pool, prroi_pool and
deformable_psroi_pooling) and the gather-based bilinear sampler every rule here shares."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import unwrap
from ...backends.lowering import lowering


def bilinear(x, b, ch, y, xx):
    """X [N, C, H, W] at float points (y, xx) of image b, channel ch (index arrays that
    broadcast together): the four-corner interpolation with corners off the map counting 0,
    so the vjp reaches X and the point coordinates."""
    _, _, h, w = x.shape
    y0, x0 = jnp.floor(y), jnp.floor(xx)
    ly, lx = y - y0, xx - x0
    y0, x0 = y0.astype(jnp.int32), x0.astype(jnp.int32)
    total = 0
    for dy, wy in ((0, 1 - ly), (1, ly)):
        for dx, wx in ((0, 1 - lx), (1, lx)):
            yi, xi = y0 + dy, x0 + dx
            ok = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            v = x[b, ch, jnp.clip(yi, 0, h - 1), jnp.clip(xi, 0, w - 1)]
            total = total + jnp.where(ok, wy * wx * v, 0)
    return total


def roi_images(rois, n, counts=None):
    """(boxes, image index of each box, finish): the image of a box is its LoD sequence, or
    given by per-image box ``counts`` (Paddle's BatchRoINums); ``finish`` zeroes the padding
    rows of a LoD result."""
    if counts is None:
        return rois.data, jnp.minimum(rois.segment_ids(), n - 1), rois.masked
    ends = jnp.cumsum(counts.astype(jnp.int32))
    batch = jnp.searchsorted(ends, jnp.arange(rois.shape[0]), side="right")
    return rois, jnp.minimum(batch, n - 1), lambda out: out


def per_image(weights, batch, n):
    """[R, P, H] row weights of each box as [R, P, N, H], zero outside its image: contracting
    them with X [N, C, H, W] never gathers a [R, C, H, W] copy of the boxes' images."""
    return weights[:, :, None, :] * (batch[:, None] == jnp.arange(n)).astype(
        weights.dtype)[:, None, :, None]


def _c_round(v):  # C's round: half away from zero
    return jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)


def psroi_pool(x, rois, batch, oc, ph, pw, scale):
    _, _, h, w = x.shape
    r = jax.lax.stop_gradient(_c_round(rois))  # Paddle's psroi_pool has no ROIs gradient
    start_w, start_h = r[:, 0] * scale, r[:, 1] * scale
    width = jnp.maximum((r[:, 2] + 1) * scale - start_w, 0.1)
    height = jnp.maximum((r[:, 3] + 1) * scale - start_h, 0.1)

    def cells(start, length, pooled, size):  # [R, pooled, size] membership of each bin
        p = jnp.arange(pooled, dtype=start.dtype)
        bin_ = (length / pooled)[:, None]
        lo = jnp.clip(jnp.floor(p * bin_ + start[:, None]), 0, size)
        hi = jnp.clip(jnp.ceil((p + 1) * bin_ + start[:, None]), 0, size)
        idx = jnp.arange(size)
        return (idx >= lo[..., None]) & (idx < hi[..., None]), hi - lo

    mh, nh = cells(start_h, height, ph, h)
    mw, nw = cells(start_w, width, pw, w)
    xs = x.reshape(x.shape[0], oc, ph, pw, h, w)
    rows = jnp.einsum("rpni,ncpqij->rcpqj", per_image(mh.astype(x.dtype), batch, x.shape[0]),
                      xs)
    total = jnp.einsum("rcpqj,rqj->rcpq", rows, mw.astype(x.dtype))
    area = (nh[:, :, None] * nw[:, None, :])[:, None]
    return jnp.where(area > 0, total / jnp.maximum(area, 1), 0)


@lowering("psroi_pool")
def _psroi_pool(c, X, ROIs):
    rois, batch, finish = roi_images(ROIs, X.shape[0])
    return {"Out": finish(psroi_pool(X, rois, batch, c["output_channels"], c["pooled_height"],
                                     c["pooled_width"], c["spatial_scale"]))}


def _tent_integral(t):
    """The integral of max(0, 1 - |s|) for s from -inf to t."""
    t = jnp.clip(t, -1, 1)
    return jnp.where(t < 0, (t + 1) ** 2 / 2, 1 - (1 - t) ** 2 / 2)


def prroi_pool(x, rois, batch, ph, pw, scale):
    """The integral of the interpolation (grid values 0 off the map) over a bin is separable:
    sum over grid points of X times the integrals of its two tent functions over the bin."""
    _, _, h, w = x.shape
    box = rois * scale
    width = jnp.maximum(box[:, 2] - box[:, 0], 0)
    height = jnp.maximum(box[:, 3] - box[:, 1], 0)

    def weights(start, length, pooled, size):  # [R, pooled, size]
        p = jnp.arange(pooled, dtype=start.dtype)
        bin_ = (length / pooled)[:, None]
        lo = (start[:, None] + p * bin_)[..., None]
        hi = lo + bin_[..., None]
        g = jnp.arange(size, dtype=start.dtype)
        return _tent_integral(hi - g) - _tent_integral(lo - g), length / pooled

    ay, bh = weights(box[:, 1], height, ph, h)
    ax, bw = weights(box[:, 0], width, pw, w)
    rows = jnp.einsum("rpni,ncij->rpcj", per_image(ay, batch, x.shape[0]), x)
    total = jnp.einsum("rpcj,rqj->rcpq", rows, ax)
    area = (bh * bw)[:, None, None, None]
    safe = jnp.where(area > 0, area, 1)
    return jnp.where(area > 0, total / safe, 0)


@lowering("prroi_pool")
def _prroi_pool(c, X, ROIs, BatchRoINums):
    rois, batch, finish = roi_images(ROIs, X.shape[0], BatchRoINums)
    return {"Out": finish(prroi_pool(X, rois, batch, c["pooled_height"], c["pooled_width"],
                                     c["spatial_scale"]))}


def deformable_psroi(x, rois, batch, trans, c):
    """Paddle's deformable_psroi_pooling: boxes rounded then shifted half a cell, bins of
    sample_per_part^2 points moved by the bin's part of Trans; points off [-0.5, size - 0.5]
    are skipped, the rest clamped onto the map and interpolated."""
    _, _, h, w = x.shape
    ph, pw, od = c["pooled_height"], c["pooled_width"], c["output_dim"]
    (gh, gw), (parth, partw) = c["group_size"], c["part_size"]
    sp, scale, r = c["sample_per_part"], c["spatial_scale"], rois.shape[0]
    box = jax.lax.stop_gradient(_c_round(rois))  # no ROIs gradient, as Paddle's
    start_w, start_h = box[:, 0] * scale - 0.5, box[:, 1] * scale - 0.5
    width = jnp.maximum((box[:, 2] + 1) * scale - 0.5 - start_w, 0.1)
    height = jnp.maximum((box[:, 3] + 1) * scale - 0.5 - start_h, 0.1)
    py, px = jnp.arange(ph), jnp.arange(pw)
    part_y = jnp.floor(py / ph * parth).astype(jnp.int32)
    part_x = jnp.floor(px / pw * partw).astype(jnp.int32)
    if c["no_trans"] or trans is None:
        classes = 1
        ty = tx = jnp.zeros((r, 1, ph, pw), x.dtype)
    else:
        classes = trans.shape[1] // 2
        t = trans[:, :, part_y[:, None], part_x[None, :]] * c["trans_std"]  # [R, 2K, ph, pw]
        tx, ty = t[:, 0::2], t[:, 1::2]
    cls = jnp.arange(od) // (od // classes)
    tx, ty = tx[:, cls], ty[:, cls]  # [R, od, ph, pw]
    bh, bw = (height / ph)[:, None, None, None], (width / pw)[:, None, None, None]
    hs = py[None, None, :, None] * bh + start_h[:, None, None, None] + ty * height[
        :, None, None, None]
    ws = px[None, None, None, :] * bw + start_w[:, None, None, None] + tx * width[
        :, None, None, None]
    s = jnp.arange(sp, dtype=x.dtype)
    ys = hs[..., None, None] + (s[:, None] * bh[..., None, None] / sp)  # [R, od, ph, pw, sp, 1]
    xs = ws[..., None, None] + (s[None, :] * bw[..., None, None] / sp)  # [..., 1, sp]
    ok = (ys >= -0.5) & (ys <= h - 0.5) & (xs >= -0.5) & (xs <= w - 0.5)
    ys, xs = jnp.clip(ys, 0, h - 1), jnp.clip(xs, 0, w - 1)
    g_y = jnp.clip(jnp.floor(py * gh / ph).astype(jnp.int32), 0, gh - 1)
    g_x = jnp.clip(jnp.floor(px * gw / pw).astype(jnp.int32), 0, gw - 1)
    ch = (jnp.arange(od)[:, None, None] * gh + g_y[None, :, None]) * gw + g_x[None, None, :]
    val = bilinear(x, batch[:, None, None, None, None, None], ch[None, ..., None, None], ys, xs)
    count = jnp.sum(ok, axis=(-2, -1)).astype(x.dtype)
    total = jnp.sum(jnp.where(ok, val, 0), axis=(-2, -1))
    return jnp.where(count > 0, total / jnp.maximum(count, 1), 0), count


@lowering("deformable_psroi_pooling")
def _deformable_psroi(c, Input, ROIs, Trans):
    rois, batch, finish = roi_images(ROIs, Input.shape[0])
    if Trans is not None:  # a LoD ROIs holds a bucket of rows: Trans's rows follow them
        Trans = unwrap(Trans)
        cap, rows = rois.shape[0], Trans.shape[0]
        Trans = jnp.pad(Trans, ((0, max(cap - rows, 0)),) + ((0, 0),) * 3)[:cap]
    out, count = deformable_psroi(Input, rois, batch, Trans, c)
    return {"Output": finish(out), "TopCount": finish(count)}
