"""Image resizing layers: image_resize, resize_bilinear/nearest/trilinear and
image_resize_short, emitting Paddle 1.8's *_interp ops with its attributes."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .helper import LayerHelper, check_variable

_METHODS = {"BILINEAR": ("bilinear_interp", 2), "NEAREST": ("nearest_interp", 2),
            "TRILINEAR": ("trilinear_interp", 3)}


def image_resize(input, out_shape=None, scale=None, name=None, resample="BILINEAR",
                 actual_shape=None, align_corners=True, align_mode=1, data_format="NCHW"):
    """Resize the spatial dims to out_shape (wins) or by scale (int(in * scale))."""
    check_variable("image_resize", "input", input)
    if resample not in _METHODS:
        raise ProgramError(f"image_resize: resample must be one of {sorted(_METHODS)}, "
                           f"got {resample!r}")
    op_type, nd = _METHODS[resample]
    if input.ndim != nd + 2:
        raise ProgramError(f"image_resize: {resample} takes a {nd + 2}-D input, got "
                           f"{list(input.shape)}")
    formats = ("NCHW", "NHWC") if nd == 2 else ("NCDHW", "NDHWC")
    if data_format not in formats:
        raise ProgramError(f"image_resize: data_format must be {' or '.join(formats)}, "
                           f"got {data_format!r}")
    if isinstance(out_shape, Variable) or isinstance(scale, Variable) or \
            actual_shape is not None or (out_shape is not None and
                                         any(isinstance(v, Variable) for v in out_shape)):
        raise ProgramError("image_resize: a tensor-valued out_shape, scale or actual_shape "
                           "would give a data-dependent shape, which an XLA step cannot "
                           "have; give Python ints or a float scale")
    if align_mode not in (0, 1):
        raise ProgramError(f"image_resize: align_mode must be 0 or 1, got {align_mode}")
    attrs = {"out_d": -1, "out_h": -1, "out_w": -1, "interp_method": op_type[:-7],
             "align_corners": align_corners, "align_mode": align_mode,
             "data_layout": "NHWC" if data_format[-1] == "C" else "NCHW"}
    if out_shape is not None:
        out_shape = [int(v) for v in out_shape]
        if len(out_shape) != nd or min(out_shape) <= 0:
            raise ProgramError(f"image_resize: out_shape must be {nd} positive ints, got "
                               f"{out_shape}")
        attrs.update(zip(("out_d", "out_h", "out_w")[3 - nd:], out_shape, strict=True))
    elif scale is not None:
        if float(scale) <= 0:
            raise ProgramError(f"image_resize: scale must be positive, got {scale}")
        attrs["scale"] = float(scale)
    else:
        raise ProgramError("image_resize: give out_shape or scale")
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(op_type, {"X": input}, {"Out": out}, attrs)
    return out


def resize_bilinear(input, out_shape=None, scale=None, name=None, actual_shape=None,
                    align_corners=True, align_mode=1, data_format="NCHW"):
    return image_resize(input, out_shape, scale, name, "BILINEAR", actual_shape,
                        align_corners, align_mode, data_format)


def resize_trilinear(input, out_shape=None, scale=None, name=None, actual_shape=None,
                     align_corners=True, align_mode=1, data_format="NCDHW"):
    return image_resize(input, out_shape, scale, name, "TRILINEAR", actual_shape,
                        align_corners, align_mode, data_format)


def resize_nearest(input, out_shape=None, scale=None, name=None, actual_shape=None,
                   align_corners=True, data_format="NCHW"):
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape,
                        align_corners, 1, data_format)


def image_resize_short(input, out_short_len, resample="BILINEAR"):
    """Resize so the shorter of H, W becomes out_short_len, keeping the aspect ratio."""
    check_variable("image_resize_short", "input", input)
    if input.ndim != 4 or min(input.shape[2:4]) < 0:
        raise ProgramError(f"image_resize_short: input must be [N, C, H, W] with known H and "
                           f"W, got {list(input.shape)}")
    hw = list(input.shape[2:4])
    short = 0 if hw[0] <= hw[1] else 1
    out = [0, 0]
    out[short] = out_short_len
    out[1 - short] = int(float(hw[1 - short]) * (float(out_short_len) / float(hw[short]))
                         + 0.5)
    return image_resize(input, out_shape=out, resample=resample)
