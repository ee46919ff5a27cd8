"""The vision-sampling ops' slots, attributes and shape rules (Paddle 1.8's op names and attrs).

Every op differentiates w.r.t. its feature map; prroi_pool also w.r.t. ROIs, deformable_conv
w.r.t. Offset, Mask and Filter, deformable_psroi_pooling w.r.t. Trans, as Paddle's grad ops.
"""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType


def _float(c, slot, rank):
    x = c.x(slot)
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x.dtype}")
    c.check(x.rank == rank, f"{slot} must be {rank}-D, got {list(x.shape)}")
    return x


def _rois(c, x, width=4, counts=None):
    """ROIs [R, width] of X's dtype, with a LoD of level 1 (its image of each box) unless
    the op's optional per-image slot ``counts`` gives it."""
    rois = c.x("ROIs")
    c.check(rois.rank == 2 and rois.shape[1] in (width, -1),
            f"ROIs must be [R, {width}], got {list(rois.shape)}")
    c.check(rois.dtype == x.dtype, f"ROIs must be {x.dtype} like X, got {rois.dtype}")
    if counts is not None and c.has(counts):
        n = c.x(counts)
        c.check(n.dtype in INT_DTYPES and n.rank == 1,
                f"{counts} must be 1-D integer counts, got {n.dtype}{list(n.shape)}")
        c.check(rois.lod_level == 0, f"give ROIs with a LoD or {counts}, not both")
    else:
        c.check(rois.lod_level == 1, f"ROIs needs a LoD of level 1 (its image of each box), "
                                     f"got lod_level {rois.lod_level}")
    return rois


def _pooled(c):
    ph, pw = c["pooled_height"], c["pooled_width"]
    c.check(ph > 0 and pw > 0, f"pooled sizes must be positive, got {ph}x{pw}")
    c.check(c["spatial_scale"] > 0, f"spatial_scale must be positive, got {c['spatial_scale']}")
    return ph, pw


def _psroi_pool(c):
    x = _float(c, "X", 4)
    rois = _rois(c, x)
    ph, pw = _pooled(c)
    oc = c["output_channels"]
    c.check(oc > 0, f"output_channels must be positive, got {oc}")
    c.check(x.shape[1] < 0 or x.shape[1] == oc * ph * pw,
            f"X's channels must be output_channels * pooled_height * pooled_width = "
            f"{oc * ph * pw}, got {list(x.shape)}")
    return {"Out": TensorType((rois.shape[0], oc, ph, pw), x.dtype, False, rois.lod_level)}


register("psroi_pool", "X ROIs", "Out",
         {"output_channels": "int", "spatial_scale": ("float", 1.0),
          "pooled_height": ("int", 1), "pooled_width": ("int", 1)},
         infer=_psroi_pool, lod_inputs=("ROIs",), lod="aware",
         doc="position-sensitive RoI average pooling: bin (i, j) of output channel c averages "
             "input channel (c * pooled_height + i) * pooled_width + j over its cells")


def _prroi_pool(c):
    x = _float(c, "X", 4)
    rois = _rois(c, x, counts="BatchRoINums")
    ph, pw = _pooled(c)
    return {"Out": TensorType((rois.shape[0], x.shape[1], ph, pw), x.dtype, False,
                              rois.lod_level)}


register("prroi_pool", "X ROIs BatchRoINums?", "Out",
         {"spatial_scale": ("float", 1.0), "pooled_height": ("int", 1),
          "pooled_width": ("int", 1)},
         infer=_prroi_pool, lod_inputs=("ROIs",), lod="aware",
         doc="precise RoI pooling: each bin is the integral of X's bilinear interpolation over "
             "the bin divided by its area (0 for an empty bin); differentiable w.r.t. ROIs too")


def _conv_out(c, x, flt):
    k = flt.shape[2:]
    out = []
    for i in range(2):
        size, dil = x.shape[2 + i], c["dilations"][i]
        if size < 0:
            out.append(-1)
            continue
        o = (size + 2 * c["paddings"][i] - (dil * (k[i] - 1) + 1)) // c["strides"][i] + 1
        c.check(o > 0, f"Filter {list(flt.shape)} larger than padded Input {list(x.shape)}")
        out.append(o)
    return out


def _deformable_conv(c):
    x, flt = _float(c, "Input", 4), _float(c, "Filter", 4)
    for name in ("strides", "paddings", "dilations"):
        c.check(len(c[name]) == 2, f"{name} must have 2 entries, got {c[name]}")
    g, dg = c["groups"], c["deformable_groups"]
    c.check(g > 0 and dg > 0, f"groups and deformable_groups must be positive, got {g}, {dg}")
    ch = x.shape[1]
    c.check(ch < 0 or (ch % dg == 0 and ch % g == 0 and flt.shape[1] * g == ch),
            f"Input {list(x.shape)} channels must divide by groups={g} and "
            f"deformable_groups={dg} and equal Filter {list(flt.shape)}'s in-channels * groups")
    c.check(flt.shape[0] % g == 0, f"Filter {list(flt.shape)}'s out-channels must divide by "
                                   f"groups={g}")
    oh, ow = _conv_out(c, x, flt)
    kk = flt.shape[2] * flt.shape[3]
    off = _float(c, "Offset", 4)
    want = (x.shape[0], 2 * dg * kk, oh, ow)
    slots = [("Offset", off, want)]
    if c.has("Mask"):
        slots.append(("Mask", _float(c, "Mask", 4), (x.shape[0], dg * kk, oh, ow)))
    for name, t, shape in slots:
        c.check(all(a < 0 or b < 0 or a == b for a, b in zip(t.shape, shape, strict=True)),
                f"{name} must be {list(shape)} (deformable_groups * kernel points, output "
                f"size), got {list(t.shape)}")
    return {"Output": TensorType((x.shape[0], flt.shape[0], oh, ow), x.dtype)}


_CONV_ATTRS = {"strides": ("ints", [1, 1]), "paddings": ("ints", [0, 0]),
               "dilations": ("ints", [1, 1]), "groups": ("int", 1),
               "deformable_groups": ("int", 1), "im2col_step": ("int", 64)}

register("deformable_conv", "Input Offset Mask Filter", "Output", dict(_CONV_ATTRS),
         infer=_deformable_conv,
         doc="modulated deformable convolution (v2): each kernel point samples Input "
             "bilinearly at its offset position, times its Mask, then a grouped convolution")
register("deformable_conv_v1", "Input Offset Filter", "Output", dict(_CONV_ATTRS),
         infer=_deformable_conv,
         doc="deformable convolution (v1): each kernel point samples Input bilinearly at its "
             "offset position, then a grouped convolution")


def _deformable_psroi(c):
    x = _float(c, "Input", 4)
    rois = _rois(c, x)
    ph, pw = _pooled(c)
    gs, ps = c["group_size"], c["part_size"]
    c.check(len(gs) == 2 and len(ps) == 2 and min(gs + ps) > 0,
            f"group_size and part_size must be 2 positive ints, got {gs}, {ps}")
    od = c["output_dim"]
    c.check(od > 0, f"output_dim must be positive, got {od}")
    c.check(x.shape[1] < 0 or x.shape[1] == od * gs[0] * gs[1],
            f"Input's channels must be output_dim * group_size = {od * gs[0] * gs[1]}, "
            f"got {list(x.shape)}")
    c.check(c["sample_per_part"] > 0, f"sample_per_part must be positive, "
                                      f"got {c['sample_per_part']}")
    if not c["no_trans"]:  # Trans may be a LoD value (computed from the boxes' features)
        t = _float(c, "Trans", 4)
        c.check(t.shape[1] < 0 or (t.shape[1] % 2 == 0 and od % (t.shape[1] // 2) == 0),
                f"Trans must be [R, 2 * classes, part_h, part_w] with output_dim divisible "
                f"by classes, got {list(t.shape)}")
        c.check(all(a < 0 or a == b for a, b in zip(t.shape[2:], ps, strict=True)),
                f"Trans's spatial dims must be part_size {ps}, got {list(t.shape)}")
    shape = (rois.shape[0], od, ph, pw)
    return {"Output": TensorType(shape, x.dtype, False, rois.lod_level),
            "TopCount": TensorType(shape, x.dtype, False, rois.lod_level)}


register("deformable_psroi_pooling", "Input ROIs Trans", "Output TopCount",
         {"no_trans": ("bool", False), "spatial_scale": ("float", 1.0), "output_dim": "int",
          "group_size": ("ints", [1, 1]), "pooled_height": ("int", 1),
          "pooled_width": ("int", 1), "part_size": ("ints", [1, 1]),
          "sample_per_part": ("int", 1), "trans_std": ("float", 0.1)},
         infer=_deformable_psroi, lod_inputs=("ROIs", "Trans"), lod="aware",
         doc="deformable (position-sensitive) RoI pooling: each bin averages bilinear samples "
             "shifted by Trans * trans_std * the box size; TopCount counts the samples")


def _perspective(c):
    x = _float(c, "X", 4)
    rois = _rois(c, x, width=8)
    th, tw = c["transformed_height"], c["transformed_width"]
    c.check(th > 0 and tw > 0, f"transformed sizes must be positive, got {th}x{tw}")
    c.check(c["spatial_scale"] > 0, f"spatial_scale must be positive, got {c['spatial_scale']}")
    r, lod = rois.shape[0], rois.lod_level
    return {"Out": TensorType((r, x.shape[1], th, tw), x.dtype, False, lod),
            "Mask": TensorType((r, 1, th, tw), "int32", False, lod),
            "TransformMatrix": TensorType((r, 9), x.dtype, False, lod)}


register("roi_perspective_transform", "X ROIs", "Out Mask TransformMatrix",
         {"transformed_height": "int", "transformed_width": "int",
          "spatial_scale": ("float", 1.0)},
         infer=_perspective, lod_inputs=("ROIs",), lod="aware",
         doc="warps each quadrilateral RoI [x1..y4] of its image to transformed_height x "
             "transformed_width by a perspective transform with bilinear sampling")


def im2seq_size(size, k, lo, hi, stride):
    return -1 if size < 0 else (size + lo + hi - k) // stride + 1


def _im2sequence(c):
    x = _float(c, "X", 4)
    k, s, p = c["kernels"], c["strides"], c["paddings"]
    c.check(len(k) == 2 and len(s) == 2 and len(p) == 4 and min(k + s) > 0,
            f"kernels, strides must be 2 positive ints and paddings 4 ints, got {k}, {s}, {p}")
    oh = im2seq_size(x.shape[2], k[0], p[0], p[2], s[0])
    ow = im2seq_size(x.shape[3], k[1], p[1], p[3], s[1])
    c.check(oh != 0 and ow != 0 and oh >= -1 and ow >= -1,
            f"kernel {k} larger than padded X {list(x.shape)}")
    if c.has("Y"):
        y = c.x("Y")
        c.check(y.dtype in INT_DTYPES | FLOAT_DTYPES and y.rank == 2 and y.shape[1] in (2, -1),
                f"Y (input_image_size) must be [N, 2], got {y.dtype}{list(y.shape)}")
        c.check(len(c["out_stride"]) == 2 and min(c["out_stride"]) > 0,
                f"out_stride must be 2 positive ints, got {c['out_stride']}")
    # with Y the rows depend on the sizes fed
    rows = -1 if min(x.shape[0], oh, ow) < 0 or c.has("Y") else x.shape[0] * oh * ow
    ch = -1 if x.shape[1] < 0 else x.shape[1] * k[0] * k[1]
    return {"Out": TensorType((rows, ch), x.dtype, False, 1)}


register("im2sequence", "X Y?", "Out",
         {"kernels": "ints", "strides": ("ints", [1, 1]), "paddings": ("ints", [0, 0, 0, 0]),
          "out_stride": ("ints", [1, 1])},
         infer=_im2sequence,
         doc="image patches as a LoD value: one sequence per image of its output positions' "
             "[C * kh * kw] patches; with Y (read when N > 1, as Paddle) the positions of its "
             "real size ceil(int(Y) / out_stride) only (a static bound of N * oh * ow rows)")
