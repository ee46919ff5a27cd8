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
