"""instance_norm, group_norm, lrn and affine_channel: slots, attributes, shape rules.

Statistics outputs have Paddle's shapes: instance_norm [N*C], group_norm [N, groups].
"""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.types import FLOAT_DTYPES, TensorType


def _float_input(c, slot, min_rank):
    x = c.x(slot)
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x.dtype}")
    c.check(x.rank >= min_rank, f"{slot} must have rank >= {min_rank}, got {list(x.shape)}")
    return x


def _channel_vectors(c, ch, slots):
    for slot in slots:
        if c.has(slot):
            t = c.x(slot)
            c.check(t.rank == 1 and (ch < 0 or t.shape[0] in (ch, -1)),
                    f"{slot} must be [{ch}], got {list(t.shape)}")


def _instance_norm(c):
    x = _float_input(c, "X", 3)
    _channel_vectors(c, x.shape[1], ("Scale", "Bias"))
    n, ch = x.shape[:2]
    vec = TensorType((-1 if n < 0 or ch < 0 else n * ch,), x.dtype)
    return {"Y": x, "SavedMean": vec, "SavedVariance": vec}


register("instance_norm", "X Scale? Bias?", "Y SavedMean SavedVariance",
         {"epsilon": ("float", 1e-5)}, infer=_instance_norm,
         doc="normalise each (example, channel) over its spatial dims; Y = Scale*x_hat + Bias")


def _group_norm(c):
    x = _float_input(c, "X", 2)
    layout = c["data_layout"]
    c.check(layout in ("NCHW", "NHWC"), f"data_layout must be NCHW or NHWC, got {layout!r}")
    ch = x.shape[-1] if layout == "NHWC" else x.shape[1]
    g = c["groups"]
    c.check(g >= 1 and (ch < 0 or ch % g == 0),
            f"groups={g} must divide the {ch} channels of X {list(x.shape)}")
    _channel_vectors(c, ch, ("Scale", "Bias"))
    stats = TensorType((x.shape[0], g), x.dtype)
    return {"Y": x, "Mean": stats, "Variance": stats}


register("group_norm", "X Scale? Bias?", "Y Mean Variance",
         {"epsilon": ("float", 1e-5), "groups": ("int", 1), "data_layout": ("str", "NCHW")},
         infer=_group_norm,
         doc="normalise each example's channel groups (with their spatial dims) separately")


def _lrn(c):
    x = _float_input(c, "X", 4)
    c.check(x.rank == 4, f"X must be 4-D, got {list(x.shape)}")
    c.check(c["n"] > 0, f"n must be positive, got {c['n']}")
    c.check(c["data_format"] in ("NCHW", "NHWC", "AnyLayout"),
            f"data_format must be NCHW or NHWC, got {c['data_format']!r}")
    return {"Out": x, "MidOut": x}


register("lrn", "X", "Out MidOut", {
    "n": ("int", 5), "k": ("float", 1.0), "alpha": ("float", 1e-4), "beta": ("float", 0.75),
    "data_format": ("str", "AnyLayout"),
}, infer=_lrn,
    doc="Out = X / (k + alpha * sum of X^2 over n neighbouring channels)^beta; MidOut the base")


def _affine_channel(c):
    x = _float_input(c, "X", 2)
    layout = c["data_layout"]
    c.check(layout in ("NCHW", "NHWC", "AnyLayout"),
            f"data_layout must be NCHW or NHWC, got {layout!r}")
    ch = x.shape[-1] if layout == "NHWC" else x.shape[1]
    _channel_vectors(c, ch, ("Scale", "Bias"))
    return {"Out": x}


register("affine_channel", "X Scale Bias", "Out", {"data_layout": ("str", "AnyLayout")},
         infer=_affine_channel, doc="Out = X * Scale[c] + Bias[c] per channel c")
