"""Shape and dtype inference of every registered op against hand-computed cases, the errors
bad inputs get, and the Program builder's Paddle naming, parameters and source lines.

Expected shapes are worked out by hand from Paddle's rules (they will be checked against
what each op produces once every backend rule exists). ``CASES`` must name every
registered op type: a new op without a case here fails ``test_every_op_has_a_case``.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

import pytest

import graphc
from graphc import initializer, layers
from graphc.ir import unique_name
from graphc.ir.grad_defs import grad_op_type
from graphc.ir.opdef import all_op_types, get_op_def, has_op_def
from graphc.ir.types import FLOAT_DTYPES, TensorType, lod_type

HERE = "test_shape_inference.py"


def t(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype)


def i64(*shape: int) -> TensorType:
    return t(*shape, dtype="int64")


def rows(*shape: int, dtype: str = "float32") -> TensorType:
    """A row-sparse (SelectedRows) type standing for the dense ``shape``."""
    return TensorType(tuple(shape), dtype, True)


def _as_lists(types: dict[str, Any]) -> dict[str, list[TensorType]]:
    """{slot: type or [types]} -> {slot: [types]}."""
    return {k: list(v) if isinstance(v, list) else [v] for k, v in types.items()}


def infer(op_type: str, ins: dict[str, Any], attrs: dict[str, Any] | None = None,
          where: str | None = None) -> dict[str, list[TensorType]]:
    """Run ``op_type``'s inference the way the builder and verifier do (attrs normalised)."""
    where = where or f"op {op_type}"
    opdef = get_op_def(op_type, where)
    return opdef.infer_types(_as_lists(ins), opdef.normalize_attrs(attrs or {}, where), where)


def case(op_type: str, ins: dict, attrs: dict | None, outs: dict, name: str = ""):
    return pytest.param(op_type, ins, attrs or {}, outs,
                        id=f"{op_type}-{name}" if name else op_type)


X4 = t(2, 3, 4, 5)
ELEMENTWISE = ("elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
               "elementwise_max", "elementwise_min", "elementwise_pow")
UNARY = ("relu", "sigmoid", "tanh", "exp", "sqrt", "square", "abs", "gelu", "leaky_relu",
         "scale", "assign", "softsign")
ADAM_INS = {"Param": t(10, 5), "Grad": t(10, 5), "LearningRate": t(1), "Moment1": t(10, 5),
            "Moment2": t(10, 5), "Beta1Pow": t(1), "Beta2Pow": t(1)}
ADAM_OUTS = {"ParamOut": t(10, 5), "Moment1Out": t(10, 5), "Moment2Out": t(10, 5),
             "Beta1PowOut": t(1), "Beta2PowOut": t(1)}
SECOND_ADAM_PARAM = {"Param": t(3), "Grad": t(3), "Moment1": t(3), "Moment2": t(3),
                     "Beta1Pow": t(1), "Beta2Pow": t(1)}
FUSED_ADAM_INS = {"LearningRate": t(1),
                  **{k: [ADAM_INS[k], v] for k, v in SECOND_ADAM_PARAM.items()}}
FUSED_ADAM_OUTS = {f"{k}Out": [ADAM_OUTS[f"{k}Out"], v]
                   for k, v in SECOND_ADAM_PARAM.items() if k != "Grad"}

CASES = [
    # -- elementwise: Paddle's axis broadcasting -------------------------------------------
    *[case(op, {"X": X4, "Y": t(3, 4)}, {"axis": 1}, {"Out": X4}, "mid-axis")
      for op in ELEMENTWISE],
    case("elementwise_add", {"X": X4, "Y": t(4, 5)}, {"axis": -1}, {"Out": X4}, "trailing"),
    case("elementwise_add", {"X": X4, "Y": t(5)}, None, {"Out": X4}, "vector"),
    case("elementwise_add", {"X": X4, "Y": t(1)}, None, {"Out": X4}, "scalar-like"),
    case("elementwise_add", {"X": X4, "Y": t(2)}, {"axis": 0}, {"Out": X4}, "axis-0"),
    # Y [3, 1] at axis 1 of a rank-2 X only fits once its trailing 1 is trimmed (Paddle)
    case("elementwise_add", {"X": t(2, 3), "Y": t(3, 1)}, {"axis": 1}, {"Out": t(2, 3)},
         "trim-trailing-1"),
    case("elementwise_add", {"X": X4, "Y": t(3, 1)}, {"axis": 1}, {"Out": X4}, "inner-1"),
    case("elementwise_mul", {"X": t(4, 5), "Y": X4}, None, {"Out": X4}, "y-rank-larger"),
    case("elementwise_mul", {"X": t(3, 4), "Y": X4}, {"axis": 1}, {"Out": X4},
         "y-rank-larger-axis"),
    case("elementwise_add", {"X": t(-1, 3, 4, 5), "Y": t(3)}, {"axis": 1},
         {"Out": t(-1, 3, 4, 5)}, "unknown-batch"),
    case("elementwise_add", {"X": t(-1, 10), "Y": t(1, 10)}, None, {"Out": t(-1, 10)},
         "unknown-vs-1"),
    case("elementwise_add", {"X": t(1, 10), "Y": t(-1, 10)}, None, {"Out": t(-1, 10)},
         "1-vs-unknown"),
    case("elementwise_add", {"X": t(-1, 10), "Y": t(8, 10)}, None, {"Out": t(8, 10)},
         "unknown-vs-known"),
    case("elementwise_add", {"X": t(2, 3, dtype="float16"), "Y": t(3, dtype="float16")}, None,
         {"Out": t(2, 3, dtype="float16")}, "f16"),
    # -- activations and other same-shape ops ------------------------------------------------
    *[case(op, {"X": t(-1, 7)}, None, {"Out": t(-1, 7)}) for op in UNARY],
    case("relu", {"X": t(2, 3, dtype="float64")}, None, {"Out": t(2, 3, dtype="float64")},
         "f64"),
    case("leaky_relu", {"X": t(2)}, {"alpha": 0.1}, {"Out": t(2)}, "alpha"),
    case("scale", {"X": t(2, 3)}, {"scale": 2.0, "bias": 1.0, "bias_after_scale": False},
         {"Out": t(2, 3)}, "bias-first"),
    case("softmax", {"X": t(-1, 10)}, None, {"Out": t(-1, 10)}),
    case("softmax", {"X": t(2, 3, 4)}, {"axis": 1}, {"Out": t(2, 3, 4)}, "axis-1"),
    case("sum", {"X": [t(2, 3), t(2, 3), t(2, 3)]}, None, {"Out": t(2, 3)}),
    case("sum", {"X": [t(-1, 3), t(4, 3)]}, None, {"Out": t(4, 3)}, "fills-unknown"),
    case("mean", {"X": t(-1, 10)}, None, {"Out": t(1)}),
    # -- matrix products -------------------------------------------------------------------
    case("mul", {"X": t(-1, 784), "Y": t(784, 10)}, None, {"Out": t(-1, 10)}),
    case("mul", {"X": t(2, 3, 4), "Y": t(4, 5)}, {"x_num_col_dims": 2}, {"Out": t(2, 3, 5)},
         "x_num_col_dims=2"),
    case("mul", {"X": X4, "Y": t(60, 7)}, None, {"Out": t(2, 7)}, "flatten-x"),
    case("mul", {"X": t(6, 12), "Y": t(3, 4, 5)}, {"y_num_col_dims": 2}, {"Out": t(6, 5)},
         "y_num_col_dims=2"),
    case("matmul", {"X": t(2, 3), "Y": t(3, 4)}, None, {"Out": t(2, 4)}),
    case("matmul", {"X": t(3, 2), "Y": t(3, 4)}, {"transpose_X": True}, {"Out": t(2, 4)},
         "transpose-x"),
    case("matmul", {"X": t(2, 3), "Y": t(4, 3)}, {"transpose_Y": True}, {"Out": t(2, 4)},
         "transpose-y"),
    case("matmul", {"X": t(3, 2), "Y": t(4, 3)}, {"transpose_X": True, "transpose_Y": True},
         {"Out": t(2, 4)}, "transpose-both"),
    case("matmul", {"X": t(3), "Y": t(3, 4)}, None, {"Out": t(4)}, "vector-x"),
    case("matmul", {"X": t(2, 3), "Y": t(3)}, None, {"Out": t(2)}, "vector-y"),
    case("matmul", {"X": t(3), "Y": t(3)}, None, {"Out": t(1)}, "dot"),
    case("matmul", {"X": t(5, 1, 2, 3), "Y": t(4, 3, 6)}, None, {"Out": t(5, 4, 2, 6)},
         "batch-broadcast"),
    case("matmul", {"X": t(-1, 2, 3), "Y": t(3, 4)}, {"alpha": 0.5}, {"Out": t(-1, 2, 4)},
         "unknown-batch"),
    case("matmul", {"X": t(8, 2, 3), "Y": t(8, 4, 3)}, {"transpose_Y": True},
         {"Out": t(8, 2, 4)}, "batched-transpose"),
    # -- reductions ------------------------------------------------------------------------
    *[case(op, {"X": t(2, 3, 4)}, {"dim": [1]}, {"Out": t(2, 4)})
      for op in ("reduce_sum", "reduce_mean", "reduce_max")],
    case("reduce_sum", {"X": t(2, 3, 4)}, {"dim": [1], "keep_dim": True}, {"Out": t(2, 1, 4)},
         "keep_dim"),
    case("reduce_sum", {"X": t(2, 3, 4)}, {"dim": [-1]}, {"Out": t(2, 3)}, "negative-dim"),
    case("reduce_sum", {"X": t(2, 3, 4)}, {"dim": [0, -1]}, {"Out": t(3)}, "two-dims"),
    case("reduce_mean", {"X": t(2, 3, 4)}, {"reduce_all": True}, {"Out": t(1)}, "reduce_all"),
    case("reduce_mean", {"X": t(2, 3, 4)}, {"reduce_all": True, "keep_dim": True},
         {"Out": t(1, 1, 1)}, "reduce_all-keep_dim"),
    case("reduce_max", {"X": t(-1, 3)}, {"dim": [1]}, {"Out": t(-1)}, "unknown-batch"),
    # -- metrics ---------------------------------------------------------------------------
    case("top_k", {"X": t(-1, 10)}, {"k": 3}, {"Out": t(-1, 3), "Indices": i64(-1, 3)}),
    case("accuracy", {"Out": t(-1, 3), "Indices": i64(-1, 3), "Label": i64(-1, 1)}, None,
         {"Accuracy": t(1), "Correct": t(1, dtype="int32"), "Total": t(1, dtype="int32")}),
    # -- tensor manipulation -----------------------------------------------------------------
    case("reshape2", {"X": t(2, 3, 4)}, {"shape": [0, -1]},
         {"Out": t(2, 12), "XShape": t(0, 2, 3, 4)}, "copy-and-infer"),
    case("reshape2", {"X": t(2, 3, 4)}, {"shape": [4, -1]},
         {"Out": t(4, 6), "XShape": t(0, 2, 3, 4)}, "infer-last"),
    case("reshape2", {"X": t(6)}, {"shape": [2, 3]}, {"Out": t(2, 3), "XShape": t(0, 6)},
         "explicit"),
    case("reshape2", {"X": t(-1, 3, 4)}, {"shape": [0, 12]},
         {"Out": t(-1, 12), "XShape": t(0, -1, 3, 4)}, "copy-unknown-batch"),
    case("reshape2", {"X": t(-1, 3, 4)}, {"shape": [-1, 12]},
         {"Out": t(-1, 12), "XShape": t(0, -1, 3, 4)}, "infer-unknown-batch"),
    # As Paddle's compile-time rule: with an unknown input dim, the -1 stays unknown.
    case("reshape2", {"X": t(-1, 3, 4)}, {"shape": [0, -1]},
         {"Out": t(-1, -1), "XShape": t(0, -1, 3, 4)}, "copy-unknown-and-infer"),
    case("transpose2", {"X": t(2, 3, 4)}, {"axis": [2, 0, 1]},
         {"Out": t(4, 2, 3), "XShape": t(0, 2, 3, 4)}),
    case("transpose2", {"X": t(-1, 8, 16)}, {"axis": [0, 2, 1]},
         {"Out": t(-1, 16, 8), "XShape": t(0, -1, 8, 16)}, "unknown-batch"),
    case("concat", {"X": [t(2, 3), t(4, 3)]}, None, {"Out": t(6, 3)}),
    case("concat", {"X": [t(2, 3), t(2, 5), t(2, 1)]}, {"axis": -1}, {"Out": t(2, 9)},
         "last-axis"),
    case("concat", {"X": [t(-1, 3), t(2, 3)]}, {"axis": 0}, {"Out": t(-1, 3)},
         "unknown-on-axis"),
    case("concat", {"X": [t(-1, 3), t(-1, 5)]}, {"axis": 1}, {"Out": t(-1, 8)},
         "unknown-off-axis"),
    case("split", {"X": t(6, 4)}, {"num": 3}, {"Out": [t(2, 4)] * 3}, "num"),
    case("split", {"X": t(6, 4)}, {"sections": [1, -1, 2]},
         {"Out": [t(1, 4), t(3, 4), t(2, 4)]}, "sections-with-minus-1"),
    case("split", {"X": t(2, 6)}, {"num": 2, "axis": -1}, {"Out": [t(2, 3), t(2, 3)]},
         "last-axis"),
    case("split", {"X": t(-1, 4)}, {"num": 2}, {"Out": [t(-1, 4), t(-1, 4)]},
         "unknown-dim"),
    case("split", {"X": t(-1, 4)}, {"sections": [2, -1]}, {"Out": [t(2, 4), t(-1, 4)]},
         "unknown-dim-sections"),
    case("split", {"X": t(3, 4)}, {"sections": [3, -1]}, {"Out": [t(3, 4), t(0, 4)]},
         "empty-rest"),
    case("cast", {"X": t(-1, 3)}, {"in_dtype": "float32", "out_dtype": "int64"},
         {"Out": i64(-1, 3)}),
    case("cast", {"X": t(2, dtype="float16")}, {"in_dtype": "float16", "out_dtype": "float32"},
         {"Out": t(2)}, "f16-to-f32"),
    # -- creation ----------------------------------------------------------------------------
    case("fill_constant", {}, {"shape": [2, 3], "value": 1.5}, {"Out": t(2, 3)}),
    case("fill_constant", {}, {"shape": [1], "dtype": "int64", "value": 7},
         {"Out": i64(1)}, "int64"),
    # -- issue 24: porting blockers (shape tensors, folded when the step is traced)
    case("fill_constant", {"ShapeTensor": [TensorType((2,), "int32")]}, {"shape": [-1, 3]},
         {"Out": t(-1, 3)}, "shape-tensor"),
    case("uniform_random", {"ShapeTensorList": [TensorType((1,), "int32")] * 2},
         {"shape": [-1, 4]}, {"Out": t(-1, 4)}, "shape-tensor-list"),
    case("reshape2", {"X": t(-1, 6), "ShapeTensor": [TensorType((1,), "int32")] * 3},
         {"shape": [-1, 2, 3]}, {"Out": t(-1, 2, 3), "XShape": t(0, -1, 6)}, "shape-tensor"),
    case("expand", {"X": t(2, 3), "expand_times_tensor": [TensorType((1,), "int32")] * 2},
         {"expand_times": [-1, 2]}, {"Out": t(-1, 6)}, "times-tensor"),
    case("fill_zeros_like", {"X": t(-1, 3)}, None, {"Out": t(-1, 3)}),
    case("fill_zeros_like", {"X": i64(2)}, None, {"Out": i64(2)}, "int64"),
    case("uniform_random", {}, {"shape": [4, 5], "min": -0.5, "max": 0.5}, {"Out": t(4, 5)}),
    case("gaussian_random", {}, {"shape": [4, 5], "dtype": "float64", "std": 0.1},
         {"Out": t(4, 5, dtype="float64")}),
    # -- convolution and pooling -------------------------------------------------------------
    case("conv2d", {"Input": t(2, 3, 32, 32), "Filter": t(8, 3, 3, 3)}, None,
         {"Output": t(2, 8, 30, 30)}),
    case("conv2d", {"Input": t(2, 3, 32, 32), "Filter": t(8, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1]}, {"Output": t(2, 8, 16, 16)}, "stride2-pad1"),
    case("conv2d", {"Input": t(2, 3, 32, 32), "Filter": t(8, 3, 3, 3)},
         {"dilations": [2, 2]}, {"Output": t(2, 8, 28, 28)}, "dilation2"),
    case("conv2d", {"Input": t(2, 3, 32, 32), "Filter": t(8, 3, 3, 3)},
         {"strides": [2, 2], "padding_algorithm": "SAME"}, {"Output": t(2, 8, 16, 16)},
         "same-stride2"),
    case("conv2d", {"Input": t(2, 3, 31, 31), "Filter": t(8, 3, 5, 5)},
         {"strides": [2, 2], "padding_algorithm": "SAME"}, {"Output": t(2, 8, 16, 16)},
         "same-odd"),
    case("conv2d", {"Input": t(2, 3, 32, 32), "Filter": t(8, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [5, 5], "padding_algorithm": "VALID"},
         {"Output": t(2, 8, 15, 15)}, "valid-ignores-paddings"),
    case("conv2d", {"Input": t(2, 32, 32, 3), "Filter": t(8, 3, 3, 3)},
         {"data_format": "NHWC", "paddings": [1, 1]}, {"Output": t(2, 32, 32, 8)}, "nhwc"),
    case("conv2d", {"Input": t(2, 4, 8, 8), "Filter": t(6, 2, 3, 3)}, {"groups": 2},
         {"Output": t(2, 6, 6, 6)}, "groups"),
    case("conv2d", {"Input": t(1, 3, 8, 8), "Filter": t(4, 3, 3, 3)},
         {"paddings": [1, 2, 0, 1]}, {"Output": t(1, 4, 9, 7)}, "asymmetric-pads"),
    case("conv2d", {"Input": t(-1, 3, -1, 32), "Filter": t(8, 3, 3, 3)}, None,
         {"Output": t(-1, 8, -1, 30)}, "unknown-dims"),
    case("depthwise_conv2d", {"Input": t(2, 4, 8, 8), "Filter": t(4, 1, 3, 3)},
         {"groups": 4, "paddings": [1, 1]}, {"Output": t(2, 4, 8, 8)}),
    case("pool2d", {"X": t(2, 3, 32, 32)}, {"ksize": [2, 2], "strides": [2, 2]},
         {"Out": t(2, 3, 16, 16)}),
    case("pool2d", {"X": t(2, 3, 7, 7)}, {"ksize": [2, 2], "strides": [2, 2]},
         {"Out": t(2, 3, 3, 3)}, "floor"),
    case("pool2d", {"X": t(2, 3, 7, 7)}, {"ksize": [2, 2], "strides": [2, 2], "ceil_mode": True},
         {"Out": t(2, 3, 4, 4)}, "ceil_mode"),
    case("pool2d", {"X": t(2, 3, 32, 32)},
         {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1], "pooling_type": "avg"},
         {"Out": t(2, 3, 16, 16)}, "avg-pad1"),
    case("pool2d", {"X": t(-1, 3, 7, 9)}, {"global_pooling": True}, {"Out": t(-1, 3, 1, 1)},
         "global"),
    case("pool2d", {"X": t(2, 3, 13, 17)}, {"ksize": [4, 5], "adaptive": True},
         {"Out": t(2, 3, 4, 5)}, "adaptive"),
    case("pool2d", {"X": t(2, 32, 32, 3)},
         {"ksize": [2, 2], "strides": [2, 2], "data_format": "NHWC"},
         {"Out": t(2, 16, 16, 3)}, "nhwc"),
    case("pool2d", {"X": t(2, 3, 8, 8)},
         {"ksize": [3, 3], "strides": [3, 3], "padding_algorithm": "SAME"},
         {"Out": t(2, 3, 3, 3)}, "same"),
    # -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
    case("pool2d", {"X": t(-1, 3, 3, 3)}, {"ksize": [4, 4], "strides": [2, 2]},
         {"Out": t(-1, 3, 1, 1)}, "window-past-input"),
    case("conv2d_transpose", {"Input": t(-1, 4, 5, 5), "Filter": t(4, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1]}, {"Output": t(-1, 3, 9, 9)}),
    case("conv2d_transpose", {"Input": t(2, 4, 5, 5), "Filter": t(4, 3, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1], "output_size": [10, 10], "groups": 2},
         {"Output": t(2, 6, 10, 10)}, "output_size-groups"),
    case("conv2d_transpose", {"Input": t(2, 5, -1, 4), "Filter": t(4, 3, 2, 2)},
         {"data_format": "NHWC"}, {"Output": t(2, 6, -1, 3)}, "nhwc-unknown"),
    case("depthwise_conv2d_transpose", {"Input": t(2, 4, 5, 5), "Filter": t(4, 1, 3, 3)},
         {"groups": 4}, {"Output": t(2, 4, 7, 7)}),
    case("conv3d", {"Input": t(-1, 4, 6, 6, 6), "Filter": t(8, 2, 3, 3, 3)},
         {"strides": [2, 2, 2], "paddings": [1, 1, 1], "dilations": [1, 1, 1], "groups": 2},
         {"Output": t(-1, 8, 3, 3, 3)}),
    case("conv3d_transpose", {"Input": t(2, 4, 3, 3, 3), "Filter": t(4, 2, 2, 2, 2)},
         {"strides": [2, 2, 2], "paddings": [0, 0, 0], "dilations": [1, 1, 1]},
         {"Output": t(2, 2, 6, 6, 6)}),
    case("pool3d", {"X": t(-1, 3, 7, 7, 7)}, {"ksize": [2, 2, 2], "strides": [2, 2, 2]},
         {"Out": t(-1, 3, 3, 3, 3)}),
    case("pool3d", {"X": t(2, 3, 7, 8, 9)}, {"ksize": [2, 3, 4], "adaptive": True},
         {"Out": t(2, 3, 2, 3, 4)}, "adaptive"),
    case("instance_norm", {"X": t(2, 3, 4, 4), "Scale": t(3), "Bias": t(3)}, None,
         {"Y": t(2, 3, 4, 4), "SavedMean": t(6), "SavedVariance": t(6)}),
    case("group_norm", {"X": t(-1, 6, 4, 4), "Scale": t(6), "Bias": t(6)}, {"groups": 3},
         {"Y": t(-1, 6, 4, 4), "Mean": t(-1, 3), "Variance": t(-1, 3)}),
    case("lrn", {"X": t(2, 6, 4, 4)}, None, {"Out": t(2, 6, 4, 4), "MidOut": t(2, 6, 4, 4)}),
    case("affine_channel", {"X": t(2, 3, 4), "Scale": t(3), "Bias": t(3)}, None,
         {"Out": t(2, 3, 4)}),
    case("bilinear_interp", {"X": t(-1, 3, 4, 5)}, {"out_h": 8, "out_w": 3},
         {"Out": t(-1, 3, 8, 3)}),
    case("bilinear_interp", {"X": t(2, 4, 5, 3)}, {"scale": 1.5, "data_layout": "NHWC"},
         {"Out": t(2, 6, 7, 3)}, "scale-nhwc"),
    case("nearest_interp", {"X": t(2, 3, -1, 5)}, {"scale": 2.0}, {"Out": t(2, 3, -1, 10)}),
    case("trilinear_interp", {"X": t(2, 3, 4, 5, 6)}, {"out_d": 2, "out_h": 3, "out_w": 4},
         {"Out": t(2, 3, 2, 3, 4)}),
    case("max_pool2d_with_index", {"X": t(-1, 3, 7, 7)},
         {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]},
         {"Out": t(-1, 3, 4, 4), "Mask": t(-1, 3, 4, 4, dtype="int32")}),
    case("max_pool3d_with_index", {"X": t(2, 3, 5, 6, 7)}, {"ksize": [2, 3, 4], "adaptive": True},
         {"Out": t(2, 3, 2, 3, 4), "Mask": t(2, 3, 2, 3, 4, dtype="int32")}),
    case("temporal_shift", {"X": t(-1, 8, 4, 4)}, {"seg_num": 4}, {"Out": t(-1, 8, 4, 4)}),
    case("unfold", {"X": t(2, 3, 5, 6)},
         {"kernel_sizes": [2, 3], "strides": [2, 1], "paddings": [1, 0, 0, 2]},
         {"Y": t(2, 18, 18)}),
    case("unfold", {"X": t(-1, 3, -1, 6)}, {"kernel_sizes": [2, 2]}, {"Y": t(-1, 12, -1)},
         "unknown"),
    case("bilinear_tensor_product",
         {"X": t(-1, 3), "Y": t(-1, 4), "Weight": t(5, 3, 4), "Bias": t(1, 5)}, None,
         {"Out": t(-1, 5)}),
    # -- issue 24: nn tail (data_norm, spectral_norm, lstm, hash, cvm)
    case("data_norm", {"X": t(-1, 6), "BatchSize": t(6), "BatchSum": t(6),
                       "BatchSquareSum": t(6)}, {"slot_dim": 3},
         {"Y": t(-1, 6), "Means": t(6), "Scales": t(6), "BatchSizeOut": t(6),
          "BatchSumOut": t(6), "BatchSquareSumOut": t(6)}),
    case("spectral_norm", {"Weight": t(4, 3, 2), "U": t(3), "V": t(8)}, {"dim": 1},
         {"Out": t(4, 3, 2)}),
    case("cudnn_lstm", {"Input": t(5, -1, 3), "InitH": t(4, -1, 2), "InitC": t(4, -1, 2),
                        "W": t(2 * 4 * 2 * (3 + 2 + 2) + 2 * 4 * 2 * (4 + 2 + 2))},
         {"hidden_size": 2, "num_layers": 2, "is_bidirec": True},
         {"Out": t(5, -1, 4), "LastH": t(4, -1, 2), "LastC": t(4, -1, 2),
          "Reserve": t(1, 5, -1, 4)}),
    case("hash", {"X": i64(-1, 2)}, {"num_hash": 3, "mod_by": 7}, {"Out": i64(-1, 3, 1)}),
    case("cvm", {"X": t(-1, 5), "CVM": t(-1, 2)}, None, {"Y": t(-1, 5)}, "use_cvm"),
    case("cvm", {"X": t(-1, 5), "CVM": t(-1, 2)}, {"use_cvm": False}, {"Y": t(-1, 3)},
         "no_cvm"),
    case("filter_by_instag", {"Ins": lod_type((-1, 4), "float32", 1),
                              "Ins_tag": lod_type((-1, 1), "int64", 1), "Filter_tag": i64(3)},
         {"is_lod": True},
         {"Out": lod_type((-1, 4), "float32", 1), "LossWeight": lod_type((-1, 1), "float32", 1),
          "IndexMap": lod_type((-1, 3), "int64", 1)}),
    case("load", {}, {"file_path": "w.bin", "shape": [2, 3], "dtype": "int64"},
         {"Out": i64(2, 3)}),
    case("load", {}, {"file_path": "w.bin", "shape": [4], "load_as_fp16": True},
         {"Out": t(4, dtype="float16")}, "fp16"),
    # -- normalisation, dropout, embedding ---------------------------------------------------
    case("batch_norm", {"X": t(-1, 3, 4, 4), "Scale": t(3), "Bias": t(3), "Mean": t(3),
                        "Variance": t(3)}, None,
         {"Y": t(-1, 3, 4, 4), "MeanOut": t(3), "VarianceOut": t(3), "SavedMean": t(3),
          "SavedVariance": t(3)}, "nchw"),
    case("batch_norm", {"X": t(2, 4, 4, 3), "Scale": t(3), "Bias": t(3), "Mean": t(3),
                        "Variance": t(3)}, {"data_layout": "NHWC", "is_test": True},
         {"Y": t(2, 4, 4, 3), "MeanOut": t(3), "VarianceOut": t(3), "SavedMean": t(3),
          "SavedVariance": t(3)}, "nhwc"),
    case("batch_norm", {"X": t(-1, 10), "Scale": t(10), "Bias": t(10), "Mean": t(10),
                        "Variance": t(10)}, None,
         {"Y": t(-1, 10), "MeanOut": t(10), "VarianceOut": t(10), "SavedMean": t(10),
          "SavedVariance": t(10)}, "2d"),
    case("batch_norm", {"X": t(2, 3, 4, 4, dtype="float16"), "Scale": t(3), "Bias": t(3),
                        "Mean": t(3), "Variance": t(3)}, None,
         {"Y": t(2, 3, 4, 4, dtype="float16"), "MeanOut": t(3), "VarianceOut": t(3),
          "SavedMean": t(3), "SavedVariance": t(3)}, "f16-with-f32-stats"),
    case("layer_norm", {"X": t(2, 3, 4), "Scale": t(12), "Bias": t(12)}, None,
         {"Y": t(2, 3, 4), "Mean": t(2), "Variance": t(2)}, "axis1"),
    case("layer_norm", {"X": t(2, 3, 4), "Scale": t(4)}, {"begin_norm_axis": 2},
         {"Y": t(2, 3, 4), "Mean": t(6), "Variance": t(6)}, "axis2"),
    case("layer_norm", {"X": t(-1, 3, 4)}, {"begin_norm_axis": 2},
         {"Y": t(-1, 3, 4), "Mean": t(-1), "Variance": t(-1)}, "no-scale-unknown-batch"),
    case("dropout", {"X": t(-1, 10)}, {"dropout_prob": 0.3},
         {"Out": t(-1, 10), "Mask": t(-1, 10, dtype="uint8")}),
    case("lookup_table", {"W": t(100, 16), "Ids": i64(-1, 1)}, None, {"Out": t(-1, 16)}),
    case("lookup_table", {"W": t(100, 16), "Ids": i64(4, 7, 1)}, {"padding_idx": 0},
         {"Out": t(4, 7, 16)}, "3d-ids"),
    case("lookup_table", {"W": t(100, 16), "Ids": t(5, 1, dtype="int32")}, None,
         {"Out": t(5, 16)}, "int32-ids"),
    # -- losses ------------------------------------------------------------------------------
    case("softmax_with_cross_entropy", {"Logits": t(-1, 10), "Label": i64(-1, 1)}, None,
         {"Softmax": t(-1, 10), "Loss": t(-1, 1)}),
    case("softmax_with_cross_entropy", {"Logits": t(2, 5, 3), "Label": i64(2, 1, 3)},
         {"axis": 1}, {"Softmax": t(2, 5, 3), "Loss": t(2, 1, 3)}, "axis1"),
    case("softmax_with_cross_entropy", {"Logits": t(2, 5, 3), "Label": i64(2, 5, 1)},
         {"axis": -1}, {"Softmax": t(2, 5, 3), "Loss": t(2, 5, 1)}, "rank3-last-axis"),
    case("softmax_with_cross_entropy", {"Logits": t(4, 10), "Label": t(4, 10)},
         {"soft_label": True}, {"Softmax": t(4, 10), "Loss": t(4, 1)}, "soft-label"),
    case("cross_entropy", {"X": t(-1, 10), "Label": i64(-1, 1)}, None, {"Y": t(-1, 1)}),
    case("cross_entropy", {"X": t(4, 10), "Label": t(4, 10)}, {"soft_label": True},
         {"Y": t(4, 1)}, "soft-label"),
    case("cross_entropy", {"X": t(-1, 10), "Label": t(-1, 10)}, {"soft_label": True},
         {"Y": t(-1, 1)}, "soft-label-unknown-batch"),
    # -- optimizers and learning-rate schedules ----------------------------------------------
    case("sgd", {"Param": t(10, 5), "Grad": t(10, 5), "LearningRate": t(1)}, None,
         {"ParamOut": t(10, 5)}),
    case("momentum", {"Param": t(10, 5), "Grad": t(10, 5), "Velocity": t(10, 5),
                      "LearningRate": t(1)}, {"mu": 0.9},
         {"ParamOut": t(10, 5), "VelocityOut": t(10, 5)}),
    case("adam", ADAM_INS, None, ADAM_OUTS),
    case("adamw", ADAM_INS, {"coeff": 0.1}, ADAM_OUTS),
    case("increment", {"X": i64(1)}, {"step": 1.0}, {"Out": i64(1)}),
    case("piecewise_decay", {"Step": i64(1)}, {"boundaries": [10, 20], "values": [1., .5, .1]},
         {"Out": t(1)}),
    case("cosine_decay", {"Step": i64(1)},
         {"learning_rate": 0.1, "step_each_epoch": 100, "epochs": 10}, {"Out": t(1)}),
    case("linear_warmup", {"Step": i64(1), "LearningRate": t(1)},
         {"warmup_steps": 10, "start_lr": 0.0, "end_lr": 0.1}, {"Out": t(1)}),
    # -- multi-parameter optimizers: position i of each duplicable slot is parameter i ------
    case("fused_sgd", {"Param": [t(10, 5), t(3)], "Grad": [t(10, 5), t(3)],
                       "LearningRate": t(1)}, None, {"ParamOut": [t(10, 5), t(3)]}),
    case("fused_momentum", {"Param": [t(10, 5), t(3)], "Grad": [t(10, 5), t(3)],
                            "Velocity": [t(10, 5), t(3)], "LearningRate": t(1)},
         {"mu": 0.9, "layout": "coalesced"},
         {"ParamOut": [t(10, 5), t(3)], "VelocityOut": [t(10, 5), t(3)]}),
    *[case(op, FUSED_ADAM_INS, None, FUSED_ADAM_OUTS) for op in ("fused_adam", "fused_adamw")],
    # -- fused ops made by passes ------------------------------------------------------------
    case("fused_elemwise_activation", {"X": t(-1, 3), "Y": t(3)},
         {"functor_list": ["relu", "elementwise_add"]},
         {"Out": t(-1, 3), "IntermediateOut": t(-1, 3)}, "act-of-add"),
    case("fused_elemwise_activation", {"X": t(2, 3, 4), "Y": t(3)},
         {"functor_list": ["elementwise_add", "scale"], "axis": 1, "scale": 2.0},
         {"Out": t(2, 3, 4), "IntermediateOut": t(3)}, "add-of-act-y"),
    case("fused_elemwise_activation", {"X": t(3), "Y": t(2, 3)},
         {"functor_list": ["elementwise_add", "tanh"], "unary_operand": "X"},
         {"Out": t(2, 3), "IntermediateOut": t(3)}, "add-of-act-x"),
    case("fused_elemwise_activation_grad",
         {"X": t(-1, 3), "Y": t(3), "IntermediateOut": t(-1, 3), "Out@GRAD": t(-1, 3)},
         {"functor_list": ["relu", "elementwise_add"]},
         {"X@GRAD": t(-1, 3), "Y@GRAD": t(3)}),
    case("fused_elemwise_activation_grad",
         {"X": t(2, 3), "IntermediateOut": t(3), "Out@GRAD": t(2, 3)},
         {"functor_list": ["elementwise_add", "relu"]},
         {"X@GRAD": t(2, 3), "Y@GRAD": t(3)}, "y-from-intermediate"),
    case("fused_batch_norm_act", {"X": t(-1, 3, 4, 4), "Scale": t(3), "Bias": t(3),
                                  "Mean": t(3), "Variance": t(3)}, {"act_type": "relu"},
         {"Y": t(-1, 3, 4, 4), "MeanOut": t(3), "VarianceOut": t(3), "SavedMean": t(3),
          "SavedVariance": t(3)}),
    case("fused_batch_norm_act_grad",
         {"X": t(-1, 3, 4, 4), "Y": t(-1, 3, 4, 4), "Y@GRAD": t(-1, 3, 4, 4), "Scale": t(3),
          "Bias": t(3), "SavedMean": t(3), "SavedVariance": t(3)}, {"act_type": "tanh"},
         {"X@GRAD": t(-1, 3, 4, 4), "Scale@GRAD": t(3), "Bias@GRAD": t(3)}),
    case("sync_batch_norm", {"X": t(-1, 3, 4, 4), "Scale": t(3), "Bias": t(3), "Mean": t(3),
                             "Variance": t(3)}, {"nranks": 4},
         {"Y": t(-1, 3, 4, 4), "MeanOut": t(3), "VarianceOut": t(3), "SavedMean": t(3),
          "SavedVariance": t(3)}),
    case("sync_batch_norm_grad",
         {"X": t(-1, 4, 4, 3), "Y@GRAD": t(-1, 4, 4, 3), "Scale": t(3), "Bias": t(3),
          "Mean": t(3), "Variance": t(3), "SavedMean": t(3), "SavedVariance": t(3)},
         {"nranks": 2, "data_layout": "NHWC"},
         {"X@GRAD": t(-1, 4, 4, 3), "Scale@GRAD": t(3), "Bias@GRAD": t(3)}),
    case("fused_relu_depthwise_conv2d", {"Input": t(2, 4, 8, 8), "Filter": t(4, 1, 3, 3)},
         {"groups": 4, "paddings": [1, 1]}, {"Output": t(2, 4, 8, 8)}),
    case("fused_relu_depthwise_conv2d_grad",
         {"Input": t(2, 4, 8, 8), "Filter": t(4, 1, 3, 3), "Output@GRAD": t(2, 4, 8, 8)},
         {"groups": 4, "paddings": [1, 1]},
         {"Input@GRAD": t(2, 4, 8, 8), "Filter@GRAD": t(4, 1, 3, 3)}),
    # -- mixed precision (the amp pass) --------------------------------------------------------
    case("check_finite_and_unscale", {"X": [t(10, 5), t(3, dtype="bfloat16")], "Scale": t(1)},
         None, {"Out": [t(10, 5), t(3, dtype="bfloat16")], "FoundInfinite": t(1, dtype="bool")}),
    case("update_loss_scaling", {"FoundInfinite": t(1, dtype="bool"), "PrevLossScaling": t(1),
                                 "InGoodSteps": t(1, dtype="int32"),
                                 "InBadSteps": t(1, dtype="int32")}, None,
         {"LossScaling": t(1), "OutGoodSteps": t(1, dtype="int32"),
          "OutBadSteps": t(1, dtype="int32")}),
    case("skip_update", {"Skip": t(1, dtype="bool"), "Old": t(4, 3), "New": t(4, 3)}, None,
         {"Out": t(4, 3)}),
    # -- collectives (data parallelism) ------------------------------------------------------
    case("c_allreduce", {"X": t(10, 5)}, {"nranks": 4}, {"Out": t(10, 5)}),
    case("c_allreduce", {"X": t(7)}, {"nranks": 4, "inter_nranks": 2, "reduce": "sum"},
         {"Out": t(7)}, "hierarchical"),
    case("c_fused_allreduce", {"X": [t(10, 5), t(3)]}, {"nranks": 2},
         {"Out": [t(10, 5), t(3)]}),
    case("c_reduce_scatter", {"X": t(10, 5)}, {"nranks": 4}, {"Out": t(1, 13)}),
    case("c_fused_reduce_scatter", {"X": [t(10, 5), t(3)]}, {"nranks": 2},
         {"Out": [t(1, 25), t(1, 2)]}),
    case("c_shard", {"X": t(3, 3)}, {"nranks": 4}, {"Out": t(1, 3)}),
    case("c_allgather", {"X": t(1, 13)}, {"nranks": 4, "shapes": [10, 5], "ranks": [2]},
         {"Out": t(10, 5)}),
    case("c_fused_allgather", {"X": [t(1, 25), t(1, 2)]},
         {"nranks": 2, "shapes": [10, 5, 3], "ranks": [2, 1]}, {"Out": [t(10, 5), t(3)]}),
    case("c_allgather_rows", {"X": rows(100, 8)}, {"nranks": 4}, {"Out": rows(100, 8)}),
    # -- row-sparse values (is_sparse embeddings) --------------------------------------------
    case("merge_selected_rows", {"X": rows(100, 8)}, None, {"Out": rows(100, 8)}),
    case("get_tensor_from_selected_rows", {"X": rows(100, 8, dtype="float64")}, None,
         {"Out": t(100, 8, dtype="float64")}),
    case("sparse_l2_decay", {"Grad": rows(100, 8), "Param": t(100, 8)}, {"coeff": 0.1},
         {"Out": rows(100, 8)}),
    case("lookup_table_grad", {"W": t(100, 16), "Ids": i64(-1, 5, 1), "Out@GRAD": t(-1, 5, 16)},
         {"is_sparse": True}, {"W@GRAD": rows(100, 16)}, "sparse"),
    case("lookup_table_grad", {"W": t(100, 16), "Ids": i64(-1, 1), "Out@GRAD": t(-1, 16)},
         None, {"W@GRAD": t(100, 16)}, "dense"),
    case("sum", {"X": [rows(10, 4), rows(10, 4)]}, None, {"Out": rows(10, 4)}, "all-sparse"),
    case("sum", {"X": [rows(10, 4), t(10, 4)]}, None, {"Out": t(10, 4)}, "sparse-and-dense"),
    case("sgd", {"Param": t(10, 5), "Grad": rows(10, 5), "LearningRate": t(1)}, None,
         {"ParamOut": t(10, 5)}, "sparse-grad"),
    case("adam", {**ADAM_INS, "Grad": rows(10, 5)}, {"lazy_mode": True}, ADAM_OUTS,
         "sparse-grad-lazy"),
    case("check_finite_and_unscale", {"X": [rows(10, 5), t(3)], "Scale": t(1)}, None,
         {"Out": [rows(10, 5), t(3)], "FoundInfinite": t(1, dtype="bool")}, "sparse"),
]


@pytest.mark.parametrize("op_type, ins, attrs, outs", CASES)
def test_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


def _forward_types_with_cases() -> set[str]:
    """Op types in CASES (forward ops, and grad ops whose rule is not the derived one)."""
    return {p.values[0] for p in CASES}


def test_every_op_has_a_case():
    """Every op needs a case in CASES, except the derived ``T_grad`` of an op that has one:
    test_grad_op_types covers those."""
    covered = _forward_types_with_cases()
    covered |= {grad_op_type(op) for op in covered if has_op_def(grad_op_type(op))}
    # stoppers24: T_grad_grad of a double-grad op, checked by its double-grad test
    covered |= {grad_op_type(op) for op in covered if has_op_def(grad_op_type(op))
                and op.endswith("_grad")}
    missing = sorted(set(all_op_types()) - covered)
    assert not missing, f"add shape-inference cases to {HERE} for: {missing}"


def _grad_cases():
    """The first case of each op whose gradient op has no case of its own."""
    types = _forward_types_with_cases()
    done = {op for op in types if grad_op_type(op) in types}
    for p in CASES:
        op_type = p.values[0]
        if op_type not in done and has_op_def(grad_op_type(op_type)):
            done.add(op_type)
            yield pytest.param(*p.values, id=grad_op_type(op_type))


@pytest.mark.parametrize("op_type, ins, attrs, outs", list(_grad_cases()))
def test_grad_op_types(op_type, ins, attrs, outs):
    """T_grad, given T's inputs, outputs and output gradients, gives every floating-point
    input of T a gradient of that input's type; integer inputs (labels, ids) get none."""
    ins, outs = _as_lists(ins), _as_lists(outs)
    grad_ins = {**ins, **outs}
    grad_ins.update({f"{slot}@GRAD": types for slot, types in outs.items()
                     if all(ty.dtype in FLOAT_DTYPES for ty in types)})
    expected = {f"{slot}@GRAD": types for slot, types in ins.items()
                if all(ty.dtype in FLOAT_DTYPES for ty in types)}
    assert infer(grad_op_type(op_type), grad_ins, attrs) == expected


@pytest.mark.parametrize("op_type, ins, expected", [
    # these grad ops read the forward output, not the input, as in Paddle
    ("relu_grad", {"Out": t(-1, 7), "Out@GRAD": t(-1, 7)}, {"X@GRAD": [t(-1, 7)]}),
    ("tanh_grad", {"Out": t(3), "Out@GRAD": t(3)}, {"X@GRAD": [t(3)]}),
    ("sigmoid_grad", {"Out": t(3), "Out@GRAD": t(3)}, {"X@GRAD": [t(3)]}),
    ("dropout_grad", {"Mask": t(4, 2, dtype="uint8"), "Out@GRAD": t(4, 2)},
     {"X@GRAD": [t(4, 2)]}),
    ("softmax_with_cross_entropy_grad",
     {"Label": i64(-1, 1), "Softmax": t(-1, 10), "Loss@GRAD": t(-1, 1)},
     {"Logits@GRAD": [t(-1, 10)]}),
])
def test_grad_ops_that_do_not_read_the_forward_input(op_type, ins, expected):
    assert infer(op_type, ins) == expected


# ------------------------------------------------------------------------------ bad input

BN_STATS = {"Scale": t(3), "Bias": t(3), "Mean": t(3), "Variance": t(3)}

ERRORS = [
    ("elementwise_add", {"X": t(2, 3), "Y": t(4)}, {}, "do not broadcast"),
    ("elementwise_add", {"X": t(2, 3), "Y": t(3)}, {"axis": 2}, "does not fit"),
    ("elementwise_sub", {"X": t(2, 3), "Y": t(2, 3, dtype="float64")}, {},
     "X is float32 but Y is float64"),
    ("softmax", {"X": t(2, 3)}, {"axis": 2}, "axis 2 is out of range for rank 2"),
    ("sum", {"X": [t(2, 3), t(2, 4)]}, {}, "inputs have shapes [2, 3] and [2, 4]"),
    ("sum", {"X": [t(2, 3), t(2, 3, dtype="float16")]}, {}, "inputs mix"),
    ("mul", {"X": t(2, 3), "Y": t(4, 5)}, {}, "flattens to width 3"),
    ("mul", {"X": t(2, 3), "Y": t(3, 5)}, {"x_num_col_dims": 2}, "x_num_col_dims 2"),
    ("matmul", {"X": t(2, 3), "Y": t(4, 5)}, {}, "contracting dimensions differ"),
    ("matmul", {"X": t(2, 2, 3), "Y": t(3, 3, 4)}, {}, "do not broadcast"),
    ("reduce_sum", {"X": t(2, 3)}, {"dim": [2]}, "dim 2 is out of range for rank 2"),
    ("top_k", {"X": t(4, 10)}, {"k": 11}, "k=11 for last dimension 10"),
    ("accuracy", {"Out": t(4, 1), "Indices": i64(4, 1), "Label": i64(4)}, {},
     "Label must be [N, 1]"),
    ("reshape2", {"X": t(2, 3, 4)}, {"shape": [-1, -1]}, "more than one -1"),
    ("reshape2", {"X": t(2, 3, 4)}, {"shape": [5, -1]}, "cannot reshape [2, 3, 4]"),
    ("reshape2", {"X": t(2, 3, 4)}, {"shape": [5, 5]}, "24 elements"),
    ("reshape2", {"X": t(6)}, {"shape": [2, 0]}, "copies dim 1 of rank-1 input"),
    ("transpose2", {"X": t(2, 3, 4)}, {"axis": [0, 0, 1]}, "not a permutation"),
    ("concat", {"X": [t(2, 3), t(3, 3)]}, {"axis": 1}, "differ off axis 1"),
    ("concat", {"X": [t(2, 3), t(2, 3, dtype="int64")]}, {}, "inputs mix"),
    ("split", {"X": t(6, 4)}, {"num": 4}, "not divisible into 4 parts"),
    ("split", {"X": t(6, 4)}, {"sections": [1, 2]}, "do not add up to 6"),
    ("split", {"X": t(6, 4)}, {"sections": [-1, -1]}, "more than one -1"),
    ("split", {"X": t(3, 4)}, {"sections": [5, -1]}, "sections [5, -1] exceed dimension 3"),
    ("split", {"X": t(6, 4)}, {"sections": [-2, 8]}, "negative entry other than -1"),
    ("split", {"X": t(6, 4)}, {}, "needs num > 0 or sections"),
    ("cast", {"X": t(2)}, {"in_dtype": "float64", "out_dtype": "int32"},
     "in_dtype float64 but X is float32"),
    ("fill_constant", {}, {"shape": [-1, 3]}, "must be fully known"),
    ("uniform_random", {}, {"shape": [-1]}, "must be fully known"),
    ("conv2d", {"Input": t(2, 3, 8, 8), "Filter": t(8, 4, 3, 3)}, {},
     "input has 3 channels but Filter [8, 4, 3, 3] with groups=1 expects 4"),
    ("conv2d", {"Input": t(2, 4, 8, 8), "Filter": t(5, 2, 3, 3)}, {"groups": 2},
     "5 filters not divisible by groups=2"),
    ("conv2d", {"Input": t(2, 3, 2, 2), "Filter": t(8, 3, 3, 3)}, {},
     "window 3 larger than padded input 2"),
    ("conv2d", {"Input": t(3, 8, 8), "Filter": t(8, 3, 3, 3)}, {}, "expects a 4-D input"),
    ("conv2d", {"Input": t(2, 3, 8, 8), "Filter": t(8, 3, 3, 3)}, {"strides": [0, 1]},
     "strides must be positive"),
    ("conv2d", {"Input": t(2, 3, 8, 8), "Filter": t(8, 3, 3, 3)}, {"data_format": "NCDHW"},
     "data format must be NCHW or NHWC"),
    ("conv2d", {"Input": t(2, 3, 8, 8), "Filter": t(8, 3, 3, 3)},
     {"padding_algorithm": "FULL"}, "padding_algorithm 'FULL'"),
    ("pool2d", {"X": t(2, 3, 8, 8)}, {"pooling_type": "min"}, "pooling_type 'min'"),
    ("pool2d", {"X": t(2, 3, 1, 1)}, {"ksize": [2, 2]}, "larger than padded input"),
    # -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
    ("conv2d_transpose", {"Input": t(2, 3, 5, 5), "Filter": t(4, 3, 3, 3)}, {},
     "input has 3 channels but Filter [4, 3, 3, 3] expects 4"),
    ("conv2d_transpose", {"Input": t(2, 4, 5, 5), "Filter": t(4, 3, 3, 3)},
     {"output_size": [20, 20]}, "output_size [20, 20] must lie in"),
    ("conv3d", {"Input": t(2, 4, 6, 6), "Filter": t(8, 4, 3, 3, 3)}, {},
     "expects a 5-D input"),
    ("pool3d", {"X": t(2, 3, 2, 2, 2)}, {"ksize": [3, 3, 3]}, "larger than padded input"),
    ("group_norm", {"X": t(2, 6, 4, 4)}, {"groups": 4}, "groups=4 must divide the 6"),
    ("instance_norm", {"X": t(2, 3, 4, 4), "Scale": t(4)}, {}, "Scale must be [3]"),
    ("bilinear_interp", {"X": t(2, 3, 4, 4)}, {}, "give positive output sizes"),
    ("trilinear_interp", {"X": t(2, 3, 4, 4)}, {"out_d": 2, "out_h": 2, "out_w": 2},
     "X must be 5-D"),
    ("temporal_shift", {"X": t(6, 8, 4, 4)}, {"seg_num": 4}, "multiple of seg_num=4"),
    ("unfold", {"X": t(2, 3, 2, 2)}, {"kernel_sizes": [3, 3]}, "larger than padded input"),
    ("bilinear_tensor_product", {"X": t(2, 3), "Y": t(2, 4), "Weight": t(5, 4, 4)}, {},
     "does not fit"),
    # -- issue 24: nn tail (data_norm, spectral_norm, lstm, hash, cvm)
    ("data_norm", {"X": t(2, 6), "BatchSize": t(5), "BatchSum": t(6), "BatchSquareSum": t(6)},
     {}, "BatchSize must be [6] for X [2, 6]"),
    ("data_norm", {"X": t(2, 6), "BatchSize": t(6), "BatchSum": t(6), "BatchSquareSum": t(6)},
     {"slot_dim": 4}, "slot_dim 4 does not divide"),
    ("spectral_norm", {"Weight": t(4, 3), "U": t(4), "V": t(4)}, {}, "V must be [3]"),
    ("cudnn_lstm", {"Input": t(5, 2, 3), "InitH": t(1, 2, 2), "InitC": t(1, 2, 2), "W": t(7)},
     {"hidden_size": 2}, "W must be [56]"),
    ("hash", {"X": t(3, 2)}, {}, "X must be int32 or int64"),
    ("cvm", {"X": t(3, 1), "CVM": t(3, 2)}, {}, "needs at least the 2 show/click"),
    ("filter_by_instag", {"Ins": t(4, 2), "Ins_tag": lod_type((-1, 1), "int64", 1),
                          "Filter_tag": i64(2)}, {"is_lod": True}, "Ins must be a LoD value"),
    ("load", {}, {"file_path": "w.bin", "shape": [-1, 3]}, "must be known and positive"),
    ("batch_norm", {"X": t(2, 4, 8, 8), **BN_STATS}, {},
     "Scale must be [4] for X [2, 4, 8, 8] (NCHW)"),
    ("batch_norm", {"X": t(2, 8, 8, 4), **BN_STATS}, {"data_layout": "NHWC"},
     "Scale must be [4]"),
    ("batch_norm", {"X": t(6), **BN_STATS}, {}, "X must have rank >= 2"),
    ("sync_batch_norm", {"X": t(2, 4, 8, 8), **BN_STATS}, {"nranks": 2},
     "Scale must be [4] for X [2, 4, 8, 8] (NCHW)"),
    ("sync_batch_norm", {"X": t(2, 3), "Scale": t(3), "Bias": t(3), "Mean": t(3),
                         "Variance": t(3)}, {"nranks": 0}, "nranks must be >= 1"),
    ("sync_batch_norm_grad", {"X": t(2, 3), "Y@GRAD": t(2, 3), "Scale": t(3)}, {"nranks": 2},
     "SavedMean and SavedVariance"),
    ("layer_norm", {"X": t(2, 3, 4), "Scale": t(5)}, {}, "Scale must be [12]"),
    ("layer_norm", {"X": t(2, 3, 4)}, {"begin_norm_axis": 3}, "begin_norm_axis 3 for rank 3"),
    ("dropout", {"X": t(2)}, {"dropout_prob": 1.5}, "dropout_prob 1.5 not in [0, 1]"),
    ("dropout", {"X": t(2)}, {"dropout_implementation": "scale"}, "dropout_implementation"),
    ("lookup_table", {"W": t(100, 16), "Ids": t(4, 1)}, {}, "Ids must be integer"),
    ("lookup_table", {"W": t(100, 16), "Ids": i64(4, 7)}, {}, "end in a dimension of 1"),
    ("lookup_table", {"W": t(100), "Ids": i64(4, 1)}, {}, "W must be [vocab, width]"),
    ("softmax_with_cross_entropy", {"Logits": t(4, 10), "Label": t(4, 1)}, {},
     "hard Label must be integer"),
    ("softmax_with_cross_entropy", {"Logits": t(4, 10), "Label": i64(4)}, {},
     "Label must be Logits' shape with 1 at axis 1"),
    ("softmax_with_cross_entropy", {"Logits": t(4, 10), "Label": i64(4, 1)}, {"axis": 2},
     "axis 2 is out of range"),
    ("softmax_with_cross_entropy", {"Logits": t(4, 10), "Label": t(4, 3)},
     {"soft_label": True}, "soft Label [4, 3] must match Logits [4, 10]"),
    ("cross_entropy", {"X": t(4, 10), "Label": i64(4, 2)}, {}, "with the last dim 1 or dropped"),
    ("c_allreduce", {"X": t(4)}, {"nranks": 4, "reduce": "max"}, "reduce must be one of"),
    ("c_allreduce", {"X": rows(10, 4)}, {"nranks": 4},
     "input 'X' of op c_allreduce is a row-sparse value"),
    ("relu", {"X": rows(10, 4)}, {},
     "which this op does not take; ops that do: adadelta, adagrad, adam, "),
    ("c_allgather_rows", {"X": t(10, 4)}, {"nranks": 4}, "dense gradients go through"),
    ("merge_selected_rows", {"X": t(10, 4)}, {}, "X must be row-sparse"),
    ("sparse_l2_decay", {"Grad": rows(10, 4), "Param": t(10, 5)}, {"coeff": 0.1},
     "Param must be the dense f32[10,4]"),
    ("sgd", {"Param": t(10, 5), "Grad": rows(10, 4), "LearningRate": t(1)}, {},
     "Param [10, 5] and Grad [10, 4] differ"),
    ("check_finite_and_unscale", {"X": [t(4)], "Scale": t(2)}, {}, "Scale must be [1]"),
    ("check_finite_and_unscale", {"X": [i64(4)], "Scale": t(1)}, {}, "must be floating point"),
    ("update_loss_scaling", {"FoundInfinite": t(1, dtype="bool"), "PrevLossScaling": t(1),
                             "InGoodSteps": t(1, dtype="int32"), "InBadSteps": t(1)}, {},
     "InBadSteps must be integer"),
    ("update_loss_scaling", {"FoundInfinite": t(1, dtype="bool"), "PrevLossScaling": t(1),
                             "InGoodSteps": t(1, dtype="int32"),
                             "InBadSteps": t(1, dtype="int32")}, {"decr_ratio": 1.5},
     "must be in (0, 1)"),
    ("skip_update", {"Skip": t(1), "Old": t(4), "New": t(4)}, {}, "Skip must be bool"),
    ("skip_update", {"Skip": t(1, dtype="bool"), "Old": t(4), "New": t(5)}, {},
     "Old is"),
    ("c_allreduce", {"X": t(4)}, {"nranks": 6, "inter_nranks": 4}, "divisible by inter_nr"),
    ("c_fused_allreduce", {"X": [t(4), t(2, dtype="float64")]}, {"nranks": 2},
     "must share a dtype"),
    ("c_reduce_scatter", {"X": t(-1, 4)}, {"nranks": 2}, "unknown shape"),
    ("c_allgather", {"X": t(1, 3)}, {"nranks": 4, "shapes": [10, 5], "ranks": [2]},
     "is not a shard of [10, 5]"),
    ("c_fused_allgather", {"X": [t(1, 3)]}, {"nranks": 4, "shapes": [10, 5], "ranks": [1]},
     "do not add up"),
    ("cross_entropy", {"X": t(4, 10), "Label": t(7, 10)}, {"soft_label": True},
     "soft Label [7, 10] must match X [4, 10]"),
    ("sgd", {"Param": t(10, 5), "Grad": t(5, 10), "LearningRate": t(1)}, {},
     "Param [10, 5] and Grad [5, 10] differ"),
    ("sgd", {"Param": t(10, 5), "Grad": t(10, 5), "LearningRate": t(2)}, {},
     "LearningRate must be [1]"),
    ("momentum", {"Param": t(3), "Grad": t(3), "Velocity": t(4), "LearningRate": t(1)},
     {"mu": 0.9}, "Velocity must match Param"),
    # -- issue 24: optimizers
    ("lookahead", {"Param": t(3), "SlowParam": t(4), "Step": t(1)}, {},
     "SlowParam [4] must match Param [3]"),
    ("dpsgd", {"Param": t(10, 5), "Grad": t(10, 4), "LearningRate": t(1)}, {},
     "Param [10, 5] and Grad [10, 4] differ"),
    ("adam", {**ADAM_INS, "Moment2": t(5, 10)}, {}, "Moment2 must match Param [10, 5]"),
    ("fused_sgd", {"Param": [t(3), t(4)], "Grad": [t(3)], "LearningRate": t(1)}, {},
     "Grad has 1 values but Param has 2"),
    ("fused_sgd", {"Param": [t(3), t(4)], "Grad": [t(3), t(5)], "LearningRate": t(1)}, {},
     "parameter 1: sgd: Param [4] and Grad [5] differ"),
    ("fused_sgd", {"Param": [t(3)], "Grad": [t(3)], "LearningRate": t(1)},
     {"layout": "packed"}, "layout must be one of"),
    ("fused_elemwise_activation", {"X": t(2, 3), "Y": t(3)},
     {"functor_list": ["relu", "sigmoid"]}, "must pair elementwise_add with an activation"),
    ("fused_elemwise_activation", {"X": t(2, 3), "Y": t(3)},
     {"functor_list": ["relu", "elementwise_add"], "unary_operand": "X"},
     "only applies to functor_list ['elementwise_add', act]"),
    ("fused_elemwise_activation", {"X": t(2, 3), "Y": t(4)},
     {"functor_list": ["relu", "elementwise_add"]}, "do not broadcast"),
    ("fused_batch_norm_act", {"X": t(2, 3, 4, 4), **BN_STATS}, {"act_type": "gelu"},
     "act_type must be one of"),
    ("fused_relu_depthwise_conv2d", {"Input": t(2, 4, 8, 8), "Filter": t(4, 2, 3, 3)},
     {"groups": 4}, "input has 4 channels"),
    ("cosine_decay", {"Step": i64(2)},
     {"learning_rate": 0.1, "step_each_epoch": 100, "epochs": 10}, "Step must be [1]"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in ERRORS])
def test_bad_inputs_raise_shape_error(op_type, ins, attrs, message):
    where = f"op {op_type} at model.py:7"
    with pytest.raises(graphc.ShapeError) as info:
        infer(op_type, ins, attrs, where)
    text = str(info.value)
    assert text.startswith(where + ": "), text
    assert message in text


@pytest.mark.parametrize("op_type, ins, attrs, message", ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in ERRORS])
def test_bad_inputs_through_the_builder_name_the_op_and_line(op_type, ins, attrs, message):
    block = graphc.Program().global_block()
    inputs = {}
    for slot, types in _as_lists(ins).items():
        inputs[slot] = [block.create_var(f"{slot}{i}", ty.shape, ty.dtype, is_data=True,
                                         selected_rows=ty.sparse)
                        for i, ty in enumerate(types)]
    outputs = {s.name: block.create_var(f"out_{s.name}") for s in get_op_def(op_type).outputs}
    with pytest.raises(graphc.ShapeError, match=re.escape(message)) as info:
        line = _next_line()
        block.append_op(op_type, inputs, outputs, attrs)
    assert_names_op_and_line(info.value, op_type, line)
    assert not block.ops and all(v.shape is None for v in outputs.values())


@pytest.mark.parametrize("op_type, attrs, message", [
    ("dropout", {"is_test": "yes"}, "attribute 'is_test' expects bool, got str 'yes'"),
    ("scale", {"scale": "2"}, "attribute 'scale' expects float"),
    ("scale", {"scale": True}, "attribute 'scale' expects float"),
    ("top_k", {"k": 2.0}, "attribute 'k' expects int"),
    ("reshape2", {"shape": [2, "x"]}, "attribute 'shape' expects ints"),
    ("reshape2", {}, "requires attribute 'shape'"),
    ("cast", {"in_dtype": "float32", "out_dtype": "complex64"}, "'out_dtype' expects dtype"),
    ("relu", {"alpha": 0.1}, "unknown attribute 'alpha' for op relu"),
])
def test_bad_attributes_raise_op_definition_error(op_type, attrs, message):
    with pytest.raises(graphc.OpDefinitionError, match="^op x at m.py:3: ") as info:
        get_op_def(op_type).normalize_attrs(attrs, "op x at m.py:3")
    assert message in str(info.value)


def test_attribute_values_are_coerced_to_their_schema_type():
    opdef = get_op_def("scale")
    assert opdef.normalize_attrs({"scale": 2}, "op scale") == {
        "scale": 2.0, "bias": 0.0, "bias_after_scale": True}
    assert type(opdef.normalize_attrs({"scale": 2}, "op scale")["scale"]) is float
    cast = get_op_def("cast").normalize_attrs({"in_dtype": "fp32", "out_dtype": "i64"}, "op")
    assert cast == {"in_dtype": "float32", "out_dtype": "int64"}


# ------------------------------------------------------------------- inference via layers


def _next_line() -> str:
    """``test_shape_inference.py:N`` where N is the line after the caller's."""
    return f"{HERE}:{sys._getframe(1).f_lineno + 1}"


def assert_names_op_and_line(error: Exception, op_type: str, line: str) -> None:
    """The message starts ``op <type> at <path ending in line>: ``."""
    assert re.match(rf"op {op_type} at \S*{re.escape(line)}: ", str(error)), str(error)


@pytest.mark.parametrize("kwargs, shape", [
    ({}, [-1, 8, 30, 30]),
    ({"stride": 2, "padding": 1}, [-1, 8, 16, 16]),
    ({"dilation": 2}, [-1, 8, 28, 28]),
    ({"padding": "SAME", "stride": 2}, [-1, 8, 16, 16]),
    ({"padding": "VALID", "stride": 2}, [-1, 8, 15, 15]),
    ({"padding": [1, 2]}, [-1, 8, 32, 34]),
    ({"filter_size": [3, 5], "stride": [1, 2]}, [-1, 8, 30, 14]),
])
def test_conv2d_layer_shapes(kwargs, shape):
    x = layers.data("img", [-1, 3, 32, 32])
    y = layers.conv2d(x, num_filters=8, **{"filter_size": 3, **kwargs})
    assert list(y.shape) == shape
    ops = graphc.default_main_program().global_block().ops
    assert [op.type for op in ops] == ["conv2d", "elementwise_add"]
    assert ops[1].attr("axis") == 1  # the bias is per channel


def test_conv2d_layer_nhwc_groups_and_depthwise():
    x = layers.data("img", [-1, 16, 16, 4])
    y = layers.conv2d(x, 6, 3, padding=1, data_format="NHWC", groups=2)
    assert list(y.shape) == [-1, 16, 16, 6]
    w = graphc.default_main_program().global_block().var("conv2d_0.w_0")
    assert list(w.shape) == [6, 2, 3, 3]
    z = layers.conv2d(layers.data("img2", [-1, 4, 9, 9]), 8, 3, stride=2, groups=4)
    assert list(z.shape) == [-1, 8, 4, 4]
    assert graphc.default_main_program().global_block().ops[-2].type == "depthwise_conv2d"


@pytest.mark.parametrize("kwargs, shape", [
    ({"pool_size": 2, "pool_stride": 2}, [-1, 3, 3, 3]),
    ({"pool_size": 2, "pool_stride": 2, "ceil_mode": True}, [-1, 3, 4, 4]),
    ({"pool_size": 3, "pool_stride": 2, "pool_padding": 1}, [-1, 3, 4, 4]),
    ({"global_pooling": True}, [-1, 3, 1, 1]),
    ({"pool_size": 3, "pool_type": "avg"}, [-1, 3, 5, 5]),
])
def test_pool2d_layer_shapes(kwargs, shape):
    x = layers.data("img", [-1, 3, 7, 7])
    assert list(layers.pool2d(x, **kwargs).shape) == shape


def test_elementwise_layers_broadcast_with_paddle_axis():
    x = layers.data("x", [-1, 3, 4, 5])
    assert list(layers.elementwise_add(x, graphc.data("b", [3]), axis=1).shape) == \
        [-1, 3, 4, 5]
    assert list(layers.elementwise_mul(x, graphc.data("c", [4, 5])).shape) == [-1, 3, 4, 5]
    assert list(layers.elementwise_sub(x, graphc.data("d", [3, 1]), axis=1).shape) == \
        [-1, 3, 4, 5]


def test_tensor_layers_shapes():
    x = layers.data("x", [-1, 3, 4])
    assert list(layers.reshape(x, [0, 12]).shape) == [-1, 12]
    assert list(layers.reshape(x, [-1, 2, 6]).shape) == [-1, 2, 6]
    assert list(layers.transpose(x, [0, 2, 1]).shape) == [-1, 4, 3]
    assert list(layers.concat([x, x], axis=-1).shape) == [-1, 3, 8]
    assert [list(p.shape) for p in layers.split(x, [1, -1], dim=1)] == [[-1, 1, 4],
                                                                        [-1, 2, 4]]
    assert [list(p.shape) for p in layers.split(x, 2, dim=-1)] == [[-1, 3, 2]] * 2
    assert list(layers.reduce_sum(x, dim=-1, keep_dim=True).shape) == [-1, 3, 1]
    assert list(layers.reduce_mean(x).shape) == [1]
    assert list(layers.matmul(x, graphc.data("y", [4, 5])).shape) == [-1, 3, 5]
    assert list(layers.matmul(x, x, transpose_y=True).shape) == [-1, 3, 3]
    c = layers.cast(x, "float16")
    assert (list(c.shape), c.dtype) == ([-1, 3, 4], "float16")
    f = layers.fill_constant([2, 2], "int32", 3)
    assert (list(f.shape), f.dtype) == ([2, 2], "int32")


def test_fc_with_num_flatten_dims():
    x = layers.data("x", [-1, 5, 6])
    y = layers.fc(x, 7, num_flatten_dims=2)
    assert list(y.shape) == [-1, 5, 7]
    block = graphc.default_main_program().global_block()
    assert list(block.var("fc_0.w_0").shape) == [6, 7]
    mul, add = block.ops
    assert mul.attr("x_num_col_dims") == 2 and add.attr("axis") == 2


def test_loss_metric_and_embedding_layers_shapes():
    logits = layers.data("logits", [-1, 10])
    label = layers.data("label", [-1, 1], dtype="int64")
    assert list(layers.softmax_with_cross_entropy(logits, label).shape) == [-1, 1]
    seq = layers.data("seq", [-1, 5, 10])
    seq_label = layers.data("seq_label", [-1, 1, 10], dtype="int64")
    assert list(layers.softmax_with_cross_entropy(seq, seq_label, axis=1).shape) == \
        [-1, 1, 10]
    acc = layers.accuracy(logits, label, k=5)
    assert (list(acc.shape), acc.dtype) == ([1], "float32")
    _, indices = layers.topk(logits, 3)
    assert (list(indices.shape), indices.dtype) == ([-1, 3], "int64")
    ids = layers.data("ids", [-1, 1], dtype="int64")
    assert list(layers.embedding(ids, [1000, 32]).shape) == [-1, 32]


def test_normalisation_layers_shapes():
    img = layers.data("img", [-1, 8, 8, 3])
    bn = layers.batch_norm(img, data_layout="NHWC")
    assert list(bn.shape) == [-1, 8, 8, 3]
    block = graphc.default_main_program().global_block()
    assert [list(block.var(f"batch_norm_0.{s}").shape) for s in ("w_0", "b_0", "w_1", "w_2")] \
        == [[3]] * 4
    seq = layers.data("seq", [-1, 4, 6])
    ln = layers.layer_norm(seq, begin_norm_axis=2)
    assert list(ln.shape) == [-1, 4, 6]
    assert list(block.var("layer_norm_0.w_0").shape) == [6]
    ln_op = block.ops[-1]
    assert [list(block.var(n).shape) for n in ln_op.output("Mean")] == [[-1]]


def test_layer_errors_name_the_op_and_the_source_line():
    a, b = layers.data("a", [-1, 3]), graphc.data("b", [4])
    with pytest.raises(graphc.ShapeError, match="do not broadcast") as info:
        line = _next_line()
        layers.elementwise_add(a, b)
    assert_names_op_and_line(info.value, "elementwise_add", line)

    with pytest.raises(graphc.ShapeError, match="contracting dimensions differ") as info:
        line = _next_line()
        layers.matmul(a, graphc.data("m", [4, 5]))
    assert_names_op_and_line(info.value, "matmul", line)

    with pytest.raises(graphc.ShapeError, match="cannot reshape") as info:
        line = _next_line()
        layers.reshape(graphc.data("k", [2, 3]), [5, -1])
    assert_names_op_and_line(info.value, "reshape2", line)

    with pytest.raises(graphc.ShapeError, match="window 3 larger than padded input 2") as info:
        line = _next_line()
        layers.conv2d(layers.data("tiny", [-1, 3, 2, 2]), 4, 3)
    assert_names_op_and_line(info.value, "conv2d", line)


# ------------------------------------------------------------------- the Program builder


def _program_with_x():
    prog = graphc.Program()
    block = prog.global_block()
    x = block.create_var("x", [-1, 3], is_data=True)
    return prog, block, x


def test_unknown_op_type_is_named():
    prog, block, x = _program_with_x()
    out = block.create_var("out")
    with pytest.raises(graphc.UnknownOpError, match="unknown op type 'nope'") as info:
        line = _next_line()
        block.append_op("nope", {"X": x}, {"Out": out})
    assert_names_op_and_line(info.value, "nope", line)
    assert prog.num_ops == 0


def test_missing_unknown_and_overfull_slots():
    prog, block, x = _program_with_x()
    out = block.create_var("out")
    with pytest.raises(graphc.OpDefinitionError, match="missing required input slot 'Y'"):
        block.append_op("elementwise_add", {"X": x}, {"Out": out})
    with pytest.raises(graphc.OpDefinitionError, match="has no input slot 'Z'"):
        block.append_op("relu", {"X": x, "Z": x}, {"Out": out})
    with pytest.raises(graphc.OpDefinitionError, match="missing required output slot 'Out'"):
        block.append_op("relu", {"X": x}, {})
    with pytest.raises(graphc.OpDefinitionError, match="input slot 'X' of op relu takes one"):
        block.append_op("relu", {"X": [x, x]}, {"Out": out})
    with pytest.raises(graphc.ProgramError, match="expects Variables or names, got int"):
        block.append_op("relu", {"X": 3}, {"Out": out})
    assert prog.num_ops == 0 and out.shape is None


def test_wrong_attribute_type_names_op_attribute_and_line():
    prog, block, x = _program_with_x()
    out, mask = block.create_var("out"), block.create_var("mask")
    with pytest.raises(graphc.OpDefinitionError) as info:
        line = _next_line()
        block.append_op("dropout", {"X": x}, {"Out": out, "Mask": mask}, {"is_test": "yes"})
    assert_names_op_and_line(info.value, "dropout", line)
    assert str(info.value).endswith(": attribute 'is_test' expects bool, got str 'yes'")
    with pytest.raises(graphc.OpDefinitionError, match="unknown attribute 'train'"):
        block.append_op("dropout", {"X": x}, {"Out": out, "Mask": mask}, {"train": True})
    with pytest.raises(graphc.OpDefinitionError, match="requires attribute 'shape'"):
        block.append_op("reshape2", {"X": x}, {"Out": out})
    assert prog.num_ops == 0


def test_unknown_variable_names():
    prog, block, x = _program_with_x()
    out = block.create_var("out")
    with pytest.raises(graphc.ProgramError, match="input 'X' names unknown variable 'ghost'"):
        block.append_op("relu", {"X": "ghost"}, {"Out": out})
    with pytest.raises(graphc.ProgramError, match="output 'Out' names unknown variable 'nil'"):
        block.append_op("relu", {"X": x}, {"Out": "nil"})
    unshaped = block.create_var("unshaped")
    with pytest.raises(graphc.ShapeError, match="'unshaped' has no shape"):
        block.append_op("relu", {"X": unshaped}, {"Out": out})
    with pytest.raises(graphc.ProgramError, match="variable 'ghost' is not in block 0"):
        block.var("ghost")
    assert prog.num_ops == 0


def test_predeclared_output_must_match_the_inferred_type():
    prog, block, x = _program_with_x()
    wrong_shape = block.create_var("wrong_shape", [5, 5])
    with pytest.raises(graphc.ShapeError) as info:
        block.append_op("relu", {"X": x}, {"Out": wrong_shape})
    assert "output 'Out' variable 'wrong_shape' is f32[5,5] but the op produces f32[-1,3]" \
        in str(info.value)
    wrong_dtype = block.create_var("wrong_dtype", [-1, 3], dtype="int64")
    with pytest.raises(graphc.ShapeError, match="is i64.-1,3. but the op produces f32.-1,3."):
        block.append_op("relu", {"X": x}, {"Out": wrong_dtype})
    # an unknown dimension on either side is compatible, and the declaration is kept
    fine = block.create_var("fine", [8, 3])
    block.append_op("relu", {"X": x}, {"Out": fine})
    assert fine.shape == (8, 3)
    parts = [block.create_var(f"part{i}") for i in range(2)]
    with pytest.raises(graphc.ShapeError, match="output 'Out' has 2 variables but the op "
                                                "produces 3"):
        block.append_op("split", {"X": fine}, {"Out": parts}, {"num": 3, "axis": 1})
    assert prog.num_ops == 1 and all(p.shape is None for p in parts)


def test_a_failed_append_op_leaves_no_output_typed():
    prog, block, _ = _program_with_x()
    y = block.create_var("y", [-1, 4], is_data=True)
    fresh, clash = block.create_var("fresh"), block.create_var("clash", [9, 9])
    with pytest.raises(graphc.ShapeError, match="variable 'clash' is f32.9,9."):
        block.append_op("split", {"X": y}, {"Out": [fresh, clash]}, {"num": 2, "axis": 1})
    assert fresh.shape is None


def test_inferred_output_types_are_recorded_on_the_variables():
    prog, block, x = _program_with_x()
    ids = block.create_var("ids", [-1, 1], dtype="int64", is_data=True)
    w = block.create_parameter("w", [50, 4])
    out = block.create_var("out")
    block.append_op("lookup_table", {"W": w, "Ids": ids}, {"Out": out})
    assert (out.shape, out.dtype) == ((-1, 4), "float32")


# ------------------------------------------------------------------------- Paddle naming


def test_paddle_names_for_fc_batch_norm_conv_and_embedding():
    x = layers.data("x", [-1, 4])
    h = layers.fc(x, 3, act="relu")
    h = layers.batch_norm(h)
    h2 = layers.fc(h, 2)
    img = layers.data("img", [-1, 3, 8, 8])
    layers.conv2d(img, 4, 3)
    layers.embedding(layers.data("ids", [-1, 1], dtype="int64"), [10, 5])
    main = graphc.default_main_program()
    block = main.global_block()
    ops = block.ops
    assert [(op.type, op.output_arg_names) for op in ops[:4]] == [
        ("mul", ["fc_0.tmp_0"]),
        ("elementwise_add", ["fc_0.tmp_1"]),
        ("relu", ["fc_0.tmp_2"]),
        ("batch_norm", ["batch_norm_0.tmp_2", "batch_norm_0.w_1", "batch_norm_0.w_2",
                        "batch_norm_0.tmp_0", "batch_norm_0.tmp_1"]),
    ]
    assert ops[3].inputs == {"X": ["fc_0.tmp_2"], "Scale": ["batch_norm_0.w_0"],
                             "Bias": ["batch_norm_0.b_0"], "Mean": ["batch_norm_0.w_1"],
                             "Variance": ["batch_norm_0.w_2"]}
    assert h2.name == "fc_1.tmp_1"
    params = {p.name: (list(p.shape), p.trainable) for p in main.all_parameters()}
    assert params == {
        "fc_0.w_0": ([4, 3], True), "fc_0.b_0": ([3], True),
        "batch_norm_0.w_0": ([3], True), "batch_norm_0.b_0": ([3], True),
        "batch_norm_0.w_1": ([3], False), "batch_norm_0.w_2": ([3], False),
        "fc_1.w_0": ([3, 2], True), "fc_1.b_0": ([2], True),
        "conv2d_0.w_0": ([4, 3, 3, 3], True), "conv2d_0.b_0": ([4], True),
        "embedding_0.w_0": ([10, 5], True),
    }
    assert all(isinstance(p, graphc.Parameter) and p.persistable
               for p in main.all_parameters())
    assert [p.name for p in main.all_parameters()] == list(params)  # creation order


def test_fc_with_several_inputs_names_one_weight_per_input():
    a, b = layers.data("a", [-1, 2]), layers.data("b", [-1, 5])
    out = layers.fc([a, b], 3)
    block = graphc.default_main_program().global_block()
    assert [op.type for op in block.ops] == ["mul", "mul", "sum", "elementwise_add"]
    assert [list(block.var(n).shape) for n in ("fc_0.w_0", "fc_0.w_1")] == [[2, 3], [5, 3]]
    assert out.name == "fc_0.tmp_3" and list(out.shape) == [-1, 3]


def test_unique_name_guard_restarts_the_counters():
    x = layers.data("x", [-1, 4])
    layers.fc(x, 2)
    with graphc.program_guard(graphc.Program(), graphc.Program()), unique_name.guard():
        inner = layers.fc(layers.data("x", [-1, 4]), 2)
        assert inner.name == "fc_0.tmp_1"
        assert graphc.default_main_program().all_parameters()[0].name == "fc_0.w_0"
    assert layers.fc(x, 2).name == "fc_1.tmp_1"
    assert unique_name.generate("fc") == "fc_2"


def test_parameters_live_in_main_and_their_initializers_in_startup():
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    x = layers.data("x", [-1, 4])
    layers.batch_norm(layers.fc(x, 3))
    assert {p.name for p in main.all_parameters()} == {
        "fc_0.w_0", "fc_0.b_0", "batch_norm_0.w_0", "batch_norm_0.b_0", "batch_norm_0.w_1",
        "batch_norm_0.w_2"}
    assert [op.type for op in main.global_block().ops] == ["mul", "elementwise_add",
                                                           "batch_norm"]
    inits = {op.output("Out")[0]: (op.type, op.attrs) for op in startup.global_block().ops}
    limit = math.sqrt(6.0 / (4 + 3))  # Xavier (Glorot) uniform: fan_in 4, fan_out 3
    assert inits == {
        "fc_0.w_0": ("uniform_random", {"shape": [4, 3], "dtype": "float32", "min": -limit,
                                        "max": limit, "seed": 0, "row_keyed": False}),
        "fc_0.b_0": ("fill_constant", {"shape": [3], "dtype": "float32", "value": 0.0,
                                       "force_cpu": False}),
        "batch_norm_0.w_0": ("fill_constant", {"shape": [3], "dtype": "float32", "value": 1.0,
                                               "force_cpu": False}),
        "batch_norm_0.b_0": ("fill_constant", {"shape": [3], "dtype": "float32", "value": 0.0,
                                               "force_cpu": False}),
        "batch_norm_0.w_1": ("fill_constant", {"shape": [3], "dtype": "float32", "value": 0.0,
                                               "force_cpu": False}),
        "batch_norm_0.w_2": ("fill_constant", {"shape": [3], "dtype": "float32", "value": 1.0,
                                               "force_cpu": False}),
    }
    svars = startup.global_block().vars
    assert all(svars[n].persistable and svars[n].shape == main.global_block().var(n).shape
               for n in inits)


@pytest.mark.parametrize("init, shape, op_type, attrs", [
    (initializer.Constant(0.5), [3, 2], "fill_constant", {"value": 0.5}),
    (initializer.Uniform(-0.1, 0.2, seed=3), [3, 2], "uniform_random",
     {"min": -0.1, "max": 0.2, "seed": 3}),
    (initializer.Normal(1.0, 2.0), [3, 2], "gaussian_random", {"mean": 1.0, "std": 2.0}),
    (initializer.Xavier(), [3, 2], "uniform_random",
     {"min": -math.sqrt(6 / 5), "max": math.sqrt(6 / 5)}),
    (initializer.Xavier(uniform=False), [3, 2], "gaussian_random",
     {"mean": 0.0, "std": math.sqrt(2 / 5)}),
    (initializer.MSRA(), [3, 2], "uniform_random",
     {"min": -math.sqrt(6 / 3), "max": math.sqrt(6 / 3)}),
    (initializer.MSRA(uniform=False), [3, 2], "gaussian_random",
     {"mean": 0.0, "std": math.sqrt(2 / 3)}),
    # conv filters [out, in, kh, kw]: fan_in = in * kh * kw, fan_out = out * kh * kw
    (initializer.Xavier(), [8, 3, 3, 3], "uniform_random",
     {"min": -math.sqrt(6 / (27 + 72)), "max": math.sqrt(6 / (27 + 72))}),
    (initializer.MSRA(uniform=False), [8, 3, 3, 3], "gaussian_random",
     {"std": math.sqrt(2 / 27)}),
])
def test_initializer_ops(init, shape, op_type, attrs):
    x = layers.data("x", [-1, 3, 4, 4] if len(shape) == 4 else [-1, 3])
    attr = graphc.ParamAttr(name="p", initializer=init)
    if len(shape) == 4:
        layers.conv2d(x, 8, 3, param_attr=attr, bias_attr=False)
    else:
        layers.fc(x, 2, param_attr=attr, bias_attr=False)
    (op,) = graphc.default_startup_program().global_block().ops
    assert op.type == op_type and op.output("Out") == ["p"]
    assert op.attr("shape") == shape and op.attr("dtype") == "float32"
    for name, value in attrs.items():
        assert op.attr(name) == pytest.approx(value), name


def test_param_attr_name_trainable_and_learning_rate():
    x = layers.data("x", [-1, 3])
    layers.fc(x, 2, param_attr=graphc.ParamAttr(name="my_w", initializer=initializer.Constant(
        0.25), trainable=False, learning_rate=0.1), bias_attr=False)
    main = graphc.default_main_program()
    (w,) = main.all_parameters()
    assert (w.name, w.trainable, w.stop_gradient, w.optimize_attr) == (
        "my_w", False, True, {"learning_rate": 0.1})
    assert [op.type for op in main.global_block().ops] == ["mul"]  # no bias
    (init,) = graphc.default_startup_program().global_block().ops
    assert (init.type, init.attr("value")) == ("fill_constant", 0.25)
    graph = graphc.lower(main)
    info = graph.vars["my_w"]
    assert (info.kind, info.trainable, info.learning_rate) == ("param", False, 0.1)


def test_every_op_records_the_source_line_that_built_it():
    x = layers.data("x", [-1, 4])
    fc_line = _next_line()
    h = layers.fc(x, 3, act="relu")
    bn_line = _next_line()
    layers.batch_norm(h)
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    sources = [op.source for op in main.global_block().ops]
    assert all(s.endswith(fc_line) for s in sources[:3]), sources
    assert sources[3].endswith(bn_line)
    init_sources = [op.source for op in startup.global_block().ops]
    assert all(s.endswith(fc_line) for s in init_sources[:2]), init_sources
    assert all(s.endswith(bn_line) for s in init_sources[2:]), init_sources
    graph = graphc.lower(main)
    assert [op.source for op in graph.ops()] == sources
    assert f':{fc_line.split(":")[1]})' in graph.to_text(show_source=True)


# --------------------------------------------------------------------- clone(for_test=True)


def _training_like_program():
    main = graphc.default_main_program()
    x = layers.data("x", [-1, 4])
    h = layers.batch_norm(layers.fc(x, 3))
    h = layers.dropout(h, 0.5)
    loss = layers.mean(h)
    block = main.global_block()
    with main.op_role_guard("backward"):
        grad = block.create_var("loss@GRAD")
        block.append_op("fill_constant", outputs={"Out": grad}, attrs={"shape": [1]})
    with main.op_role_guard("optimize"):
        w = block.var("fc_0.w_0")
        block.append_op("scale", {"X": w}, {"Out": w}, {"scale": 0.5})
    return main, loss


def test_clone_for_test_keeps_forward_ops_and_sets_is_test():
    main, loss = _training_like_program()
    assert [op.role for op in main.global_block().ops] == ["forward"] * 5 + ["backward",
                                                                             "optimize"]
    test_prog = main.clone(for_test=True)
    ops = test_prog.global_block().ops
    assert [op.type for op in ops] == ["mul", "elementwise_add", "batch_norm", "dropout",
                                       "mean"]
    assert all(op.role == "forward" for op in ops)
    assert ops[2].attr("is_test") is True and ops[3].attr("is_test") is True
    assert "loss@GRAD" not in test_prog.global_block().vars
    assert {p.name for p in test_prog.all_parameters()} == {
        p.name for p in main.all_parameters()}
    # the original is untouched
    orig = main.global_block().ops
    assert orig[2].attr("is_test") is False and orig[3].attr("is_test") is False
    assert len(orig) == 7
    # ops keep their source lines, and the clone lowers and verifies
    assert [op.source for op in ops] == [op.source for op in orig[:5]]
    graphc.lower(test_prog).verify()


def test_clone_without_for_test_is_a_full_deep_copy():
    main, _ = _training_like_program()
    dup = main.clone()
    assert [(op.type, op.role, op.attrs) for op in dup.global_block().ops] == \
        [(op.type, op.role, op.attrs) for op in main.global_block().ops]
    dup.global_block().ops[2].set_attr("is_test", True)
    assert main.global_block().ops[2].attr("is_test") is False
    assert dup.global_block().var("fc_0.w_0") is not main.global_block().var("fc_0.w_0")
    assert graphc.lower(dup).structurally_equal(graphc.lower(main)) is False
    assert graphc.lower(main.clone()).structurally_equal(graphc.lower(main))


# -- tensor manipulation (issue 15) ------------------------------------------------------------
def b(*shape: int) -> TensorType:
    return t(*shape, dtype="bool")


MANIPULATION_CASES = [
    case("slice", {"Input": t(3, 4, 5)}, {"axes": [0, 2], "starts": [1, -3], "ends": [9999, -1]},
         {"Out": t(2, 4, 2)}, "negative-bounds"),
    case("slice", {"Input": t(-1, 4)}, {"axes": [-1], "starts": [3], "ends": [1]},
         {"Out": t(-1, 0)}, "empty-unknown-batch"),
    case("slice", {"Input": t(3, 4)}, {"axes": [0], "starts": [1], "ends": [2],
                                       "decrease_axis": [0]}, {"Out": t(4)}, "decrease"),
    case("strided_slice", {"Input": t(3, 4, 5)},
         {"axes": [1, 2], "starts": [-1, 0], "ends": [-5, 5], "strides": [-2, 2]},
         {"Out": t(3, 2, 3)}),
    case("squeeze2", {"X": t(2, 1, 3, 1)}, None, {"Out": t(2, 3), "XShape": t(0, 2, 1, 3, 1)}),
    case("squeeze2", {"X": t(-1, 1, 3)}, {"axes": [0, -2]},
         {"Out": t(3), "XShape": t(0, -1, 1, 3)}, "unknown-taken-as-one"),
    case("unsqueeze2", {"X": t(-1, 3)}, {"axes": [0, -1]},
         {"Out": t(1, -1, 3, 1), "XShape": t(0, -1, 3)}),
    case("flatten2", {"X": t(-1, 3, 4)}, {"axis": 2}, {"Out": t(-1, 4), "XShape": t(0, -1, 3, 4)}),
    case("flatten2", {"X": t(2, 3, 4)}, {"axis": 0}, {"Out": t(1, 24), "XShape": t(0, 2, 3, 4)},
         "axis0"),
    case("shape", {"Input": t(-1, 3, 4)}, None, {"Out": t(3, dtype="int32")}),
    case("expand", {"X": t(-1, 1, 3)}, {"expand_times": [1, 4, 2]}, {"Out": t(-1, 4, 6)}),
    case("expand_as", {"X": t(2, 1), "target_tensor": t(4, 3)}, None, {"Out": t(4, 3)}),
    case("gather", {"X": t(10, 3), "Index": i64(4)}, None, {"Out": t(4, 3)}),
    case("gather", {"X": t(10, 3), "Index": i64(-1, 1)}, None, {"Out": t(-1, 3)}, "column"),
    case("gather_nd", {"X": t(3, 4, 5), "Index": i64(2, 6, 2)}, None, {"Out": t(2, 6, 5)}),
    case("scatter", {"X": t(10, 3), "Ids": i64(4), "Updates": t(4, 3)}, None,
         {"Out": t(10, 3)}),
    case("stack", {"X": [t(-1, 3), t(-1, 3)]}, {"axis": -1}, {"Y": t(-1, 3, 2)}),
    case("unstack", {"X": t(2, 3, 4)}, {"axis": -2, "num": 3}, {"Y": [t(2, 4)] * 3}),
    case("one_hot", {"X": i64(-1, 1)}, {"depth": 10}, {"Out": t(-1, 10)}),
    case("one_hot_v2", {"X": i64(-1, 5)}, {"depth": 7}, {"Out": t(-1, 5, 7)}),
    case("where_index", {"Condition": b(3, 4)}, None, {"Out": i64(-1, 2).with_lod(1)}),
    case("where_index", {"Condition": b(3, 4)}, {"size": 5}, {"Out": i64(5, 2)}, "bounded"),
    case("range", {}, {"start": 1, "end": 10, "step": 3, "dtype": "int32"},
         {"Out": t(3, dtype="int32")}),
    case("range", {}, {"start": 1.0, "end": 0.0, "step": -0.25, "dtype": "float32"},
         {"Out": t(4)}, "negative-step"),
    case("fill_any_like", {"X": i64(-1, 3)}, {"value": 1.0}, {"Out": i64(-1, 3)}),
    case("assign_value", {}, {"shape": [2, 1], "dtype": "int64", "int64_values": [7, 2 ** 40]},
         {"Out": i64(2, 1)}),
    case("fill_constant_batch_size_like", {"Input": t(-1, 7)},
         {"shape": [0, 3], "dtype": "int64", "value": 2.0}, {"Out": i64(-1, 3)}),
    case("uniform_random_batch_size_like", {"Input": t(8, 7)},
         {"shape": [4, 0], "input_dim_idx": 1, "output_dim_idx": 1}, {"Out": t(4, 7)}),
    case("log", {"X": t(2, 3)}, None, {"Out": t(2, 3)}),
    case("sign", {"X": t(2, 3)}, None, {"Out": t(2, 3)}),
    case("pow", {"X": t(2, 3)}, {"factor": 2.0}, {"Out": t(2, 3)}),
    case("clip", {"X": t(-1, 3)}, {"min": -1.0, "max": 1.0}, {"Out": t(-1, 3)}),
    case("clip_by_norm", {"X": t(-1, 3)}, {"max_norm": 1.0}, {"Out": t(-1, 3)}),
    case("norm", {"X": t(-1, 3, 4)}, {"axis": -2}, {"Out": t(-1, 3, 4), "Norm": t(-1, 1, 4)}),
    *[case(op, {"X": t(2, 3, 4)}, {"dim": [-1, 0], "keep_dim": True}, {"Out": t(1, 3, 1)})
      for op in ("reduce_min", "reduce_prod")],
    *[case(op, {"X": b(2, 3, 4)}, {"reduce_all": True}, {"Out": b(1)})
      for op in ("reduce_all", "reduce_any")],
    *[case(op, {"X": i64(2, 3), "Y": i64(3)}, None, {"Out": i64(2, 3)})
      for op in ("elementwise_mod", "elementwise_floordiv")],
    *[case(op, {"X": t(2, 3, 4), "Y": t(3)}, {"axis": 1}, {"Out": b(2, 3, 4)})
      for op in ("equal", "not_equal", "less_than", "less_equal", "greater_than",
                 "greater_equal")],
    *[case(op, {"X": b(2, 3), "Y": b(3)}, None, {"Out": b(2, 3)})
      for op in ("logical_and", "logical_or", "logical_xor")],
    case("logical_not", {"X": b(2, 3)}, None, {"Out": b(2, 3)}),
    case("arg_max", {"X": t(-1, 3, 4)}, {"axis": -1}, {"Out": i64(-1, 3)}),
    case("arg_min", {"X": t(2, 3, 4)}, {"axis": 1, "keepdims": True}, {"Out": i64(2, 1, 4)}),
    case("arg_min", {"X": t(2, 3)}, {"flatten": True}, {"Out": i64(1)}, "flatten"),
    case("argsort", {"X": t(-1, 5)}, {"axis": 0, "descending": True},
         {"Out": t(-1, 5), "Indices": i64(-1, 5)}),
]
CASES.extend(MANIPULATION_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", MANIPULATION_CASES)
def test_manipulation_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in MANIPULATION_CASES if has_op_def(grad_op_type(p.values[0]))])
def test_manipulation_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


MANIPULATION_ERRORS = [
    ("slice", {"Input": t(3, 4)}, {"axes": [0, 1], "starts": [0], "ends": [1, 2]},
     "starts [0] must have one entry per axis"),
    ("slice", {"Input": t(3, 4)}, {"axes": [2], "starts": [0], "ends": [1]},
     "axes entry 2 is out of range for rank 2"),
    ("slice", {"Input": t(3, 4)}, {"axes": [0], "starts": [0], "ends": [2],
                                   "decrease_axis": [0]}, "decrease_axis [0] must name"),
    ("strided_slice", {"Input": t(3)}, {"axes": [0], "starts": [0], "ends": [2],
                                        "strides": [0]}, "strides [0] contain 0"),
    ("squeeze2", {"X": t(2, 1)}, {"axes": [3]}, "axes entry 3 is out of range for rank 2"),
    ("squeeze2", {"X": t(2, 1)}, {"axes": [0]}, "dimension 0 of [2, 1] has size 2"),
    ("unsqueeze2", {"X": t(2, 1)}, {"axes": [4]}, "axes entry 4 is out of range for rank 3"),
    ("flatten2", {"X": t(2, 1)}, {"axis": 3}, "axis 3 must be in [0, 2]"),
    ("expand", {"X": t(2, 1)}, {"expand_times": [2]}, "one entry per dimension of X [2, 1]"),
    ("expand_as", {"X": t(2, 2), "target_tensor": t(3, 2)}, {}, "is not a multiple of X"),
    ("gather", {"X": t(5, 3), "Index": t(4)}, {}, "Index must be an integer tensor"),
    ("gather", {"X": t(5, 3), "Index": i64(4, 2)}, {}, "Index must be [N] or [N, 1]"),
    ("gather_nd", {"X": t(5, 3), "Index": i64(4, 3)}, {}, "at most X's rank 2"),
    ("scatter", {"X": t(5, 3), "Ids": i64(2), "Updates": t(3, 3)}, {},
     "Updates [3, 3] must be [len(Ids)=2]"),
    ("stack", {"X": [t(2, 3), t(3, 2)]}, {}, "inputs [2, 3] and [3, 2] differ"),
    ("unstack", {"X": t(2, 3)}, {"num": 3}, "num 3 must equal dimension 0"),
    ("one_hot", {"X": i64(4, 2)}, {"depth": 3}, "X must end in a dimension of 1"),
    ("one_hot", {"X": t(4, 1)}, {"depth": 3}, "X must be an integer tensor"),
    ("range", {}, {"start": 0, "end": 3, "step": 0}, "step must not be 0"),
    ("assign_value", {}, {"shape": [3], "dtype": "float32", "fp32_values": [1.0]},
     "1 values for shape [3]"),
    ("assign_value", {}, {"shape": [1], "dtype": "float32", "int32_values": [1]},
     "takes its values from fp32_values, got ['int32_values']"),
    ("assign_value", {}, {"shape": [1], "dtype": "float64", "fp32_values": [1.0]},
     "dtype float64 must be one of"),
    ("fill_constant_batch_size_like", {"Input": t(-1, 2)}, {"shape": [0, -1]},
     "must be known apart from output_dim_idx 0"),
    ("clip", {"X": t(3)}, {"min": 1.0, "max": 0.0}, "min 1.0 must not exceed max 0.0"),
    ("clip_by_norm", {"X": t(3)}, {"max_norm": 0.0}, "max_norm 0.0 must be positive"),
    ("log", {"X": i64(3)}, {}, "X must be floating point, got int64"),
    ("reduce_all", {"X": t(3)}, {}, "X must be bool, got float32"),
    ("logical_and", {"X": b(3), "Y": t(3)}, {}, "inputs must be bool"),
    ("less_than", {"X": t(3), "Y": i64(3)}, {}, "X is float32 but Y is int64"),
    ("equal", {"X": t(2, 3), "Y": t(4)}, {}, "do not broadcast"),
    ("arg_max", {"X": t(2, 3)}, {"axis": 2}, "axis 2 is out of range for rank 2"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", MANIPULATION_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in MANIPULATION_ERRORS])
def test_manipulation_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- issue 24: math activations ---------------------------------------------------------------
MATH_ACTIVATION_CASES = [
    *[case(op, {"X": t(-1, 7)}, None, {"Out": t(-1, 7)})
      for op in ("selu", "elu", "relu6", "stanh", "hard_sigmoid", "swish", "brelu", "soft_relu",
                 "logsigmoid", "hard_swish", "thresholded_relu", "softplus", "softshrink",
                 "hard_shrink", "tanh_shrink", "erf", "atan", "rsqrt", "ceil", "floor", "cos",
                 "acos", "asin", "sin", "round", "reciprocal")],
    case("selu", {"X": t(2, 3, dtype="float64")}, {"scale": 1.5, "alpha": 2.0},
         {"Out": t(2, 3, dtype="float64")}, "f64-attrs"),
    case("softshrink", {"X": t(3)}, {"lambda": 0.1}, {"Out": t(3)}, "lambda"),
    case("prelu", {"X": t(-1, 3, 4, 4), "Alpha": t(1)}, {"mode": "all"},
         {"Out": t(-1, 3, 4, 4)}),
    case("prelu", {"X": t(-1, 3, 4, 4), "Alpha": t(1, 3, 1, 1)}, {"mode": "channel"},
         {"Out": t(-1, 3, 4, 4)}, "channel"),
    case("prelu", {"X": t(-1, 3, 5), "Alpha": t(1, 3, 5)}, {"mode": "element"},
         {"Out": t(-1, 3, 5)}, "element"),
    case("maxout", {"X": t(-1, 6, 4, 4)}, {"groups": 3}, {"Out": t(-1, 2, 4, 4)}),
    case("maxout", {"X": t(2, 4, 4, 6)}, {"groups": 2, "axis": -1}, {"Out": t(2, 4, 4, 3)},
         "nhwc"),
    case("maxout", {"X": t(2, -1, 4, 4)}, {"groups": 2}, {"Out": t(2, -1, 4, 4)},
         "unknown-channels"),
    case("cumsum", {"X": t(-1, 5)}, None, {"Out": t(-1, 5)}),
    case("cumsum", {"X": i64(2, 3, 4)}, {"axis": 0, "exclusive": True, "reverse": True},
         {"Out": i64(2, 3, 4)}, "int-exclusive-reverse"),
    case("size", {"Input": t(-1, 3)}, None, {"Out": i64(1)}),
    *[case(op, {"X": t(-1, 3)}, None, {"Out": b(1)}) for op in ("isinf", "isnan", "isfinite")],
]
CASES.extend(MATH_ACTIVATION_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", MATH_ACTIVATION_CASES)
def test_math_activation_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in MATH_ACTIVATION_CASES
                          if has_op_def(grad_op_type(p.values[0]))])
def test_math_activation_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


MATH_ACTIVATION_ERRORS = [
    ("selu", {"X": i64(3)}, {}, "X must be floating point, got int64"),
    ("ceil", {"X": t(3, dtype="int32")}, {}, "X must be floating point, got int32"),
    ("prelu", {"X": t(-1, 3, 4, 4), "Alpha": t(1, 4, 1, 1)}, {"mode": "channel"},
     "mode 'channel' with X [-1, 3, 4, 4] needs 3 alpha values, Alpha is [1, 4, 1, 1]"),
    ("prelu", {"X": t(-1, 3), "Alpha": t(1)}, {"mode": "rows"}, "mode must be 'all'"),
    ("prelu", {"X": t(2, 3), "Alpha": t(1, dtype="float64")}, {"mode": "all"},
     "Alpha is float64 but X is float32"),
    ("maxout", {"X": t(2, 5, 4, 4)}, {"groups": 2}, "channels 5 of X [2, 5, 4, 4] must divide"),
    ("maxout", {"X": t(2, 4, 4)}, {"groups": 2}, "X must be 4-D"),
    ("cumsum", {"X": t(2, 3)}, {"axis": 2}, "axis 2 is out of range for rank 2"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", MATH_ACTIVATION_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in MATH_ACTIVATION_ERRORS])
def test_math_activation_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end issue 24: math activations

# -- issue 24: detection ----------------------------------------------------------------------
_PRIOR = {"min_sizes": [2.0, 4.0], "max_sizes": [3.0, 9.0], "aspect_ratios": [2.0, 1.0],
          "flip": True}
DETECTION_CASES = [
    case("prior_box", {"Input": t(-1, 8, 5, 6), "Image": t(-1, 3, 40, 48)}, _PRIOR,
         {"Boxes": t(5, 6, 8, 4), "Variances": t(5, 6, 8, 4)}),
    case("prior_box", {"Input": t(2, 8, -1, 6), "Image": t(2, 3, 40, 48)},
         {"min_sizes": [2.0]}, {"Boxes": t(-1, 6, 1, 4), "Variances": t(-1, 6, 1, 4)},
         "unknown-height"),
    case("box_coder", {"PriorBox": t(7, 4), "TargetBox": t(-1, 4)}, None,
         {"OutputBox": t(-1, 7, 4)}, "encode"),
    case("box_coder", {"PriorBox": t(7, 4), "PriorBoxVar": t(7, 4), "TargetBox": t(-1, 7, 4)},
         {"code_type": "decode_center_size"}, {"OutputBox": t(-1, 7, 4)}, "decode"),
    case("box_coder", {"PriorBox": t(-1, 4), "TargetBox": t(-1, 7, 4)},
         {"code_type": "decode_center_size", "axis": 1, "variance": [1.0, 1.0, 2.0, 2.0]},
         {"OutputBox": t(-1, 7, 4)}, "decode-axis1"),
    case("iou_similarity", {"X": t(-1, 4), "Y": t(5, 4)}, None, {"Out": t(-1, 5)}),
    case("yolo_box", {"X": t(-1, 14, 3, 4), "ImgSize": t(-1, 2, dtype="int32")},
         {"anchors": [10, 13, 16, 30], "class_num": 2, "conf_thresh": 0.01,
          "downsample_ratio": 32}, {"Boxes": t(-1, 24, 4), "Scores": t(-1, 24, 2)}),
    case("anchor_generator", {"Input": t(-1, 8, 5, -1)},
         {"anchor_sizes": [32.0, 64.0], "aspect_ratios": [0.5, 1.0, 2.0],
          "stride": [16.0, 16.0]}, {"Anchors": t(5, -1, 6, 4), "Variances": t(5, -1, 6, 4)}),
    case("polygon_box_transform", {"Input": t(-1, 8, 5, 6)}, None,
         {"Output": t(-1, 8, 5, 6)}),
    case("roi_align", {"X": t(-1, 8, 5, 6), "ROIs": t(-1, 4), "RoisLod": i64(3)},
         {"pooled_height": 2, "pooled_width": 3}, {"Out": t(-1, 8, 2, 3)}),
    case("roi_pool", {"X": t(-1, 8, 5, 6), "ROIs": t(-1, 4), "RoisLod": i64(3)},
         {"pooled_height": 2, "pooled_width": 3},
         {"Out": t(-1, 8, 2, 3), "Argmax": i64(-1, 8, 2, 3)}),
    case("box_clip", {"Input": t(-1, 7, 4), "ImInfo": t(-1, 3)}, None,
         {"Output": t(-1, 7, 4)}),
    case("box_decoder_and_assign", {"PriorBox": t(-1, 4), "PriorBoxVar": t(4),
                                    "TargetBox": t(-1, 12), "BoxScore": t(-1, 3)},
         {"box_clip": 4.135}, {"DecodeBox": t(-1, 12), "OutputAssignBox": t(-1, 4)}),
    case("density_prior_box", {"Input": t(-1, 8, 5, 6), "Image": t(-1, 3, 40, 48)},
         {"densities": [2, 1], "fixed_sizes": [8.0, 16.0], "fixed_ratios": [1.0, 2.0]},
         {"Boxes": t(5, 6, 10, 4), "Variances": t(5, 6, 10, 4)}),
    case("density_prior_box", {"Input": t(-1, 8, 5, 6), "Image": t(-1, 3, 40, 48)},
         {"densities": [2], "fixed_sizes": [8.0], "fixed_ratios": [1.0],
          "flatten_to_2d": True}, {"Boxes": t(120, 4), "Variances": t(120, 4)}, "flat"),
    case("bipartite_match", {"DistMat": TensorType((-1, 9), "float32", False, 1)}, None,
         {"ColToRowMatchIndices": TensorType((-1, 9), "int32"),
          "ColToRowMatchDist": t(-1, 9)}),
    case("bipartite_match", {"DistMat": t(4, 9)}, {"match_type": "per_prediction"},
         {"ColToRowMatchIndices": TensorType((1, 9), "int32"), "ColToRowMatchDist": t(1, 9)},
         "dense"),
    case("target_assign", {"X": TensorType((-1, 1, 4), "float32", False, 1),
                           "MatchIndices": TensorType((-1, 9), "int32"),
                           "NegIndices": TensorType((-1, 1), "int32", False, 1)},
         {"mismatch_value": 0}, {"Out": t(-1, 9, 4), "OutWeight": t(-1, 9, 1)}),
    case("multiclass_nms", {"BBoxes": t(-1, 9, 4), "Scores": t(-1, 3, 9)},
         {"score_threshold": 0.1, "nms_top_k": 5, "keep_top_k": 4},
         {"Out": TensorType((-1, 6), "float32", False, 1)}),
]
CASES.extend(DETECTION_CASES)  # test_every_op_has_a_case reads CASES when it runs
# -- end issue 24: detection


# -- issue 24: vision sampling ----------------------------------------------------------------
def _lod_rois(width=4):
    return TensorType((-1, width), "float32", False, 1)


VISION_SAMPLING_CASES = [
    case("psroi_pool", {"X": t(-1, 12, 5, 6), "ROIs": _lod_rois()},
         {"output_channels": 3, "pooled_height": 2, "pooled_width": 2},
         {"Out": TensorType((-1, 3, 2, 2), "float32", False, 1)}),
    case("prroi_pool", {"X": t(-1, 8, 5, 6), "ROIs": t(-1, 4), "BatchRoINums": i64(-1)},
         {"pooled_height": 2, "pooled_width": 3}, {"Out": t(-1, 8, 2, 3)}, "batch_roi_nums"),
    case("prroi_pool", {"X": t(-1, 8, 5, 6), "ROIs": _lod_rois()},
         {"pooled_height": 2, "pooled_width": 3},
         {"Out": TensorType((-1, 8, 2, 3), "float32", False, 1)}, "lod"),
    case("deformable_conv", {"Input": t(-1, 4, 5, 6), "Offset": t(-1, 36, 3, 3),
                             "Mask": t(-1, 18, 3, 3), "Filter": t(6, 2, 3, 3)},
         {"strides": [2, 2], "paddings": [1, 1], "groups": 2, "deformable_groups": 2},
         {"Output": t(-1, 6, 3, 3)}),
    case("deformable_conv_v1", {"Input": t(2, 4, 5, -1), "Offset": t(2, 18, 3, -1),
                                "Filter": t(6, 4, 3, 3)}, None, {"Output": t(2, 6, 3, -1)}),
    case("deformable_psroi_pooling", {"Input": t(-1, 8, 5, 6), "ROIs": _lod_rois(),
                                      "Trans": t(-1, 4, 2, 2)},
         {"output_dim": 2, "group_size": [2, 2], "pooled_height": 2, "pooled_width": 2,
          "part_size": [2, 2]},
         {"Output": TensorType((-1, 2, 2, 2), "float32", False, 1),
          "TopCount": TensorType((-1, 2, 2, 2), "float32", False, 1)}),
    case("roi_perspective_transform", {"X": t(-1, 3, 5, 6), "ROIs": _lod_rois(8)},
         {"transformed_height": 2, "transformed_width": 4},
         {"Out": TensorType((-1, 3, 2, 4), "float32", False, 1),
          "Mask": TensorType((-1, 1, 2, 4), "int32", False, 1),
          "TransformMatrix": TensorType((-1, 9), "float32", False, 1)}),
    case("im2sequence", {"X": t(2, 3, 5, 6)},
         {"kernels": [2, 3], "strides": [1, 2], "paddings": [1, 0, 0, 1]},
         {"Out": TensorType((30, 18), "float32", False, 1)}, "dense"),
    case("im2sequence", {"X": t(-1, 3, 5, 6), "Y": TensorType((-1, 2), "int32")},
         {"kernels": [2, 2], "out_stride": [2, 2]},
         {"Out": TensorType((-1, 12), "float32", False, 1)}, "image_sizes"),
]
CASES.extend(VISION_SAMPLING_CASES)
# -- end issue 24: vision sampling


# -- issue 24: detection proposals ------------------------------------------------------------
def _lod(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(shape, dtype, False, 1)


DETECTION_PROPOSALS_CASES = [
    case("multiclass_nms2", {"BBoxes": t(-1, 9, 4), "Scores": t(-1, 3, 9)},
         {"score_threshold": 0.1, "nms_top_k": 5, "keep_top_k": 4},
         {"Out": _lod(-1, 6), "Index": _lod(-1, 1, dtype="int32")}),
    case("locality_aware_nms", {"BBoxes": t(-1, 9, 4), "Scores": t(-1, 3, 9)},
         {"score_threshold": 0.1, "nms_top_k": 5, "keep_top_k": -1}, {"Out": _lod(-1, 6)}),
    case("retinanet_detection_output",
         {"BBoxes": [t(-1, 12, 4), t(-1, 3, 4)], "Scores": [t(-1, 12, 5), t(-1, 3, 5)],
          "Anchors": [t(12, 4), t(3, 4)], "ImInfo": t(-1, 3)}, None, {"Out": _lod(-1, 6)}),
    case("generate_proposals",
         {"Scores": t(-1, 3, 4, 5), "BboxDeltas": t(-1, 12, 4, 5), "ImInfo": t(-1, 3),
          "Anchors": t(4, 5, 3, 4), "Variances": t(4, 5, 3, 4)}, None,
         {"RpnRois": _lod(-1, 4), "RpnRoiProbs": _lod(-1, 1)}),
    case("distribute_fpn_proposals", {"FpnRois": _lod(-1, 4)},
         {"min_level": 2, "max_level": 4, "refer_level": 4, "refer_scale": 224},
         {"MultiFpnRois": [_lod(-1, 4)] * 3, "RestoreIndex": _lod(-1, 1, dtype="int32")}),
    case("collect_fpn_proposals",
         {"MultiLevelRois": [_lod(-1, 4), _lod(-1, 4)],
          "MultiLevelScores": [_lod(-1, 1), _lod(-1, 1)]},
         {"post_nms_topN": 100}, {"FpnRois": _lod(-1, 4)}),
    case("generate_proposal_labels",
         {"RpnRois": _lod(-1, 4), "GtClasses": _lod(-1, 1, dtype="int32"),
          "IsCrowd": _lod(-1, 1, dtype="int32"), "GtBoxes": _lod(-1, 4), "ImInfo": t(-1, 3)},
         {"class_nums": 5},
         {"Rois": _lod(-1, 4), "LabelsInt32": _lod(-1, 1, dtype="int32"),
          "BboxTargets": _lod(-1, 20), "BboxInsideWeights": _lod(-1, 20),
          "BboxOutsideWeights": _lod(-1, 20)}),
]
CASES.extend(DETECTION_PROPOSALS_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", DETECTION_PROPOSALS_CASES)
def test_detection_proposals_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
# -- end issue 24: detection proposals


# -- issue 24: detection targets --------------------------------------------------------------
DETECTION_TARGET_CASES = [
    case("yolov3_loss", {"X": t(-1, 16, 5, 5), "GTBox": t(-1, 6, 4),
                         "GTLabel": TensorType((-1, 6), "int32"), "GTScore": t(-1, 6)},
         {"anchors": [10, 13, 16, 30, 33, 23], "anchor_mask": [1, 2], "class_num": 3,
          "ignore_thresh": 0.7, "downsample_ratio": 8},
         {"Loss": t(-1), "ObjectnessMask": t(-1, 2, 5, 5),
          "GTMatchMask": TensorType((-1, 6), "int32")}),
    case("mine_hard_examples", {"ClsLoss": t(-1, 9), "MatchIndices": TensorType((-1, 9), "int32"),
                                "MatchDist": t(-1, 9)},
         {"neg_pos_ratio": 3.0, "neg_dist_threshold": 0.5},
         {"NegIndices": TensorType((-1, 1), "int32", False, 1),
          "UpdatedMatchIndices": TensorType((-1, 9), "int32")}),
    case("mine_hard_examples", {"ClsLoss": t(4, 9), "LocLoss": t(4, 9),
                                "MatchIndices": TensorType((4, 9), "int32"),
                                "MatchDist": t(4, 9)},
         {"mining_type": "hard_example", "sample_size": 5},
         {"NegIndices": TensorType((-1, 1), "int32", False, 1),
          "UpdatedMatchIndices": TensorType((4, 9), "int32")}, "hard-example"),
    case("rpn_target_assign", {"Anchor": t(20, 4), "GtBoxes": TensorType((-1, 4), "float32",
                                                                        False, 1),
                               "IsCrowd": TensorType((-1, 1), "int32", False, 1),
                               "ImInfo": t(-1, 3)}, {"use_random": False},
         {"LocationIndex": TensorType((-1,), "int32", False, 1),
          "ScoreIndex": TensorType((-1,), "int32", False, 1),
          "TargetBBox": TensorType((-1, 4), "float32", False, 1),
          "TargetLabel": TensorType((-1, 1), "int32", False, 1),
          "BBoxInsideWeight": TensorType((-1, 4), "float32", False, 1)}),
    case("retinanet_target_assign",
         {"Anchor": t(20, 4), "GtBoxes": TensorType((-1, 4), "float32", False, 1),
          "GtLabels": TensorType((-1, 1), "int32", False, 1),
          "IsCrowd": TensorType((-1, 1), "int32", False, 1), "ImInfo": t(-1, 3)}, None,
         {"LocationIndex": TensorType((-1,), "int32", False, 1),
          "ScoreIndex": TensorType((-1,), "int32", False, 1),
          "TargetBBox": TensorType((-1, 4), "float32", False, 1),
          "TargetLabel": TensorType((-1, 1), "int32", False, 1),
          "BBoxInsideWeight": TensorType((-1, 4), "float32", False, 1),
          "ForegroundNumber": TensorType((-1, 1), "int32", False, 1)}),
]
CASES.extend(DETECTION_TARGET_CASES)
# -- end issue 24: detection targets


# -- issue 24: detection eval -----------------------------------------------------------------
DETECTION_EVAL_CASES = [
    case("detection_map", {"DetectRes": TensorType((-1, 6), "float32", False, 1),
                           "Label": TensorType((-1, 6), "float32", False, 1)},
         {"class_num": 5, "capacity": 32},
         {"MAP": t(1), "AccumPosCount": TensorType((5, 1), "int32"), "AccumTruePos": t(32, 3),
          "AccumFalsePos": t(32, 3)}, "batch"),
    case("detection_map", {"DetectRes": TensorType((-1, 6), "float32", False, 1),
                           "Label": TensorType((-1, 5), "float32", False, 1),
                           "HasState": TensorType((1,), "int32"),
                           "PosCount": TensorType((5, 1), "int32"), "TruePos": t(32, 3),
                           "FalsePos": t(32, 3)},
         {"class_num": 5, "capacity": 32, "ap_type": "11point"},
         {"MAP": t(1), "AccumPosCount": TensorType((5, 1), "int32"), "AccumTruePos": t(32, 3),
          "AccumFalsePos": t(32, 3)}, "state"),
]
CASES.extend(DETECTION_EVAL_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", DETECTION_EVAL_CASES)
def test_detection_eval_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("ins, attrs, message", [
    ({"DetectRes": TensorType((-1, 6), "float32", False, 1), "Label": t(-1, 6)},
     {"class_num": 5}, "Label must be a LoD value"),
    ({"DetectRes": TensorType((-1, 6), "float32", False, 1),
      "Label": TensorType((-1, 6), "float32", False, 1), "PosCount": TensorType((5, 1), "int32")},
     {"class_num": 5}, "give PosCount, TruePos and FalsePos together"),
    ({"DetectRes": TensorType((-1, 6), "float32", False, 1),
      "Label": TensorType((-1, 6), "float32", False, 1), "PosCount": TensorType((4, 1), "int32"),
      "TruePos": t(32, 3), "FalsePos": t(32, 3)},
     {"class_num": 5, "capacity": 32}, "PosCount must be int32 \\[class_num=5, 1\\]"),
    ({"DetectRes": TensorType((-1, 6), "float32", False, 1),
      "Label": TensorType((-1, 6), "float32", False, 1)},
     {"class_num": 5, "ap_type": "voc"}, "ap_type must be"),
])
def test_detection_eval_shape_errors(ins, attrs, message):
    with pytest.raises(graphc.ShapeError, match=message):
        infer("detection_map", ins, attrs)
# -- end issue 24: detection eval


# -- issue 24: beam and mask --------------------------------------------------------------------
BEAM_MASK_CASES = [
    case("gather_tree", {"Ids": i64(4, -1, 3), "Parents": i64(4, 2, 3)}, None,
         {"Out": i64(4, 2, 3)}, "batch-from-parents"),
    case("gather_tree", {"Ids": t(5, 2, 3, dtype="int32"), "Parents": i64(5, 2, 3)}, None,
         {"Out": t(5, 2, 3, dtype="int32")}, "int32"),
    case("generate_mask_labels",
         {"ImInfo": t(-1, 3), "GtClasses": TensorType((-1, 1), "int32", False, 1),
          "IsCrowd": TensorType((-1, 1), "int32", False, 1),
          "GtSegms": TensorType((-1, 2), "float32", False, 3),
          "Rois": TensorType((-1, 4), "float32", False, 1),
          "LabelsInt32": TensorType((-1, 1), "int32", False, 1)},
         {"num_classes": 81, "resolution": 14},
         {"MaskRois": TensorType((-1, 4), "float32", False, 1),
          "RoiHasMaskInt32": TensorType((-1, 1), "int32", False, 1),
          "MaskInt32": TensorType((-1, 81 * 14 * 14), "int32", False, 1)}, "level3"),
]
CASES.extend(BEAM_MASK_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", BEAM_MASK_CASES)
def test_beam_mask_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("ins, message", [
    ({"Ids": t(4, 2, 3), "Parents": i64(4, 2, 3)}, "Ids must be int32/int64"),
    ({"Ids": i64(4, 2), "Parents": i64(4, 2)}, "Ids must be int32/int64 \\[max_time"),
    ({"Ids": i64(4, 2, 3), "Parents": i64(4, 2, 2)}, "must have the shape of Ids"),
])
def test_beam_mask_shape_errors(ins, message):
    with pytest.raises(graphc.ShapeError, match=message):
        infer("gather_tree", ins)
# -- end issue 24: beam and mask


# -- issue 24: distributions and Variable -----------------------------------------------------
# the slice ops Variable.__getitem__ emits: every axis indexed by an int keeps shape [1]
# (Paddle's rule), a reversing step over an unknown batch stays unknown
VARIABLE_INDEX_CASES = [
    case("slice", {"Input": t(3, 4)}, {"axes": [0, 1], "starts": [1, -1], "ends": [2, 2 ** 31 - 1],
                                       "decrease_axis": [0, 1]}, {"Out": t(1)}, "all-decreased"),
    case("slice", {"Input": t(-1, 4, 5)}, {"axes": [1], "starts": [2], "ends": [3],
                                           "decrease_axis": [1]}, {"Out": t(-1, 5)},
         "int-index-unknown-batch"),
    case("strided_slice", {"Input": t(-1, 6)},
         {"axes": [0, 1], "starts": [-1, 1], "ends": [-(2 ** 31) + 1, 2 ** 31 - 1],
          "strides": [-1, 2]}, {"Out": t(-1, 3)}, "reversed-unknown-batch"),
    case("strided_slice", {"Input": t(4, 6)},
         {"axes": [0, 1], "starts": [2, -1], "ends": [3, 0], "strides": [1, -2],
          "decrease_axis": [0]}, {"Out": t(3)}, "int-and-negative-step"),
]


@pytest.mark.parametrize("op_type, ins, attrs, outs", VARIABLE_INDEX_CASES)
def test_variable_index_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    test_grad_op_types(op_type, ins, attrs, outs)
# -- end issue 24: distributions and Variable


# -- issue 24: tensor creation and manipulation ------------------------------------------------
TENSOR_CREATION_CASES = [
    case("linspace", {}, {"start": 0.0, "stop": 1.0, "num": 5, "dtype": "float64"},
         {"Out": t(5, dtype="float64")}),
    case("eye", {}, {"num_rows": 3}, {"Out": t(3, 3)}),
    case("eye", {}, {"num_rows": 2, "num_columns": 4, "dtype": "int64"}, {"Out": i64(2, 4)},
         "rectangular"),
    case("diag", {"Diagonal": i64(-1)}, None, {"Out": i64(-1, -1)}),
    case("gaussian_random_batch_size_like", {"Input": t(-1, 7)}, {"shape": [0, 3]},
         {"Out": t(-1, 3)}),
    case("sampling_id", {"X": t(-1, 5)}, None, {"Out": i64(-1)}),
    case("unique", {"X": i64(-1)}, None, {"Out": i64(-1), "Index": t(-1, dtype="int32")}),
    case("unique_with_counts", {"X": t(6)}, {"dtype": "int64"},
         {"Out": t(6), "Index": i64(6), "Count": i64(6)}),
    case("shard_index", {"X": i64(-1, 1)}, {"index_num": 20, "nshards": 2, "shard_id": 1},
         {"Out": i64(-1, 1)}),
    case("is_empty", {"X": t(-1, 3)}, None, {"Out": b(1)}),
    case("pad", {"X": t(-1, 3)}, {"paddings": [1, 2, 0, 3]}, {"Out": t(-1, 6)}),
    case("pad2d", {"X": t(-1, 2, 3, 4)}, {"paddings": [1, 0, 2, 2], "mode": "reflect"},
         {"Out": t(-1, 2, 4, 8)}),
    case("pad2d", {"X": t(2, 3, 4, -1)}, {"paddings": [1, 1, 0, 2], "data_format": "NHWC"},
         {"Out": t(2, 5, 6, -1)}, "nhwc"),
    case("pad_constant_like", {"X": t(4, 5), "Y": t(2, 5)}, None, {"Out": t(4, 5)}),
    case("crop", {"X": t(-1, 5, 6), "Y": t(-1, 2, 3)}, {"offsets": [0, 1, 2]},
         {"Out": t(-1, 2, 3)}),
    case("crop", {"X": t(4, 5)}, {"shape": [2, 3]}, {"Out": t(2, 3)}, "shape-attr"),
    case("crop_tensor", {"X": t(-1, 5, 6)}, {"shape": [-1, 2, -1], "offsets": [0, 1, 2]},
         {"Out": t(-1, 2, 4)}),
    case("label_smooth", {"X": t(-1, 4), "PriorDist": t(1, 4)}, {"epsilon": 0.1},
         {"Out": t(-1, 4)}),
    case("multiplex", {"X": [t(-1, 3), t(-1, 3)], "Ids": i64(-1, 1)}, None, {"Out": t(-1, 3)}),
    case("scatter_nd_add", {"X": t(3, 4, 5), "Index": i64(-1, 2), "Updates": t(-1, 5)}, None,
         {"Out": t(3, 4, 5)}),
    case("space_to_depth", {"X": t(-1, 4, 6, 8)}, {"blocksize": 2}, {"Out": t(-1, 16, 3, 4)}),
    case("pixel_shuffle", {"X": t(-1, 18, 2, -1)}, {"upscale_factor": 3},
         {"Out": t(-1, 2, 6, -1)}),
    case("shuffle_channel", {"X": t(-1, 6, 2, 2)}, {"group": 3}, {"Out": t(-1, 6, 2, 2)}),
]
CASES.extend(TENSOR_CREATION_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", TENSOR_CREATION_CASES)
def test_tensor_creation_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs", [
    p for p in TENSOR_CREATION_CASES if has_op_def(grad_op_type(p.values[0]))])
def test_tensor_creation_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


TENSOR_CREATION_ERRORS = [
    ("linspace", {}, {"start": 0.0, "stop": 1.0, "num": 0}, "num 0 must be positive"),
    ("diag", {"Diagonal": t(2, 2)}, {}, "Diagonal must be 1-D"),
    ("sampling_id", {"X": t(4)}, {}, "X must be [batch, classes]"),
    ("unique", {"X": t(2, 3)}, {}, "X must be 1-D, got [2, 3]"),
    ("shard_index", {"X": i64(4, 1)}, {"index_num": 8, "nshards": 2, "shard_id": 2},
     "shard_id 2 must be in [0, nshards=2)"),
    ("pad", {"X": t(2, 3)}, {"paddings": [1, 1]}, "must hold 2 entries (before, after)"),
    ("pad2d", {"X": t(1, 1, 2, 2)}, {"paddings": [2, 0, 0, 0], "mode": "reflect"},
     "must be smaller than X's dimension 2"),
    ("pad2d", {"X": t(1, 1, 2, 2)}, {"mode": "wrap"}, "mode 'wrap'"),
    ("pad_constant_like", {"X": t(2, 3), "Y": t(3, 3)}, {}, "no dimension larger than X's"),
    ("crop_tensor", {"X": t(4, 5)}, {"shape": [3, 3], "offsets": [2, 0]}, "goes past X"),
    ("crop", {"X": t(4, 5)}, {"shape": [3]}, "one entry per dimension of X"),
    ("label_smooth", {"X": i64(2, 3)}, {}, "X must be floating point"),
    ("label_smooth", {"X": t(2, 3), "PriorDist": t(1, 4)}, {}, "PriorDist [1, 4] must be"),
    ("multiplex", {"X": [t(3, 2), t(3, 4)], "Ids": i64(3, 1)}, {}, "differ"),
    ("scatter_nd_add", {"X": t(3, 4), "Index": i64(2, 1), "Updates": t(2, 5)}, {},
     "Updates [2, 5] must be Index's leading dims"),
    ("space_to_depth", {"X": t(1, 2, 4, 4)}, {"blocksize": 2}, "channels 2 must be a multiple"),
    ("pixel_shuffle", {"X": t(1, 5, 2, 2)}, {"upscale_factor": 2}, "channels 5 must be"),
    ("shuffle_channel", {"X": t(1, 5, 2, 2)}, {"group": 2}, "multiple of group 2"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", TENSOR_CREATION_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in TENSOR_CREATION_ERRORS])
def test_tensor_creation_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- losses, metrics and learning-rate schedules (issue 15) ---------------------------------------
LOSS_CASES = [
    case("sigmoid_cross_entropy_with_logits", {"X": t(-1, 3), "Label": t(-1, 3)}, None,
         {"Out": t(-1, 3)}),
    case("cos_sim", {"X": t(-1, 2, 3), "Y": t(1, 2, 3)}, None,
         {"Out": t(-1, 1), "XNorm": t(-1, 1), "YNorm": t(1, 1)}, "one-row-Y"),
    case("log_loss", {"Predicted": t(-1, 1), "Labels": t(-1, 1)}, None, {"Loss": t(-1, 1)}),
    case("huber_loss", {"X": t(4, 1), "Y": t(4, 1)}, {"delta": 1.0},
         {"Out": t(4, 1), "Residual": t(4, 1)}),
    case("smooth_l1_loss", {"X": t(-1, 4), "Y": t(-1, 4), "InsideWeight": t(-1, 4)}, None,
         {"Diff": t(-1, 4), "Out": t(-1, 1)}),
    case("bpr_loss", {"X": t(-1, 5), "Label": i64(-1, 1)}, None, {"Y": t(-1, 1)}),
    case("margin_rank_loss", {"X1": t(-1, 1), "X2": t(-1, 1), "Label": t(-1, 1)}, None,
         {"Out": t(-1, 1), "Activated": t(-1, 1)}),
    case("rank_loss", {"Label": t(-1, 1), "Left": t(-1, 1), "Right": t(-1, 1)}, None,
         {"Out": t(-1, 1)}),
    case("kldiv_loss", {"X": t(-1, 4), "Target": t(-1, 4)}, None, {"Loss": t(1)}),
    case("kldiv_loss", {"X": t(-1, 4), "Target": t(-1, 4)}, {"reduction": "none"},
         {"Loss": t(-1, 4)}, "none"),
    *[case(op, {"Step": t(1)}, {"learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
           {"Out": t(1)}) for op in ("exponential_decay", "natural_exp_decay",
                                     "inverse_time_decay")],
    case("polynomial_decay", {"Step": t(1)}, {"learning_rate": 0.1, "decay_steps": 10},
         {"Out": t(1)}),
    case("noam_decay", {"Step": t(1)}, {"d_model": 512.0, "warmup_steps": 4000},
         {"Out": t(1)}),
    case("linear_lr_warmup", {"Step": t(1), "LearningRate": t(1, dtype="float64")},
         {"warmup_steps": 5, "start_lr": 0.0, "end_lr": 0.1}, {"Out": t(1, dtype="float64")}),
    case("auc", {"Predict": t(-1, 2), "Label": i64(-1, 1), "StatPos": i64(2 * 11 + 1),
                 "StatNeg": i64(2 * 11 + 1)}, {"num_thresholds": 10},
         {"AUC": t(1, dtype="float64"), "StatPosOut": i64(23), "StatNegOut": i64(23)}),
    case("auc", {"Predict": t(-1, 1), "Label": i64(-1, 1), "StatPos": i64(1, 11),
                 "StatNeg": i64(1, 11)}, {"num_thresholds": 10, "slide_steps": 0},
         {"AUC": t(1, dtype="float64"), "StatPosOut": i64(1, 11), "StatNegOut": i64(1, 11)},
         "global"),
]
CASES.extend(LOSS_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", LOSS_CASES)
def test_loss_metric_schedule_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in LOSS_CASES if has_op_def(grad_op_type(p.values[0]))])
def test_loss_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


LOSS_ERRORS = [
    ("cos_sim", {"X": t(4, 3), "Y": t(2, 3)}, {}, "Y must have 1 row or as many rows as X"),
    ("cos_sim", {"X": t(4), "Y": t(4)}, {}, "must have the same rank >= 2"),
    ("huber_loss", {"X": t(4, 1), "Y": t(4, 2)}, {"delta": 1.0}, "must have the same shape"),
    ("huber_loss", {"X": t(4, 1), "Y": t(4, 1)}, {"delta": -1.0}, "delta must be >= 0"),
    ("bpr_loss", {"X": t(4, 3), "Label": i64(4, 2)}, {}, "Label must be [N, 1]"),
    ("rank_loss", {"Label": t(4, 1), "Left": t(4, 2), "Right": t(4, 2)}, {},
     "Label [4, 1] must match Left [4, 2]"),
    ("exponential_decay", {"Step": t(1)}, {"learning_rate": 0.1, "decay_steps": 0,
                                           "decay_rate": 0.5}, "decay_steps must be > 0"),
    ("noam_decay", {"Step": t(2)}, {"d_model": 8.0, "warmup_steps": 4}, "Step must be [1]"),
    ("auc", {"Predict": t(4, 2), "Label": i64(4, 1), "StatPos": i64(1, 11),
             "StatNeg": i64(1, 11)}, {"num_thresholds": 10}, "StatPos must hold 23 counts"),
    ("auc", {"Predict": t(4, 2), "Label": i64(3, 1), "StatPos": i64(1, 11),
             "StatNeg": i64(1, 11)}, {"num_thresholds": 10, "slide_steps": 0},
     "Label must be [N, 1]"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", LOSS_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in LOSS_ERRORS])
def test_loss_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- the other optimizers and weight averaging (issue 15) -----------------------------------------
P10 = t(10, 5)
OPTIMIZER_CASES = [
    case("adagrad", {"Param": P10, "Grad": P10, "Moment": P10, "LearningRate": t(1)}, None,
         {"ParamOut": P10, "MomentOut": P10}),
    case("decayed_adagrad", {"Param": P10, "Grad": P10, "Moment": P10, "LearningRate": t(1)},
         None, {"ParamOut": P10, "MomentOut": P10}),
    case("adamax", {"Param": P10, "Grad": P10, "LearningRate": t(1), "Moment": P10,
                    "InfNorm": P10, "Beta1Pow": t(1)}, None,
         {"ParamOut": P10, "MomentOut": P10, "InfNormOut": P10}),
    case("adadelta", {"Param": P10, "Grad": P10, "AvgSquaredGrad": P10,
                      "AvgSquaredUpdate": P10}, None,
         {"ParamOut": P10, "AvgSquaredGradOut": P10, "AvgSquaredUpdateOut": P10}),
    case("rmsprop", {"Param": P10, "Grad": P10, "Moment": P10, "MeanSquare": P10,
                     "MeanGrad": P10, "LearningRate": t(1)}, {"centered": True},
         {"ParamOut": P10, "MomentOut": P10, "MeanSquareOut": P10, "MeanGradOut": P10}),
    case("lamb", {**ADAM_INS}, {"weight_decay": 0.01},
         {"ParamOut": P10, "Moment1Out": P10, "Moment2Out": P10}),
    case("lars_momentum", {"Param": P10, "Grad": P10, "Velocity": P10, "LearningRate": t(1)},
         {"mu": 0.9}, {"ParamOut": P10, "VelocityOut": P10}),
    case("ftrl", {"Param": P10, "SquaredAccumulator": P10, "LinearAccumulator": P10,
                  "Grad": P10, "LearningRate": t(1)}, None,
         {"ParamOut": P10, "SquaredAccumOut": P10, "LinearAccumOut": P10}),
    case("average_accumulates", {"param": P10, "in_sum_1": P10, "in_sum_2": P10,
                                 "in_sum_3": P10, "in_num_accumulates": i64(1),
                                 "in_old_num_accumulates": i64(1), "in_num_updates": i64(1)},
         {"average_window": 0.15, "max_average_window": 100, "min_average_window": 10},
         {"out_sum_1": P10, "out_sum_2": P10, "out_sum_3": P10, "out_num_accumulates": i64(1),
          "out_old_num_accumulates": i64(1), "out_num_updates": i64(1)}),
    case("model_average_apply", {"Sum1": P10, "Sum2": P10, "Sum3": P10,
                                 "NumAccumulates": i64(1), "OldNumAccumulates": i64(1)}, None,
         {"Out": P10}),
    case("ema_decay", {"ThresSteps": t(1)}, {"decay": 0.999}, {"Out": t(1)}),
    case("ema_update", {"Param": P10, "Ema": P10, "Decay": t(1)}, None, {"EmaOut": P10}),
    case("ema_bias_corrected", {"Ema": P10, "Decay": t(1), "Step": t(1)}, None, {"Out": P10}),
    # -- issue 24: optimizers
    case("dpsgd", {"Param": P10, "Grad": P10, "LearningRate": t(1)},
         {"clip": 1.0, "batch_size": 4.0, "sigma": 0.5}, {"ParamOut": P10}),
    case("lookahead", {"Param": P10, "SlowParam": P10, "Step": i64(1)}, {"alpha": 0.5, "k": 3},
         {"ParamOut": P10, "SlowParamOut": P10}),
    case("truncated_gaussian_random", {}, {"shape": [4, 5], "dtype": "float64", "std": 0.1},
         {"Out": t(4, 5, dtype="float64")}),
]
CASES.extend(OPTIMIZER_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", OPTIMIZER_CASES)
def test_optimizer_and_averaging_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("adagrad", {"Param": P10, "Grad": t(10, 4), "Moment": P10, "LearningRate": t(1)}, {},
     "and Grad"),
    ("rmsprop", {"Param": P10, "Grad": P10, "Moment": t(5, 10), "MeanSquare": P10,
                 "MeanGrad": P10, "LearningRate": t(1)}, {}, "must match Param"),
    ("ftrl", {"Param": i64(10, 5), "SquaredAccumulator": i64(10, 5),
              "LinearAccumulator": i64(10, 5), "Grad": i64(10, 5), "LearningRate": t(1)}, {},
     "floating point"),
    ("lars_momentum", {"Param": P10, "Grad": P10, "Velocity": P10, "LearningRate": t(3)},
     {"mu": 0.9}, "LearningRate must be"),
])
def test_optimizer_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- parameter-server ops (issue 17) -----------------------------------------------------------
TOKEN = t(1, dtype="int32")
PSERVER_CASES = [
    case("send", {"X": [t(4, 8), t(4, 8)]}, {"epmap": ["a:1", "b:2"],
                                             "varnames": ["w@GRAD.block0", "w@GRAD.block1"]},
         {"Out": TOKEN}),
    case("send_barrier", {"X": [TOKEN, TOKEN]}, {"endpoints": ["a:1", "b:2"]}, {"Out": TOKEN}),
    case("recv", {"X": [TOKEN]}, {"epmap": ["a:1", "b:2"], "varnames": ["w.block0", "w.block1"],
                                  "shapes": [4, 8, 3, 8], "ranks": [2, 2]},
         {"Out": [t(4, 8), t(3, 8)]}),
    case("fetch_barrier", {"X": [t(4, 8), t(3)]}, {"endpoints": ["a:1"]},
         {"Out": [t(4, 8), t(3)]}),
    case("geo_sgd_exchange", {"Old": [t(4, 8), t(3)], "X": [t(4, 8), t(3)]},
         {"params": ["w", "b"], "blocks": ["w.block0", "w.block1", "b"], "starts": [0, 2, 0],
          "ends": [2, 4, 3], "counts": [2, 1], "epmap": ["a:1", "b:2", "a:1"], "push_nums": 4,
          "trainers": 2}, {"Out": [t(4, 8), t(3)]}),
    case("distributed_lookup_table", {"Ids": t(5, 1, dtype="int64")},
         {"table_name": "tab", "height": 1000, "width": 8, "epmap": ["a:1", "b:2"]},
         {"Out": t(5, 8)}),
    case("distributed_lookup_table_grad", {"Ids": t(5, 1, dtype="int64"),
                                           "Out@GRAD": t(5, 8)},
         {"table_name": "tab", "height": 1000, "width": 8},
         {"W@GRAD": TensorType((1000, 8), "float32", True)}),
    case("send_rows", {"X": TensorType((300, 8), "float32", True)},
         {"epmap": ["a:1", "b:2"], "varnames": ["w@GRAD.block0", "w@GRAD.block1"],
          "split": "range", "sections": [150, 150]}, {"Out": TOKEN}),
    case("ps_server_sum", {"X": t(1)}, {}, {"Out": t(1)}),
]
CASES.extend(PSERVER_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", PSERVER_CASES)
def test_pserver_op_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


# -- LoD sequence ops (issue 16): token dims -1, LoD levels in the types ------------------------
def lod(*shape: int, level: int = 1, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype, False, level)


SEQUENCE_CASES = [
    case("sequence_pool", {"X": lod(-1, 3)}, {"pooltype": "SUM"}, {"Out": t(-1, 3)}),
    case("sequence_pool", {"X": lod(-1, 3, level=2)}, {"pooltype": "MAX"},
         {"Out": lod(-1, 3)}, "level2"),
    case("sequence_softmax", {"X": lod(-1, 1)}, {}, {"Out": lod(-1, 1)}),
    case("sequence_conv", {"X": lod(-1, 4), "Filter": t(12, 5)}, {"contextLength": 3,
                                                                  "contextStart": -1},
         {"Out": lod(-1, 5)}),
    case("sequence_expand", {"X": t(-1, 4), "Y": lod(-1, 1, level=2)}, {"ref_level": 0},
         {"Out": lod(-1, 4)}),
    case("sequence_expand", {"X": t(-1, 4), "Y": lod(-1, 1, level=2)}, {},
         {"Out": lod(-1, 4, level=2)}, "last_level"),
    case("sequence_expand_as", {"X": t(-1, 4), "Y": lod(-1, 1)}, {}, {"Out": lod(-1, 4)}),
    case("sequence_concat", {"X": [lod(-1, 3), lod(-1, 3)]}, {}, {"Out": lod(-1, 3)}),
    case("sequence_reshape", {"X": lod(-1, 6)}, {"new_dim": 4}, {"Out": lod(-1, 4)}),
    case("sequence_pad", {"X": lod(-1, 3), "PadValue": t(1)}, {"padded_length": 7},
         {"Out": t(-1, 7, 3), "Length": i64(-1)}),
    case("sequence_pad", {"X": lod(-1, 3), "PadValue": t(3)}, {},
         {"Out": t(-1, -1, 3), "Length": i64(-1)}, "bucket"),
    case("sequence_unpad", {"X": t(4, 7, 3), "Length": i64(4)}, {}, {"Out": lod(-1, 3)}),
    case("sequence_mask", {"X": i64(4)}, {"maxlen": 6, "out_dtype": "float32"},
         {"Y": t(4, 6)}),
    case("sequence_reverse", {"X": lod(-1, 2, level=2)}, {}, {"Y": lod(-1, 2, level=2)}),
    case("sequence_slice", {"X": lod(-1, 2), "Offset": i64(-1, 1), "Length": i64(-1, 1)}, {},
         {"Out": lod(-1, 2)}),
    case("sequence_enumerate", {"X": lod(-1, 1, dtype="int64")}, {"win_size": 3},
         {"Out": lod(-1, 3, dtype="int64")}),
    case("sequence_scatter", {"X": t(4, 9), "Ids": lod(-1, 1, dtype="int64"),
                              "Updates": lod(-1, 1)}, {}, {"Out": t(4, 9)}),
    case("reduce_mean", {"X": lod(-1, 3)}, {"dim": [1]}, {"Out": lod(-1)}, "lod_rows"),
    case("reduce_max", {"X": lod(-1, 3)}, {"dim": [0]}, {"Out": t(3)}, "lod_tokens"),
    case("batch_norm", {"X": lod(-1, 3), "Scale": t(3), "Bias": t(3), "Mean": t(3),
                        "Variance": t(3)}, {},
         {"Y": lod(-1, 3), "MeanOut": t(3), "VarianceOut": t(3), "SavedMean": t(3),
          "SavedVariance": t(3)}, "lod"),
]
CASES.extend(SEQUENCE_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", SEQUENCE_CASES)
def test_sequence_op_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("sequence_conv", {"X": lod(-1, 4), "Filter": t(8, 5)}, {"contextLength": 3},
     "Filter must be [contextLength * D"),
    ("sequence_expand", {"X": lod(-1, 4), "Y": lod(-1, 1)}, {}, "X is the LoD value"),
    ("sequence_concat", {"X": [lod(-1, 3), lod(-1, 2)]}, {}, "differs from X[0]"),
    ("sequence_pad", {"X": lod(-1, 3), "PadValue": t(2)}, {}, "PadValue must be [1]"),
    ("sequence_mask", {"X": i64(4)}, {}, "maxlen must be given"),
    ("sequence_softmax", {"X": t(-1, 1)}, {}, "X must be a LoD value"),
])
def test_sequence_op_bad_inputs(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- recurrent and sequence-labelling ops over LoD sequences (issue 16) --------------------------
def lod1(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(tuple(shape), dtype, False, 1)


RNN_CASES = [
    case("lstm", {"Input": lod1(-1, 8), "Weight": t(2, 8), "Bias": t(1, 14)}, None,
         {"Hidden": lod1(-1, 2), "Cell": lod1(-1, 2)}, "peepholes"),
    case("lstm", {"Input": lod1(-1, 8), "H0": t(-1, 2), "C0": t(-1, 2), "Weight": t(2, 8),
                  "Bias": t(1, 8)}, {"use_peepholes": False},
         {"Hidden": lod1(-1, 2), "Cell": lod1(-1, 2)}, "init"),
    case("lstmp", {"Input": lod1(-1, 8), "Weight": t(3, 8), "ProjWeight": t(2, 3),
                   "Bias": t(1, 14)}, None,
         {"Projection": lod1(-1, 3), "Cell": lod1(-1, 2)}),
    case("gru", {"Input": lod1(-1, 6), "Weight": t(2, 6), "Bias": t(1, 6)}, None,
         {"Hidden": lod1(-1, 2)}),
    case("gru_unit", {"Input": t(4, 6), "HiddenPrev": t(4, 2), "Weight": t(2, 6)}, None,
         {"Gate": t(4, 6), "ResetHiddenPrev": t(4, 2), "Hidden": t(4, 2)}),
    case("lstm_unit", {"X": t(4, 8), "C_prev": t(4, 2)}, None, {"C": t(4, 2), "H": t(4, 2)}),
    case("linear_chain_crf", {"Emission": lod1(-1, 3), "Transition": t(5, 3),
                              "Label": lod1(-1, 1, dtype="int64")}, None,
         {"Alpha": lod1(-1, 3), "EmissionExps": lod1(-1, 3), "TransitionExps": t(5, 3),
          "LogLikelihood": t(-1, 1)}),
    case("crf_decoding", {"Emission": lod1(-1, 3), "Transition": t(5, 3)}, None,
         {"ViterbiPath": lod1(-1, 1, dtype="int64")}),
    case("chunk_eval", {"Inference": lod1(-1, 1, dtype="int64"),
                        "Label": lod1(-1, 1, dtype="int64")}, {"num_chunk_types": 2},
         {"Precision": t(1), "Recall": t(1), "F1Score": t(1), "NumInferChunks": i64(1),
          "NumLabelChunks": i64(1), "NumCorrectChunks": i64(1)}),
]
CASES.extend(RNN_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", RNN_CASES)
def test_rnn_op_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("lstm", {"Input": lod1(-1, 8), "Weight": t(2, 8), "Bias": t(1, 8)}, None,
     "Bias must be [1, 14]"),
    ("gru", {"Input": t(-1, 6), "Weight": t(2, 6)}, None, "Input must be a LoD value"),
    ("linear_chain_crf", {"Emission": lod1(-1, 3), "Transition": t(3, 3),
                          "Label": lod1(-1, 1, dtype="int64")}, None,
     "Transition must be [tags + 2, tags]"),
])
def test_rnn_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs or {}, message)


STEP_BODY = ("graph @step {\n  input %m: f32[-1,2] {feed}\n  input %x: f32[-1,2] {feed}\n"
             "  %y: f32[-1,2] = elementwise_add(X=%m, Y=%x)\n  output %y\n  output %y\n}\n")
DYNAMIC_RNN_CASES = [
    case("dynamic_rnn", {"Init": [t(-1, 2)], "Xs": [lod1(-1, 2)]},
         {"body": STEP_BODY, "init_from": [0], "init_values": [0.0]},
         {"Out": [lod1(-1, 2)]}),
]
CASES.extend(DYNAMIC_RNN_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", DYNAMIC_RNN_CASES)
def test_dynamic_rnn_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    with pytest.raises(graphc.ShapeError, match="step inputs must be LoD values"):
        infer(op_type, {**ins, "Xs": [t(-1, 2)]}, attrs)


# -- roll-repeated-layers' ops (issue 18) ---------------------------------------------------------
LAYER_BODY = """graph @layer {
  input %h: f32[-1,4] {feed}
  input %w: f32[4,4] {feed}
  input %b: f32[4] {feed}
  %m: f32[-1,4] = mul(X=%h, Y=%w)
  %a: f32[-1,4] = elementwise_add(X=%m, Y=%b) {axis=1}
  %r: f32[-1,4] = relu(X=%a)
  output %r
}
"""
SCAN_CASES = [
    case("scan_layers", {"Init": t(-1, 4), "Xs": [t(3, 4, 4), t(3, 4)]},
         {"body": LAYER_BODY, "iterations": 3}, {"Out": t(-1, 4), "Ys": []}),
    case("reverse", {"X": t(2, 3, 4)}, {"axis": [0, -1]}, {"Out": t(2, 3, 4)}),
]
CASES.extend(SCAN_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", SCAN_CASES)
def test_scan_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("scan_layers", {"Init": t(-1, 4), "Xs": [t(2, 4, 4), t(3, 4)]},
     {"body": LAYER_BODY, "iterations": 3}, "expected [3] + the body's"),
    ("scan_layers", {"Init": t(-1, 5), "Xs": [t(3, 4, 4), t(3, 4)]},
     {"body": LAYER_BODY, "iterations": 3}, "but the body reads"),
    ("reverse", {"X": t(2, 3)}, {"axis": [2]}, "out of range"),
])
def test_scan_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


# -- issue 24: losses ---------------------------------------------------------------------------
def _i32(*shape):
    return t(*shape, dtype="int32")


LOSS_MORE_CASES = [
    case("sigmoid_focal_loss", {"X": t(-1, 5), "Label": _i32(-1, 1), "FgNum": _i32(1)},
         {"gamma": 2.0, "alpha": 0.25}, {"Out": t(-1, 5)}),
    case("teacher_student_sigmoid_loss", {"X": t(-1, 1), "Label": t(-1, 1)}, None,
         {"Y": t(-1, 1)}),
    case("center_loss", {"X": t(-1, 4), "Label": i64(-1, 1), "Centers": t(3, 4),
                         "CenterUpdateRate": t(1)}, {"cluster_num": 3},
         {"SampleCenterDiff": t(-1, 4), "Loss": t(-1, 1), "CentersOut": t(3, 4)}),
    case("npair_loss", {"Anchor": t(-1, 6), "Positive": t(-1, 6), "Labels": i64(-1)}, None,
         {"Out": t(1)}),
    case("mean_iou", {"Predictions": _i32(-1, 8, 8), "Labels": _i32(-1, 8, 8)},
         {"num_classes": 4},
         {"OutMeanIou": t(1), "OutWrong": _i32(4), "OutCorrect": _i32(4)}),
    case("edit_distance", {"Hyps": i64(-1, 7), "Refs": i64(-1, 5), "HypsLength": i64(-1),
                           "RefsLength": i64(-1)}, {"normalized": True},
         {"Out": t(-1, 1), "SequenceNum": i64(1)}),
    case("warpctc", {"Logits": t(9, -1, 5), "Label": _i32(-1, 4), "LogitsLength": i64(-1),
                     "LabelLength": i64(-1)}, {"blank": 4}, {"Loss": t(-1, 1)}),
    case("ctc_align", {"Input": i64(-1, 9), "InputLength": i64(-1, 1)}, {"padding_value": -1},
         {"Output": i64(-1, 9), "OutputLength": i64(-1, 1)}),
    case("hierarchical_sigmoid", {"X": t(-1, 4), "W": t(5, 4), "Label": i64(-1, 1),
                                  "Bias": t(5, 1)}, {"num_classes": 6},
         {"Out": t(-1, 1), "PreOut": t(-1, 3)}),
    case("hierarchical_sigmoid", {"X": t(-1, 4), "W": t(6, 4), "Label": i64(-1, 1),
                                  "PathTable": i64(-1, 5), "PathCode": i64(-1, 5)},
         {"num_classes": 6}, {"Out": t(-1, 1), "PreOut": t(-1, 5)}, "custom"),
    case("row_conv", {"X": t(-1, 7, 4), "Filter": t(3, 4)}, None, {"Out": t(-1, 7, 4)}),
    case("fsp_matrix", {"X": t(-1, 2, 5, 5), "Y": t(-1, 3, 5, 5)}, None, {"Out": t(-1, 2, 3)}),
    case("add_position_encoding", {"X": t(-1, 7, 8)}, {"alpha": 1.0, "beta": 1.0},
         {"Out": t(-1, 7, 8)}),
    case("affine_grid", {"Theta": t(-1, 2, 3)}, {"output_shape": [4, 3, 5, 6]},
         {"Output": t(-1, 5, 6, 2)}),
    case("grid_sampler", {"X": t(-1, 3, 8, 8), "Grid": t(-1, 5, 6, 2)}, None,
         {"Output": t(-1, 3, 5, 6)}),
    case("nce", {"Input": t(-1, 4), "Label": i64(-1, 2), "Weight": t(20, 4), "Bias": t(20, 1)},
         {"num_total_classes": 20, "num_neg_samples": 5},
         {"Cost": t(-1, 1), "SampleLogits": t(-1, 7), "SampleLabels": i64(-1, 7)}),
    case("sampled_softmax_with_cross_entropy", {"Logits": t(-1, 50), "Labels": i64(-1, 1)},
         {"num_samples": 8},
         {"Loss": t(-1, 1), "Samples": i64(-1, 9), "Probabilities": t(-1, 9)}),
    case("random_crop", {"X": t(-1, 3, 8, 8)}, {"shape": [5, 6]}, {"Out": t(-1, 3, 5, 6)}),
    case("similarity_focus", {"X": t(-1, 3, 4, 5)}, {"axis": 1, "indexes": [0, 2]},
         {"Out": t(-1, 3, 4, 5)}),
]
CASES.extend(LOSS_MORE_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", LOSS_MORE_CASES)
def test_loss_more_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in LOSS_MORE_CASES if has_op_def(grad_op_type(p.values[0]))])
def test_loss_more_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


LOSS_MORE_ERRORS = [
    ("sigmoid_focal_loss", {"X": t(4, 5), "Label": t(4, 1), "FgNum": _i32(1)}, {},
     "Label must be an integer tensor, got float32"),
    ("sigmoid_focal_loss", {"X": t(4, 5), "Label": _i32(3, 1), "FgNum": _i32(1)}, {},
     "Label must be [N, 1] with X's N"),
    ("teacher_student_sigmoid_loss", {"X": t(4, 2), "Label": t(4, 1)}, {}, "X must be [N, 1]"),
    ("center_loss", {"X": t(-1, 4), "Label": i64(-1, 1), "Centers": t(3, 5),
                     "CenterUpdateRate": t(1)}, {"cluster_num": 3}, "Centers must be"),
    ("npair_loss", {"Anchor": t(2, 6), "Positive": t(2, 5), "Labels": i64(2)}, {},
     "must both be [N, D]"),
    ("mean_iou", {"Predictions": _i32(2, 3), "Labels": _i32(2, 4)}, {"num_classes": 2},
     "must have the same shape"),
    ("edit_distance", {"Hyps": i64(3, 7), "Refs": i64(2, 5), "HypsLength": i64(3),
                       "RefsLength": i64(2)}, {}, "same N"),
    ("edit_distance", {"Hyps": t(3, 7), "Refs": i64(3, 5), "HypsLength": i64(3),
                       "RefsLength": i64(3)}, {}, "Hyps must be an integer tensor"),
    ("warpctc", {"Logits": t(9, 2, 5), "Label": _i32(2, 4), "LogitsLength": i64(2),
                 "LabelLength": i64(2)}, {"blank": 5}, "blank 5 must be in [0, 5)"),
    ("warpctc", {"Logits": t(2, 5), "Label": _i32(2, 4), "LogitsLength": i64(2),
                 "LabelLength": i64(2)}, {}, "Logits must be padded [T, N"),
    ("ctc_align", {"Input": i64(2, 9), "InputLength": i64(3, 1)}, {},
     "InputLength must be [N, 1]"),
    ("hierarchical_sigmoid", {"X": t(2, 4), "W": t(5, 3), "Label": i64(2, 1)},
     {"num_classes": 6}, "W must be [nodes, D=4]"),
    ("row_conv", {"X": t(2, 7, 4), "Filter": t(3, 5)}, {}, "Filter must be"),
    ("fsp_matrix", {"X": t(2, 2, 5, 5), "Y": t(2, 3, 4, 5)}, {}, "with the same N, H, W"),
    ("add_position_encoding", {"X": t(2, 7, 5)}, {"alpha": 1.0, "beta": 1.0}, "an even D"),
    ("affine_grid", {"Theta": t(2, 3, 3)}, {"output_shape": [2, 1, 4, 4]},
     "Theta must be [N, 2, 3]"),
    ("grid_sampler", {"X": t(2, 3, 8, 8), "Grid": t(2, 5, 6, 3)}, {}, "Grid [N, H', W', 2]"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", LOSS_MORE_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in LOSS_MORE_ERRORS])
def test_loss_more_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end issue 24: losses


# -- issue 24: host callbacks (py_func, Print) and DGC ----------------------------------------
_DGC_INS = {"Param": t(128, 128), "Grad": t(128, 128), "Velocity": t(128, 128),
            "V": t(128, 128), "LearningRate": t(1), "CurrentStep": t(1)}
HOST_CASES = [
    case("py_func", {"X": [t(-1, 3), t(2)]},
         {"forward_callable_id": 0, "out_ranks": [2, 0], "out_dims": [-1, 4],
          "out_dtypes": ["float32", "int64"]}, {"Out": [t(-1, 4), i64()]}),
    case("print", {"In": t(-1, 3)}, {"message": "m", "print_phase": "backward"},
         {"Out": t(-1, 3)}),
    case("dgc_momentum", _DGC_INS, {"mu": 0.9, "sparsity": [0.75, 0.9]},
         {"ParamOut": t(128, 128), "VelocityOut": t(128, 128), "VOut": t(128, 128)}),
]
CASES.extend(HOST_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", HOST_CASES)
def test_host_and_dgc_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in HOST_CASES if has_op_def(grad_op_type(p.values[0]))])
def test_host_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


HOST_ERRORS = [
    ("py_func", {"X": [t(2)]}, {"forward_callable_id": 0, "out_ranks": [2], "out_dims": [3],
                                "out_dtypes": ["float32"]}, "do not describe the same"),
    ("print", {"In": t(2)}, {"print_phase": "sideways"}, "print_phase must be one of"),
    ("dgc_momentum", {**_DGC_INS, "V": t(4)}, {"mu": 0.9}, "V must match Param"),
    ("dgc_momentum", _DGC_INS, {"mu": 0.9, "sparsity": []}, "sparsity must be a non-empty"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", HOST_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in HOST_ERRORS])
def test_host_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end issue 24: host callbacks (py_func, Print) and DGC


# -- issue 26: conditionals (cond, case, switch_case, ifelse) -------------------------------------
def _branch(name, out):
    return (f"graph @{name} {{\n  input %x: f32[-1,3] {{feed}}\n  input %w: f32[3] {{feed}}\n"
            f"{out}}}\n")


PLUS = _branch("plus", "  %y: f32[-1,3] = elementwise_add(X=%x, Y=%w) {axis=1}\n  output %y\n")
KEEP = _branch("keep", "  output %x\n")
NARROW = _branch("narrow", "  %y: f32[2,3] = fill_constant() {shape=[2, 3]}\n  output %y\n")
XW = {"Input": [t(-1, 3), t(3)]}
COND_CASES = [
    case("cond", {"Cond": t(1, dtype="bool"), **XW}, {"true_body": PLUS, "false_body": KEEP},
         {"Out": [t(-1, 3)]}),
    case("case", {"Conds": [t(1, dtype="bool")] * 2, **XW},
         {"branches": [PLUS, KEEP, NARROW]}, {"Out": [t(-1, 3)]}),
    case("switch_case", {"Index": t(1, dtype="int32"), **XW},
         {"branches": [PLUS, KEEP], "keys": [4]}, {"Out": [t(-1, 3)]}),
    case("ifelse", {"Cond": t(5, 1, dtype="bool"), "X": [t(5, 3)], "Input": [t(3)]},
         {"true_body": PLUS, "false_body": KEEP}, {"Out": [t(5, 3)]}),
]
CASES.extend(COND_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", COND_CASES)
def test_cond_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    test_grad_op_types(op_type, ins, attrs, outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("cond", {"Cond": t(2, dtype="bool"), **XW}, {"true_body": PLUS, "false_body": KEEP},
     "Cond must be a bool tensor of one element"),
    ("cond", {"Cond": t(1, dtype="bool"), "Input": [t(-1, 4), t(3)]},
     {"true_body": PLUS, "false_body": KEEP}, "Input 0 is f32[-1,4] but branch 0 reads"),
    ("cond", {"Cond": t(1, dtype="bool"), **XW}, {"true_body": PLUS, "false_body": PLUS[:9]},
     "does not verify"),
    ("case", {"Conds": [t(1, dtype="bool")], **XW}, {"branches": [PLUS, KEEP, KEEP]},
     "1 conditions need 2 branches"),
    ("switch_case", {"Index": t(1), **XW}, {"branches": [PLUS, KEEP], "keys": [1]},
     "Index must be a int32/int64/uint8"),
    ("switch_case", {"Index": t(1, dtype="int64"), **XW},
     {"branches": [PLUS, KEEP, KEEP], "keys": [1, 1]}, "keys must be distinct"),
    ("ifelse", {"Cond": t(5, 1, dtype="bool"), "X": [t(4, 3)], "Input": [t(3)]},
     {"true_body": PLUS, "false_body": KEEP}, "must have the rows of Cond"),
    ("ifelse", {"Cond": t(5, 1, dtype="bool"), "X": [t(5, 3)], "Input": [t(3)]},
     {"true_body": PLUS, "false_body": NARROW}, "branch 1 returns output 0 as f32[2,3], not"),
])
def test_cond_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end issue 26: conditionals


# -- issue 26: loops and tensor arrays --------------------------------------------------------
def _array(cap: int, *element: int, dtype: str = "float32") -> TensorType:
    return TensorType((cap, *element), dtype, array=True)


_WHILE_BODY = """graph @body {
  input %h: f32[2,3] {feed}
  input %i: i64[1] {feed}
  input %c: bool[1] {feed}
  input %w: f32[3,3] {feed}
  input %n: i64[1] {feed}
  %m: f32[2,3] = mul(X=%h, Y=%w)
  %h#1: f32[2,3] = tanh(X=%m)
  %i#1: i64[1] = increment(X=%i)
  %c#1: bool[1] = less_than(X=%i#1, Y=%n)
  output %h#1
  output %i#1
  output %c#1
}
"""

CONTROL_FLOW_CASES = [
    case("while", {"Carry": [t(2, 3)], "Aux": [i64(1), t(1, dtype="bool")], "X": [t(3, 3)],
                   "XAux": [i64(1)]}, {"body": _WHILE_BODY, "cond_index": 1},
         {"Out": [t(2, 3)], "AuxOut": [i64(1), t(1, dtype="bool")]}),
    case("write_to_array", {"X": t(-1, 4), "I": i64(1)}, {"capacity": 8},
         {"Out": _array(8, -1, 4)}, "new"),
    case("write_to_array", {"X": t(2, 4), "I": i64(1), "Array": _array(8, 2, 4)}, None,
         {"Out": _array(8, 2, 4)}, "existing"),
    case("read_from_array", {"X": _array(8, 2, 4), "I": i64(1)}, None, {"Out": t(2, 4)}),
    case("lod_array_length", {"X": _array(8, 2, 4)}, None, {"Out": i64(1)}),
    case("empty_array", {}, {"shape": [8, 2, 4], "dtype": "float32"},
         {"Out": _array(8, 2, 4)}),
]
CASES.extend(CONTROL_FLOW_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", CONTROL_FLOW_CASES)
def test_control_flow_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


def test_while_refuses_a_body_that_retypes_a_carried_value():
    bad = _WHILE_BODY.replace("%h#1: f32[2,3] = tanh(X=%m)", "%h#1: f32[2,3] = tanh(X=%m)\n"
                              "  %h#2: f64[2,3] = cast(X=%h#1) {in_dtype=\"float32\", "
                              "out_dtype=\"float64\"}").replace("output %h#1", "output %h#2")
    from graphc.ir.errors import ShapeError
    with pytest.raises(ShapeError, match="keep each carried value's type"):
        infer("while", {"Carry": [t(2, 3)], "Aux": [i64(1), t(1, dtype="bool")],
                        "X": [t(3, 3)], "XAux": [i64(1)]}, {"body": bad, "cond_index": 1})
# -- end issue 26: loops and tensor arrays


# -- issue 26: StaticRNN's recurrent op ---------------------------------------------------------
RNN_STEP = """graph @step {
  input %m: f32[-1,4] {feed}
  input %x: f32[-1,3] {feed}
  input %w: f32[3,4] {feed}
  %a: f32[-1,4] = mul(X=%x, Y=%w)
  %h: f32[-1,4] = elementwise_add(X=%a, Y=%m)
  output %h
  output %h
}
"""
RECURRENT_CASES = [
    case("recurrent", {"inputs": [t(5, -1, 3)], "initial_states": [t(-1, 4)],
                       "parameters": [t(3, 4)]}, {"body": RNN_STEP},
         {"outputs": [t(5, -1, 4)]}),
]
CASES.extend(RECURRENT_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", RECURRENT_CASES)
def test_recurrent_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    test_grad_op_types(op_type, ins, attrs, outs)
    # an integer operand beside float ones: every operand of the slot gets a gradient type
    step = RNN_STEP.replace("input %w: f32[3,4] {feed}",
                            "input %w: f32[3,4] {feed}\n  input %k: i64[2] {feed}")
    grads = infer("recurrent_grad", {"inputs": [t(5, -1, 3)], "initial_states": [t(-1, 4)],
                                     "parameters": [t(3, 4), i64(2)],
                                     "outputs": [t(5, -1, 4)],
                                     "outputs@GRAD": [t(5, -1, 4)]}, {"body": step})
    assert grads["parameters@GRAD"] == [t(3, 4), i64(2)]


@pytest.mark.parametrize("ins, message", [
    ({"inputs": [t(5, 3)], "initial_states": [t(-1, 4)], "parameters": [t(3, 4)]},
     "step slice does not match"),
    ({"inputs": [t(5)], "initial_states": [t(-1, 4)], "parameters": [t(3, 4)]},
     "needs a time axis and a batch axis"),
    ({"inputs": [t(5, -1, 3), t(6, -1, 3)], "initial_states": [t(-1, 4)],
      "parameters": [t(3, 4)]}, "the step takes 3 inputs"),
    ({"inputs": [t(5, -1, 3)], "initial_states": [t(-1, 5)], "parameters": [t(3, 4)]},
     "initial state 0 is"),
    ({"inputs": [t(5, -1, 3)], "initial_states": [t(-1, 4)], "parameters": [t(3, 5)]},
     "parameter 0 is"),
])
def test_recurrent_bad_inputs_name_the_op(ins, message):
    test_bad_inputs_raise_shape_error("recurrent", ins, {"body": RNN_STEP}, message)


def test_recurrent_memory_that_changes_shape_is_refused():
    step = RNN_STEP.replace("output %h\n  output %h", "output %a\n  output %h").replace(
        "input %m: f32[-1,4]", "input %m: f32[-1,5]").replace(
        "%h: f32[-1,4] = elementwise_add(X=%a, Y=%m)",
        "%h: f32[-1,5] = elementwise_add(X=%m, Y=%m)")
    test_bad_inputs_raise_shape_error(
        "recurrent", {"inputs": [t(5, -1, 3)], "initial_states": [t(-1, 5)],
                      "parameters": [t(3, 4)]}, {"body": step}, "memory 0 enters the step")
# -- end issue 26: StaticRNN's recurrent op


# -- issue 26: LoD ops of control-flow programs (lod_reset, rank tables, beam_search) -------------
from graphc.ir.types import array_type  # noqa: E402

_BEAM_INS = {"pre_ids": lod(-1, 1, level=2, dtype="int64"), "pre_scores": lod(-1, 1, level=2),
             "ids": lod(-1, 4, level=2, dtype="int64"), "scores": lod(-1, 4, level=2)}
LOD_CONTROL_CASES = [
    case("lod_reset", {"X": t(6, 2)}, {"target_lod": [0, 4, 6]}, {"Out": lod(-1, 2)}, "attr"),
    case("lod_reset", {"X": lod(-1, 2), "Y": t(1, 3, dtype="int32")}, {}, {"Out": lod(-1, 2)},
         "offsets"),
    case("lod_reset", {"X": lod(-1, 3, dtype="int64"), "Y": lod(-1, 1, level=2)}, {},
         {"Out": lod(-1, 3, level=2, dtype="int64")}, "y_lod"),
    case("lod_reset", {"X": lod(-1, 2)}, {"target_lod": [0, 1, 2], "append": True},
         {"Out": lod(-1, 2, level=2)}, "append"),
    case("lod_rank_table", {"X": lod(-1, 3, level=2)}, {}, {"Out": i64(-1, 2)}),
    case("max_sequence_len", {"RankTable": i64(-1, 2)}, {}, {"Out": i64(1)}),
    case("reorder_lod_tensor_by_rank", {"X": lod(-1, 3, level=2), "RankTable": i64(-1, 2)}, {},
         {"Out": lod(-1, 3, level=2)}),
    case("reorder_lod_tensor_by_rank", {"X": t(-1, 3), "RankTable": i64(-1, 2)}, {},
         {"Out": t(-1, 3)}, "dense"),
    case("beam_search", _BEAM_INS, {"beam_size": 4, "end_id": 1},
         {"selected_ids": lod(-1, 1, level=2, dtype="int64"),
          "selected_scores": lod(-1, 1, level=2), "parent_idx": t(-1, dtype="int32")}),
    case("beam_search_decode",
         {"Ids": array_type(lod(-1, 1, level=2, dtype="int64"), 16),
          "Scores": array_type(lod(-1, 1, level=2), 16)}, {"beam_size": 4, "end_id": 1},
         {"SentenceIds": lod(-1, level=2, dtype="int64"), "SentenceScores": lod(-1, level=2)}),
    case("write_to_array", {"X": lod(-1, 1, level=2, dtype="int64"), "I": i64(1)},
         {"capacity": 8}, {"Out": array_type(lod(-1, 1, level=2, dtype="int64"), 8)}, "lod"),
    case("read_from_array", {"X": array_type(lod(-1, 3, level=2), 8), "I": i64(1)}, {},
         {"Out": lod(-1, 3, level=2)}, "lod"),
    case("is_empty", {"X": lod(-1, 1, level=2, dtype="int64")}, {},
         {"Out": t(1, dtype="bool")}, "lod"),
]
CASES.extend(LOD_CONTROL_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", LOD_CONTROL_CASES)
def test_lod_control_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("op_type, ins, attrs, outs",
                         [p for p in LOD_CONTROL_CASES if has_op_def(grad_op_type(p.values[0]))
                          and "array" not in p.values[0]])  # arrays refuse gradients
def test_lod_control_grad_op_types(op_type, ins, attrs, outs):
    test_grad_op_types(op_type, ins, attrs, outs)


LOD_CONTROL_ERRORS = [
    ("lod_reset", {"X": t(6, 2)}, {}, "target_lod must hold at least two offsets"),
    ("lod_reset", {"X": t(6, 2)}, {"target_lod": [1, 6]}, "must start at 0"),
    ("lod_reset", {"X": t(6, 2)}, {"target_lod": [0, 4, 2, 6]}, "ascending"),
    ("lod_reset", {"X": t(6, 2)}, {"target_lod": [0, 4, 5]}, "X has 6 rows"),
    ("lod_reset", {"X": lod(-1, 2), "Y": t(3)}, {}, "must be integers"),
    ("lod_reset", {"X": lod(-1, 2, level=2)}, {"target_lod": [0, 1], "append": True},
     "would have 3 LoD levels"),
    ("lod_rank_table", {"X": t(4, 2)}, {}, "X must be a LoD value"),
    ("lod_rank_table", {"X": lod(-1, 2, level=2)}, {"level": 2}, "one of X's 2 LoD levels"),
    ("max_sequence_len", {"RankTable": t(4, 2)}, {}, "must be a rank table"),
    ("reorder_lod_tensor_by_rank", {"X": lod(-1, 2), "RankTable": i64(4)}, {},
     "must be a rank table"),
    ("beam_search", {**_BEAM_INS, "scores": t(-1, 4)}, {"beam_size": 2, "end_id": 0},
     "scores must be a LoD value"),
    ("beam_search", _BEAM_INS, {"beam_size": 2, "end_id": 0, "level": 1}, "over level 0"),
    ("beam_search", _BEAM_INS, {"beam_size": 0, "end_id": 0}, "beam_size must be >= 1"),
    ("beam_search", {**_BEAM_INS, "ids": lod(-1, 4, level=2)}, {"beam_size": 2, "end_id": 0},
     "ids must be integers"),
    ("beam_search_decode", {"Ids": array_type(i64(-1, 1), 4),
                            "Scores": array_type(lod(-1, 1, level=2), 4)},
     {"beam_size": 2, "end_id": 0}, "Ids must be a tensor array of 2-level LoD values"),
    ("write_to_array", {"X": lod(-1, 1), "I": i64(1),
                        "Array": array_type(lod(-1, 1, level=2), 4)}, {},
     "an array's elements share one type"),
]


@pytest.mark.parametrize("op_type, ins, attrs, message", LOD_CONTROL_ERRORS,
                         ids=[f"{e[0]}-{e[3][:30]}" for e in LOD_CONTROL_ERRORS])
def test_lod_control_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end issue 26: LoD ops of control-flow programs


# -- issue 28: fused_embedding_seq_pool (made by the fuse-embedding-seq-pool pass) -----------
FUSED_EMBEDDING_CASES = [
    case("fused_embedding_seq_pool",
         {"W": t(100, 10), "Ids": [TensorType((-1, 1), "int64", False, 1),
                                   TensorType((-1,), "int32", False, 1)]},
         {"is_sparse": True}, {"Out": [t(-1, 10), t(-1, 10)]}),
]
CASES.extend(FUSED_EMBEDDING_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", FUSED_EMBEDDING_CASES)
def test_fused_embedding_inferred_types(op_type, ins, attrs, outs):
    from graphc.ir.types import sparse_type
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    # its gradient: one row-sparse W@GRAD (is_sparse), none for the ids
    grad = infer(grad_op_type(op_type), {**ins, "Out@GRAD": outs["Out"]}, attrs)
    assert grad == {"W@GRAD": [sparse_type((100, 10), "float32")]}


@pytest.mark.parametrize("ids, message", [
    (t(-1, 1, dtype="int64"), "must be a level-1 LoD value"),
    (TensorType((-1, 1), "float32", False, 1), "must be integer"),
    (TensorType((-1, 2), "int64", False, 1), "[tokens] or [tokens, 1]"),
])
def test_fused_embedding_bad_ids_name_the_slot(ids, message):
    test_bad_inputs_raise_shape_error("fused_embedding_seq_pool", {"W": t(9, 2), "Ids": [ids]},
                                      {}, message)
# -- end issue 28: fused_embedding_seq_pool


# -- issue 26: decoding (tensor_array_to_tensor, empty_array with a batch size)
DECODE_CASES = [
    case("tensor_array_to_tensor", {"X": _array(5, 2, 3)}, {"axis": 0, "use_stack": True},
         {"Out": t(5, 2, 3), "OutIndex": t(5, dtype="int32")}, "stack"),
    case("tensor_array_to_tensor", {"X": _array(5, 2, 3)}, {"axis": 1},
         {"Out": t(2, 15), "OutIndex": t(5, dtype="int32")}, "concat"),
    case("tensor_array_to_tensor", {"X": _array(5, -1, 3)}, {"axis": 0},
         {"Out": t(-1, 3), "OutIndex": t(5, dtype="int32")}, "concat unknown"),
    case("empty_array", {"Input": t(-1, 4, dtype="bool")},
         {"shape": [8, -1, 4], "dtype": "int64"}, {"Out": _array(8, -1, 4, dtype="int64")},
         "batch from Input"),
]
CASES.extend(DECODE_CASES)


@pytest.mark.parametrize("op_type, ins, attrs, outs", DECODE_CASES)
def test_decode_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
# -- end issue 26: decoding


# -- issue 24: PipelineOptimizer's microbatch_loop ------------------------------------------------
MICROBATCH_BODY = """graph @microbatch {
  input %acc: f32[4] {feed}
  input %s: f32[4] {feed}
  input %x: f32[-1,4] {feed}
  input %w: f32[4] {feed}
  %y: f32[-1,4] = elementwise_mul(X=%x, Y=%w) {axis=1}
  %g: f32[4] = reduce_sum(X=%y)
  %acc2: f32[4] = elementwise_add(X=%acc, Y=%g)
  %s2: f32[4] = elementwise_add(X=%s, Y=%g)
  %l: f32[1] = mean(X=%y)
  output %acc2
  output %s2
  output %y
  output %l
}
"""
MICROBATCH_ATTRS = {"body": MICROBATCH_BODY, "num_microbatches": 2, "num_grads": 1,
                    "merges": ["rows", "mean"]}
MICROBATCH_CASES = [
    case("microbatch_loop", {"Batch": t(-1, 4), "State": t(4), "Consts": t(4)},
         MICROBATCH_ATTRS, {"GradSum": t(4), "StateOut": t(4), "Out": [t(-1, 4), t(1)]}),
]
CASES.extend(MICROBATCH_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", MICROBATCH_CASES)
def test_microbatch_loop_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("ins, attrs, message", [
    ({"Batch": t(8, 4), "State": t(4), "Consts": t(4)}, {},
     "first dimension is the batch"),
    ({"Batch": t(-1, 4), "State": t(5), "Consts": t(4)}, {}, "State 0 is"),
    ({"Batch": t(-1, 4), "State": t(4)}, {}, "the body takes 4 inputs"),
    ({"Batch": t(-1, 4), "State": t(4), "Consts": t(4)}, {"merges": ["rows", "rows"]},
     "'rows' merges a value whose first dimension is the batch"),
    ({"Batch": t(-1, 4), "State": t(4), "Consts": t(4)}, {"merges": ["rows", "sum"]},
     "merge must be one of"),
    ({"Batch": t(-1, 4), "State": t(4), "Consts": t(4)}, {"merges": ["rows", "mean", "rows"]},
     "the body returns 4 values"),
])
def test_microbatch_loop_bad_inputs_name_the_op(ins, attrs, message):
    test_bad_inputs_raise_shape_error("microbatch_loop", ins, {**MICROBATCH_ATTRS, **attrs},
                                      message)
# -- end issue 24: PipelineOptimizer's microbatch_loop


# -- port24: shuffle_batch (fluid.contrib.layers) -------------------------------------------------
PORT24_CASES = [
    case("shuffle_batch", {"X": t(-1, 4)}, None, {"Out": t(-1, 4), "ShuffleIdx": i64(-1)}),
    case("shuffle_batch", {"X": t(2, 3, 4)}, {"startup_seed": 5},
         {"Out": t(2, 3, 4), "ShuffleIdx": i64(6)}, "rows of all but the last dim"),
]
CASES.extend(PORT24_CASES)  # test_every_op_has_a_case reads CASES when it runs


def test_shuffle_batch_needs_a_row_dimension():
    test_bad_inputs_raise_shape_error("shuffle_batch", {"X": t(4)}, {}, "at least one row")
# -- end port24


# -- ctc: ctc_align's LoD form (ctc_greedy_decoder of a LoD input) ------------------------------
CTC_CASES = [
    case("ctc_align", {"Input": lod(-1, 1, dtype="int64")}, {"blank": 3},
         {"Output": lod(-1, 1, dtype="int64")}, "lod"),
    case("ctc_align", {"Input": lod(-1, 1, level=2, dtype="int64")}, {},
         {"Output": lod(-1, 1, dtype="int64")}, "lod2_outer_sequences"),
]
CASES.extend(CTC_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", CTC_CASES)
def test_ctc_align_lod_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)


@pytest.mark.parametrize("ins, message", [
    ({"Input": lod(-1, 2, dtype="int64")}, "one id per token ([T, 1])"),
    ({"Input": lod(-1, 1, dtype="int64"), "InputLength": i64(-1, 1)},
     "InputLength is for a padded [N, T] Input"),
    ({"Input": i64(-1, 9)}, "needs InputLength [N, 1]"),
    ({"Input": lod(-1, 1, dtype="float32")}, "Input must be an integer tensor"),
    ({"Input": lod(-1, 1, level=3, dtype="int64")}, "takes at most level 2"),
])
def test_ctc_align_bad_inputs_name_the_op(ins, message):
    test_bad_inputs_raise_shape_error("ctc_align", ins, {}, message)


def test_lookup_table_refuses_ids_whose_only_dimension_is_the_batch():
    # Paddle's build-time check as well (similarity_net's mmdnn declares its ids [None])
    test_bad_inputs_raise_shape_error("lookup_table", {"W": t(100, 16), "Ids": i64(-1)}, {},
                                      "Ids [-1] must end in a dimension of 1")
    assert infer("lookup_table", {"W": t(100, 16), "Ids": i64(1)}) == {"Out": [t(16)]}
# -- end ctc


# -- ifelse26: split_lod_tensor / merge_lod_tensor ------------------------------------------------
IFELSE26_CASES = [
    case("split_lod_tensor", {"X": t(-1, 3), "Mask": b(-1, 1)}, None,
         {"OutTrue": lod(-1, 3), "OutFalse": lod(-1, 3)}, "dense"),
    case("split_lod_tensor", {"X": lod(-1, 3, level=2), "Mask": b(-1, 1)}, None,
         {"OutTrue": lod(-1, 3, level=2), "OutFalse": lod(-1, 3, level=2)}, "lod2"),
    case("merge_lod_tensor", {"X": t(5, 2), "Mask": b(5, 1), "InTrue": lod(-1, 4),
                              "InFalse": t(-1, 4)}, None, {"Out": t(5, 4)}, "dense"),
    case("merge_lod_tensor", {"X": lod(-1, 2), "Mask": b(-1, 1), "InTrue": lod(-1, 4),
                              "InFalse": lod(-1, -1)}, None, {"Out": lod(-1, -1)}, "lod"),
    case("merge_lod_tensor_infer", {"X": t(5, 1, dtype="bool"), "Mask": b(5, 1),
                                    "InTrue": lod(-1, 4), "InFalse": lod(-1, 4)}, None,
         {"Out": t(5, 4)}, "x-is-the-mask"),
]
CASES.extend(IFELSE26_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", IFELSE26_CASES)
def test_ifelse26_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    if has_op_def(grad_op_type(op_type)):  # merge_lod_tensor_infer has no gradient
        test_grad_op_types(op_type, ins, attrs, outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("split_lod_tensor", {"X": t(4, 2), "Mask": b(3, 1)}, {}, "Mask bool[3,1] has 3 flags"),
    ("split_lod_tensor", {"X": lod(-1, 2), "Mask": b(-1, 2)}, {}, "dense [N, 1] tensor"),
    ("split_lod_tensor", {"X": lod(-1, 2, level=2), "Mask": b(-1, 1)}, {"level": 1},
     "level 0 only"),
    ("merge_lod_tensor", {"X": t(4, 2), "Mask": b(4, 1), "InTrue": t(-1, 2),
                          "InFalse": t(-1, 2, dtype="float64")}, {}, "one dtype and one row"),
    ("merge_lod_tensor", {"X": t(4, 2), "Mask": lod(-1, 1), "InTrue": t(-1, 2),
                          "InFalse": t(-1, 2)}, {}, "input 'Mask' of op merge_lod_tensor is a LoD"),
])
def test_ifelse26_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end ifelse26


# -- arr2lod: lod_tensor_to_array / array_to_lod_tensor / shrink_rnn_memory -----------------------
_TABLE = i64(-1, 2)
ARR2LOD_CASES = [
    case("lod_tensor_to_array", {"X": lod(-1, 3), "RankTable": _TABLE}, {"capacity": 8},
         {"Out": array_type(lod(-1, 3), 8)}, "lod1"),
    case("lod_tensor_to_array", {"X": lod(-1, 3, level=2), "RankTable": _TABLE}, None,
         {"Out": array_type(lod(-1, 3, level=2), 128)}, "lod2-default-capacity"),
    case("array_to_lod_tensor", {"X": array_type(lod(-1, 3, level=2), 8),
                                 "RankTable": _TABLE}, None, {"Out": lod(-1, 3, level=2)},
         "lod2"),
    case("array_to_lod_tensor", {"X": array_type(t(4, 3), 8), "RankTable": _TABLE}, None,
         {"Out": lod(-1, 3)}, "dense-elements"),
    case("shrink_rnn_memory", {"X": t(4, 3), "RankTable": _TABLE, "I": i64(1)}, None,
         {"Out": lod(-1, 3)}, "dense"),
    case("shrink_rnn_memory", {"X": lod(-1, 3, level=2), "RankTable": _TABLE, "I": i64(1)},
         None, {"Out": lod(-1, 3, level=2)}, "lod2"),
]
CASES.extend(ARR2LOD_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", ARR2LOD_CASES)
def test_arr2lod_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    test_grad_op_types(op_type, ins, attrs, outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("lod_tensor_to_array", {"X": t(4, 2), "RankTable": _TABLE}, {}, "must be a LoD value"),
    ("lod_tensor_to_array", {"X": lod(-1, 2), "RankTable": i64(-1, 3)}, {}, "rank table"),
    ("array_to_lod_tensor", {"X": lod(-1, 2), "RankTable": _TABLE}, {}, "must be a tensor array"),
    ("array_to_lod_tensor", {"X": t(4, 2), "RankTable": _TABLE}, {}, "tensor array"),
    ("shrink_rnn_memory", {"X": t(4, 2), "RankTable": _TABLE, "I": i64(2)}, {}, "one element"),
])
def test_arr2lod_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end arr2lod


# -- nlp24: TDM's tdm_child / tdm_sampler and index_sample (fluid.contrib.layers) --------------
def _i32(*shape: int) -> TensorType:
    return t(*shape, dtype="int32")


_TDM_SAMPLER = {"neg_samples_num_list": [1, 2], "layer_offset_lod": [0, 2, 6]}
NLP24_CASES = [
    case("tdm_child", {"X": i64(-1, 1), "TreeInfo": _i32(7, 5)}, {"child_nums": 2},
         {"Child": _i32(-1, 1, 2), "LeafMask": _i32(-1, 1, 2)}, "ids [B, 1] -> [B, 1, c]"),
    case("tdm_child", {"X": _i32(3), "TreeInfo": i64(9, 6)}, {"child_nums": 3, "dtype": "int64"},
         {"Child": i64(3, 3), "LeafMask": i64(3, 3)}, "int64 out"),
    case("tdm_sampler", {"X": i64(-1, 1), "Travel": _i32(4, 2), "Layer": _i32(6, 1)},
         _TDM_SAMPLER, {"Out": _i32(-1, 5), "Labels": _i32(-1, 5), "Mask": _i32(-1, 5)},
         "positives and negatives"),
    case("tdm_sampler", {"X": i64(8), "Travel": i64(4, 2), "Layer": i64(6, 1)},
         {**_TDM_SAMPLER, "output_positive": False, "dtype": "int64"},
         {"Out": i64(8, 3), "Labels": i64(8, 3), "Mask": i64(8, 3)}, "negatives only"),
    case("index_sample", {"X": t(-1, 6), "Index": i64(-1, 3)}, None, {"Out": t(-1, 3)}),
    case("index_sample", {"X": i64(4, 6), "Index": _i32(4, 2)}, None, {"Out": i64(4, 2)},
         "int X"),
]
CASES.extend(NLP24_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type,ins,attrs,message", [
    ("tdm_child", {"X": i64(-1, 1), "TreeInfo": _i32(7, 4)}, {"child_nums": 2}, "no room"),
    ("tdm_child", {"X": t(-1, 1), "TreeInfo": _i32(7, 5)}, {"child_nums": 2}, "int32 or int64"),
    ("tdm_sampler", {"X": i64(-1, 1), "Travel": _i32(4, 2), "Layer": _i32(6, 1)},
     {**_TDM_SAMPLER, "neg_samples_num_list": [2, 2]}, "takes 0 to 1 negative"),
    ("tdm_sampler", {"X": i64(-1, 2), "Travel": _i32(4, 2), "Layer": _i32(6, 1)},
     _TDM_SAMPLER, "one leaf (item) id per row"),
    ("tdm_sampler", {"X": i64(-1, 1), "Travel": _i32(4, 3), "Layer": _i32(6, 1)},
     _TDM_SAMPLER, "Travel must be [leaf_node_num, 2 layers]"),
    ("index_sample", {"X": t(3, 6), "Index": i64(4, 2)}, {}, "as many rows"),
])
def test_nlp24_bad_inputs(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)
# -- end nlp24


# -- stoppers24: squared_l2_norm (global-norm clipping's term) and elementwise_mul of rows ------
STOPPERS24_CASES = [
    case("squared_l2_norm", {"X": t(4, 3, dtype="float64")}, None,
         {"Out": t(1, dtype="float64")}, "dense"),
    case("squared_l2_norm", {"X": rows(100, 8)}, None, {"Out": t(1)}, "rows"),
    case("elementwise_mul", {"X": rows(100, 8), "Y": t(1)}, None, {"Out": rows(100, 8)},
         "rows-by-scalar"),
]
CASES.extend(STOPPERS24_CASES)  # test_every_op_has_a_case reads CASES when it runs


@pytest.mark.parametrize("op_type, ins, attrs, outs", STOPPERS24_CASES)
def test_stoppers24_inferred_types(op_type, ins, attrs, outs):
    assert infer(op_type, ins, attrs) == _as_lists(outs)
    if not any(t.sparse for t in ins.values()):  # a gradient never flows into a sparse X
        test_grad_op_types(op_type, ins, attrs, outs)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("squared_l2_norm", {"X": i64(4)}, {}, "X must be floating point"),
    ("elementwise_mul", {"X": rows(10, 4), "Y": t(4)}, {}, "one-element Y only"),
    ("elementwise_mul", {"X": rows(10, 4), "Y": t(1, dtype="float64")}, {}, "X is float32"),
    ("elementwise_add", {"X": rows(10, 4), "Y": t(1)}, {}, "row-sparse"),
])
def test_stoppers24_bad_inputs_name_the_op(op_type, ins, attrs, message):
    test_bad_inputs_raise_shape_error(op_type, ins, attrs, message)


def _double_grad_cases():
    from graphc.ir.grad_defs import DOUBLE_GRAD_OPS
    return [p for p in CASES if p.values[0] in DOUBLE_GRAD_OPS]


@pytest.mark.parametrize("op_type, ins, attrs, outs", _double_grad_cases())
def test_stoppers24_double_grad_op_types(op_type, ins, attrs, outs):
    """T_grad_grad (a double-grad T), given T_grad's inputs and its output gradients, gives
    each floating-point input of T_grad (T's inputs, outputs, their gradients) its type."""
    ins, outs = _as_lists(ins), _as_lists(outs)
    if any(ty.sparse or ty.lod_level for types in ins.values() for ty in types):
        return  # a second gradient takes dense values only
    grad_ins = {**ins, **outs}
    grad_ins.update({f"{slot}@GRAD": types for slot, types in outs.items()
                     if all(ty.dtype in FLOAT_DTYPES for ty in types)})
    first = infer(grad_op_type(op_type), grad_ins, attrs)
    double_ins = {**grad_ins, **first, **{f"{slot}@GRAD": types for slot, types in first.items()}}
    expected = {f"{slot}@GRAD": types for slot, types in grad_ins.items()
                if all(ty.dtype in FLOAT_DTYPES for ty in types)}
    assert infer(grad_op_type(grad_op_type(op_type)), double_ins, attrs) == expected
# -- end stoppers24
