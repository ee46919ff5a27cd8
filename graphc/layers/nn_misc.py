"""Assorted Fluid nn layers: dice_loss (composed of existing ops, as Paddle's), temporal_shift,
unfold and bilinear_tensor_product. Paddle 1.8's signatures, ops and defaults."""

from __future__ import annotations

from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable
from .manipulation import one_hot
from .math import elementwise_add, elementwise_div, elementwise_mul, reduce_mean, reduce_sum, scale
from .tensor import cast


def dice_loss(input, label, epsilon=1e-05, name=None):
    """mean over examples of 1 - 2|X∩Y| / (|X| + |Y| + epsilon), label one-hot encoded."""
    check_variable("dice_loss", "input", input)
    check_variable("dice_loss", "label", label)
    if input.ndim < 2 or input.shape[-1] < 0:
        raise ProgramError(f"dice_loss: input must be [N, ..., classes] with known classes, "
                           f"got {list(input.shape)}")
    if label.ndim != input.ndim or label.shape[-1] not in (1, -1):
        raise ProgramError(f"dice_loss: label must be input's shape with a last dimension of "
                           f"1, got {list(label.shape)} for input {list(input.shape)}")
    hot = one_hot(label, depth=input.shape[-1])
    if hot.dtype != input.dtype:
        hot = cast(hot, input.dtype)
    dims = list(range(1, input.ndim))
    inse = reduce_sum(elementwise_mul(input, hot), dim=dims)
    denom = elementwise_add(reduce_sum(input, dim=dims), reduce_sum(hot, dim=dims))
    score = scale(elementwise_div(inse, scale(denom, bias=epsilon)), scale=-2.0, bias=1.0)
    return reduce_mean(score)


def temporal_shift(x, seg_num, shift_ratio=0.25, name=None):
    """Split [N*T, C, H, W] into seg_num steps; shift channels [0, C*r) back one step and
    [C*r, 2*C*r) forward one step (zeros at the ends)."""
    check_variable("temporal_shift", "x", x)
    helper = LayerHelper("temporal_shift", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("temporal_shift", {"X": x}, {"Out": out},
                     {"seg_num": seg_num, "shift_ratio": shift_ratio})
    return out


def _ints(v, n, what):
    if isinstance(v, int):
        return [v] * n
    v = [int(e) for e in v]
    if len(v) != n:
        raise ProgramError(f"unfold: {what} must be an int or {n} ints, got {v}")
    return v


def unfold(x, kernel_sizes, strides=1, paddings=0, dilations=1, name=None):
    """im2col: [N, C, H, W] -> [N, C*kh*kw, L]; paddings int, [h, w] or [top, left, bottom,
    right]."""
    check_variable("unfold", "x", x)
    if isinstance(paddings, int):
        paddings = [paddings] * 4
    elif len(paddings) == 2:
        paddings = list(paddings) * 2
    helper = LayerHelper("unfold", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("unfold", {"X": x}, {"Y": out}, {
        "kernel_sizes": _ints(kernel_sizes, 2, "kernel_sizes"),
        "strides": _ints(strides, 2, "strides"), "paddings": _ints(paddings, 4, "paddings"),
        "dilations": _ints(dilations, 2, "dilations")})
    return out


def bilinear_tensor_product(x, y, size, act=None, name=None, param_attr=None, bias_attr=None):
    """out[b, i] = x[b] W[i] y[b]^T + bias[i]; W [size, M, N], bias [1, size]."""
    check_variable("bilinear_tensor_product", "x", x)
    check_variable("bilinear_tensor_product", "y", y)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] < 0 or y.shape[1] < 0:
        raise ProgramError(f"bilinear_tensor_product: x and y must be [batch, known width], "
                           f"got {list(x.shape)} and {list(y.shape)}")
    helper = LayerHelper("bilinear_tensor_product", name)
    w = helper.create_parameter(param_attr, [size, x.shape[1], y.shape[1]], x.dtype)
    inputs = {"X": x, "Y": y, "Weight": w}
    bias = helper.create_parameter(bias_attr, [1, size], x.dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = bias
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("bilinear_tensor_product", inputs, {"Out": out})
    return helper.append_activation(out, act)
