"""temporal_shift, unfold and bilinear_tensor_product: slots, attributes, shape rules.

unfold's paddings are Paddle's [top, left, bottom, right]; its Out is [N, C*kh*kw, L].
"""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.types import FLOAT_DTYPES, TensorType
from ..conv_pool.defs import window_size


def _temporal_shift(c):
    x = c.x("X")
    c.check(x.rank == 4, f"X must be [N*T, C, H, W], got {list(x.shape)}")
    t = c["seg_num"]
    c.check(t > 0, f"seg_num must be positive, got {t}")
    c.check(x.shape[0] < 0 or x.shape[0] % t == 0,
            f"the first dimension {x.shape[0]} of X must be a multiple of seg_num={t}")
    c.check(0 < c["shift_ratio"] < 0.5, f"shift_ratio {c['shift_ratio']} not in (0, 0.5)")
    return {"Out": x}


register("temporal_shift", "X", "Out", {"seg_num": ("int", 1), "shift_ratio": ("float", 0.25)},
         infer=_temporal_shift,
         doc="shift a shift_ratio of the channels one step back in time, as many forward")


def _unfold(c):
    x = c.x("X")
    c.check(x.rank == 4, f"X must be [N, C, H, W], got {list(x.shape)}")
    k, s, p, d = c["kernel_sizes"], c["strides"], c["paddings"], c["dilations"]
    c.check(len(k) == 2 and len(s) == 2 and len(d) == 2 and len(p) == 4,
            f"kernel_sizes, strides, dilations need 2 entries and paddings 4, got {k}, {s}, "
            f"{d}, {p}")
    c.check(min(k) > 0 and min(s) > 0 and min(d) > 0,
            f"kernel_sizes {k}, strides {s} and dilations {d} must be positive")
    oh = window_size(c, x.shape[2], k[0], s[0], p[0], p[2], d[0])
    ow = window_size(c, x.shape[3], k[1], s[1], p[1], p[3], d[1])
    blocks = -1 if oh < 0 or ow < 0 else oh * ow
    ch = -1 if x.shape[1] < 0 else x.shape[1] * k[0] * k[1]
    return {"Y": TensorType((x.shape[0], ch, blocks), x.dtype)}


register("unfold", "X", "Y", {
    "kernel_sizes": "ints", "strides": ("ints", [1, 1]), "paddings": ("ints", [0, 0, 0, 0]),
    "dilations": ("ints", [1, 1]),
}, infer=_unfold, doc="im2col: every sliding block's values as a column, [N, C*kh*kw, L]")


def _bilinear_tp(c):
    x, y, w = c.x("X"), c.x("Y"), c.x("Weight")
    c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
    c.check(x.rank == 2 and y.rank == 2, f"X and Y must be 2-D, got {list(x.shape)} and "
                                         f"{list(y.shape)}")
    c.check(w.rank == 3, f"Weight must be [size, M, N], got {list(w.shape)}")
    c.check(x.shape[1] in (w.shape[1], -1) and y.shape[1] in (w.shape[2], -1),
            f"Weight {list(w.shape)} does not fit X {list(x.shape)} and Y {list(y.shape)}")
    c.check(x.shape[0] < 0 or y.shape[0] < 0 or x.shape[0] == y.shape[0],
            f"X {list(x.shape)} and Y {list(y.shape)} have different batch sizes")
    if c.has("Bias"):
        b = c.x("Bias")
        c.check(b.shape == (1, w.shape[0]), f"Bias must be [1, {w.shape[0]}], got "
                                             f"{list(b.shape)}")
    return {"Out": TensorType((x.shape[0] if x.shape[0] >= 0 else y.shape[0], w.shape[0]),
                              x.dtype)}


register("bilinear_tensor_product", "X Y Weight Bias?", "Out", infer=_bilinear_tp,
         doc="Out[b, i] = X[b] . Weight[i] . Y[b] + Bias[0, i]")
