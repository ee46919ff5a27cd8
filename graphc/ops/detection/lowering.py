"""Lowering rules for the detection ops: prior boxes are constants computed with NumPy at
trace time (they depend on shapes and attributes only); the others are jnp arithmetic."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.lod import LoDArray
from ...backends.lowering import lowering
from .defs import expand_aspect_ratios


def _prior_halves(c):
    """(half width, half height) of each prior of one cell, in Paddle's order."""
    ratios = expand_aspect_ratios(c["aspect_ratios"], c["flip"])
    maxs = c["max_sizes"]
    out = []
    for s, mn in enumerate(c["min_sizes"]):
        big = [(np.sqrt(mn * maxs[s]) / 2,) * 2] if maxs else []
        shaped = [(mn * np.sqrt(r) / 2, mn / np.sqrt(r) / 2) for r in ratios]
        if c["min_max_aspect_ratios_order"]:
            # min-size square, max-size square, then the other ratios
            rest = [hw for r, hw in zip(ratios, shaped) if abs(r - 1.0) >= 1e-6]
            out += [(mn / 2, mn / 2)] + big + rest
        else:
            out += shaped + big
    return np.array(out, np.float64)


@lowering("prior_box")
def _prior_box(c, Input, Image):
    fh, fw = Input.shape[2], Input.shape[3]
    ih, iw = Image.shape[2], Image.shape[3]
    sw, sh = c["step_w"], c["step_h"]
    if sw == 0 or sh == 0:  # either step unset: both from the image (Paddle's kernel)
        sw, sh = iw / fw, ih / fh
    cx = (np.arange(fw) + c["offset"]) * sw
    cy = (np.arange(fh) + c["offset"]) * sh
    halves = _prior_halves(c)
    hw, hh = halves[:, 0], halves[:, 1]
    cx = cx[None, :, None]
    cy = cy[:, None, None]
    boxes = np.stack(np.broadcast_arrays((cx - hw) / iw, (cy - hh) / ih,
                                         (cx + hw) / iw, (cy + hh) / ih), axis=-1)
    if c["clip"]:
        boxes = np.clip(boxes, 0.0, 1.0)
    var = np.broadcast_to(np.array(c["variances"]), boxes.shape)
    dtype = Input.dtype
    return {"Boxes": jnp.asarray(boxes, dtype), "Variances": jnp.asarray(var, dtype)}


def _center_size(box, norm):
    w = box[..., 2] - box[..., 0] + norm
    h = box[..., 3] - box[..., 1] + norm
    return box[..., 0] + w / 2, box[..., 1] + h / 2, w, h


@lowering("box_coder")
def _box_coder(c, PriorBox, PriorBoxVar, TargetBox):
    norm = 0.0 if c["box_normalized"] else 1.0
    if PriorBoxVar is not None:
        var = PriorBoxVar
    elif c["variance"]:
        var = jnp.asarray(c["variance"], PriorBox.dtype)[None, :]
    else:
        var = jnp.ones((1, 4), PriorBox.dtype)
    pcx, pcy, pw, ph = _center_size(PriorBox, norm)
    if c["code_type"] == "encode_center_size":
        # target centres and sizes use no `norm` offset for the centre (Paddle's kernel)
        t = TargetBox[:, None, :]
        tcx = (t[..., 0] + t[..., 2]) / 2
        tcy = (t[..., 1] + t[..., 3]) / 2
        tw = t[..., 2] - t[..., 0] + norm
        th = t[..., 3] - t[..., 1] + norm
        out = jnp.stack([(tcx - pcx) / pw, (tcy - pcy) / ph,
                         jnp.log(jnp.abs(tw / pw)), jnp.log(jnp.abs(th / ph))], axis=-1)
        return {"OutputBox": out / var[None, :, :]}
    # decode: priors run along TargetBox's axis 1 (axis=0) or axis 0 (axis=1)
    expand = (lambda a: a[None, :]) if c["axis"] == 0 else (lambda a: a[:, None])
    pcx, pcy, pw, ph = expand(pcx), expand(pcy), expand(pw), expand(ph)
    v = var[None, :, :] if var.shape[0] == 1 else (var[None] if c["axis"] == 0
                                                   else var[:, None])
    t = TargetBox
    cx = v[..., 0] * t[..., 0] * pw + pcx
    cy = v[..., 1] * t[..., 1] * ph + pcy
    w = jnp.exp(v[..., 2] * t[..., 2]) * pw
    h = jnp.exp(v[..., 3] * t[..., 3]) * ph
    out = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - norm, cy + h / 2 - norm], axis=-1)
    return {"OutputBox": out}


@lowering("iou_similarity")
def _iou_similarity(c, X, Y):
    norm = 0.0 if c["box_normalized"] else 1.0
    x, y = X[:, None, :], Y[None, :, :]
    ax = (x[..., 2] - x[..., 0] + norm) * (x[..., 3] - x[..., 1] + norm)
    ay = (y[..., 2] - y[..., 0] + norm) * (y[..., 3] - y[..., 1] + norm)
    iw = jnp.maximum(jnp.minimum(x[..., 2], y[..., 2]) - jnp.maximum(x[..., 0], y[..., 0])
                     + norm, 0)
    ih = jnp.maximum(jnp.minimum(x[..., 3], y[..., 3]) - jnp.maximum(x[..., 1], y[..., 1])
                     + norm, 0)
    inter = iw * ih
    return {"Out": inter / (ax + ay - inter)}


@lowering("yolo_box")
def _yolo_box(c, X, ImgSize):
    n, _, gh, gw = X.shape
    anchors = np.array(c["anchors"], np.float64).reshape(-1, 2)
    an, classes = anchors.shape[0], c["class_num"]
    ds = c["downsample_ratio"]
    x = X.reshape(n, an, 5 + classes, gh, gw)
    img_h = ImgSize[:, 0].astype(X.dtype)[:, None, None, None]
    img_w = ImgSize[:, 1].astype(X.dtype)[:, None, None, None]
    col = jnp.arange(gw, dtype=X.dtype)[None, None, None, :]
    row = jnp.arange(gh, dtype=X.dtype)[None, None, :, None]
    aw = jnp.asarray(anchors[:, 0], X.dtype)[None, :, None, None]
    ah = jnp.asarray(anchors[:, 1], X.dtype)[None, :, None, None]
    bx = (col + jax.nn.sigmoid(x[:, :, 0])) * img_w / gw
    by = (row + jax.nn.sigmoid(x[:, :, 1])) * img_h / gh
    bw = jnp.exp(x[:, :, 2]) * aw * img_w / (ds * gw)
    bh = jnp.exp(x[:, :, 3]) * ah * img_h / (ds * gh)
    x1, y1, x2, y2 = bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2
    if c["clip_bbox"]:
        x1, y1 = jnp.maximum(x1, 0), jnp.maximum(y1, 0)
        x2, y2 = jnp.minimum(x2, img_w - 1), jnp.minimum(y2, img_h - 1)
    conf = jax.nn.sigmoid(x[:, :, 4])
    keep = conf >= c["conf_thresh"]
    boxes = jnp.where(keep[..., None], jnp.stack([x1, y1, x2, y2], axis=-1), 0)
    scores = jnp.where(keep[:, :, None], conf[:, :, None] * jax.nn.sigmoid(x[:, :, 5:]), 0)
    # boxes run anchor-major, then rows, then columns
    return {"Boxes": boxes.reshape(n, -1, 4),
            "Scores": jnp.moveaxis(scores, 2, -1).reshape(n, -1, classes)}


@lowering("anchor_generator")
def _anchor_generator(c, Input):
    fh, fw = Input.shape[2], Input.shape[3]
    sw, sh = c["stride"]
    off = c["offset"]
    halves = []
    for r in c["aspect_ratios"]:  # ratios outer, sizes inner (Paddle's order)
        for s in c["anchor_sizes"]:
            # C's round (half away from zero) on positive values
            base_w = np.floor(np.sqrt(sw * sh / r) + 0.5)
            base_h = np.floor(base_w * r + 0.5)
            halves.append((0.5 * (s / sw * base_w - 1), 0.5 * (s / sh * base_h - 1)))
    halves = np.array(halves)
    cx = (np.arange(fw) * sw + off * (sw - 1))[None, :, None]
    cy = (np.arange(fh) * sh + off * (sh - 1))[:, None, None]
    hw, hh = halves[:, 0], halves[:, 1]
    anchors = np.stack(np.broadcast_arrays(cx - hw, cy - hh, cx + hw, cy + hh), axis=-1)
    var = np.broadcast_to(np.array(c["variances"]), anchors.shape)
    return {"Anchors": jnp.asarray(anchors, Input.dtype),
            "Variances": jnp.asarray(var, Input.dtype)}


@lowering("polygon_box_transform")
def _polygon_box_transform(c, Input):
    _, ch, h, w = Input.shape
    col = np.broadcast_to(np.arange(w)[None, None, :] * 4.0, (ch, h, w))
    row = np.broadcast_to(np.arange(h)[None, :, None] * 4.0, (ch, h, w))
    base = np.where((np.arange(ch) % 2 == 0)[:, None, None], col, row)
    return {"Output": jnp.asarray(base, Input.dtype)[None] - Input}


def _bilinear_weights(y, size):
    """Paddle's RoIAlign corner rule along one axis: (low, high, w_low, w_high, inside)."""
    inside = (y >= -1.0) & (y <= size)
    y = jnp.maximum(y, 0)
    low = jnp.floor(y).astype(jnp.int32)
    top = low >= size - 1
    low = jnp.where(top, size - 1, low)
    high = jnp.where(top, size - 1, low + 1)
    y = jnp.where(top, low.astype(y.dtype), y)
    frac = y - low
    return low, high, 1 - frac, frac, inside


def _grid(lo, length, pooled, ratio, cap):
    """Sample positions [R, pooled, G] of each bin, the mask of real samples and the count
    per box; G is static: ``ratio`` or ``cap`` (Paddle's grid is ceil(length / pooled))."""
    n = jnp.ceil(length / pooled) if ratio <= 0 else jnp.full_like(length, ratio)
    g = ratio if ratio > 0 else cap
    k = jnp.arange(g, dtype=length.dtype)
    p = jnp.arange(pooled, dtype=length.dtype)
    bin_ = (length / pooled)[:, None, None]
    pos = lo[:, None, None] + p[None, :, None] * bin_ + (k + 0.5) * bin_ / n[:, None, None]
    return pos, k[None, None, :] < n[:, None, None], n


def roi_align(x, rois, batch, ph, pw, scale, ratio):
    _, _, h, w = x.shape
    box = rois * scale
    hgt = jnp.maximum(box[:, 3] - box[:, 1], 1.0)
    wid = jnp.maximum(box[:, 2] - box[:, 0], 1.0)
    # a box at most one pooled bin past the map gets every sample Paddle takes
    ys, ymask, ny = _grid(box[:, 1], hgt, ph, ratio, -(-h // ph) + 1)
    xs, xmask, nx = _grid(box[:, 0], wid, pw, ratio, -(-w // pw) + 1)
    yl, yh, wyl, wyh, yin = _bilinear_weights(ys, h)
    xl, xh, wxl, wxh, xin = _bilinear_weights(xs, w)
    b = batch[:, None, None, None, None]

    def on_y(a):  # [R, ph, Gh] -> [R, ph, Gh, 1, 1]
        return a[:, :, :, None, None]

    def on_x(a):  # [R, pw, Gw] -> [R, 1, 1, pw, Gw]
        return a[:, None, None, :, :]

    def at(yi, xi):  # the advanced indices go first: [R, ph, Gh, pw, Gw, C]
        return x[b, :, on_y(yi), on_x(xi)]

    val = sum(on_y(wy)[..., None] * on_x(wx)[..., None] * at(yi, xi)
              for yi, wy in ((yl, wyl), (yh, wyh)) for xi, wx in ((xl, wxl), (xh, wxh)))
    keep = (on_y(ymask & yin) & on_x(xmask & xin))[..., None]
    total = jnp.sum(jnp.where(keep, val, 0), axis=(2, 4))  # [R, ph, pw, C]
    count = jnp.maximum(ny * nx, 1)[:, None, None, None]
    return jnp.moveaxis(total / count, -1, 1)


@lowering("roi_align")
def _roi_align(c, X, ROIs, RoisLod):
    args = (c["pooled_height"], c["pooled_width"], c["spatial_scale"], c["sampling_ratio"])
    if RoisLod is None:  # a LoD ROIs: its sequence is its image
        batch = jnp.minimum(ROIs.segment_ids(), X.shape[0] - 1)
        return {"Out": ROIs.masked(roi_align(X, ROIs.data, batch, *args))}
    ends = RoisLod[1:].astype(jnp.int32)
    batch = jnp.searchsorted(ends, jnp.arange(ROIs.shape[0]), side="right")
    return {"Out": roi_align(X, ROIs, jnp.minimum(batch, X.shape[0] - 1), *args)}


def _clip_to(box, info):
    """Paddle's ClipTiledBoxes with is_scale: image size round(h or w / scale)."""
    h = jnp.floor(info[..., 0] / info[..., 2] + 0.5)
    w = jnp.floor(info[..., 1] / info[..., 2] + 0.5)
    lim = jnp.stack([w, h, w, h], axis=-1) - 1
    return jnp.minimum(jnp.maximum(box, 0), lim)


@lowering("box_clip")
def _box_clip(c, Input, ImInfo):
    if isinstance(Input, LoDArray):
        batch = jnp.minimum(Input.segment_ids(), ImInfo.shape[0] - 1)
        return {"Output": Input.masked(_clip_to(Input.data, ImInfo[batch]))}
    return {"Output": _clip_to(Input, ImInfo[:, None, :])}


@lowering("box_decoder_and_assign")
def _box_decoder_and_assign(c, PriorBox, PriorBoxVar, TargetBox, BoxScore):
    n, classes = BoxScore.shape
    pw = PriorBox[:, 2] - PriorBox[:, 0] + 1
    ph = PriorBox[:, 3] - PriorBox[:, 1] + 1
    pcx, pcy = (PriorBox[:, 0] + pw / 2)[:, None], (PriorBox[:, 1] + ph / 2)[:, None]
    pw, ph = pw[:, None], ph[:, None]
    t = TargetBox.reshape(n, classes, 4)
    v = PriorBoxVar
    dw = jnp.minimum(v[2] * t[..., 2], c["box_clip"])
    dh = jnp.minimum(v[3] * t[..., 3], c["box_clip"])
    cx, cy = v[0] * t[..., 0] * pw + pcx, v[1] * t[..., 1] * ph + pcy
    w, h = jnp.exp(dw) * pw, jnp.exp(dh) * ph
    dec = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], axis=-1)
    # the first class > 0 with the highest score above -1 (Paddle's strict > scan)
    fg = jnp.where(jnp.arange(classes) > 0, BoxScore, -jnp.inf)
    best = jnp.argmax(fg, axis=1)
    found = jnp.take_along_axis(fg, best[:, None], axis=1)[:, 0] > -1
    chosen = jnp.take_along_axis(dec, best[:, None, None], axis=1)[:, 0]
    return {"DecodeBox": dec.reshape(n, classes * 4),
            "OutputAssignBox": jnp.where(found[:, None], chosen, PriorBox)}


@lowering("density_prior_box")
def _density_prior_box(c, Input, Image):
    fh, fw = Input.shape[2], Input.shape[3]
    ih, iw = Image.shape[2], Image.shape[3]
    sw, sh = c["step_w"], c["step_h"]
    if sw == 0 or sh == 0:
        sw, sh = iw / fw, ih / fh
    avg = int((sw + sh) * 0.5)  # Paddle truncates the mean step, and the shift, to ints
    offsets, halves = [], []
    for size, dens in zip(c["fixed_sizes"], c["densities"]):
        shift = avg // dens
        for r in c["fixed_ratios"]:
            root = np.sqrt(np.float32(r))
            half = (np.float32(size * root) / 2, np.float32(size / root) / 2)
            for di in range(dens):
                for dj in range(dens):
                    offsets.append((-avg / 2 + shift / 2 + dj * shift,
                                    -avg / 2 + shift / 2 + di * shift))
                    halves.append(half)
    offsets, halves = np.array(offsets), np.array(halves, np.float64)
    cx = ((np.arange(fw) + c["offset"]) * sw)[None, :, None] + offsets[:, 0]
    cy = ((np.arange(fh) + c["offset"]) * sh)[:, None, None] + offsets[:, 1]
    hw, hh = halves[:, 0], halves[:, 1]
    boxes = np.stack(np.broadcast_arrays(np.maximum((cx - hw) / iw, 0),
                                         np.maximum((cy - hh) / ih, 0),
                                         np.minimum((cx + hw) / iw, 1),
                                         np.minimum((cy + hh) / ih, 1)), axis=-1)
    if c["clip"]:
        boxes = np.clip(boxes, 0.0, 1.0)
    if c["flatten_to_2d"]:
        boxes = boxes.reshape(-1, 4)
    var = np.broadcast_to(np.array(c["variances"]), boxes.shape)
    return {"Boxes": jnp.asarray(boxes, Input.dtype), "Variances": jnp.asarray(var, Input.dtype)}
