"""Fluid-style layer functions (``graphc.layers.fc`` ...), building into the default programs.

Each layer appends Paddle's ops with Paddle's names; see helper.LayerHelper.
"""

from .learning_rate_scheduler import cosine_decay, linear_lr_warmup, piecewise_decay
from .loss import accuracy, cross_entropy, softmax_with_cross_entropy, topk
from .math import (
    elementwise_add,
    elementwise_div,
    elementwise_mul,
    elementwise_sub,
    gelu,
    leaky_relu,
    matmul,
    mean,
    reduce_max,
    reduce_mean,
    reduce_sum,
    relu,
    scale,
    sigmoid,
    softmax,
    tanh,
)
from .math_op_patch import monkey_patch_variable
from .nn import batch_norm, conv2d, dropout, embedding, fc, layer_norm, pool2d
from .tensor import (
    assign,
    cast,
    concat,
    data,
    fill_constant,
    get_tensor_from_selected_rows,
    merge_selected_rows,
    reshape,
    split,
    sums,
    transpose,
)

monkey_patch_variable()

__all__ = [
    "accuracy", "assign", "batch_norm", "cast", "concat", "conv2d", "cosine_decay",
    "cross_entropy", "data", "dropout", "elementwise_add", "elementwise_div", "elementwise_mul",
    "elementwise_sub", "embedding", "fc", "fill_constant", "gelu",
    "get_tensor_from_selected_rows", "layer_norm", "leaky_relu", "linear_lr_warmup", "matmul",
    "mean", "merge_selected_rows", "piecewise_decay", "pool2d", "reduce_max", "reduce_mean",
    "reduce_sum", "relu", "reshape", "scale", "sigmoid", "softmax", "softmax_with_cross_entropy",
    "split", "sums", "tanh", "topk", "transpose",
]
