"""Layers with parameters: fc, conv2d (and depthwise), pool2d, batch_norm, layer_norm,
dropout, embedding. Each emits the same ops, names and defaults as Paddle Fluid's."""

from __future__ import annotations

import math

from ..build.initializer import Constant, Normal
from ..build.param_attr import ParamAttr
from ..ir.errors import ArgumentValueError, ProgramError
from ..ir.source import user_source
from ..ir.types import FLOAT_DTYPES
from .helper import FLOATS, LayerHelper, check_dtype, check_dtype_arg, check_variable


def _pair(v, what: str) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    if len(v) != 2:
        raise ProgramError(f"{what} must be an int or a pair, got {v}")
    return v


def fc(input, size: int, num_flatten_dims: int = 1, param_attr=None, bias_attr=None,
       act=None, name=None):
    """Fully connected: mul(X, W) per input, summed, + bias (axis=num_flatten_dims), act."""
    helper = LayerHelper("fc", name)
    inputs = input if isinstance(input, list | tuple) else [input]
    if not inputs:
        raise ProgramError("fc: input is empty")
    attrs = param_attr if isinstance(param_attr, list | tuple) else [param_attr] * len(inputs)
    products = []
    for x, pattr in zip(inputs, attrs, strict=True):
        check_variable("fc", "input", x)
        if x.dtype not in FLOAT_DTYPES:  # Paddle's fc takes float inputs only
            source = user_source()
            raise ProgramError(
                f"fc{f' at {source}' if source else ''}: input '{x.name}' is {x.dtype}; fc "
                f"takes {', '.join(sorted(FLOAT_DTYPES))} (its weights take the input's "
                "dtype): cast it first, e.g. layers.cast(x, 'float32')")
        if not 0 < num_flatten_dims < x.ndim:
            # Paddle's mul refuses it at build time too (X's rank must exceed x_num_col_dims)
            raise ProgramError(
                f"fc: input '{x.name}' of shape {list(x.shape)} has rank {x.ndim}: "
                f"num_flatten_dims={num_flatten_dims} must be in [1, {x.ndim}) (the dimensions "
                f"after it are flattened into the weight's rows)"
                + ((f"; '{x.name}' is fed data declared without a -1 batch dimension: "
                    f"declare it as {[-1, *x.shape]} (or layers.data(shape="
                    f"{list(x.shape)}), which prepends it)" if x.is_data else
                    "; a rank-1 input has no batch dimension: give it one (layers.unsqueeze)")
                   if x.ndim == 1 else ""))
        if any(d < 0 for d in x.shape[num_flatten_dims:]):
            batchless = x.is_data and all(d >= 0 for d in x.shape)
            raise ProgramError(
                f"fc: input '{x.name}' of shape {list(x.shape)}: num_flatten_dims="
                f"{num_flatten_dims} must leave known dimensions to flatten"
                + (f"; '{x.name}' is fed data declared without a -1 batch dimension: declare "
                   f"it as {[-1, *x.shape]} (or layers.data(shape={list(x.shape)}), which "
                   "prepends it)" if batchless else ""))
        w = helper.create_parameter(pattr, [math.prod(x.shape[num_flatten_dims:]), size],
                                    x.dtype)
        tmp = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op("mul", {"X": x, "Y": w}, {"Out": tmp},
                         {"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        products.append(tmp)
    if len(products) > 1:
        pre_bias = helper.create_variable_for_type_inference(inputs[0].dtype)
        helper.append_op("sum", {"X": products}, {"Out": pre_bias})
    else:
        pre_bias = products[0]
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=num_flatten_dims)
    return helper.append_activation(pre_act, act)


def conv2d(input, num_filters: int, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn: bool = True, act=None, name=None,
           data_format: str = "NCHW"):
    """2-D convolution + bias + act. groups == channels (!= 1) emits depthwise_conv2d."""
    check_variable("conv2d", "input", input)
    if data_format not in ("NCHW", "NHWC"):
        raise ProgramError(f"conv2d: data_format must be NCHW or NHWC, got {data_format!r}")
    if input.ndim != 4:
        hint = (f"; '{input.name}' is fed data: declare it with a -1 batch dimension, "
                f"{[-1, *input.shape]} (layers.data prepends it)"
                if input.is_data and len(input.shape) == 3 and min(input.shape) >= 0 else "")
        raise ProgramError(f"conv2d: input '{input.name}' must be 4-D, got "
                           f"{list(input.shape)}{hint}")
    channels = input.shape[3] if data_format == "NHWC" else input.shape[1]
    if channels < 0:
        raise ProgramError(f"conv2d: the channel dimension of {list(input.shape)} must be known")
    groups = groups or 1
    if channels % groups:
        raise ProgramError(f"conv2d: {channels} channels not divisible by groups={groups}")
    depthwise = groups == channels and channels != 1 and num_filters % channels == 0
    helper = LayerHelper("conv2d", name)
    ksize = _pair(filter_size, "conv2d: filter_size")
    algo, pads = "EXPLICIT", padding
    if isinstance(padding, str):
        algo, pads = padding.upper(), [0, 0]
        if algo not in ("SAME", "VALID"):
            raise ProgramError(f"conv2d: padding must be ints, 'SAME' or 'VALID', got {padding!r}")
    pads = [pads, pads] if isinstance(pads, int) else list(pads)
    std = (2.0 / (ksize[0] * ksize[1] * channels)) ** 0.5
    w = helper.create_parameter(param_attr, [num_filters, channels // groups, *ksize],
                                input.dtype, default_initializer=Normal(0.0, std, 0))
    pre_bias = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("depthwise_conv2d" if depthwise else "conv2d",
                     {"Input": input, "Filter": w}, {"Output": pre_bias},
                     {"strides": _pair(stride, "conv2d: stride"), "paddings": pads,
                      "dilations": _pair(dilation, "conv2d: dilation"), "groups": groups,
                      "use_cudnn": use_cudnn and not depthwise, "data_format": data_format,
                      "padding_algorithm": algo})
    axis = 3 if data_format == "NHWC" else 1
    pre_act = helper.append_bias_op(pre_bias, bias_attr, dim_start=axis, dim_end=axis + 1)
    return helper.append_activation(pre_act, act)


def pool2d(input, pool_size=-1, pool_type: str = "max", pool_stride=1, pool_padding=0,
           global_pooling: bool = False, use_cudnn: bool = True, ceil_mode: bool = False,
           name=None, exclusive: bool = True, data_format: str = "NCHW"):
    check_variable("pool2d", "input", input)
    # Paddle 1.8's argument checks, ValueErrors all (ArgumentValueError: a ProgramError too)
    if pool_type not in ("max", "avg"):
        raise ArgumentValueError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if pool_size == -1 and not global_pooling:
        raise ArgumentValueError("pool2d: give pool_size or set global_pooling=True")
    if data_format not in ("NCHW", "NHWC"):
        raise ArgumentValueError(f"pool2d: data_format must be NCHW or NHWC, got "
                                 f"{data_format!r}")
    helper = LayerHelper("pool2d", name)
    algo, pads = _pool_padding(pool_padding, data_format, ceil_mode)
    out = helper.create_variable_for_type_inference(input.dtype)
    ksize = [1, 1] if pool_size == -1 else _pair(pool_size, "pool2d: pool_size")
    helper.append_op("pool2d", {"X": input}, {"Out": out}, {
        "pooling_type": pool_type, "ksize": ksize,
        "strides": _pair(pool_stride, "pool2d: pool_stride"), "paddings": pads,
        "global_pooling": global_pooling, "ceil_mode": ceil_mode, "exclusive": exclusive,
        "data_format": data_format, "padding_algorithm": algo})
    return out


def _pool_padding(padding, data_format: str, ceil_mode: bool):
    """pool2d's padding as (padding_algorithm, paddings): "SAME"/"VALID", an int, [h, w],
    [top, bottom, left, right], or Paddle's four [before, after] pairs in data_format order
    whose batch and channel pairs must be zero."""
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise ArgumentValueError(f"pool2d: pool_padding must be 'SAME', 'VALID' or "
                                     f"numbers, got {padding!r}")
        if algo == "VALID" and ceil_mode:
            raise ArgumentValueError("pool2d: ceil_mode must be False with pool_padding "
                                     "'VALID'")
        return algo, [0, 0]
    if isinstance(padding, int):
        return "EXPLICIT", [padding, padding]
    pads = list(padding)
    if pads and isinstance(pads[0], list | tuple):
        if len(pads) != 4:
            raise ArgumentValueError(f"pool2d: pool_padding pairs must be 4 (one per "
                                     f"dimension of {data_format}), got {padding!r}")
        skip = (0, 1) if data_format == "NCHW" else (0, 3)
        if any(list(pads[i]) != [0, 0] for i in skip):
            raise ArgumentValueError(f"pool2d: pool_padding {padding!r} pads the batch or "
                                     f"channel dimension of {data_format}")
        pads = [int(p) for i, pair in enumerate(pads) if i not in skip for p in pair]
    return "EXPLICIT", pads


def batch_norm(input, act=None, is_test: bool = False, momentum: float = 0.9,
               epsilon: float = 1e-5, param_attr=None, bias_attr=None,
               data_layout: str = "NCHW", in_place: bool = False, name=None,
               moving_mean_name=None, moving_variance_name=None,
               do_model_average_for_mean_and_var: bool = True,
               use_global_stats: bool = False):
    """Batch norm with scale ``.w_0``, bias ``.b_0``, moving mean ``.w_1``, variance ``.w_2``.

    ``in_place`` is Paddle's memory hint (write Y over X); graphc's values are SSA and XLA
    reuses buffers itself, so it changes nothing. ``do_model_average_for_mean_and_var=False``
    leaves the moving statistics out of ModelAverage, as Paddle's ParamAttr does."""
    check_dtype("batch_norm", "input", input, FLOATS)
    if data_layout not in ("NCHW", "NHWC"):
        raise ProgramError(f"batch_norm: data_layout must be NCHW or NHWC, got {data_layout!r}")
    helper = LayerHelper("batch_norm", name)
    channels = input.shape[-1] if data_layout == "NHWC" else input.shape[1]
    if channels < 0:
        raise ProgramError(f"batch_norm: channels of {list(input.shape)} must be known")
    stat_dtype = "float32" if input.dtype in ("float16", "bfloat16") else input.dtype
    scale = helper.create_parameter(param_attr, [channels], stat_dtype,
                                    default_initializer=Constant(1.0))
    bias = helper.create_parameter(bias_attr, [channels], stat_dtype, is_bias=True)
    mean = helper.create_parameter(
        ParamAttr(name=moving_mean_name, initializer=Constant(0.0), trainable=False,
                  do_model_average=do_model_average_for_mean_and_var),
        [channels], stat_dtype)
    variance = helper.create_parameter(
        ParamAttr(name=moving_variance_name, initializer=Constant(1.0), trainable=False,
                  do_model_average=do_model_average_for_mean_and_var),
        [channels], stat_dtype)
    saved_mean = helper.create_variable_for_type_inference(stat_dtype, stop_gradient=True)
    saved_var = helper.create_variable_for_type_inference(stat_dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(
        "batch_norm",
        {"X": input, "Scale": scale, "Bias": bias, "Mean": mean, "Variance": variance},
        {"Y": out, "MeanOut": mean, "VarianceOut": variance, "SavedMean": saved_mean,
         "SavedVariance": saved_var},
        {"momentum": momentum, "epsilon": epsilon, "is_test": is_test,
         "data_layout": data_layout, "use_global_stats": use_global_stats})
    return helper.append_activation(out, act)


def layer_norm(input, scale: bool = True, shift: bool = True, begin_norm_axis: int = 1,
               epsilon: float = 1e-5, param_attr=None, bias_attr=None, act=None, name=None):
    check_variable("layer_norm", "input", input)
    helper = LayerHelper("layer_norm", name)
    norm_shape = input.shape[begin_norm_axis:]
    if any(d < 0 for d in norm_shape):
        raise ProgramError(f"layer_norm: dimensions from {begin_norm_axis} of "
                           f"{list(input.shape)} must be known")
    size = math.prod(norm_shape)
    inputs = {"X": input}
    if scale:
        inputs["Scale"] = helper.create_parameter(param_attr, [size], input.dtype,
                                                  default_initializer=Constant(1.0))
    if shift:
        inputs["Bias"] = helper.create_parameter(bias_attr, [size], input.dtype, is_bias=True)
    mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    variance = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("layer_norm", inputs, {"Y": out, "Mean": mean, "Variance": variance},
                     {"epsilon": epsilon, "begin_norm_axis": begin_norm_axis})
    return helper.append_activation(out, act)


def dropout(x, dropout_prob: float, is_test: bool = False, seed=None, name=None,
            dropout_implementation: str = "downgrade_in_infer"):
    check_dtype("dropout", "x", x, FLOATS)
    helper = LayerHelper("dropout", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    helper.append_op("dropout", {"X": x}, {"Out": out, "Mask": mask}, {
        "dropout_prob": dropout_prob, "is_test": is_test, "fix_seed": seed is not None,
        "seed": seed or 0, "dropout_implementation": dropout_implementation})
    return out


def _row_keyed(startup, name: str) -> None:
    """A distributed table's random initializer draws each row from its own key (row_keyed),
    so parameter servers draw only the rows trainers ask for, equal to a local run's."""
    for op in startup.global_block().ops:
        if name in op.output("Out") and op.type in ("uniform_random", "gaussian_random"):
            op.set_attr("row_keyed", True)


def embedding(input, size, is_sparse: bool = False, is_distributed: bool = False,
              padding_idx=None, param_attr=None, dtype="float32"):
    """Lookup rows of a [vocab, width] table; ``is_sparse`` asks for row-sparse gradients."""
    # Paddle 1.8 takes int64 ids only; graphc's lookup also reads int32 ids, so any
    # integer dtype passes and a float is the TypeError Paddle raises
    check_dtype("embedding", "input", input, ("int8", "int16", "int32", "int64", "uint8"))
    dtype = check_dtype_arg("embedding", "dtype", dtype, FLOATS)
    size = [int(s) for s in size]
    if len(size) != 2:
        raise ProgramError(f"embedding: size must be [vocab, width], got {size}")
    helper = LayerHelper("embedding")
    w = helper.create_parameter(param_attr, size, dtype)
    if is_distributed:
        _row_keyed(helper.startup_program, w.name)
    out = helper.create_variable_for_type_inference(dtype)
    pad = -1 if padding_idx is None else (padding_idx if padding_idx >= 0
                                           else size[0] + padding_idx)
    # a distributed table's gradient is always rows (they travel to the servers as rows);
    # its update is SGD, for which rows and the dense gradient agree
    helper.append_op("lookup_table", {"W": w, "Ids": input}, {"Out": out},
                     {"is_sparse": is_sparse or is_distributed,
                      "is_distributed": is_distributed,
                      "padding_idx": pad})
    return out
