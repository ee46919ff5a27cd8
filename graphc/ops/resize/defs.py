"""bilinear_interp, nearest_interp and trilinear_interp: slots, attributes, shape rules.

The output size is out_d/out_h/out_w, or int(in * scale) when scale > 0 (Paddle 1.8).
"""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.types import FLOAT_DTYPES, TensorType

# Paddle's attribute says NCHW/NHWC (channels first/last) for 3-D inputs too
_LAYOUTS = {2: ("NCHW", "NHWC"), 3: ("NCHW", "NHWC", "NCDHW", "NDHWC")}
LAST = ("NHWC", "NDHWC")


def resized_dims(c, dims, nd):
    """The output spatial dims of an interp op with input spatial ``dims``."""
    scale = c["scale"]
    if scale > 0:
        return tuple(-1 if d < 0 else int(d * scale) for d in dims)
    given = [c["out_d"], c["out_h"], c["out_w"]][3 - nd:]
    c.check(all(v > 0 for v in given),
            f"give positive output sizes or a positive scale, got sizes {given}, scale {scale}")
    return tuple(given)


def _interp(nd):
    def infer(c):
        x = c.x("X")
        layout = c["data_layout"]
        c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
        c.check(x.rank == nd + 2, f"X must be {nd + 2}-D, got {list(x.shape)}")
        c.check(layout in _LAYOUTS[nd],
                f"data_layout must be one of {_LAYOUTS[nd]}, got {layout!r}")
        c.check(c["align_mode"] in (0, 1), f"align_mode must be 0 or 1, got {c['align_mode']}")
        last = layout in LAST
        dims = x.shape[1:-1] if last else x.shape[2:]
        out = resized_dims(c, dims, nd)
        c.check(all(d != 0 for d in out), f"resized dims {list(out)} must be positive")
        shape = (x.shape[0], *out, x.shape[-1]) if last else x.shape[:2] + out
        return {"Out": TensorType(shape, x.dtype)}
    return infer


def _attrs(nd, method):
    return {"out_d": ("int", -1), "out_h": ("int", -1), "out_w": ("int", -1),
            "scale": ("float", 0.0), "interp_method": ("str", method),
            "align_corners": ("bool", True), "align_mode": ("int", 1),
            "data_layout": ("str", "NCHW")}


register("bilinear_interp", "X", "Out", _attrs(2, "bilinear"), infer=_interp(2),
         doc="bilinear resize of H and W (align_corners, align_mode as Paddle's)")
register("nearest_interp", "X", "Out", _attrs(2, "nearest"), infer=_interp(2),
         doc="nearest-neighbour resize of H and W")
register("trilinear_interp", "X", "Out", _attrs(3, "trilinear"), infer=_interp(3),
         doc="trilinear resize of D, H and W")
