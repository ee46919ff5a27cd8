"""More Fluid nn layers: transposed and 3-D convolutions, pool3d, adaptive pooling,
instance/group norm, lrn, affine_channel. Paddle 1.8's signatures, ops and defaults."""

from __future__ import annotations

import math

from ..build.initializer import Constant, Normal
from ..ir.errors import ProgramError
from ..ir.program import Variable
from .helper import LayerHelper, check_variable


def _tuple(v, n: int, what: str) -> list[int]:
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    if len(v) != n:
        raise ProgramError(f"{what} must be an int or {n} ints, got {v}")
    return [int(e) for e in v]


def _padding(layer: str, padding, n: int, data_format: str = "NCHW"):
    """(padding_algorithm, paddings): 'SAME'/'VALID', an int, n ints, 2n ints, or Paddle's
    (before, after) pair per dimension of the input, batch and channel ones zero."""
    if isinstance(padding, list | tuple) and any(isinstance(p, list | tuple) for p in padding):
        pairs = [list(p) for p in padding]
        spatial = pairs[1:-1] if data_format[-1] == "C" else pairs[2:]
        rest = pairs[:1] + pairs[-1:] if data_format[-1] == "C" else pairs[:2]
        if len(pairs) != n + 2 or any(p != [0, 0] for p in rest) or \
                any(len(p) != 2 for p in spatial):
            raise ProgramError(f"{layer}: padding pairs must be {n + 2} [before, after] "
                               f"pairs, zero for batch and channels, got {padding}")
        return "EXPLICIT", [int(v) for p in spatial for v in p]
    if isinstance(padding, str):
        algo = padding.upper()
        if algo not in ("SAME", "VALID"):
            raise ProgramError(f"{layer}: padding must be ints, 'SAME' or 'VALID', "
                               f"got {padding!r}")
        return algo, [0] * n
    pads = [padding] * n if isinstance(padding, int) else [int(p) for p in padding]
    if len(pads) not in (n, 2 * n):
        raise ProgramError(f"{layer}: padding must have {n} or {2 * n} entries, got {pads}")
    return "EXPLICIT", pads


def _channels(layer: str, input, nd: int, data_format: str, known: bool = True) -> int:
    check_variable(layer, "input", input)
    formats = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[nd]
    if data_format not in formats:
        raise ProgramError(f"{layer}: data_format must be {' or '.join(formats)}, "
                           f"got {data_format!r}")
    if input.ndim != nd + 2:
        raise ProgramError(f"{layer}: input '{input.name}' must be {nd + 2}-D, got "
                           f"{list(input.shape)}")
    ch = input.shape[-1] if data_format == formats[1] else input.shape[1]
    if ch < 0 and known:  # the layer's parameters are shaped by it
        raise ProgramError(f"{layer}: the channel dimension of {list(input.shape)} must be "
                           "known")
    return ch


def _bias_act(helper, out, bias_attr, act, channel_axis):
    pre_act = helper.append_bias_op(out, bias_attr, dim_start=channel_axis,
                                    dim_end=channel_axis + 1)
    return helper.append_activation(pre_act, act)


def _conv_nd(layer, nd, input, num_filters, filter_size, stride, padding, dilation, groups,
             param_attr, bias_attr, use_cudnn, act, name, data_format):
    ch = _channels(layer, input, nd, data_format)
    groups = groups or 1
    if ch % groups:
        raise ProgramError(f"{layer}: {ch} channels not divisible by groups={groups}")
    helper = LayerHelper(layer, name)
    ksize = _tuple(filter_size, nd, f"{layer}: filter_size")
    algo, pads = _padding(layer, padding, nd, data_format)
    std = (2.0 / (math.prod(ksize) * ch)) ** 0.5
    w = helper.create_parameter(param_attr, [num_filters, ch // groups, *ksize], input.dtype,
                                default_initializer=Normal(0.0, std, 0))
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(layer, {"Input": input, "Filter": w}, {"Output": out}, {
        "strides": _tuple(stride, nd, f"{layer}: stride"), "paddings": pads,
        "dilations": _tuple(dilation, nd, f"{layer}: dilation"), "groups": groups,
        "use_cudnn": use_cudnn, "data_format": data_format, "padding_algorithm": algo})
    return _bias_act(helper, out, bias_attr, act, nd + 1 if data_format[-1] == "C" else 1)


def conv3d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
           data_format="NCDHW"):
    """3-D convolution + bias + act; Filter [num_filters, C/groups, kd, kh, kw]."""
    return _conv_nd("conv3d", 3, input, num_filters, filter_size, stride, padding, dilation,
                    groups, param_attr, bias_attr, use_cudnn, act, name, data_format)


def _conv_transpose(layer, nd, input, num_filters, output_size, filter_size, padding, stride,
                    dilation, groups, param_attr, bias_attr, use_cudnn, act, name,
                    data_format):
    ch = _channels(layer, input, nd, data_format)
    groups = groups or 1
    if ch % groups or num_filters % groups:
        raise ProgramError(f"{layer}: groups={groups} must divide the {ch} input channels and "
                           f"num_filters={num_filters}")
    stride = _tuple(stride, nd, f"{layer}: stride")
    dilation = _tuple(dilation, nd, f"{layer}: dilation")
    algo, pads = _padding(layer, padding, nd, data_format)
    sizes = None if output_size is None else _tuple(output_size, nd, f"{layer}: output_size")
    last = data_format[-1] == "C"
    dims = input.shape[1:-1] if last else input.shape[2:]
    if filter_size is None:  # Paddle derives it from output_size
        if sizes is None:
            raise ProgramError(f"{layer}: give filter_size or output_size")
        if any(d < 0 for d in dims):
            raise ProgramError(f"{layer}: filter_size from output_size needs known input "
                               f"dims, got {list(input.shape)}")
        pairs = pads if len(pads) == 2 * nd else [p for p in pads for _ in (0, 1)]
        filter_size = [(sizes[i] - (dims[i] - 1) * stride[i] + pairs[2 * i] + pairs[2 * i + 1]
                        - 1) // dilation[i] + 1 for i in range(nd)]
    ksize = _tuple(filter_size, nd, f"{layer}: filter_size")
    op_type = layer
    if nd == 2 and ch == groups and num_filters == ch and not use_cudnn:
        op_type = "depthwise_conv2d_transpose"
    helper = LayerHelper(layer, name)
    w = helper.create_parameter(param_attr, [ch, num_filters // groups, *ksize], input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op(op_type, {"Input": input, "Filter": w}, {"Output": out}, {
        "output_size": sizes or [], "strides": stride, "paddings": pads,
        "dilations": dilation, "groups": groups, "use_cudnn": use_cudnn,
        "data_format": data_format, "padding_algorithm": algo})
    return _bias_act(helper, out, bias_attr, act, nd + 1 if last else 1)


def conv2d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0,
                     stride=1, dilation=1, groups=None, param_attr=None, bias_attr=None,
                     use_cudnn=True, act=None, name=None, data_format="NCHW"):
    """Transposed 2-D convolution + bias + act; Filter [C, num_filters/groups, kh, kw]."""
    return _conv_transpose("conv2d_transpose", 2, input, num_filters, output_size,
                           filter_size, padding, stride, dilation, groups, param_attr,
                           bias_attr, use_cudnn, act, name, data_format)


def conv3d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0,
                     stride=1, dilation=1, groups=None, param_attr=None, bias_attr=None,
                     use_cudnn=True, act=None, name=None, data_format="NCDHW"):
    """Transposed 3-D convolution + bias + act; Filter [C, num_filters/groups, kd, kh, kw]."""
    return _conv_transpose("conv3d_transpose", 3, input, num_filters, output_size,
                           filter_size, padding, stride, dilation, groups, param_attr,
                           bias_attr, use_cudnn, act, name, data_format)


def pool3d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0,
           global_pooling=False, use_cudnn=True, ceil_mode=False, name=None, exclusive=True,
           data_format="NCDHW"):
    _channels("pool3d", input, 3, data_format, known=False)
    if pool_type not in ("max", "avg"):
        raise ProgramError(f"pool3d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if pool_size == -1 and not global_pooling:
        raise ProgramError("pool3d: give pool_size or set global_pooling=True")
    algo, pads = _padding("pool3d", pool_padding, 3, data_format)
    helper = LayerHelper("pool3d", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("pool3d", {"X": input}, {"Out": out}, {
        "pooling_type": pool_type,
        "ksize": [1, 1, 1] if pool_size == -1 else _tuple(pool_size, 3, "pool3d: pool_size"),
        "strides": _tuple(pool_stride, 3, "pool3d: pool_stride"), "paddings": pads,
        "global_pooling": global_pooling, "ceil_mode": ceil_mode, "exclusive": exclusive,
        "data_format": data_format, "padding_algorithm": algo})
    return out


def _adaptive(layer, nd, input, pool_size, pool_type, require_index, name):
    _channels(layer, input, nd, "NCHW" if nd == 2 else "NCDHW", known=False)
    if pool_type not in ("max", "avg"):
        raise ProgramError(f"{layer}: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if require_index and pool_type != "max":
        raise ProgramError(f"{layer}: require_index=True needs pool_type 'max', got "
                           f"{pool_type!r}")
    helper = LayerHelper(layer, name)
    out = helper.create_variable_for_type_inference(input.dtype)
    if require_index:  # (out, mask): the argmax's flat index in each input plane
        mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
        helper.append_op(f"max_pool{nd}d_with_index", {"X": input},
                         {"Out": out, "Mask": mask},
                         {"ksize": _tuple(pool_size, nd, f"{layer}: pool_size"),
                          "adaptive": True})
        return out, mask
    op = "pool2d" if nd == 2 else "pool3d"
    helper.append_op(op, {"X": input}, {"Out": out}, {
        "pooling_type": pool_type, "ksize": _tuple(pool_size, nd, f"{layer}: pool_size"),
        "adaptive": True})
    return out


def adaptive_pool2d(input, pool_size, pool_type="max", require_index=False, name=None):
    """pool2d(adaptive=True): output [N, C, *pool_size], window i over
    [floor(i*H/o), ceil((i+1)*H/o))."""
    return _adaptive("adaptive_pool2d", 2, input, pool_size, pool_type, require_index, name)


def adaptive_pool3d(input, pool_size, pool_type="max", require_index=False, name=None):
    """pool3d(adaptive=True): output [N, C, *pool_size]."""
    return _adaptive("adaptive_pool3d", 3, input, pool_size, pool_type, require_index, name)


def _scale_bias(helper, input, channels, param_attr, bias_attr):
    inputs = {"X": input}
    scale = helper.create_parameter(param_attr, [channels], input.dtype,
                                    default_initializer=Constant(1.0))
    bias = helper.create_parameter(bias_attr, [channels], input.dtype, is_bias=True)
    if scale is not None:
        inputs["Scale"] = scale
    if bias is not None:
        inputs["Bias"] = bias
    return inputs


def instance_norm(input, epsilon=1e-05, param_attr=None, bias_attr=None, name=None):
    check_variable("instance_norm", "input", input)
    if input.ndim < 3 or input.shape[1] < 0:
        raise ProgramError(f"instance_norm: input '{input.name}' must be [N, C, ...] with "
                           f"known C, got {list(input.shape)}")
    helper = LayerHelper("instance_norm", name)
    inputs = _scale_bias(helper, input, input.shape[1], param_attr, bias_attr)
    mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    var = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("instance_norm", inputs,
                     {"Y": out, "SavedMean": mean, "SavedVariance": var},
                     {"epsilon": epsilon})
    return out


def group_norm(input, groups, epsilon=1e-05, param_attr=None, bias_attr=None, act=None,
               data_layout="NCHW", name=None):
    check_variable("group_norm", "input", input)
    if data_layout not in ("NCHW", "NHWC"):
        raise ProgramError(f"group_norm: data_layout must be NCHW or NHWC, got {data_layout!r}")
    ch = input.shape[-1] if data_layout == "NHWC" else input.shape[1]
    if ch < 0:
        raise ProgramError(f"group_norm: channels of {list(input.shape)} must be known")
    helper = LayerHelper("group_norm", name)
    inputs = _scale_bias(helper, input, ch, param_attr, bias_attr)
    mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    var = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("group_norm", inputs, {"Y": out, "Mean": mean, "Variance": var},
                     {"epsilon": epsilon, "groups": groups, "data_layout": data_layout})
    return helper.append_activation(out, act)


def lrn(input, n=5, k=1.0, alpha=1e-4, beta=0.75, name=None, data_format="NCHW"):
    """Local response normalisation across n neighbouring channels."""
    check_variable("lrn", "input", input)
    if input.ndim != 4:
        raise ProgramError(f"lrn: input '{input.name}' must be 4-D, got {list(input.shape)}")
    helper = LayerHelper("lrn", name)
    mid = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("lrn", {"X": input}, {"Out": out, "MidOut": mid},
                     {"n": n, "k": k, "alpha": alpha, "beta": beta,
                      "data_format": data_format})
    return out


def affine_channel(x, scale=None, bias=None, data_layout="NCHW", name=None, act=None):
    """x * scale[c] + bias[c] per channel (scale and bias: [C] Variables)."""
    check_variable("affine_channel", "x", x)
    for arg, v in (("scale", scale), ("bias", bias)):
        if not isinstance(v, Variable):
            raise ProgramError(f"affine_channel: '{arg}' must be a [C] Variable, got "
                               f"{type(v).__name__}")
    helper = LayerHelper("affine_channel", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("affine_channel", {"X": x, "Scale": scale, "Bias": bias}, {"Out": out},
                     {"data_layout": data_layout})
    return helper.append_activation(out, act)
