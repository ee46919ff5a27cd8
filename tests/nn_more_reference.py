"""NumPy references of Paddle 1.8's conv/pool/resize kernels for tests/test_layers_nn_more.py,
written loop by loop from the kernels' index rules, independently of graphc's lowerings."""

from __future__ import annotations

import numpy as np


def conv_ref(x, w, s, pads, d, g):
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    k = w.shape[2:]
    dims = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    cg, mg = x.shape[1] // g, w.shape[0] // g
    out = np.zeros((x.shape[0], w.shape[0], *dims))
    for off in np.ndindex(*k):
        sl = tuple(slice(off[i] * d[i], off[i] * d[i] + s[i] * (dims[i] - 1) + 1, s[i])
                   for i in range(nd))
        patch = xp[(slice(None), slice(None), *sl)]
        for gi in range(g):
            out[:, gi * mg:(gi + 1) * mg] += np.einsum(
                "nc...,mc->nm...", patch[:, gi * cg:(gi + 1) * cg],
                w[(slice(gi * mg, (gi + 1) * mg), slice(None), *off)])
    return out


def conv_transpose_ref(x, w, s, pads, d, g, out_size=None):
    nd = x.ndim - 2
    k, cg, mg = w.shape[2:], x.shape[1] // g, w.shape[1]
    full = [(x.shape[2 + i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 for i in range(nd)]
    buf = np.zeros((x.shape[0], mg * g, *full))
    for off in np.ndindex(*k):
        sl = tuple(slice(off[i] * d[i], off[i] * d[i] + s[i] * (x.shape[2 + i] - 1) + 1, s[i])
                   for i in range(nd))
        for gi in range(g):
            buf[(slice(None), slice(gi * mg, (gi + 1) * mg), *sl)] += np.einsum(
                "nc...,cm->nm...", x[:, gi * cg:(gi + 1) * cg],
                w[(slice(gi * cg, (gi + 1) * cg), slice(None), *off)])
    out = out_size or [full[i] - sum(pads[i]) for i in range(nd)]
    buf = np.pad(buf, [(0, 0), (0, 0)] + [(0, max(0, pads[i][0] + out[i] - full[i]))
                                          for i in range(nd)])
    return buf[(slice(None), slice(None),
                *(slice(pads[i][0], pads[i][0] + out[i]) for i in range(nd)))]


def pool_ref(x, k, s, pads, kind, ceil=False, exclusive=True):
    """Paddle's pooling: windows clipped to the input; an inclusive average divides by the
    whole window."""
    nd = x.ndim - 2
    dims = []
    for i in range(nd):
        num = x.shape[2 + i] + sum(pads[i]) - k[i] + (s[i] - 1 if ceil else 0)
        dims.append(int(num / s[i]) + 1)
    out = np.zeros(x.shape[:2] + tuple(dims))
    for o in np.ndindex(*dims):
        sl = []
        for i in range(nd):
            lo = o[i] * s[i] - pads[i][0]
            sl.append(slice(max(lo, 0), min(lo + k[i], x.shape[2 + i])))
        win = x[(slice(None), slice(None), *sl)].reshape(*x.shape[:2], -1)
        avg = win.mean(-1) if exclusive else win.sum(-1) / np.prod(k)
        out[(slice(None), slice(None), *o)] = win.max(-1) if kind == "max" else avg
    return out


def adaptive_ref(x, out, kind):
    nd = x.ndim - 2
    res = np.zeros(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        sl = [slice(o[i] * x.shape[2 + i] // out[i], -(-(o[i] + 1) * x.shape[2 + i] // out[i]))
              for i in range(nd)]
        win = x[(slice(None), slice(None), *sl)].reshape(*x.shape[:2], -1)
        res[(slice(None), slice(None), *o)] = win.max(-1) if kind == "max" else win.mean(-1)
    return res


def interp_ref(x, out, method, align_corners, align_mode):
    """Paddle 1.8's interp kernels, one output index at a time, axis by axis."""
    y = x
    for i, o in enumerate(out):
        ax = 2 + i
        size = y.shape[ax]
        f = np.float32  # Paddle's kernels compute positions in float32
        r = f(0) if o <= 1 else (f(size - 1) / f(o - 1) if align_corners else f(size) / f(o))
        moved = np.moveaxis(y, ax, 0)
        res = np.zeros((o,) + moved.shape[1:])
        for kk in range(o):
            if method == "nearest":
                idx = int(r * f(kk) + f(0.5)) if align_corners else int(r * f(kk))
                res[kk] = moved[idx]
                continue
            flag = align_mode == 0 and not align_corners
            pos = r * (f(kk) + f(0.5)) - f(0.5) if flag else r * f(kk)
            n = max(int(pos), 0)
            sn = min(n + 1, size - 1)
            src = max(pos, f(0))
            dn = src - n
            res[kk] = moved[n] * (1 - dn) + moved[sn] * dn
        y = np.moveaxis(res, 0, ax)
    return y
