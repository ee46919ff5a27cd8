"""Elementwise, activation, matrix and reduction layers: one op each (plus optional act).

``axis`` in the elementwise layers is Paddle's: where Y's dimensions start inside X's.
"""

from __future__ import annotations

from .helper import LayerHelper, check_variable


def _unary(op_type: str, x, attrs=None, name=None):
    check_variable(op_type, "x", x)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, {"X": x}, {"Out": out}, attrs or {})
    return out


def _elementwise(op_type: str, x, y, axis: int, act, name):
    check_variable(op_type, "x", x)
    check_variable(op_type, "y", y)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, {"X": x, "Y": y}, {"Out": out}, {"axis": axis})
    return helper.append_activation(out, act)


def elementwise_add(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_div", x, y, axis, act, name)


def relu(x, name=None):
    return _unary("relu", x, name=name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name=name)


def tanh(x, name=None):
    return _unary("tanh", x, name=name)


def gelu(x, approximate: bool = False, name=None):
    return _unary("gelu", x, {"approximate": approximate}, name)


def leaky_relu(x, alpha: float = 0.02, name=None):
    return _unary("leaky_relu", x, {"alpha": alpha}, name)


def softmax(input, use_cudnn: bool = False, name=None, axis: int = -1):
    return _unary("softmax", input, {"axis": axis}, name)


def scale(x, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True, act=None,
          name=None):
    out = _unary("scale", x, {"scale": scale, "bias": bias,
                              "bias_after_scale": bias_after_scale}, name)
    return LayerHelper("scale").append_activation(out, act) if act else out


def matmul(x, y, transpose_x: bool = False, transpose_y: bool = False, alpha: float = 1.0,
           name=None):
    check_variable("matmul", "x", x)
    check_variable("matmul", "y", y)
    helper = LayerHelper("matmul", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("matmul", {"X": x, "Y": y}, {"Out": out},
                     {"transpose_X": transpose_x, "transpose_Y": transpose_y, "alpha": alpha})
    return out


def mean(x, name=None):
    return _unary("mean", x, name=name)


def _reduce(op_type, input, dim, keep_dim, name):
    if dim is None:
        attrs = {"dim": [0], "keep_dim": keep_dim, "reduce_all": True}
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        attrs = {"dim": dims, "keep_dim": keep_dim,
                 "reduce_all": len(dims) == len(input.shape or ())}
    return _unary(op_type, input, attrs, name)


def reduce_sum(input, dim=None, keep_dim: bool = False, name=None):
    return _reduce("reduce_sum", input, dim, keep_dim, name)


def reduce_mean(input, dim=None, keep_dim: bool = False, name=None):
    return _reduce("reduce_mean", input, dim, keep_dim, name)


def reduce_max(input, dim=None, keep_dim: bool = False, name=None):
    return _reduce("reduce_max", input, dim, keep_dim, name)
