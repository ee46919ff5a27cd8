"""Lowering rules for temporal_shift (a zero-padded shift along time), unfold (patches via
an identity convolution) and bilinear_tensor_product (an einsum)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


@lowering("temporal_shift")
def _temporal_shift(c, X):
    t = c["seg_num"]
    nt, ch = X.shape[:2]
    x = X.reshape(nt // t, t, *X.shape[1:])
    c1, c2 = int(ch * c["shift_ratio"]), int(ch * 2 * c["shift_ratio"])
    zero = jnp.zeros_like(x[:, :1])
    back = jnp.concatenate([zero, x[:, :-1]], axis=1)  # out[t] = x[t - 1]
    fwd = jnp.concatenate([x[:, 1:], zero], axis=1)  # out[t] = x[t + 1]
    out = jnp.concatenate([back[:, :, :c1], fwd[:, :, c1:c2], x[:, :, c2:]], axis=2)
    return {"Out": out.reshape(X.shape)}


@lowering("unfold")
def _unfold(c, X):
    k, p = c["kernel_sizes"], c["paddings"]
    # Paddle's column order: channel-major, then kernel row, then kernel column
    patches = jax.lax.conv_general_dilated_patches(
        X, filter_shape=tuple(k), window_strides=tuple(c["strides"]),
        padding=[(p[0], p[2]), (p[1], p[3])], rhs_dilation=tuple(c["dilations"]),
        dimension_numbers=("NCHW", "OIHW", "NCHW"))
    n, ck = patches.shape[:2]
    return {"Y": patches.reshape(n, ck, -1)}


@lowering("bilinear_tensor_product")
def _bilinear_tp(c, X, Y, Weight, Bias):
    out = jnp.einsum("bm,imn,bn->bi", X, Weight, Y)
    return {"Out": out if Bias is None else out + Bias}
