"""Issue 24's nn tail layers (Paddle 1.8 signatures): data_norm, spectral_norm, inplace_abn,
lstm (cudnn), hash, continuous_value_model, filter_by_instag, load, autoincreased_step_counter."""

from __future__ import annotations

import math

from ..build.initializer import Constant, Normal
from ..build.param_attr import ParamAttr
from ..ir.errors import ProgramError
from ..ir.types import FLOAT_DTYPES
from .helper import LayerHelper, check_variable
from .learning_rate_scheduler import global_counter
from .math import leaky_relu
from .math_activation import elu
from .nn import batch_norm

STEP_COUNTER = "@STEP_COUNTER@"


def _float_input(layer: str, arg: str, x):
    check_variable(layer, arg, x)
    if x.dtype not in FLOAT_DTYPES:
        raise ProgramError(f"{layer}: {arg} must be floating point, got {x.dtype}")
    return x


def data_norm(input, act=None, epsilon=1e-05, param_attr=None, data_layout="NCHW",
              in_place=False, name=None, moving_mean_name=None, moving_variance_name=None,
              do_model_average_for_mean_and_var=True, slot_dim=-1, sync_stats=False,
              summary_decay_rate=0.9999999, enable_scale_and_shift=False):
    """Normalise [N, C] by summaries: (x - sum/size) * sqrt(size/square_sum). The summaries
    (``<name or dn>.batch_size/.batch_sum/.batch_square_sum``: 1e4/0/1e4, or ``param_attr``
    dict's batch_size/batch_sum/batch_square) fold in every training batch:
    s = s * summary_decay_rate + batch s (not trainable: no optimizer touches them)."""
    _float_input("data_norm", "input", input)
    if data_layout not in ("NCHW", "NHWC"):
        raise ProgramError(f"data_norm: data_layout must be NCHW or NHWC, got {data_layout!r}")
    if input.ndim != 2 or input.shape[1] < 0:
        raise ProgramError(f"data_norm: input must be [N, C] with C known, got "
                           f"{list(input.shape)}")
    helper = LayerHelper("data_norm", name)
    prefix = name or "dn"  # Paddle's parameter names: unnamed data_norms share "dn.*"
    channels = input.shape[1]
    stat_dtype = "float64" if input.dtype == "float64" else "float32"
    attrs = param_attr if isinstance(param_attr, dict) else {}
    keys = {"batch_size": "batch_size", "batch_sum": "batch_sum",
            "batch_square_sum": "batch_square", "scale_w": "scale_w", "bias": "bias"}
    defaults = {"batch_size": 1e4, "batch_sum": 0.0, "batch_square_sum": 1e4,
                "scale_w": 1.0, "bias": 0.0}
    defaults.update({k: float(attrs[key]) for k, key in keys.items() if key in attrs})

    def param(key, dtype):
        return helper.create_parameter(
            ParamAttr(name=f"{prefix}.{key}", initializer=Constant(defaults[key]),
                      trainable=key in ("scale_w", "bias")), [channels], dtype)

    stats = {slot: param(key, stat_dtype) for slot, key in (
        ("BatchSize", "batch_size"), ("BatchSum", "batch_sum"),
        ("BatchSquareSum", "batch_square_sum"))}
    inputs = {"X": input, **stats}
    if enable_scale_and_shift:
        inputs["scale_w"] = param("scale_w", input.dtype)
        inputs["bias"] = param("bias", input.dtype)
    means = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    scales = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    # in_place only saves memory in Paddle; graphc's buffers are assigned by XLA
    out = helper.create_variable_for_type_inference(input.dtype)
    outputs = {"Y": out, "Means": means, "Scales": scales,
               **{slot + "Out": var for slot, var in stats.items()}}
    helper.append_op("data_norm", inputs, outputs, {
        "epsilon": epsilon, "data_layout": data_layout, "slot_dim": slot_dim,
        "sync_stats": sync_stats, "summary_decay_rate": summary_decay_rate,
        "enable_scale_and_shift": enable_scale_and_shift})
    return helper.append_activation(out, act)


def spectral_norm(weight, dim=0, power_iters=1, eps=1e-12, name=None):
    """weight / sigma(weight), sigma by power iteration from persistable N(0, 1) vectors
    U [h] and V [w] (h = weight.shape[dim], w the product of the other dimensions)."""
    _float_input("spectral_norm", "weight", weight)
    if dim not in (0, 1) or weight.ndim < 2 or any(d < 0 for d in weight.shape):
        raise ProgramError(f"spectral_norm: weight must have rank >= 2 and known dimensions, "
                           f"dim 0 or 1, got {list(weight.shape)} and dim={dim}")
    helper = LayerHelper("spectral_norm", name)
    h = weight.shape[dim]
    w = math.prod(weight.shape) // h
    u = helper.create_parameter(ParamAttr(trainable=False), [h], weight.dtype,
                                default_initializer=Normal(0.0, 1.0))
    v = helper.create_parameter(ParamAttr(trainable=False), [w], weight.dtype,
                                default_initializer=Normal(0.0, 1.0))
    u.stop_gradient = v.stop_gradient = True
    out = helper.create_variable_for_type_inference(weight.dtype)
    helper.append_op("spectral_norm", {"Weight": weight, "U": u, "V": v}, {"Out": out},
                     {"dim": dim, "power_iters": power_iters, "eps": eps})
    return out


_ABN_ACTS = ("identity", "leaky_relu", "elu")


def inplace_abn(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
                bias_attr=None, data_layout="NCHW", name=None, moving_mean_name=None,
                moving_variance_name=None, do_model_average_for_mean_and_var=True,
                use_global_stats=False, act_alpha=1.0):
    """batch_norm then identity, leaky_relu(act_alpha) or elu(act_alpha): Paddle's numbers
    (its in-place buffer reuse is XLA's business here)."""
    if act not in (None, *_ABN_ACTS):
        raise ProgramError(f"inplace_abn: act must be one of {list(_ABN_ACTS)} or None, "
                           f"got {act!r}")
    out = batch_norm(input, None, is_test, momentum, epsilon, param_attr, bias_attr,
                     data_layout, name, moving_mean_name, moving_variance_name,
                     use_global_stats)
    if act == "leaky_relu":
        return leaky_relu(out, alpha=act_alpha)
    if act == "elu":
        return elu(out, alpha=act_alpha)
    return out


def lstm(input, init_h, init_c, max_len, hidden_size, num_layers, dropout_prob=0.0,
         is_bidirec=False, is_test=False, name=None, default_initializer=None, seed=-1):
    """cudnn-style LSTM over time-major input [T, N, in]: returns rnn_out [T, N, H*dirs],
    last_h and last_c [num_layers*dirs, N, H]; one flat weight parameter (cudnn_lstm's
    layout), dropout_prob between layers."""
    _float_input("lstm", "input", input)
    check_variable("lstm", "init_h", init_h)
    check_variable("lstm", "init_c", init_c)
    if input.ndim != 3 or input.shape[2] < 0:
        raise ProgramError(f"lstm: input must be [seq_len, batch, input_size] with a known "
                           f"input_size, got {list(input.shape)}")
    helper = LayerHelper("cudnn_lstm", name)
    dirs = 2 if is_bidirec else 1
    size = 0
    for layer in range(num_layers):
        width = input.shape[2] if layer == 0 else hidden_size * dirs
        size += dirs * 4 * hidden_size * (width + hidden_size + 2)
    weight = helper.create_parameter(None, [size], input.dtype,
                                     default_initializer=default_initializer)
    out = helper.create_variable_for_type_inference(input.dtype)
    last_h = helper.create_variable_for_type_inference(input.dtype)
    last_c = helper.create_variable_for_type_inference(input.dtype)
    reserve = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op(
        "cudnn_lstm", {"Input": input, "InitH": init_h, "InitC": init_c, "W": weight},
        {"Out": out, "LastH": last_h, "LastC": last_c, "Reserve": reserve},
        {"max_len": max_len, "is_bidirec": is_bidirec, "input_size": input.shape[2],
         "hidden_size": hidden_size, "num_layers": num_layers, "is_test": is_test,
         "dropout_prob": dropout_prob, "seed": seed})
    return out, last_h, last_c


def hash(input, hash_size, num_hash=1, name=None):  # noqa: A001 - Paddle's name
    """[N, K] int ids -> [N, num_hash, 1]: XXH64 of each row's bytes with seed i, mod
    hash_size (Paddle's numbers)."""
    check_variable("hash", "input", input)
    if input.dtype not in ("int32", "int64"):
        raise ProgramError(f"hash: input must be int32 or int64, got {input.dtype}")
    helper = LayerHelper("hash", name)
    out = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("hash", {"X": input}, {"Out": out},
                     {"num_hash": num_hash, "mod_by": hash_size})
    return out


def continuous_value_model(input, cvm, use_cvm=True):
    """CTR show/click features: use_cvm keeps the width with log(show+1) and
    log(click+1) - log(show+1) in the first two columns; else drops them."""
    _float_input("continuous_value_model", "input", input)
    check_variable("continuous_value_model", "cvm", cvm)
    helper = LayerHelper("cvm")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cvm", {"X": input, "CVM": cvm}, {"Y": out}, {"use_cvm": use_cvm})
    return out


def filter_by_instag(ins, ins_tag, filter_tag, is_lod, out_val_if_empty=0):
    """Keep the instances (rows of ins, or its sequences with is_lod) having a tag of
    filter_tag: returns [out, loss_weight], both LoD values (1 per kept row); none kept: one
    row of out_val_if_empty with weight 0."""
    check_variable("filter_by_instag", "ins", ins)
    check_variable("filter_by_instag", "ins_tag", ins_tag)
    check_variable("filter_by_instag", "filter_tag", filter_tag)
    helper = LayerHelper("filter_by_instag")
    out = helper.create_variable_for_type_inference(ins.dtype)
    loss_weight = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    index_map = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("filter_by_instag",
                     {"Ins": ins, "Ins_tag": ins_tag, "Filter_tag": filter_tag},
                     {"Out": out, "LossWeight": loss_weight, "IndexMap": index_map},
                     {"is_lod": bool(is_lod), "out_val_if_empty": int(out_val_if_empty)})
    return [out, loss_weight]


def load(out, file_path, load_as_fp16=None):
    """Fill ``out`` (known shape) from ``file_path``, a LoDTensor in Paddle's file format,
    when the program runs (as Paddle, usually in the startup program)."""
    check_variable("load", "out", out)
    shape = list(out.shape or ())
    if not shape or min(shape) <= 0:
        raise ProgramError(f"load: out '{out.name}' needs a known shape to load into, got "
                           f"{shape}")
    helper = LayerHelper("load")
    helper.append_op("load", {}, {"Out": out}, {
        "file_path": str(file_path), "load_as_fp16": bool(load_as_fp16), "shape": shape,
        "dtype": out.dtype})


def autoincreased_step_counter(counter_name=None, begin=1, step=1):
    """A persistable int64 [1] counter (``@STEP_COUNTER@`` by default): begin on the first
    run (begin - 1 + step), +step per run."""
    return global_counter(counter_name or STEP_COUNTER, begin, step, "int64")
