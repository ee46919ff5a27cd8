"""Lowering rules for the interp ops: static source indices and weights per axis (NumPy at
trace time), gathered with jnp.take so the rule differentiates with respect to X."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...backends.lowering import lowering
from .defs import LAST, resized_dims


def _ratio(size, out, align_corners):
    # Paddle computes ratios, source positions and weights in float32: so do we, so a
    # position that lands near an integer picks Paddle's source index
    if out <= 1:
        return np.float32(0.0)
    return np.float32(size - 1) / np.float32(out - 1) if align_corners \
        else np.float32(size) / np.float32(out)


def _linear(x, axis, out, align_corners, align_mode):
    size = x.shape[axis]
    r = _ratio(size, out, align_corners)
    k = np.arange(out, dtype=np.float32)
    half = align_mode == 0 and not align_corners
    pos = r * (k + np.float32(0.5)) - np.float32(0.5) if half else r * k
    src = np.maximum(pos, np.float32(0.0))
    lo = np.maximum(pos.astype(np.int64), 0)
    hi = np.minimum(lo + 1, size - 1)
    frac = (src - lo).astype(x.dtype)
    shape = [1] * x.ndim
    shape[axis] = out
    frac = jnp.asarray(frac).reshape(shape)
    return jnp.take(x, lo, axis=axis) * (1 - frac) + jnp.take(x, hi, axis=axis) * frac


def _nearest(x, axis, out, align_corners, _align_mode):
    r = _ratio(x.shape[axis], out, align_corners)
    k = np.arange(out, dtype=np.float32)
    idx = (r * k + np.float32(0.5) if align_corners else r * k).astype(np.int64)
    return jnp.take(x, np.minimum(idx, x.shape[axis] - 1), axis=axis)


class _Attrs:
    def __init__(self, c):
        self._c = c

    def __getitem__(self, name):
        return self._c[name]

    def check(self, cond, message):
        pass


@lowering("bilinear_interp", "nearest_interp", "trilinear_interp")
def _interp(c, X):
    nd = 3 if c.op_type == "trilinear_interp" else 2
    last = c["data_layout"] in LAST
    axes = tuple(range(1, nd + 1)) if last else tuple(range(2, nd + 2))
    out = resized_dims(_Attrs(c), [X.shape[a] for a in axes], nd)
    fn = _nearest if c.op_type == "nearest_interp" else _linear
    y = X
    for ax, o in zip(axes, out, strict=True):
        y = fn(y, ax, o, c["align_corners"], c["align_mode"])
    return {"Out": y}
