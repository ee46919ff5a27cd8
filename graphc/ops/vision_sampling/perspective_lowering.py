"""roi_perspective_transform: Paddle's perspective matrix of each quadrilateral, its inverse
map of the output grid, the point-in-quad test (1e-4 tolerances) and clamped interpolation."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from .lowering import roi_images

_EPS = 1e-4


def _ge(a, b):  # Paddle's GT_E: greater, or equal within 1e-4
    return (a > b) | (jnp.abs(a - b) < _EPS)


def _le(a, b):
    return (a < b) | (jnp.abs(a - b) < _EPS)


def _gt(a, b):
    return (a - b) > _EPS


def _c_round(v):
    return jnp.sign(v) * jnp.floor(jnp.abs(v) + 0.5)


def transform_matrix(qx, qy, th, tw):
    """[R, 9] matrices mapping (out_w, out_h, 1) to homogeneous input coordinates; the
    normalized grid is max(2, th) high and as wide as the quad's aspect allows (<= tw)."""
    x0, x1, x2, x3 = (qx[:, i] for i in range(4))
    y0, y1, y2, y3 = (qy[:, i] for i in range(4))
    length = [jnp.hypot(qx[:, i] - qx[:, (i + 1) % 4], qy[:, i] - qy[:, (i + 1) % 4])
              for i in range(4)]
    est_h, est_w = (length[1] + length[3]) / 2, (length[0] + length[2]) / 2
    nh = max(2, th)
    nw = jnp.clip(_c_round(est_w * (nh - 1) / est_h) + 1, 2, tw)
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = dx1 * dy2 - dx2 * dy1 + 1e-5
    m6 = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    m7 = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    m3 = (y1 - y0 + m6 * (nw - 1) * y1) / (nw - 1)
    m4 = (y3 - y0 + m7 * (nh - 1) * y3) / (nh - 1)
    m0 = (x1 - x0 + m6 * (nw - 1) * x1) / (nw - 1)
    m1 = (x3 - x0 + m7 * (nh - 1) * x3) / (nh - 1)
    return jnp.stack([m0, m1, x0, m3, m4, y0, m6, m7, jnp.ones_like(m6)], axis=1)


def _in_quad(x, y, qx, qy):
    """Paddle's in_quad: on an edge (within 1e-4) or an odd number of crossings to the right."""
    on = jnp.zeros(x.shape, bool)
    crossings = jnp.zeros(x.shape, jnp.int32)
    for i in range(4):
        xs, ys = qx[:, i, None, None], qy[:, i, None, None]
        xe, ye = qx[:, (i + 1) % 4, None, None], qy[:, (i + 1) % 4, None, None]
        flat = jnp.abs(ys - ye) < _EPS
        on_flat = ((jnp.abs(y - ys) < _EPS) & (jnp.abs(y - ye) < _EPS)
                   & _ge(x, jnp.minimum(xs, xe)) & _le(x, jnp.maximum(xs, xe)))
        ix = (y - ys) * (xe - xs) / jnp.where(flat, 1, ye - ys) + xs
        hit = jnp.abs(ix - x) < _EPS
        in_span = _ge(y, jnp.minimum(ys, ye)) & _le(y, jnp.maximum(ys, ye))
        on |= jnp.where(flat, on_flat, hit & in_span)
        counted = ~flat & ~(_le(y, jnp.minimum(ys, ye)) | _gt(y, jnp.maximum(ys, ye)))
        on |= counted & hit
        crossings += (counted & _gt(ix, x)).astype(jnp.int32)
    return on | (crossings % 2 == 1)


def perspective(x, rois, batch, th, tw, scale):
    _, _, h, w = x.shape
    rois = jax.lax.stop_gradient(rois)  # Paddle's grad op gives X's gradient only
    qx, qy = rois[:, 0::2] * scale, rois[:, 1::2] * scale
    mat = transform_matrix(qx, qy, th, tw)
    ow = jnp.arange(tw, dtype=x.dtype)[None, None, :]
    oh = jnp.arange(th, dtype=x.dtype)[None, :, None]
    m = [mat[:, i, None, None] for i in range(9)]
    den = m[6] * ow + m[7] * oh + m[8]
    in_w = (m[0] * ow + m[1] * oh + m[2]) / den  # [R, th, tw]
    in_h = (m[3] * ow + m[4] * oh + m[5]) / den
    off = _ge(-0.5, in_w) | _ge(in_w, w - 0.5) | _ge(-0.5, in_h) | _ge(in_h, h - 0.5)
    keep = _in_quad(in_w, in_h, qx, qy) & ~off
    in_w = jnp.where(_ge(0.0, in_w), 0.0, in_w)
    in_h = jnp.where(_ge(0.0, in_h), 0.0, in_h)
    wf, hf = jnp.floor(in_w), jnp.floor(in_h)
    in_w = jnp.where(wf >= w - 1, w - 1.0, in_w)
    in_h = jnp.where(hf >= h - 1, h - 1.0, in_h)
    wf, hf = jnp.minimum(wf, w - 1), jnp.minimum(hf, h - 1)
    lw, lh = in_w - wf, in_h - hf
    wf, hf = wf.astype(jnp.int32), hf.astype(jnp.int32)
    wc, hc = jnp.minimum(wf + 1, w - 1), jnp.minimum(hf + 1, h - 1)
    b = batch[:, None, None, None]
    c = jnp.arange(x.shape[1])[None, :, None, None]

    def at(hi, wi):  # [R, C, th, tw]
        return x[b, c, hi[:, None], wi[:, None]]

    val = ((1 - lw) * (1 - lh))[:, None] * at(hf, wf) + ((1 - lw) * lh)[:, None] * at(hc, wf) \
        + (lw * lh)[:, None] * at(hc, wc) + (lw * (1 - lh))[:, None] * at(hf, wc)
    out = jnp.where(keep[:, None], val, 0)
    return out, keep[:, None].astype(jnp.int32), mat


@lowering("roi_perspective_transform")
def _perspective(c, X, ROIs):
    rois, batch, finish = roi_images(ROIs, X.shape[0])
    out, mask, mat = perspective(X, rois, batch, c["transformed_height"],
                                 c["transformed_width"], c["spatial_scale"])
    return {"Out": finish(out), "Mask": finish(mask), "TransformMatrix": finish(mat)}
