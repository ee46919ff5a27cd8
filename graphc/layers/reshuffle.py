"""Fluid 1.8's padding, cropping and rearranging layers of issue 24: pad, pad2d,
pad_constant_like, crop(_tensor), label_smooth, multiplex, scatter_nd(_add), reverse, ..."""

from __future__ import annotations

from ..ir.errors import ProgramError, ShapeError
from ..ir.program import Variable
from ..ir.shape_values import static_value
from .helper import LayerHelper, check_variable
from .manipulation import _ints, _one


def pad(x, paddings, pad_value: float = 0.0, name=None):
    """x with paddings[2i] values before and paddings[2i+1] after along dimension i."""
    return _one("pad", "pad", {"X": x}, {"paddings": _ints("pad", "paddings", paddings),
                                         "pad_value": float(pad_value)}, name=name)


def pad2d(input, paddings=(0, 0, 0, 0), mode: str = "constant", pad_value: float = 0.0,
          data_format: str = "NCHW", name=None):
    """input padded in height and width: [top, bottom, left, right]; mode constant
    (pad_value), reflect or edge. ``paddings`` may be a Variable (Paddle's Paddings input)
    whose value the build knows (fill_constant, shapes): XLA needs the padded shape."""
    if isinstance(paddings, Variable):
        value, known = static_value(paddings, "pad2d", "paddings")
        if value.shape != (4,) or not known.all():
            raise ShapeError(f"pad2d: paddings ('{paddings.name}') must be 4 ints known when "
                             f"the program is built, got {value.tolist()} (known: "
                             f"{known.tolist()})")
        paddings = [int(v) for v in value]
    return _one("pad2d", "pad2d", {"X": input},
                {"paddings": _ints("pad2d", "paddings", paddings), "mode": mode,
                 "pad_value": float(pad_value), "data_format": data_format}, name=name)


def pad_constant_like(x, y, pad_value: float = 0.0, name=None):
    """y padded at the end of each dimension with pad_value to x's shape."""
    check_variable("pad_constant_like", "x", x)
    return _one("pad_constant_like", "pad_constant_like", {"X": x, "Y": y},
                {"pad_value": float(pad_value)}, dtype=y.dtype, name=name)


def _crop(op_type, x, shape, offsets, name):
    check_variable(op_type, "x", x)
    inputs, attrs = {"X": x}, {}
    if isinstance(shape, Variable):
        if op_type == "crop_tensor":
            raise ProgramError("crop_tensor: shape must be a list of ints; a Variable "
                               f"('{shape.name}') would make the output's shape depend on "
                               "data (crop takes a Variable whose shape is the shape)")
        inputs["Y"] = shape
    elif shape is None:
        raise ProgramError(f"{op_type}: give shape (a list of ints)")
    else:
        attrs["shape"] = _ints(op_type, "shape", shape)
    if isinstance(offsets, Variable):
        raise ProgramError(f"{op_type}: offsets must be a list of ints; a Variable "
                           f"('{offsets.name}') is not supported")
    attrs["offsets"] = [0] * len(x.shape) if offsets is None else \
        _ints(op_type, "offsets", offsets)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs, {"Out": out}, attrs)
    return out


def crop(x, shape=None, offsets=None, name=None):
    """The block of x of ``shape`` (a list, or a Variable whose shape it is) at ``offsets``."""
    return _crop("crop", x, shape, offsets, name)


def crop_tensor(x, shape=None, offsets=None, name=None):
    """The block of x of ``shape`` at ``offsets``; a -1 in shape runs to x's end."""
    return _crop("crop_tensor", x, shape, offsets, name)


def label_smooth(label, prior_dist=None, epsilon: float = 0.1, dtype="float32", name=None):
    """(1 - epsilon) label + epsilon prior_dist (uniform 1/K without one)."""
    inputs = {"X": label}
    if prior_dist is not None:
        check_variable("label_smooth", "prior_dist", prior_dist)
        inputs["PriorDist"] = prior_dist
    return _one("label_smooth", "label_smooth", inputs, {"epsilon": float(epsilon)},
                name=name)


def multiplex(inputs, index):
    """Row i of the input ``index[i]`` names, for every row i."""
    if len(inputs) < 2:
        raise ProgramError(f"multiplex: inputs must hold at least 2 Variables, got "
                           f"{len(inputs)}")
    for v in inputs:
        check_variable("multiplex", "inputs", v)
    check_variable("multiplex", "index", index)
    helper = LayerHelper("multiplex")
    out = helper.create_variable_for_type_inference(inputs[0].dtype)
    helper.append_op("multiplex", {"X": list(inputs), "Ids": index}, {"Out": out})
    return out


def scatter_nd_add(ref, index, updates, name=None):
    """ref with each updates slice added at the position its index row names."""
    return _one("scatter_nd_add", "scatter_nd_add",
                {"X": ref, "Index": index, "Updates": updates}, name=name)


def scatter_nd(index, updates, shape, name=None):
    """zeros of ``shape`` with updates scattered (added) at index, as Paddle builds it."""
    from .tensor import fill_constant
    check_variable("scatter_nd", "updates", updates)
    zeros = fill_constant(_ints("scatter_nd", "shape", shape), updates.dtype, 0.0)
    return scatter_nd_add(zeros, index, updates, name)


def reverse(x, axis):
    """x with its elements in reverse order along each axis of ``axis`` (an int or a list)."""
    return _one("reverse", "reverse", {"X": x}, {"axis": _ints("reverse", "axis", axis)})


def space_to_depth(x, blocksize, name=None):
    """[N, C, H, W] -> [N, C*b*b, H/b, W/b], elements placed as Paddle's kernel places them."""
    return _one("space_to_depth", "space_to_depth", {"X": x}, {"blocksize": int(blocksize)},
                name=name)


def pixel_shuffle(x, upscale_factor):
    """[N, C*r*r, H, W] -> [N, C, H*r, W*r]."""
    return _one("pixel_shuffle", "pixel_shuffle", {"X": x},
                {"upscale_factor": int(upscale_factor)})


def shuffle_channel(x, group, name=None):
    """x's channels regrouped: viewed as [group, C/group], transposed."""
    return _one("shuffle_channel", "shuffle_channel", {"X": x}, {"group": int(group)},
                name=name)


# -- port24: Paddle 1.8's fluid.contrib.layers.shuffle_batch
def shuffle_batch(x, seed=None):
    """x's rows (every dimension but the last, flattened) in a new random order each step;
    ``seed`` (an int) fixes the sequence of orders; without one each shuffle_batch op draws
    from its own seed derived from the program's ``random_seed`` (Paddle seeds every op of a
    program with ``random_seed`` itself, so its negatives repeat one order)."""
    check_variable("shuffle_batch", "x", x)
    if seed is not None and not isinstance(seed, int):
        raise ProgramError(f"shuffle_batch: seed must be an int or None, got "
                           f"{type(seed).__name__} (a seed variable is not supported)")
    helper = LayerHelper("shuffle_batch", None)
    out = helper.create_variable_for_type_inference(x.dtype)
    idx = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("shuffle_batch", {"X": x}, {"Out": out, "ShuffleIdx": idx},
                     {"startup_seed": int(seed or 0)})
    return out
