"""Further nn layers of fluid.layers (issue 24): hsigmoid, row_conv, fsp_matrix,
add_position_encoding, affine_grid and grid_sampler."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .helper import LayerHelper, check_variable


def _lod_padded(layer, arg, x, build):
    """``build`` on x; a LoD x is padded per sequence first and unpadded after, so each
    sequence is treated alone (its steps past its end are zeros, its positions restart)."""
    check_variable(layer, arg, x)
    if not getattr(x, "lod_level", 0):
        return build(x)
    if x.lod_level != 1 or len(x.shape) != 2:
        raise ProgramError(f"{layer}: a LoD {arg} must be [T, D] with one LoD level, got "
                           f"{list(x.shape)} at LoD level {x.lod_level}")
    from .sequence import sequence_pad, sequence_unpad
    from .tensor import fill_constant
    padded, length = sequence_pad(x, fill_constant([1], x.dtype, 0.0))
    return sequence_unpad(build(padded), length)


def _op(layer, op_type, inputs, attrs, dtype, slot="Out", name=None):
    helper = LayerHelper(layer, name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs, {slot: out}, attrs)
    return out


def hsigmoid(input, label, num_classes, param_attr=None, bias_attr=None, name=None,
             path_table=None, path_code=None, is_custom=False, is_sparse=False):
    """Hierarchical sigmoid loss [N, 1] over Paddle's default binary tree of ``num_classes``
    leaves, or over custom paths (``is_custom``: ``path_table``/``path_code`` [N, L], -1
    ending a path). ``is_sparse`` is accepted; W's gradient is dense."""
    check_variable("hsigmoid", "input", input)
    check_variable("hsigmoid", "label", label)
    if input.shape[1] < 0:
        raise ProgramError(f"hsigmoid: the feature size of input {list(input.shape)} must be "
                           f"known")
    if is_custom != (path_table is not None and path_code is not None):
        raise ProgramError("hsigmoid: is_custom=True needs path_table and path_code, and they "
                           "need is_custom=True")
    helper = LayerHelper("hierarchical_sigmoid", name)
    nodes = num_classes if is_custom else num_classes - 1
    inputs = {"X": input, "Label": label,
              "W": helper.create_parameter(param_attr, [nodes, input.shape[1]], input.dtype)}
    bias = helper.create_parameter(bias_attr, [nodes, 1], input.dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = bias
    if is_custom:
        inputs["PathTable"], inputs["PathCode"] = path_table, path_code
    out = helper.create_variable_for_type_inference(input.dtype)
    pre = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("hierarchical_sigmoid", inputs, {"Out": out, "PreOut": pre},
                     {"num_classes": int(num_classes), "is_sparse": bool(is_sparse)})
    return out


def row_conv(input, future_context_size, param_attr=None, act=None):
    """Lookahead convolution over the time steps of each sequence of a LoD [T, D] input, or of
    padded [N, T, D]; the filter [future_context_size + 1, D] is a parameter."""
    check_variable("row_conv", "input", input)
    if input.shape[-1] < 0:
        raise ProgramError(f"row_conv: the feature size of input {list(input.shape)} must be "
                           f"known")
    helper = LayerHelper("row_conv")
    filt = helper.create_parameter(param_attr, [future_context_size + 1, input.shape[-1]],
                                   input.dtype)

    def build(x):
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op("row_conv", {"X": x, "Filter": filt}, {"Out": out})
        return out

    return helper.append_activation(_lod_padded("row_conv", "input", input, build), act)


def fsp_matrix(x, y):
    """The FSP matrix [N, C1, C2] of two feature maps [N, C1, H, W] and [N, C2, H, W]."""
    check_variable("fsp_matrix", "x", x)
    check_variable("fsp_matrix", "y", y)
    return _op("fsp_matrix", "fsp_matrix", {"X": x, "Y": y}, {}, x.dtype)


def add_position_encoding(input, alpha, beta, name=None):
    """alpha * input + beta * the sinusoidal position encoding, for padded [N, T, D] or a LoD
    [T, D] input (positions counted from each sequence's start)."""
    return _lod_padded("add_position_encoding", "input", input, lambda x: _op(
        "add_position_encoding", "add_position_encoding", {"X": x},
        {"alpha": float(alpha), "beta": float(beta)}, x.dtype, name=name))


def affine_grid(theta, out_shape, name=None):
    """The [N, H, W, 2] sampling grid of affine maps ``theta`` [N, 2, 3]; ``out_shape`` is a
    list [N, C, H, W] (a Variable shape would give a data-dependent output shape)."""
    check_variable("affine_grid", "theta", theta)
    if isinstance(out_shape, Variable):
        raise ProgramError("affine_grid: out_shape must be a list or tuple of ints: a Variable "
                           "would make the grid's shape data-dependent, which XLA cannot compile")
    return _op("affine_grid", "affine_grid", {"Theta": theta},
               {"output_shape": [int(d) for d in out_shape]}, theta.dtype, "Output", name)


def grid_sampler(x, grid, name=None):
    """Bilinear samples [N, C, H', W'] of x [N, C, H, W] at grid [N, H', W', 2]."""
    check_variable("grid_sampler", "x", x)
    check_variable("grid_sampler", "grid", grid)
    return _op("grid_sampler", "grid_sampler", {"X": x, "Grid": grid}, {}, x.dtype, "Output",
               name)


_SAMPLERS = ("uniform", "log_uniform", "custom_dist")  # the op's sampler attribute: the index


def nce(input, label, num_total_classes, sample_weight=None, param_attr=None, bias_attr=None,
        num_neg_samples=None, name=None, sampler="uniform", custom_dist=None, seed=0,
        is_sparse=False):
    """Noise-contrastive estimation loss [N, 1] (divided by num_neg_samples + 1, as Paddle's
    layer); negatives drawn each step by graphc's seed rule (``seed`` fixes the op's seed)."""
    check_variable("nce", "input", input)
    check_variable("nce", "label", label)
    if sampler not in _SAMPLERS:
        raise ProgramError(f"nce: sampler must be one of {list(_SAMPLERS)}, got {sampler!r}")
    if (sampler == "custom_dist") != (custom_dist is not None):
        raise ProgramError("nce: custom_dist is given with sampler='custom_dist', and only then")
    if input.shape[1] < 0:
        raise ProgramError(f"nce: the feature size of input {list(input.shape)} must be known")
    num_neg_samples = 10 if num_neg_samples is None else int(num_neg_samples)
    helper = LayerHelper("nce", name)
    inputs = {"Input": input, "Label": label,
              "Weight": helper.create_parameter(param_attr, [num_total_classes, input.shape[1]],
                                                input.dtype)}
    bias = helper.create_parameter(bias_attr, [num_total_classes, 1], input.dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = bias
    if sample_weight is not None:
        inputs["SampleWeight"] = sample_weight
    if custom_dist is not None:
        import numpy as np

        from .tensor import assign
        probs = np.asarray(custom_dist, "float64")
        if probs.shape != (num_total_classes,):
            raise ProgramError(f"nce: custom_dist must have num_total_classes="
                               f"{num_total_classes} probabilities, got {probs.shape}")
        inputs["CustomDistProbs"] = assign(probs.astype(input.dtype))
    cost = helper.create_variable_for_type_inference(input.dtype)
    logits = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    labels = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("nce", inputs,
                     {"Cost": cost, "SampleLogits": logits, "SampleLabels": labels},
                     {"num_total_classes": int(num_total_classes),
                      "num_neg_samples": num_neg_samples, "sampler": _SAMPLERS.index(sampler),
                      "seed": int(seed), "is_sparse": bool(is_sparse)})
    from .math import scale
    return scale(cost, 1.0 / (num_neg_samples + 1))


def random_crop(x, shape, seed=None):
    """A random window of ``shape`` over x's trailing dims, its offset drawn per instance
    each step by graphc's seed rule (an int ``seed`` fixes the op's seed)."""
    check_variable("random_crop", "x", x)
    if isinstance(seed, Variable):
        raise ProgramError("random_crop: seed must be an int or None (graphc seeds ops by its "
                           "own rule, not from a seed tensor)")
    return _op("random_crop", "random_crop", {"X": x},
               {"shape": [int(d) for d in shape], "seed": int(seed or 0)}, x.dtype)


def similarity_focus(input, axis, indexes, name=None):
    """Paddle's similarity focus mask (0/1, input's shape) over the slices ``indexes`` of a
    4-D input along ``axis``."""
    check_variable("similarity_focus", "input", input)
    return _op("similarity_focus", "similarity_focus", {"X": input},
               {"axis": int(axis), "indexes": [int(i) for i in indexes]}, input.dtype,
               name=name)
