"""Vision-sampling layers of Paddle 1.8 (psroi_pool, prroi_pool, deformable_conv,
deformable_roi_pooling, roi_perspective_transform, im2sequence) with its ops and attributes."""

from __future__ import annotations

from ..build.initializer import Normal
from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable


def _ints(v, n, what):
    if isinstance(v, int):
        return [v] * n
    v = [int(i) for i in v]
    if len(v) != n:
        raise ProgramError(f"{what} must be an int or {n} ints, got {v}")
    return v


def _check(layer, **vars_):
    for arg, var in vars_.items():
        check_variable(layer, arg, var)


def psroi_pool(input, rois, output_channels, spatial_scale, pooled_height, pooled_width,
               name=None):
    """Position-sensitive RoI average pooling of LoD boxes ``rois`` [R, 4] over ``input``
    [N, output_channels * pooled_height * pooled_width, H, W] -> [R, output_channels, ph, pw]."""
    _check("psroi_pool", input=input, rois=rois)
    for arg, v in (("output_channels", output_channels), ("pooled_height", pooled_height),
                   ("pooled_width", pooled_width)):
        if not isinstance(v, int):
            raise ProgramError(f"psroi_pool: {arg} must be an int, got {v!r}")
    helper = LayerHelper("psroi_pool", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("psroi_pool", {"X": input, "ROIs": rois}, {"Out": out},
                     {"output_channels": output_channels, "spatial_scale": float(spatial_scale),
                      "pooled_height": pooled_height, "pooled_width": pooled_width})
    return out


def prroi_pool(input, rois, spatial_scale=1.0, pooled_height=1, pooled_width=1,
               batch_roi_nums=None, name=None):
    """Precise RoI pooling (the integral of the interpolation over each bin, over its area)
    of boxes ``rois`` [R, 4]: their images from its LoD, or the per-image counts
    ``batch_roi_nums``. Differentiable w.r.t. ``input`` and ``rois``."""
    _check("prroi_pool", input=input, rois=rois)
    inputs = {"X": input, "ROIs": rois}
    if batch_roi_nums is not None:
        check_variable("prroi_pool", "batch_roi_nums", batch_roi_nums)
        inputs["BatchRoINums"] = batch_roi_nums
    helper = LayerHelper("prroi_pool", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("prroi_pool", inputs, {"Out": out},
                     {"spatial_scale": float(spatial_scale), "pooled_height": int(pooled_height),
                      "pooled_width": int(pooled_width)})
    return out


def deformable_conv(input, offset, mask, num_filters, filter_size, stride=1, padding=0,
                    dilation=1, groups=None, deformable_groups=None, im2col_step=None,
                    param_attr=None, bias_attr=None, modulated=True, name=None):
    """Deformable convolution: v2 (``modulated``, op deformable_conv, reads ``mask``) or v1
    (deformable_conv_v1, ``mask`` unused); a Filter parameter and a bias over channels."""
    _check("deformable_conv", input=input, offset=offset)
    if modulated:
        check_variable("deformable_conv", "mask", mask)
    if param_attr is False:
        raise ProgramError("deformable_conv: param_attr must not be False")
    channels = input.shape[1]
    if channels < 0:
        raise ProgramError(f"deformable_conv: the channel dimension of {list(input.shape)} "
                           f"must be known")
    groups = groups or 1
    if channels % groups:
        raise ProgramError(f"deformable_conv: {channels} channels not divisible by "
                           f"groups={groups}")
    ksize = _ints(filter_size, 2, "deformable_conv: filter_size")
    helper = LayerHelper("deformable_conv", name)
    std = (2.0 / (ksize[0] * ksize[1] * channels)) ** 0.5
    w = helper.create_parameter(param_attr, [num_filters, channels // groups, *ksize],
                                input.dtype, default_initializer=Normal(0.0, std, 0))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    inputs = {"Input": input, "Offset": offset, "Filter": w}
    if modulated:
        inputs["Mask"] = mask
    helper.append_op("deformable_conv" if modulated else "deformable_conv_v1", inputs,
                     {"Output": pre_bias},
                     {"strides": _ints(stride, 2, "deformable_conv: stride"),
                      "paddings": _ints(padding, 2, "deformable_conv: padding"),
                      "dilations": _ints(dilation, 2, "deformable_conv: dilation"),
                      "groups": groups, "deformable_groups": deformable_groups or 1,
                      "im2col_step": im2col_step or 64})
    return helper.append_bias_op(pre_bias, bias_attr, dim_start=1, dim_end=2)


def deformable_roi_pooling(input, rois, trans, no_trans=False, spatial_scale=1.0,
                           group_size=[1, 1], pooled_height=1, pooled_width=1,  # noqa: B006
                           part_size=None, sample_per_part=1, trans_std=0.1,
                           position_sensitive=False, name=None):
    """Deformable (PS)RoI pooling of LoD boxes ``rois`` [R, 4] shifted by ``trans`` [R, 2 *
    classes, part_h, part_w] (op deformable_psroi_pooling) -> [R, C', ph, pw], C' = C, or
    C / (ph * pw) when ``position_sensitive``."""
    _check("deformable_roi_pooling", input=input, rois=rois, trans=trans)
    channels = input.shape[1]
    if channels < 0:
        raise ProgramError(f"deformable_roi_pooling: the channel dimension of "
                           f"{list(input.shape)} must be known")
    out_dim = channels // (pooled_height * pooled_width) if position_sensitive else channels
    part = [pooled_height, pooled_width] if part_size is None else part_size
    helper = LayerHelper("deformable_psroi_pooling", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    count = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("deformable_psroi_pooling", {"Input": input, "ROIs": rois, "Trans": trans},
                     {"Output": out, "TopCount": count},
                     {"no_trans": bool(no_trans), "spatial_scale": float(spatial_scale),
                      "output_dim": int(out_dim),
                      "group_size": _ints(group_size, 2, "deformable_roi_pooling: group_size"),
                      "pooled_height": int(pooled_height), "pooled_width": int(pooled_width),
                      "part_size": _ints(part, 2, "deformable_roi_pooling: part_size"),
                      "sample_per_part": int(sample_per_part), "trans_std": float(trans_std)})
    count.stop_gradient = True
    return out


def roi_perspective_transform(input, rois, transformed_height, transformed_width,
                              spatial_scale=1.0, name=None):
    """Warp each quadrilateral of LoD ``rois`` [R, 8] (x1, y1 .. x4, y4 clockwise from the
    top left) to [transformed_height, transformed_width]: (out, mask, transform_matrix)."""
    _check("roi_perspective_transform", input=input, rois=rois)
    helper = LayerHelper("roi_perspective_transform", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    mask = helper.create_variable_for_type_inference("int32")
    matrix = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("roi_perspective_transform", {"X": input, "ROIs": rois},
                     {"Out": out, "Mask": mask, "TransformMatrix": matrix},
                     {"transformed_height": int(transformed_height),
                      "transformed_width": int(transformed_width),
                      "spatial_scale": float(spatial_scale)})
    mask.stop_gradient = matrix.stop_gradient = True
    return out, mask, matrix


def im2sequence(input, filter_size=1, stride=1, padding=0, input_image_size=None, out_stride=1,
                name=None):
    """Image patches of ``input`` [N, C, H, W] as a LoD value [rows, C * kh * kw], one sequence
    per image; with ``input_image_size`` [N, 2] (read when N > 1, as Paddle) only the
    positions of each image's real size ceil(int(size) / out_stride). ``padding``: int,
    [up/down, left/right] or [up, left, down, right]."""
    check_variable("im2sequence", "input", input)
    pads = _ints(padding, 2, "im2sequence: padding") if isinstance(padding, int) or len(
        padding) != 4 else [int(p) for p in padding]
    if len(pads) == 2:
        pads = pads + pads
    inputs = {"X": input}
    attrs = {"kernels": _ints(filter_size, 2, "im2sequence: filter_size"),
             "strides": _ints(stride, 2, "im2sequence: stride"), "paddings": pads}
    if input_image_size is not None:
        check_variable("im2sequence", "input_image_size", input_image_size)
        inputs["Y"] = input_image_size
        attrs["out_stride"] = _ints(out_stride, 2, "im2sequence: out_stride")
    helper = LayerHelper("im2sequence", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("im2sequence", inputs, {"Out": out}, attrs)
    return out
