"""Lowering rules for transposed convolutions, conv3d and pool3d: XLA convolutions (a
transposed one as the input-dilated convolution with the flipped kernel) and reduce_window."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.lowering import lowering
from .defs import resolve_pads_nd, transpose_out_dims

_LAST = ("NHWC", "NDHWC")


class _Attrs:
    """The attributes as the shared shape helpers read them (inference already checked)."""

    def __init__(self, c):
        self._c = c

    def __getitem__(self, name):
        return self._c[name]

    def check(self, cond, message):
        pass


def _layout(layout, nd):
    """(dimension numbers, spatial axes) for an N-d layout."""
    sp = "DHW"[3 - nd:]
    if layout in _LAST:
        return (f"N{sp}C", f"OI{sp}", f"N{sp}C"), tuple(range(1, nd + 1))
    return (f"NC{sp}", f"OI{sp}", f"NC{sp}"), tuple(range(2, nd + 2))


def window_pads(dims, ksize, strides, pads, dilations=None, ceil_mode=False):
    """(lo, hi) per axis with ceil_mode's extra end padding, and end padding so a window
    larger than its padded input still gives Paddle's one (clipped) output."""
    out = []
    for i, (lo, hi) in enumerate(pads):
        eff = (dilations[i] if dilations else 1) * (ksize[i] - 1) + 1
        span = dims[i] + lo + hi - eff
        if span < 0:
            hi -= span
        elif ceil_mode:
            hi += (-span) % strides[i]
        out.append((lo, hi))
    return out


def pool_nd(X, spatial, ksize, strides, pads, is_max, exclusive):
    """Max or average pooling over the given axes with explicit (lo, hi) padding."""
    dims, st, padding = [1] * X.ndim, [1] * X.ndim, [(0, 0)] * X.ndim
    for i, ax in enumerate(spatial):
        dims[ax], st[ax], padding[ax] = ksize[i], strides[i], pads[i]
    # Python scalars as initial values keep the window reduction differentiable under jit
    if is_max:
        init = -float("inf") if jnp.issubdtype(X.dtype, jnp.floating) \
            else int(jnp.iinfo(X.dtype).min)
        return jax.lax.reduce_window(X, init, jax.lax.max, dims, st, padding)
    zero = 0.0 if jnp.issubdtype(X.dtype, jnp.floating) else 0
    total = jax.lax.reduce_window(X, zero, jax.lax.add, dims, st, padding)
    if exclusive:
        ones = jnp.ones([X.shape[ax] if ax in spatial else 1 for ax in range(X.ndim)], X.dtype)
        count = jax.lax.reduce_window(ones, zero, jax.lax.add, dims, st, padding)
    else:
        count = jnp.array(math.prod(ksize), X.dtype)
    return total / count


def adaptive_pool_nd(x, spatial, out, reduce):
    """Paddle's adaptive pooling: window i spans [floor(i*S/o), ceil((i+1)*S/o))."""
    if not spatial:
        return x
    ax, o = spatial[0], out[0]
    size = x.shape[ax]
    parts = []
    for i in range(o):
        lo, hi = (i * size) // o, -(-((i + 1) * size) // o)
        win = jax.lax.slice_in_dim(x, lo, hi, axis=ax)
        parts.append(reduce(win, axis=ax, keepdims=True))
    return adaptive_pool_nd(jnp.concatenate(parts, axis=ax), spatial[1:], out[1:], reduce)


@lowering("conv3d")
def _conv3d(c, Input, Filter):
    spec, spatial = _layout(c["data_format"], 3)
    dims = [Input.shape[a] for a in spatial]
    pads = resolve_pads_nd(_Attrs(c), c["padding_algorithm"], c["paddings"], dims,
                           Filter.shape[2:], c["strides"], c["dilations"])
    out = jax.lax.conv_general_dilated(
        Input, Filter, window_strides=tuple(c["strides"]), padding=pads,
        rhs_dilation=tuple(c["dilations"]), dimension_numbers=spec,
        feature_group_count=c["groups"])
    return {"Output": out}


@lowering("conv2d_transpose", "depthwise_conv2d_transpose", "conv3d_transpose")
def _conv_transpose(c, Input, Filter):
    nd = Filter.ndim - 2
    spec, spatial = _layout(c["data_format"], nd)
    dims = [Input.shape[a] for a in spatial]
    ksize = Filter.shape[2:]
    out, pads = transpose_out_dims(_Attrs(c), dims, ksize, nd)
    g = c["groups"]
    cin, mg = Filter.shape[0], Filter.shape[1]
    # the gradient of a convolution: dilate the input by the stride, convolve with the
    # flipped kernel whose in/out roles are swapped within each group
    w = Filter.reshape(g, cin // g, mg, *ksize)
    w = jnp.swapaxes(w, 1, 2).reshape(g * mg, cin // g, *ksize)
    w = jnp.flip(w, axis=tuple(range(2, nd + 2)))
    s, d = c["strides"], c["dilations"]
    padding = []
    for i in range(nd):
        eff = d[i] * (ksize[i] - 1)
        natural = (dims[i] - 1) * s[i] - sum(pads[i]) + eff + 1
        padding.append((eff - pads[i][0], eff - pads[i][1] + out[i] - natural))
    res = jax.lax.conv_general_dilated(
        Input, w, window_strides=(1,) * nd, padding=padding, lhs_dilation=tuple(s),
        rhs_dilation=tuple(d), dimension_numbers=spec, feature_group_count=g)
    return {"Output": res}


@lowering("pool3d")
def _pool3d(c, X):
    _, spatial = _layout(c["data_format"], 3)
    is_max = c["pooling_type"] == "max"
    reduce = jnp.max if is_max else jnp.mean
    if c["global_pooling"]:
        return {"Out": reduce(X, axis=spatial, keepdims=True)}
    if c["adaptive"]:
        return {"Out": adaptive_pool_nd(X, spatial, list(c["ksize"]), reduce)}
    dims = [X.shape[a] for a in spatial]
    k, s = list(c["ksize"]), list(c["strides"])
    pads = resolve_pads_nd(_Attrs(c), c["padding_algorithm"], c["paddings"], dims, k, s,
                           (1,) * 3)
    pads = window_pads(dims, k, s, pads, ceil_mode=c["ceil_mode"])
    return {"Out": pool_nd(X, spatial, k, s, pads, is_max, c["exclusive"])}


def _window_indices(size, out, k, s, p, adaptive):
    """[out, window] source indices along one axis (-1: padding or past the input)."""
    rows = []
    for o in range(out):
        if adaptive:
            lo, hi = (o * size) // out, -(-((o + 1) * size) // out)
        else:
            lo = o * s - p
            hi = lo + k
        rows.append([i if 0 <= i < size else -1 for i in range(lo, hi)])
    width = max(len(r) for r in rows)
    return np.array([r + [-1] * (width - len(r)) for r in rows], np.int64)


@lowering("max_pool2d_with_index", "max_pool3d_with_index")
def _max_pool_with_index(c, X):
    nd = X.ndim - 2
    dims = X.shape[2:]
    glob, adaptive = c["global_pooling"], c["adaptive"]
    k = list(dims) if glob else list(c["ksize"])
    s, p = (list(dims), [0] * nd) if glob else (list(c["strides"]), list(c["paddings"]))
    idx, out = [], []
    for i in range(nd):
        o = 1 if glob else (k[i] if adaptive else (dims[i] + 2 * p[i] - k[i]) // s[i] + 1)
        idx.append(_window_indices(dims[i], o, k[i], s[i], p[i], adaptive and not glob))
        out.append(o)
    # flat index of every window element in the input plane (-1: outside), [*out, *window]
    flat = np.zeros([*out, *(a.shape[1] for a in idx)], np.int64)
    valid = np.ones(flat.shape, bool)
    stride = 1
    for i in reversed(range(nd)):
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = idx[i].shape
        a = idx[i].reshape(shape)
        flat = flat + np.maximum(a, 0) * stride
        valid = valid & (a >= 0)
        stride *= dims[i]
    flat = flat.reshape(*out, -1)
    valid = valid.reshape(*out, -1)
    plane = X.reshape(*X.shape[:2], -1)
    win = jnp.take(plane, flat.reshape(-1), axis=2).reshape(*X.shape[:2], *flat.shape)
    win = jnp.where(valid, win, jnp.asarray(-jnp.inf, X.dtype))
    arg = jnp.argmax(win, axis=-1)
    best = jnp.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    mask = jnp.take_along_axis(jnp.broadcast_to(flat, win.shape), arg[..., None], axis=-1)
    return {"Out": best, "Mask": mask[..., 0].astype(jnp.int32)}
