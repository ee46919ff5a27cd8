"""Fluid 1.8's tensor manipulation and creation layers: slice, squeeze, unsqueeze, flatten,
shape, expand, gather, scatter, stack, unstack, one_hot, where, range, zeros/ones(_like), argmax."""

from __future__ import annotations

import builtins

import numpy as np

from ..ir.errors import ArgumentTypeError, ProgramError
from ..ir.program import Variable
from ..ir.types import normalize_dtype
from .helper import LayerHelper, check_dtype, check_variable
from .tensor import fill_constant


def _ints(layer: str, arg: str, value) -> list[int]:
    """A list of Python ints. A Variable in it (a tensor-valued attribute in Paddle) counts
    when the build can fold it to one int (a fill_constant, shape arithmetic: unitops);
    one computed from data is refused, since XLA needs every shape when it compiles."""
    if isinstance(value, Variable):  # the whole list as a 1-D int tensor
        return _folded_list(value, layer, arg)
    values = [value] if isinstance(value, int) else list(value)
    out = []
    for v in values:
        if isinstance(v, Variable):
            folded = _folded_int(v, layer, arg)
            if folded is None:
                raise ProgramError(f"{layer}: '{arg}' must be a list of ints; a Variable in "
                                   f"it ('{v.name}') would make shapes depend on data, which "
                                   "graphc does not support")
            out.append(folded)
        else:
            out.append(int(v))
    return out


def _folded_list(var, layer: str, arg: str) -> list[int]:
    from ..ir.errors import ShapeError
    from ..ir.shape_values import static_value
    try:
        value, known = static_value(var, layer, arg) if var.dtype in ("int32", "int64") \
            else (None, None)
    except ShapeError:  # computed from data
        value = None
    if value is None or not known.all():
        raise ProgramError(f"{layer}: '{arg}' must be a list of ints; the Variable "
                           f"'{var.name}' would make shapes depend on data, which graphc "
                           "does not support")
    return [int(v) for v in value.reshape(-1)]


def _folded_int(var, layer: str, arg: str):
    """The one int an int Variable holds as far as the build knows it, else None."""
    from ..ir.errors import ShapeError
    from ..ir.shape_values import static_value
    if var.dtype not in ("int32", "int64"):
        return None
    try:
        value, known = static_value(var, layer, arg)
    except ShapeError:  # computed from data
        return None
    return int(value.reshape(-1)[0]) if value.size == 1 and known.all() else None


def _one(op_type: str, layer: str, inputs: dict, attrs=None, dtype=None, name=None,
         out_slot: str = "Out", stop_gradient: bool = False):
    for arg, var in inputs.items():
        check_variable(layer, arg.lower(), var)
    helper = LayerHelper(op_type, name)
    first = next(iter(inputs.values()))
    out = helper.create_variable_for_type_inference(dtype or first.dtype, stop_gradient)
    helper.append_op(op_type, inputs, {out_slot: out}, attrs or {})
    return out


def _with_xshape(op_type: str, layer: str, x, attrs, name=None):
    check_variable(layer, "input", x)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op(op_type, {"X": x}, {"Out": out, "XShape": xshape}, attrs)
    return out


# -- slicing and reshaping ------------------------------------------------------------------------
def slice(input, axes, starts, ends):
    """input[starts:ends] along axes; negative bounds count from the end (Paddle's clamp)."""
    attrs = {"axes": _ints("slice", "axes", axes), "starts": _ints("slice", "starts", starts),
             "ends": _ints("slice", "ends", ends)}
    return _one("slice", "slice", {"Input": input}, attrs)


def strided_slice(input, axes, starts, ends, strides):
    attrs = {"axes": _ints("strided_slice", "axes", axes),
             "starts": _ints("strided_slice", "starts", starts),
             "ends": _ints("strided_slice", "ends", ends),
             "strides": _ints("strided_slice", "strides", strides)}
    return _one("strided_slice", "strided_slice", {"Input": input}, attrs)


def squeeze(input, axes, name=None):
    """Drop the listed axes, each of size 1 (every size-1 axis when axes is empty)."""
    return _with_xshape("squeeze2", "squeeze", input, {"axes": _ints("squeeze", "axes", axes)},
                        name)


def unsqueeze(input, axes, name=None):
    return _with_xshape("unsqueeze2", "unsqueeze", input,
                        {"axes": _ints("unsqueeze", "axes", axes)}, name)


def flatten(x, axis: int = 1, name=None):
    """x as a matrix: [prod(shape[:axis]), prod(shape[axis:])]."""
    return _with_xshape("flatten2", "flatten", x, {"axis": int(axis)}, name)


def shape(input):
    """input's shape as an int32 tensor (no gradient)."""
    return _one("shape", "shape", {"Input": input}, dtype="int32", stop_gradient=True)


# -- expand, gather, scatter ----------------------------------------------------------------------
def expand(x, expand_times, name=None):
    from .tensor import shape_args
    # Paddle 1.8's list (graphc adds float16); its ValueError for a bool x with
    # stop_gradient=True is not kept: graphc tiles a bool mask whatever its stop_gradient
    check_dtype("expand", "x", x, ("bool", "float16", "float32", "float64", "int32", "int64"))
    times, tensors = shape_args("expand", expand_times, ("ExpandTimes", "expand_times_tensor"))
    if tensors:  # shape tensors (folded when the step is traced), as Paddle's inputs
        check_variable("expand", "x", x)
        helper = LayerHelper("expand", name)
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op("expand", {"X": x, **tensors}, {"Out": out}, {"expand_times": times})
        return out
    return _one("expand", "expand", {"X": x},
                {"expand_times": _ints("expand", "expand_times", expand_times)}, name=name)


def expand_as(x, target_tensor, name=None):
    return _one("expand_as", "expand_as", {"X": x, "target_tensor": target_tensor}, name=name)


def gather(input, index, overwrite: bool = True):
    """input[index] along dim 0; ``overwrite`` picks how a repeated index's gradient is
    formed (Paddle: one of the rows when True, their sum when False)."""
    return _one("gather", "gather", {"X": input, "Index": index}, {"overwrite": overwrite})


def gather_nd(input, index, name=None):
    return _one("gather_nd", "gather_nd", {"X": input, "Index": index}, name=name)


def scatter(input, index, updates, name=None, overwrite: bool = True):
    """input with rows ``index`` replaced by ``updates`` (overwrite) or zeroed and summed."""
    return _one("scatter", "scatter", {"X": input, "Ids": index, "Updates": updates},
                {"overwrite": overwrite}, name=name)


# -- stack, unstack -------------------------------------------------------------------------------
def stack(x, axis: int = 0, name=None):
    xs = [x] if isinstance(x, Variable) else list(x)
    if not xs:
        raise ProgramError("stack: x is empty")
    for v in xs:
        check_variable("stack", "x", v)
    helper = LayerHelper("stack", name)
    out = helper.create_variable_for_type_inference(xs[0].dtype)
    helper.append_op("stack", {"X": xs}, {"Y": out}, {"axis": int(axis)})
    return out


def unstack(x, axis: int = 0, num=None):
    check_variable("unstack", "x", x)
    if num is None:
        rank = len(x.shape)
        if not -rank <= axis < rank:
            raise ProgramError(f"unstack: axis {axis} out of range for '{x.name}' "
                               f"{list(x.shape)}")
        num = x.shape[axis]
        if num < 0:
            raise ProgramError(f"unstack: dimension {axis} of '{x.name}' {list(x.shape)} is "
                               "unknown; give num")
    helper = LayerHelper("unstack")
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in builtins.range(num)]
    helper.append_op("unstack", {"X": x}, {"Y": outs}, {"axis": int(axis), "num": int(num)})
    return outs


# -- one_hot, where -------------------------------------------------------------------------------
def _depth(layer, depth) -> int:
    if not isinstance(depth, int | Variable) or isinstance(depth, bool):
        raise ArgumentTypeError(f"{layer}: depth must be an int, got {type(depth).__name__}")
    if isinstance(depth, Variable):
        raise ProgramError(f"{layer}: depth must be an int; a Variable ('{depth.name}') would "
                           "make the output's shape depend on data")
    return int(depth)


def one_hot(input, depth, allow_out_of_range: bool = False):
    """Fluid 1.x's one_hot: ids [..., 1] -> float32 [..., depth] (the trailing 1 replaced).
    An id outside [0, depth) refuses the run with a DataError, as Paddle raises, unless
    ``allow_out_of_range`` (then it gives a row of zeros)."""
    check_dtype("one_hot", "input", input, ("int32", "int64"))
    return _one("one_hot", "one_hot", {"X": input},
                {"depth": _depth("one_hot", depth), "allow_out_of_range": allow_out_of_range},
                dtype="float32", stop_gradient=True)


def one_hot_v2(input, depth, allow_out_of_range: bool = False):
    """``fluid.one_hot`` (one_hot_v2): ids of any shape -> float32 [*shape, depth]."""
    check_dtype("one_hot", "input", input, ("int32", "int64"))
    return _one("one_hot_v2", "one_hot", {"X": input},
                {"depth": _depth("one_hot", depth), "allow_out_of_range": allow_out_of_range},
                dtype="float32", stop_gradient=True)


def where(condition, size=None):
    """Coordinates (int64 [n, rank]) of condition's true elements, as Paddle 1.8.

    n depends on the data: the rows are one sequence of a LoD value (a buffer of one row per
    element of condition, the sequence's length n), which row-wise ops (gather_nd, gather,
    cast, elementwise), LoD-aware reductions and fetches treat as its n rows (docs/lod.md);
    ``size=N`` (graphc's addition) gives a dense [N, rank] instead, padded with rows of -1."""
    size = -1 if size is None else int(size)
    return _one("where_index", "where", {"Condition": condition}, {"size": size},
                dtype="int64", stop_gradient=True)


# -- creation -------------------------------------------------------------------------------------
def range(start, end, step, dtype, name=None):
    """[start, start + step, ...) below end; the bounds must be numbers (shapes are static)."""
    for arg, v in (("start", start), ("end", end), ("step", step)):
        if isinstance(v, Variable):
            raise ProgramError(f"range: '{arg}' must be a number; a Variable ('{v.name}') "
                               "would make the output's length depend on data")
    dtype = normalize_dtype(dtype)
    return _one_creation("range", {"start": float(start), "end": float(end),
                                   "step": float(step), "dtype": dtype}, dtype, name)


def arange(start=0, end=None, step=1, dtype="int64", name=None):
    """``range`` with numpy's defaults (one argument is the end)."""
    if end is None:
        start, end = 0, start
    return range(start, end, step, dtype, name)


def _one_creation(op_type, attrs, dtype, name=None):
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op(op_type, outputs={"Out": out}, attrs=attrs)
    return out


def zeros(shape, dtype, force_cpu: bool = False):
    if not isinstance(shape, Variable) and not any(isinstance(d, Variable) for d in shape):
        shape = _ints("zeros", "shape", shape)  # else shape tensors, as fill_constant takes
    return fill_constant(shape, dtype, 0.0, force_cpu)


def ones(shape, dtype, force_cpu: bool = False):
    if not isinstance(shape, Variable) and not any(isinstance(d, Variable) for d in shape):
        shape = _ints("ones", "shape", shape)  # else shape tensors, as fill_constant takes
    return fill_constant(shape, dtype, 1.0, force_cpu)


def _like(op_type, x, out, attrs):
    check_variable(op_type, "x", x)
    helper = LayerHelper(op_type)
    out = out or helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op(op_type, {"X": x}, {"Out": out}, attrs)
    return out


def zeros_like(x, out=None):
    return _like("fill_zeros_like", x, out, {})


def ones_like(x, out=None):
    return _like("fill_any_like", x, out, {"value": 1.0})


def fill_constant_batch_size_like(input, shape, dtype, value, input_dim_idx: int = 0,
                                  output_dim_idx: int = 0, force_cpu: bool = False):
    """value in ``shape``, whose output_dim_idx dimension is input's input_dim_idx one."""
    dtype = normalize_dtype(dtype)
    return _one("fill_constant_batch_size_like", "fill_constant_batch_size_like",
                {"Input": input}, {"shape": _ints("fill_constant_batch_size_like", "shape",
                                                  shape),
                                   "dtype": dtype, "value": float(value),
                                   "input_dim_idx": input_dim_idx,
                                   "output_dim_idx": output_dim_idx, "force_cpu": force_cpu},
                dtype=dtype, stop_gradient=True)


def uniform_random_batch_size_like(input, shape, dtype="float32", input_dim_idx: int = 0,
                                   output_dim_idx: int = 0, min: float = -1.0,
                                   max: float = 1.0, seed: int = 0):
    dtype = normalize_dtype(dtype)
    return _one("uniform_random_batch_size_like", "uniform_random_batch_size_like",
                {"Input": input}, {"shape": _ints("uniform_random_batch_size_like", "shape",
                                                  shape),
                                   "dtype": dtype, "min": float(min), "max": float(max),
                                   "seed": int(seed), "input_dim_idx": input_dim_idx,
                                   "output_dim_idx": output_dim_idx},
                dtype=dtype, stop_gradient=True)


def increment(x, value: float = 1.0, in_place: bool = True):
    """x + value for a one-element x; in place (the default) writes x itself."""
    check_variable("increment", "x", x)
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_variable_for_type_inference(x.dtype, True)
    helper.append_op("increment", {"X": x}, {"Out": out}, {"step": float(value)})
    return out


# -- arg_max, arg_min, argsort --------------------------------------------------------------------
def argmax(x, axis: int = 0):
    return _one("arg_max", "argmax", {"X": x}, {"axis": int(axis)}, dtype="int64",
                stop_gradient=True)


def argmin(x, axis: int = 0):
    return _one("arg_min", "argmin", {"X": x}, {"axis": int(axis)}, dtype="int64",
                stop_gradient=True)


def argsort(input, axis: int = -1, descending: bool = False, name=None):
    """(input sorted along axis, the int64 indices it came from)."""
    check_variable("argsort", "input", input)
    helper = LayerHelper("argsort", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    ids = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("argsort", {"X": input}, {"Out": out, "Indices": ids},
                     {"axis": int(axis), "descending": descending})
    return out, ids


_VALUE_ATTRS = {"float32": ("fp32_values", float), "int32": ("int32_values", int),
                "int64": ("int64_values", int), "bool": ("bool_values", int)}


def assign_value(input, output=None):
    """``assign`` of a numpy array (Paddle: bool, float32, int32 or int64; up to 1M
    elements): an assign_value op holding the values."""
    if not isinstance(input, np.ndarray):
        raise ArgumentTypeError(f"assign: input must be a Variable or a numpy array, got "
                                f"{type(input).__name__}")
    dtype = str(input.dtype)
    if dtype not in _VALUE_ATTRS:
        raise ArgumentTypeError(f"assign: a numpy array of {dtype}; Paddle takes bool, "
                                "float32, int32 or int64 (cast it with .astype first)")
    if input.size > 1024 * 1024:
        raise ProgramError(f"assign: a numpy array of {input.size} elements is too big to "
                           "hold in the program (at most 1048576); feed it or load it")
    attr, convert = _VALUE_ATTRS[dtype]
    helper = LayerHelper("assign_value")
    output = output or helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("assign_value", outputs={"Out": output},
                     attrs={"shape": [int(d) for d in input.shape], "dtype": dtype,
                            attr: [convert(v) for v in input.reshape(-1).tolist()]})
    return output
