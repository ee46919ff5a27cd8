"""Paddle 1.8's activation and elementwise math layers of issue 24 (and sum, mul, rank, size,
has_inf/has_nan/isfinite): Paddle's signatures; an attribute left None takes the op's default."""

from __future__ import annotations

import numpy as np

from ..build.initializer import Constant
from ..ir.errors import ProgramError
from .helper import FLOATS, LayerHelper, check_dtype, check_variable
from .math import _unary
from .tensor import assign


def _act(op_type, x, name=None, **attrs):
    # Paddle 1.8's activation layers take float16/32/64 only (a TypeError otherwise)
    return _unary(op_type, x, {k: float(v) for k, v in attrs.items() if v is not None}, name,
                  dtypes=FLOATS)


def selu(x, scale=None, alpha=None, name=None):
    """scale * (x if x > 0 else alpha * (e^x - 1)); scale/alpha default to SELU's constants."""
    return _act("selu", x, name, scale=scale, alpha=alpha)


def elu(x, alpha=1.0, name=None):
    return _act("elu", x, name, alpha=alpha)


def relu6(x, threshold=6.0, name=None):
    return _act("relu6", x, name, threshold=threshold)


def stanh(x, scale_a=0.67, scale_b=1.7159, name=None):
    return _act("stanh", x, name, scale_a=scale_a, scale_b=scale_b)


def hard_sigmoid(x, slope=0.2, offset=0.5, name=None):
    return _act("hard_sigmoid", x, name, slope=slope, offset=offset)


def swish(x, beta=1.0, name=None):
    return _act("swish", x, name, beta=beta)


def brelu(x, t_min=0.0, t_max=24.0, name=None):
    return _act("brelu", x, name, t_min=t_min, t_max=t_max)


def soft_relu(x, threshold=40.0, name=None):
    return _act("soft_relu", x, name, threshold=threshold)


def logsigmoid(x, name=None):
    return _act("logsigmoid", x, name)


def hard_swish(x, threshold=6.0, scale=6.0, offset=3.0, name=None):
    return _act("hard_swish", x, name, threshold=threshold, scale=scale, offset=offset)


def thresholded_relu(x, threshold=None):
    return _act("thresholded_relu", x, threshold=threshold)


def softplus(x, name=None):
    return _act("softplus", x, name)


def softshrink(x, alpha=None):
    """The op's attribute is ``lambda`` (a Python keyword, hence the layer's ``alpha``)."""
    return _act("softshrink", x, **{"lambda": alpha})


def hard_shrink(x, threshold=None):
    return _act("hard_shrink", x, threshold=threshold)


def tanh_shrink(x, name=None):
    return _act("tanh_shrink", x, name)


def erf(x):
    return _act("erf", x)


def atan(x, name=None):
    return _act("atan", x, name)


def rsqrt(x, name=None):
    return _act("rsqrt", x, name)


def ceil(x, name=None):
    return _act("ceil", x, name)


def floor(x, name=None):
    return _act("floor", x, name)


def cos(x, name=None):
    return _act("cos", x, name)


def acos(x, name=None):
    return _act("acos", x, name)


def asin(x, name=None):
    return _act("asin", x, name)


def sin(x, name=None):
    return _act("sin", x, name)


def round(x, name=None):
    """Halves round away from zero (as Paddle); the gradient is zero."""
    return _act("round", x, name)


def reciprocal(x, name=None):
    return _act("reciprocal", x, name)


def prelu(x, mode, param_attr=None, name=None):
    """max(0, x) + alpha * min(0, x) with a learnt alpha (initialised to 0.25): one for all
    of x (mode 'all'), one per channel (dim 1, 'channel') or one per element of a sample."""
    check_variable("prelu", "x", x)
    if mode not in ("all", "channel", "element"):
        raise ProgramError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")
    if mode != "all" and (len(x.shape) < 2 or any(d < 0 for d in x.shape[1:])):
        raise ProgramError(f"prelu: mode {mode!r} needs known dimensions after the batch, "
                           f"'{x.name}' has shape {list(x.shape)}")
    shape = {"all": [1], "channel": [1, x.shape[1], 1, 1] if mode == "channel" else None,
             "element": [1, *x.shape[1:]]}[mode]
    helper = LayerHelper("prelu", name)
    alpha = helper.create_parameter(param_attr, shape, x.dtype,
                                    default_initializer=Constant(0.25))
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("prelu", {"X": x, "Alpha": alpha}, {"Out": out}, {"mode": mode})
    return out


def maxout(x, groups, name=None, axis=1):
    """Out channel i = max of input channels i * groups .. i * groups + groups - 1."""
    return _unary("maxout", x, {"groups": int(groups), "axis": int(axis)}, name)


def cumsum(x, axis=None, exclusive=None, reverse=None):
    """Running sum along axis (default -1); exclusive leaves the element out, reverse runs
    from the end."""
    attrs = {k: v for k, v in (("axis", axis), ("exclusive", exclusive), ("reverse", reverse))
             if v is not None}
    return _unary("cumsum", x, attrs)


# the layer spellings of sum, mul, rank, size and the overflow checks
def sum(x):
    """Elementwise sum of a list of Variables (Paddle's ``sum`` op; as ``sums``)."""
    xs = list(x) if isinstance(x, list | tuple) else [x]
    if not xs:
        raise ProgramError("sum: x is an empty list")
    for v in xs:
        # Paddle 1.8's sum takes these four dtypes only
        check_dtype("sum", "x", v, ("float32", "float64", "int32", "int64"))
    helper = LayerHelper("sum")
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op("sum", {"X": xs}, {"Out": out})
    return out


def mul(x, y, x_num_col_dims: int = 1, y_num_col_dims: int = 1, name=None):
    """flatten(x, x_num_col_dims) @ flatten(y, y_num_col_dims), unflattened back."""
    check_dtype("mul", "x", x, FLOATS)
    check_dtype("mul", "y", y, FLOATS)
    helper = LayerHelper("mul", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("mul", {"X": x, "Y": y}, {"Out": out},
                     {"x_num_col_dims": int(x_num_col_dims),
                      "y_num_col_dims": int(y_num_col_dims)})
    return out


def rank(input):
    """The number of dimensions of input, an int32 constant of shape [1] (known at build)."""
    check_variable("rank", "input", input)
    out = assign(np.array([len(input.shape)], "int32"))
    out.stop_gradient = True
    return out


def _check(op_type, x, slot="X"):
    check_variable(op_type, "x", x)
    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference("bool" if slot == "X" else "int64",
                                                    stop_gradient=True)
    helper.append_op(op_type, {slot: x}, {"Out": out})
    return out


def size(input):
    """The number of elements of input (int64, shape [1])."""
    return _check("size", input, "Input")


def has_inf(x):
    """[True] when any element of x is infinite (bool, shape [1])."""
    return _check("isinf", x)


def has_nan(x):
    """[True] when any element of x is NaN (bool, shape [1])."""
    return _check("isnan", x)


def isfinite(x):
    """[True] when every element of x is finite (bool, shape [1])."""
    return _check("isfinite", x)
