"""Lowering rules for convolution, pooling, normalisation, dropout, embedding and losses.

batch_norm keeps Paddle's conventions: biased batch variance, SavedVariance = 1/sqrt(var+eps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.data_checks import checks_collected, report_invalid
from ...backends.lowering import lowering
from ...backends.narrow import index32
from ...backends.selected_rows import ROWS_DTYPE, SelectedRows
from ...ir.shapes import resolve_pads


def window_padding(c, hw, ksize, strides, dilations=(1, 1), ceil_mode=False):
    """[(lo, hi), (lo, hi)] for H and W under Paddle's padding_algorithm and ceil_mode."""
    out = []
    pads = resolve_pads(c["padding_algorithm"], c["paddings"], hw, ksize, strides, dilations)
    for i, (lo, hi) in enumerate(pads):
        if ceil_mode:  # extra padding at the end so the last partial window is counted
            eff = dilations[i] * (ksize[i] - 1) + 1
            span = hw[i] + lo + hi - eff
            hi += (-span) % strides[i]
        out.append((lo, hi))
    return out


def _hw(x, layout):
    return x.shape[1:3] if layout == "NHWC" else x.shape[2:4]


@lowering("conv2d", "depthwise_conv2d")
def _conv2d(c, Input, Filter):
    layout = c["data_format"]
    pads = window_padding(c, _hw(Input, layout), Filter.shape[2:], c["strides"],
                          c["dilations"])
    spec = ("NHWC", "OIHW", "NHWC") if layout == "NHWC" else ("NCHW", "OIHW", "NCHW")
    out = jax.lax.conv_general_dilated(
        Input, Filter, window_strides=tuple(c["strides"]), padding=pads,
        rhs_dilation=tuple(c["dilations"]), dimension_numbers=spec,
        feature_group_count=c["groups"])
    return {"Output": out}


def _adaptive_pool(x, out_hw, reduce, layout):
    """Paddle's adaptive pooling: window i spans [floor(i*H/o), ceil((i+1)*H/o))."""
    h_axis, w_axis = (1, 2) if layout == "NHWC" else (2, 3)
    rows = []
    for i in range(out_hw[0]):
        h0, h1 = (i * x.shape[h_axis]) // out_hw[0], -(-((i + 1) * x.shape[h_axis]) // out_hw[0])
        cols = []
        for j in range(out_hw[1]):
            w0 = (j * x.shape[w_axis]) // out_hw[1]
            w1 = -(-((j + 1) * x.shape[w_axis]) // out_hw[1])
            win = jax.lax.slice_in_dim(jax.lax.slice_in_dim(x, h0, h1, axis=h_axis),
                                       w0, w1, axis=w_axis)
            cols.append(reduce(win, axis=(h_axis, w_axis), keepdims=True))
        rows.append(jnp.concatenate(cols, axis=w_axis))
    return jnp.concatenate(rows, axis=h_axis)


@lowering("pool2d")
def _pool2d(c, X):
    layout = c["data_format"]
    spatial = (1, 2) if layout == "NHWC" else (2, 3)
    is_max = c["pooling_type"] == "max"
    if c["global_pooling"]:
        fn = jnp.max if is_max else jnp.mean
        return {"Out": fn(X, axis=spatial, keepdims=True)}
    if c["adaptive"]:
        return {"Out": _adaptive_pool(X, c["ksize"], jnp.max if is_max else jnp.mean, layout)}
    k, s = tuple(c["ksize"]), tuple(c["strides"])
    pads = window_padding(c, _hw(X, layout), k, s, ceil_mode=c["ceil_mode"])
    for i, h in enumerate(_hw(X, layout)):  # a window past the padded input: one output
        if h + sum(pads[i]) < k[i]:
            pads[i] = (pads[i][0], k[i] - h - pads[i][0])
    dims, strides, padding = [1, 1, 1, 1], [1, 1, 1, 1], [(0, 0)] * 4
    for i, ax in enumerate(spatial):
        dims[ax], strides[ax], padding[ax] = k[i], s[i], pads[i]
    # Python scalars as initial values: JAX then recognises the max/add monoids and can
    # differentiate the window reduction (a traced constant hides them under jit).
    if is_max:
        init = -float("inf") if jnp.issubdtype(X.dtype, jnp.floating) \
            else int(jnp.iinfo(X.dtype).min)
        out = jax.lax.reduce_window(X, init, jax.lax.max, dims, strides, padding)
        return {"Out": out}
    zero = 0.0 if jnp.issubdtype(X.dtype, jnp.floating) else 0
    total = jax.lax.reduce_window(X, zero, jax.lax.add, dims, strides, padding)
    if c["exclusive"]:
        ones = jnp.ones([X.shape[ax] if ax in spatial else 1 for ax in range(4)], X.dtype)
        count = jax.lax.reduce_window(ones, zero, jax.lax.add, dims, strides, padding)
    else:
        count = jnp.array(k[0] * k[1], X.dtype)
    return {"Out": total / count}


def batch_norm_train(x, scale, bias, epsilon, layout):
    """Normalise with batch statistics; returns (y, batch mean, biased batch variance)."""
    axes = tuple(i for i in range(x.ndim) if i != (x.ndim - 1 if layout == "NHWC" else 1))
    shape = [1] * x.ndim
    shape[x.ndim - 1 if layout == "NHWC" else 1] = -1
    xf = x.astype(scale.dtype)
    mean = jnp.mean(xf, axis=axes)
    var = jnp.mean(jnp.square(xf - mean.reshape(shape)), axis=axes)
    inv = jax.lax.rsqrt(var + jnp.asarray(epsilon, var.dtype))
    y = (xf - mean.reshape(shape)) * (inv * scale).reshape(shape) + bias.reshape(shape)
    return y.astype(x.dtype), mean, var


@lowering("batch_norm")
def _batch_norm(c, X, Scale, Bias, Mean, Variance):
    layout, eps = c["data_layout"], c["epsilon"]
    if c["is_test"] or c["use_global_stats"]:
        shape = [1] * X.ndim
        shape[X.ndim - 1 if layout == "NHWC" else 1] = -1
        inv = jax.lax.rsqrt(Variance + jnp.asarray(eps, Variance.dtype))
        y = (X.astype(Scale.dtype) - Mean.reshape(shape)) * (inv * Scale).reshape(shape) \
            + Bias.reshape(shape)
        return {"Y": y.astype(X.dtype), "MeanOut": Mean, "VarianceOut": Variance,
                "SavedMean": Mean, "SavedVariance": inv}
    y, mean, var = batch_norm_train(X, Scale, Bias, eps, layout)
    m = jnp.asarray(c["momentum"], Mean.dtype)
    return {"Y": y, "MeanOut": Mean * m + mean * (1 - m),
            "VarianceOut": Variance * m + var * (1 - m), "SavedMean": mean,
            "SavedVariance": jax.lax.rsqrt(var + jnp.asarray(eps, var.dtype))}


@lowering("layer_norm")
def _layer_norm(c, X, Scale, Bias):
    axis = c["begin_norm_axis"]
    axes = tuple(range(axis, X.ndim))
    mean = jnp.mean(X, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(X - mean), axis=axes, keepdims=True)
    y = (X - mean) * jax.lax.rsqrt(var + jnp.asarray(c["epsilon"], X.dtype))
    if Scale is not None:
        y = y * Scale.reshape(X.shape[axis:])
    if Bias is not None:
        y = y + Bias.reshape(X.shape[axis:])
    return {"Y": y, "Mean": mean.reshape(-1), "Variance": var.reshape(-1)}


@lowering("dropout")
def _dropout(c, X):
    p = c["dropout_prob"]
    upscale = c["dropout_implementation"] == "upscale_in_train"
    if c["is_test"]:
        out = X if upscale else X * jnp.asarray(1.0 - p, X.dtype)
        return {"Out": out, "Mask": jnp.ones(X.shape, jnp.uint8)}
    # float32 uniforms, as Paddle's kernel draws (32 random bits an element, not 64)
    keep = (jax.random.uniform(c.replica_rng(c["seed"] if c["fix_seed"] else 0), X.shape,
                               jnp.float32) >= p).astype(jnp.uint8)
    # The mask goes through a sqrt (exact on 0 and 1), which XLA counts as expensive: it then
    # computes the mask once, in one fusion, and Out and dropout_grad read it. Without it the
    # hash (iota and scalar keys in, ~120 integer instructions, cheap to XLA) is copied into
    # every consumer's fusion, the backward's too: on the encoder 17 dropouts made 2,000 of
    # the step's 15,000 HLO instructions and hashed every mask twice (issue 28).
    mask = jnp.sqrt(keep.astype(jnp.float32)).astype(X.dtype)
    keep = mask.astype(jnp.uint8)
    if upscale:
        mask = mask / jnp.asarray(1.0 - p, X.dtype) if p < 1.0 else mask * 0
    return {"Out": X * mask, "Mask": keep}


@lowering("lookup_table")
def _lookup_table(c, W, Ids):
    ids = Ids.reshape(Ids.shape[:-1])
    # Paddle raises for an id outside the table; jnp.take would read NaN (or, for -1, the
    # last row). padding_idx (-1: none) is legal wherever it points.
    # (its check stays in the step: the predictor makes fed ids' checks on the host itself,
    # predictor_step.py's HostIdChecks, from the step's check sites)
    bad = (ids < 0) | (ids >= W.shape[0])
    pad = c["padding_idx"]
    if pad != -1:
        bad = bad & (ids != pad)
    padding = f" or padding_idx {pad}" if pad != -1 else ""
    report_invalid(c, "Ids", bad.reshape(Ids.shape), Ids,
                   f"ids in [0, {W.shape[0]}) (the table's rows){padding}")
    # int32 indices, exact for the take and the padding compare (backends/narrow.py): no
    # s64 index arithmetic in the step
    ids = index32(ids, W.shape[0], () if pad == -1 else (pad,), checked=checks_collected())
    out = jnp.take(W, ids, axis=0)
    if pad != -1:
        out = jnp.where((ids == pad)[..., None], jnp.zeros((), W.dtype), out)
    return {"Out": out}


def _hard_label_loss(c, logp, label, axis, ignore_index):
    # Paddle raises for a label outside [0, classes) that is not ignore_index; here it would
    # give a NaN loss (or, for -1, silently pick the last class).
    classes = logp.shape[axis]
    report_invalid(c, "Label", None, label,
                   f"labels in [0, {classes}) or ignore_index {ignore_index}",
                   within=(0, classes, ignore_index))
    # int32 labels, exact for the pick and the ignore_index compare (backends/narrow.py)
    label = index32(jnp.squeeze(label, axis), classes, (ignore_index,),
                    checked=checks_collected())
    picked = jnp.take_along_axis(logp, jnp.expand_dims(label, axis), axis)
    keep = jnp.expand_dims(label != ignore_index, axis)
    return jnp.where(keep, -picked, jnp.zeros((), logp.dtype))


@lowering("softmax_with_cross_entropy")
def _softmax_ce(c, Logits, Label):
    axis = c["axis"] % Logits.ndim
    logp = jax.nn.log_softmax(Logits, axis=axis)
    if c["soft_label"]:
        loss = -jnp.sum(Label * logp, axis=axis, keepdims=True)
    else:
        loss = _hard_label_loss(c, logp, Label, axis, c["ignore_index"])
    return {"Softmax": jnp.exp(logp), "Loss": loss}


_APPRO_INF = 1e20


@lowering("cross_entropy")
def _cross_entropy(c, X, Label):
    # Paddle's kernel clamps log(x) to +-1e20 (TolerableValue): a zero probability gives the
    # large finite loss 1e20, not inf (an untrained net's first test loss stays finite)
    logp = jnp.clip(jnp.log(X), -_APPRO_INF, _APPRO_INF)
    if c["soft_label"]:
        return {"Y": -jnp.sum(Label * logp, axis=-1, keepdims=True)}
    if Label.ndim == X.ndim - 1:  # Label without its trailing 1: Y takes Label's shape
        loss = _hard_label_loss(c, logp, Label[..., None], X.ndim - 1, c["ignore_index"])
        return {"Y": loss[..., 0]}
    return {"Y": _hard_label_loss(c, logp, Label, X.ndim - 1, c["ignore_index"])}


# -- gradient rules ---------------------------------------------------------------------
def _dout(kw, slot="Out"):
    return kw[slot + "@GRAD"]


@lowering("dropout_grad")
def _dropout_grad(c, **kw):
    dout, mask = _dout(kw), kw["Mask"].astype(_dout(kw).dtype)
    p = c["dropout_prob"]
    if c["is_test"]:
        scale = 1.0 if c["dropout_implementation"] == "upscale_in_train" else 1.0 - p
        return {"X@GRAD": dout * jnp.asarray(scale, dout.dtype)}
    if c["dropout_implementation"] == "upscale_in_train":
        mask = mask / jnp.asarray(1.0 - p, dout.dtype) if p < 1.0 else mask * 0
    return {"X@GRAD": dout * mask}


@lowering("softmax_with_cross_entropy_grad")
def _softmax_ce_grad(c, **kw):
    softmax, label = kw["Softmax"], kw["Label"]
    dloss, dsoftmax = kw.get("Loss@GRAD"), kw.get("Softmax@GRAD")
    axis = c["axis"] % softmax.ndim
    dlogits = jnp.zeros_like(softmax)
    if dloss is not None:  # Paddle's formula: soft labels are taken to sum to 1
        if c["soft_label"]:
            dlogits = (softmax - label) * dloss
        else:
            # the forward's check refuses the step for a bad label (backends/narrow.py)
            lab = index32(jnp.squeeze(label, axis), softmax.shape[axis], (c["ignore_index"],),
                          checked=checks_collected())
            onehot = jax.nn.one_hot(lab, softmax.shape[axis], dtype=softmax.dtype, axis=axis)
            keep = jnp.expand_dims(lab != c["ignore_index"], axis)
            dlogits = jnp.where(keep, (softmax - onehot) * dloss, jnp.zeros((), softmax.dtype))
    if dsoftmax is not None:  # Softmax also used downstream: add the softmax vjp
        dsoftmax = dsoftmax.astype(softmax.dtype)
        dlogits = dlogits + softmax * (
            dsoftmax - jnp.sum(dsoftmax * softmax, axis=axis, keepdims=True))
    return {"Logits@GRAD": dlogits}


@lowering("batch_norm_grad")
def _batch_norm_grad(c, **kw):
    x, scale, bias, dy = kw["X"], kw["Scale"], kw["Bias"], kw["Y@GRAD"]
    layout, eps = c["data_layout"], c["epsilon"]
    if c["is_test"] or c["use_global_stats"]:
        shape = [1] * x.ndim
        shape[x.ndim - 1 if layout == "NHWC" else 1] = -1
        inv = jax.lax.rsqrt(kw["Variance"] + jnp.asarray(eps, scale.dtype))

        def fwd(x, s, b):
            return ((x.astype(s.dtype) - kw["Mean"].reshape(shape)) * (inv * s).reshape(shape)
                    + b.reshape(shape)).astype(x.dtype)
    else:
        def fwd(x, s, b):
            return batch_norm_train(x, s, b, eps, layout)[0]
    _, vjp = jax.vjp(fwd, x, scale, bias)
    dx, ds, db = vjp(dy.astype(x.dtype))
    out = {"X@GRAD": dx, "Scale@GRAD": ds, "Bias@GRAD": db}
    return {k: v for k, v in out.items() if k in c.out_types}


def looked_up_rows(ids, dout, height: int, width: int, dtype, pad: int):
    """(rows, values) of a lookup's row gradient: one row per id, the ids at ``pad`` (-1:
    none) zero values and padding rows (row = height)."""
    ids = ids.reshape(-1)
    values = dout.reshape(ids.shape[0], width).astype(dtype)
    rows = ids.astype(ROWS_DTYPE)
    if pad != -1:
        at_pad = ids == pad
        values = jnp.where(at_pad[:, None], jnp.zeros((), values.dtype), values)
        rows = jnp.where(at_pad, jnp.asarray(height, ROWS_DTYPE), rows)
    return rows, values


@lowering("lookup_table_grad")
def _lookup_table_grad(c, **kw):
    """W@GRAD: one row per id (``is_sparse``: as a SelectedRows, never the whole table), or
    the dense table of their sums. Ids at ``padding_idx`` contribute nothing: zeros in the
    dense gradient, padding rows (row = height) in the sparse one."""
    table = kw["W"]
    height, width = table.shape
    rows, values = looked_up_rows(kw["Ids"], _dout(kw), height, width, table.dtype,
                                  c["padding_idx"])
    if c["is_sparse"]:
        return {"W@GRAD": SelectedRows(rows, values, height)}
    # padding ids carry zero values: adding them at row `height` is dropped by scatter
    return {"W@GRAD": jnp.zeros_like(table).at[rows].add(values, mode="drop")}
