"""NumPy references of the vision-sampling ops written as Paddle documents them (scalar loops,
independent of graphc's vectorised rules); used by tests/test_layers_vision_sampling.py."""

from __future__ import annotations

import math

import numpy as np


def c_round(v):
    return math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)


def psroi_pool_ref(x, rois, batch, oc, ph, pw, scale):
    _, _, h, w = x.shape
    out = np.zeros((len(rois), oc, ph, pw))
    for r, box in enumerate(rois):
        sw, sh = c_round(box[0]) * scale, c_round(box[1]) * scale
        ew, eh = (c_round(box[2]) + 1) * scale, (c_round(box[3]) + 1) * scale
        bh, bw = max(eh - sh, 0.1) / ph, max(ew - sw, 0.1) / pw
        for c in range(oc):
            for i in range(ph):
                for j in range(pw):
                    h0 = min(max(math.floor(i * bh + sh), 0), h)
                    h1 = min(max(math.ceil((i + 1) * bh + sh), 0), h)
                    w0 = min(max(math.floor(j * bw + sw), 0), w)
                    w1 = min(max(math.ceil((j + 1) * bw + sw), 0), w)
                    if h1 <= h0 or w1 <= w0:
                        continue
                    ch = (c * ph + i) * pw + j
                    out[r, c, i, j] = x[batch[r], ch, h0:h1, w0:w1].mean()
    return out


def _at(plane, y, x):
    h, w = plane.shape
    return plane[y, x] if 0 <= y < h and 0 <= x < w else 0.0


def _cell_integral(plane, hy, wx, y0, x0, y1, x1):
    """The integral over [y0, y1] x [x0, x1] (inside cell (hy, wx)) of the interpolation of
    its four corners: each corner's weight is a product of 1-D integrals of t or 1 - t."""
    a, b = x0 - wx, x1 - wx
    c, d = y0 - hy, y1 - hy
    lo_x, hi_x = (b - b * b / 2) - (a - a * a / 2), (b * b - a * a) / 2
    lo_y, hi_y = (d - d * d / 2) - (c - c * c / 2), (d * d - c * c) / 2
    return (_at(plane, hy, wx) * lo_y * lo_x + _at(plane, hy, wx + 1) * lo_y * hi_x
            + _at(plane, hy + 1, wx) * hi_y * lo_x + _at(plane, hy + 1, wx + 1) * hi_y * hi_x)


def prroi_pool_ref(x, rois, batch, ph, pw, scale):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    for r, box in enumerate(rois):
        sw, sh, ew, eh = (v * scale for v in box)
        bh, bw = max(eh - sh, 0.0) / ph, max(ew - sw, 0.0) / pw
        if bh * bw <= 0:
            continue
        for i in range(ph):
            for j in range(pw):
                ys, xs = sh + i * bh, sw + j * bw
                ye, xe = ys + bh, xs + bw
                for c in range(x.shape[1]):
                    plane, total = x[batch[r], c], 0.0
                    for hy in range(math.floor(ys), math.ceil(ye)):
                        for wx in range(math.floor(xs), math.ceil(xe)):
                            total += _cell_integral(plane, hy, wx, max(ys, hy), max(xs, wx),
                                                    min(ye, hy + 1), min(xe, wx + 1))
                    out[r, c, i, j] = total / (bh * bw)
    return out


def _interp(plane, y, x):
    """Four-corner interpolation, corners off the map counting 0."""
    y0, x0 = math.floor(y), math.floor(x)
    ly, lx = y - y0, x - x0
    return ((1 - ly) * (1 - lx) * _at(plane, y0, x0) + (1 - ly) * lx * _at(plane, y0, x0 + 1)
            + ly * (1 - lx) * _at(plane, y0 + 1, x0) + ly * lx * _at(plane, y0 + 1, x0 + 1))


def deformable_psroi_ref(x, rois, batch, trans, no_trans, scale, od, group, ph, pw, part, sp,
                         trans_std):
    _, _, h, w = x.shape
    out, count = np.zeros((len(rois), od, ph, pw)), np.zeros((len(rois), od, ph, pw))
    classes = 1 if no_trans else trans.shape[1] // 2
    for r, box in enumerate(rois):
        sw, sh = c_round(box[0]) * scale - 0.5, c_round(box[1]) * scale - 0.5
        ew, eh = (c_round(box[2]) + 1) * scale - 0.5, (c_round(box[3]) + 1) * scale - 0.5
        rw, rh = max(ew - sw, 0.1), max(eh - sh, 0.1)
        bh, bw = rh / ph, rw / pw
        for ct in range(od):
            cls = ct // (od // classes)
            for i in range(ph):
                for j in range(pw):
                    pi, pj = math.floor(i / ph * part[0]), math.floor(j / pw * part[1])
                    tx = 0 if no_trans else trans[r, 2 * cls, pi, pj] * trans_std
                    ty = 0 if no_trans else trans[r, 2 * cls + 1, pi, pj] * trans_std
                    ws, hs = j * bw + sw + tx * rw, i * bh + sh + ty * rh
                    gh = min(max(math.floor(i * group[0] / ph), 0), group[0] - 1)
                    gw = min(max(math.floor(j * group[1] / pw), 0), group[1] - 1)
                    plane = x[batch[r], (ct * group[0] + gh) * group[1] + gw]
                    total, n = 0.0, 0
                    for a in range(sp):
                        for b in range(sp):
                            yy, xx = hs + a * bh / sp, ws + b * bw / sp
                            if xx < -0.5 or xx > w - 0.5 or yy < -0.5 or yy > h - 0.5:
                                continue
                            total += _interp(plane, min(max(yy, 0), h - 1),
                                             min(max(xx, 0), w - 1))
                            n += 1
                    out[r, ct, i, j] = total / n if n else 0.0
                    count[r, ct, i, j] = n
    return out, count


def deformable_conv_ref(x, offset, mask, flt, stride, pad, dil, groups, dgroups):
    n, ch, _, _ = x.shape
    m, cg, kh, kw = flt.shape
    oh, ow = offset.shape[2:]
    out = np.zeros((n, m, oh, ow))
    cols = np.zeros((n, ch, kh, kw, oh, ow))
    for b in range(n):
        for c in range(ch):
            g = c // (ch // dgroups)
            for i in range(kh):
                for j in range(kw):
                    k = i * kw + j
                    for p in range(oh):
                        for q in range(ow):
                            y = p * stride[0] - pad[0] + i * dil[0] + offset[b, g * 2 * kh * kw
                                                                           + 2 * k, p, q]
                            xx = q * stride[1] - pad[1] + j * dil[1] + offset[
                                b, g * 2 * kh * kw + 2 * k + 1, p, q]
                            v = _interp(x[b, c], y, xx) if -1 < y < x.shape[2] and \
                                -1 < xx < x.shape[3] else 0.0
                            if mask is not None:
                                v *= mask[b, g * kh * kw + k, p, q]
                            cols[b, c, i, j, p, q] = v
    per = m // groups
    for o in range(m):
        g = o // per
        out[:, o] = np.einsum("ncijpq,cij->npq", cols[:, g * cg:(g + 1) * cg], flt[o])
    return out


def im2sequence_ref(x, kernels, strides, pads, real=None):
    """Rows [C * kh * kw] of each image's output positions (row-major), and the lengths."""
    n, ch, h, w = x.shape
    kh, kw = kernels
    rows, lengths = [], []
    for b in range(n):
        hh, ww = (h, w) if real is None else real[b]
        oh = (hh + pads[0] + pads[2] - kh) // strides[0] + 1
        ow = (ww + pads[1] + pads[3] - kw) // strides[1] + 1
        for p in range(oh):
            for q in range(ow):
                patch = np.zeros((ch, kh, kw))
                for i in range(kh):
                    for j in range(kw):
                        y, xx = p * strides[0] - pads[0] + i, q * strides[1] - pads[1] + j
                        if 0 <= y < h and 0 <= xx < w:
                            patch[:, i, j] = x[b, :, y, xx]
                rows.append(patch.reshape(-1))
        lengths.append(oh * ow)
    return np.array(rows).reshape(-1, ch * kh * kw), lengths


_EPS = 1e-4


def _ge(a, b):
    return a > b or abs(a - b) < _EPS


def _le(a, b):
    return a < b or abs(a - b) < _EPS


def _in_quad(x, y, qx, qy):
    edges = [(qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]) for i in range(4)]
    for xs, ys, xe, ye in edges:
        if abs(ys - ye) < _EPS:
            if (abs(y - ys) < _EPS and abs(y - ye) < _EPS and _ge(x, min(xs, xe))
                    and _le(x, max(xs, xe))):
                return True
        else:
            ix = (y - ys) * (xe - xs) / (ye - ys) + xs
            if abs(ix - x) < _EPS and _ge(y, min(ys, ye)) and _le(y, max(ys, ye)):
                return True
    crossings = 0
    for xs, ys, xe, ye in edges:
        if abs(ys - ye) < _EPS or _le(y, min(ys, ye)) or y - max(ys, ye) > _EPS:
            continue
        ix = (y - ys) * (xe - xs) / (ye - ys) + xs
        if abs(ix - x) < _EPS:
            return True
        crossings += ix - x > _EPS
    return crossings % 2 == 1


def perspective_matrix_ref(qx, qy, th, tw):
    """Paddle's matrix: the quad's corners 0, 1, 3 map to grid corners (0, 0), (nw - 1, 0)
    and (0, nh - 1) of a normalized grid nh = max(2, th) high, nw as the quad's aspect."""
    side = [math.hypot(qx[i] - qx[(i + 1) % 4], qy[i] - qy[(i + 1) % 4]) for i in range(4)]
    nh = max(2, th)
    nw = max(2, min(c_round((side[0] + side[2]) / 2 * (nh - 1) / ((side[1] + side[3]) / 2))
                    + 1, tw))
    dx1, dx2, dx3 = qx[1] - qx[2], qx[3] - qx[2], qx[0] - qx[1] + qx[2] - qx[3]
    dy1, dy2, dy3 = qy[1] - qy[2], qy[3] - qy[2], qy[0] - qy[1] + qy[2] - qy[3]
    den = dx1 * dy2 - dx2 * dy1 + 1e-5
    g = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    hh = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    return np.array([(qx[1] - qx[0] + g * (nw - 1) * qx[1]) / (nw - 1),
                     (qx[3] - qx[0] + hh * (nh - 1) * qx[3]) / (nh - 1), qx[0],
                     (qy[1] - qy[0] + g * (nw - 1) * qy[1]) / (nw - 1),
                     (qy[3] - qy[0] + hh * (nh - 1) * qy[3]) / (nh - 1), qy[0], g, hh, 1.0])


def perspective_ref(x, rois, batch, th, tw, scale):
    _, ch, h, w = x.shape
    out = np.zeros((len(rois), ch, th, tw))
    mask = np.zeros((len(rois), 1, th, tw), np.int32)
    mats = np.zeros((len(rois), 9))
    for r, quad in enumerate(rois):
        qx, qy = quad[0::2] * scale, quad[1::2] * scale
        m = mats[r] = perspective_matrix_ref(qx, qy, th, tw)
        for p in range(th):
            for q in range(tw):
                den = m[6] * q + m[7] * p + m[8]
                iw, ih = (m[0] * q + m[1] * p + m[2]) / den, (m[3] * q + m[4] * p + m[5]) / den
                if not _in_quad(iw, ih, qx, qy) or _ge(-0.5, iw) or _ge(iw, w - 0.5) \
                        or _ge(-0.5, ih) or _ge(ih, h - 0.5):
                    continue
                iw, ih = (0.0 if _ge(0, iw) else iw), (0.0 if _ge(0, ih) else ih)
                wf, hf = math.floor(iw), math.floor(ih)
                wc, hc = wf + 1, hf + 1
                if wf >= w - 1:
                    wf = wc = w - 1
                    iw = float(wf)
                if hf >= h - 1:
                    hf = hc = h - 1
                    ih = float(hf)
                lw, lh = iw - wf, ih - hf
                img = x[batch[r]]
                out[r, :, p, q] = ((1 - lw) * (1 - lh) * img[:, hf, wf]
                                   + (1 - lw) * lh * img[:, hc, wf] + lw * lh * img[:, hc, wc]
                                   + lw * (1 - lh) * img[:, hf, wc])
                mask[r, 0, p, q] = 1
    return out, mask, mats
