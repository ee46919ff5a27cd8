"""NumPy reference of Paddle 1.8's RoIAlign kernel (loop by loop) for
tests/test_layers_detection.py."""

from __future__ import annotations

import math

import numpy as np


def _bilinear(img, y, x):
    _, h, w = img.shape
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return np.zeros(img.shape[0])
    y, x = max(y, 0.0), max(x, 0.0)
    yl, xl = int(y), int(x)
    if yl >= h - 1:
        yl = yh = h - 1
        y = float(yl)
    else:
        yh = yl + 1
    if xl >= w - 1:
        xl = xh = w - 1
        x = float(xl)
    else:
        xh = xl + 1
    ly, lx = y - yl, x - xl
    return ((1 - ly) * (1 - lx) * img[:, yl, xl] + (1 - ly) * lx * img[:, yl, xh]
            + ly * (1 - lx) * img[:, yh, xl] + ly * lx * img[:, yh, xh])


def roi_align_ref(x, rois, batch, ph, pw, scale, ratio):
    out = np.zeros((len(rois), x.shape[1], ph, pw))
    for r, (roi, b) in enumerate(zip(rois, batch)):
        x1, y1, x2, y2 = roi * scale
        rh, rw = max(y2 - y1, 1.0), max(x2 - x1, 1.0)
        bh, bw = rh / ph, rw / pw
        gh = ratio if ratio > 0 else math.ceil(rh / ph)
        gw = ratio if ratio > 0 else math.ceil(rw / pw)
        for i in range(ph):
            for j in range(pw):
                acc = np.zeros(x.shape[1])
                for iy in range(gh):
                    for ix in range(gw):
                        acc += _bilinear(x[b], y1 + i * bh + (iy + 0.5) * bh / gh,
                                         x1 + j * bw + (ix + 0.5) * bw / gw)
                out[r, :, i, j] = acc / max(gh * gw, 1)
    return out


def _jaccard(a, b, normalized):
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    add = 0.0 if normalized else 1.0

    def area(x):
        if x[2] < x[0] or x[3] < x[1]:
            return 0.0
        return (x[2] - x[0] + add) * (x[3] - x[1] + add)
    iw = min(a[2], b[2]) - max(a[0], b[0]) + add
    ih = min(a[3], b[3]) - max(a[1], b[1]) + add
    inter = iw * ih
    return inter / (area(a) + area(b) - inter)


def multiclass_nms_ref(boxes, scores, score_threshold, nms_top_k, keep_top_k, nms_threshold,
                       normalized, eta, background):
    """Paddle 1.8's MultiClassNMS per image: rows and the per-image counts."""
    rows, counts = [], []
    for b, sc in zip(boxes, scores):
        picked = {}
        for cls in range(sc.shape[0]):
            if cls == background:
                continue
            order = sorted((i for i in range(len(b)) if sc[cls, i] > score_threshold),
                           key=lambda i, cls=cls: -sc[cls, i])
            if nms_top_k > -1:
                order = order[:nms_top_k]
            kept, thr = [], nms_threshold
            for i in order:
                ok = all(_jaccard(b[i], b[k], normalized) <= thr for k in kept)
                if ok:
                    kept.append(i)
                    if eta < 1 and thr > 0.5:
                        thr *= eta
            picked[cls] = kept
        total = sum(len(v) for v in picked.values())
        if keep_top_k > -1 and total > keep_top_k:
            pairs = sorted(((sc[cls, i], cls, i) for cls, v in picked.items() for i in v),
                           key=lambda p: -p[0])[:keep_top_k]
            picked = {}
            for _, cls, i in pairs:
                picked.setdefault(cls, []).append(i)
        image = [[cls, sc[cls, i], *b[i]] for cls in sorted(picked) for i in picked[cls]]
        rows += image
        counts.append(len(image))
    return np.array(rows).reshape(-1, 6), counts


def _c_round(v):
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def roi_pool_ref(x, rois, batch, ph, pw, scale):
    _, ch, h, w = x.shape
    out = np.zeros((len(rois), ch, ph, pw))
    arg = np.full((len(rois), ch, ph, pw), -1)
    for r, (roi, b) in enumerate(zip(rois, batch)):
        x1, y1, x2, y2 = (_c_round(v * scale) for v in roi)
        bh, bw = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
        for i in range(ph):
            for j in range(pw):
                hs = min(max(math.floor(i * bh) + y1, 0), h)
                he = min(max(math.ceil((i + 1) * bh) + y1, 0), h)
                ws = min(max(math.floor(j * bw) + x1, 0), w)
                we = min(max(math.ceil((j + 1) * bw) + x1, 0), w)
                if he <= hs or we <= ws:
                    continue
                for c in range(ch):
                    best, idx = -np.inf, -1
                    for yy in range(hs, he):
                        for xx in range(ws, we):
                            if x[b, c, yy, xx] > best:
                                best, idx = x[b, c, yy, xx], yy * w + xx
                    out[r, c, i, j], arg[r, c, i, j] = best, idx
    return out, arg
