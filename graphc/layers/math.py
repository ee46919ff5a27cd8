"""Elementwise, activation, matrix, reduction and clipping layers: one op each (plus act).

``axis`` in the elementwise layers is Paddle's: where Y's dimensions start inside X's.
"""

from __future__ import annotations

from .helper import FLOATS, NUMERIC, LayerHelper, check_dtype, check_variable


def _unary(op_type: str, x, attrs=None, name=None, dtypes=None):
    """One op X -> Out; ``dtypes``: the input dtypes Paddle 1.8's layer accepts, if it checks."""
    if dtypes is None:
        check_variable(op_type, "x", x)
    else:
        check_dtype(op_type, "x", x, dtypes)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, {"X": x}, {"Out": out}, attrs or {})
    return out


def _elementwise(op_type: str, x, y, axis: int, act, name):
    # Paddle 1.8's elementwise layers take these five dtypes (a TypeError otherwise)
    check_dtype(op_type, "x", x, NUMERIC)
    check_dtype(op_type, "y", y, NUMERIC)
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


# the activations check Paddle 1.8's float16/32/64 (its generated activation layers' check)
def relu(x, name=None):
    return _unary("relu", x, name=name, dtypes=FLOATS)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name=name, dtypes=FLOATS)


def tanh(x, name=None):
    return _unary("tanh", x, name=name, dtypes=FLOATS)


def gelu(x, approximate: bool = False, name=None):
    return _unary("gelu", x, {"approximate": approximate}, name, dtypes=FLOATS)


def softsign(x, name=None):
    """Out = x / (1 + |x|), elementwise (a LoD x keeps its LoD)."""
    return _unary("softsign", x, name=name, dtypes=FLOATS)


def leaky_relu(x, alpha: float = 0.02, name=None):
    return _unary("leaky_relu", x, {"alpha": alpha}, name, dtypes=FLOATS)


def softmax(input, use_cudnn: bool = False, name=None, axis: int = -1):
    return _unary("softmax", input, {"axis": axis}, name, dtypes=FLOATS)


def scale(x, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True, act=None,
          name=None):
    out = _unary("scale", x, {"scale": scale, "bias": bias,
                              "bias_after_scale": bias_after_scale}, name)
    return LayerHelper("scale").append_activation(out, act) if act else out


def matmul(x, y, transpose_x: bool = False, transpose_y: bool = False, alpha: float = 1.0,
           name=None):
    check_dtype("matmul", "x", x, FLOATS)  # Paddle 1.8's check: a TypeError for ints
    check_dtype("matmul", "y", y, FLOATS)
    helper = LayerHelper("matmul", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("matmul", {"X": x, "Y": y}, {"Out": out},
                     {"transpose_X": transpose_x, "transpose_Y": transpose_y, "alpha": alpha})
    return out


def mean(x, name=None):
    return _unary("mean", x, name=name, dtypes=FLOATS)


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


def reduce_min(input, dim=None, keep_dim: bool = False, name=None):
    return _reduce("reduce_min", input, dim, keep_dim, name)


def reduce_prod(input, dim=None, keep_dim: bool = False, name=None):
    return _reduce("reduce_prod", input, dim, keep_dim, name)


def reduce_all(input, dim=None, keep_dim: bool = False, name=None):
    """Logical and over dims of a bool tensor (no gradient)."""
    out = _reduce("reduce_all", input, dim, keep_dim, name)
    out.stop_gradient = True
    return out


def reduce_any(input, dim=None, keep_dim: bool = False, name=None):
    """Logical or over dims of a bool tensor (no gradient)."""
    out = _reduce("reduce_any", input, dim, keep_dim, name)
    out.stop_gradient = True
    return out


def elementwise_max(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_max", x, y, axis, act, name)


def elementwise_min(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_min", x, y, axis, act, name)


def elementwise_pow(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_pow", x, y, axis, act, name)


def elementwise_mod(x, y, axis: int = -1, act=None, name=None):
    """x mod y with the sign of y, as Paddle (no gradient)."""
    return _elementwise("elementwise_mod", x, y, axis, act, name)


def elementwise_floordiv(x, y, axis: int = -1, act=None, name=None):
    return _elementwise("elementwise_floordiv", x, y, axis, act, name)


def abs(x, name=None):
    return _unary("abs", x, name=name, dtypes=FLOATS)


def sqrt(x, name=None):
    return _unary("sqrt", x, name=name, dtypes=FLOATS)


def exp(x, name=None):
    return _unary("exp", x, name=name, dtypes=FLOATS)


def log(x, name=None):
    return _unary("log", x, name=name, dtypes=FLOATS)


def square(x, name=None):
    return _unary("square", x, name=name, dtypes=FLOATS)


def sign(x):
    return _unary("sign", x, dtypes=FLOATS)


def pow(x, factor: float = 1.0, name=None):
    return _unary("pow", x, {"factor": float(factor)}, name)


def clip(x, min: float, max: float, name=None):
    """min(max(x, min), max); the gradient passes where min < x < max."""
    return _unary("clip", x, {"min": float(min), "max": float(max)}, name, dtypes=FLOATS)


def clip_by_norm(x, max_norm: float, name=None):
    """x scaled down to L2 norm max_norm when its norm exceeds it."""
    return _unary("clip_by_norm", x, {"max_norm": float(max_norm)}, name)


def l2_normalize(x, axis: int, epsilon: float = 1e-12, name=None):
    """x / sqrt(sum(x^2, axis) + epsilon) (Paddle's norm op; a 1-D x uses axis 0)."""
    check_variable("l2_normalize", "x", x)
    if len(x.shape) == 1:
        axis = 0
    helper = LayerHelper("l2_normalize", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    norm = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("norm", {"X": x}, {"Out": out, "Norm": norm},
                     {"axis": 1 if axis is None else int(axis), "epsilon": float(epsilon)})
    return out
