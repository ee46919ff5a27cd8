"""``fluid.layers.ops``: Paddle's generated activation and element-wise math layers, as one
module (``import paddle.fluid.layers.ops as ops`` ports); each is graphc.layers' own layer."""

from __future__ import annotations

from .. import layers as _layers

# Paddle 1.8's layers/ops.py __all__ (its __activations_noattr__, __unary_func__ and the
# layers it adds one by one), in its order
_PADDLE_OPS = (
    "sigmoid", "logsigmoid", "tanh", "tanh_shrink", "softplus", "softsign",
    "exp", "atan", "sqrt", "rsqrt", "abs", "ceil", "floor", "cos", "acos", "asin", "sin",
    "round", "reciprocal", "square",
    "softshrink", "hard_shrink", "cumsum", "thresholded_relu", "gelu", "erf",
    "uniform_random",
)

__all__ = list(_PADDLE_OPS)


def __getattr__(name: str):
    # looked up when asked for, so a layer added to graphc.layers later appears here too
    if name in _PADDLE_OPS:
        return getattr(_layers, name)
    # graphc.layers' own hook raises graphc's MissingAPIError for ``layers.ops.<name>``
    return _layers.__getattr__(f"ops.{name}")
