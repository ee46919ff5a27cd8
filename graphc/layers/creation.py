"""Fluid 1.8's creation and random layers of issue 24: create_tensor/parameter/global_var,
uniform/gaussian_random, linspace, eye, diag, sampling_id, unique, shard_index, is_empty."""

from __future__ import annotations

import numpy as np

from ..build.initializer import Constant
from ..build.param_attr import ParamAttr
from ..ir.default_programs import default_main_program, default_startup_program
from ..ir.errors import ProgramError
from ..ir.program import Variable
from ..ir.types import normalize_dtype
from .helper import LayerHelper, check_variable
from .manipulation import _ints, _one, _one_creation


def create_tensor(dtype, name=None, persistable: bool = False):
    """A variable of ``dtype`` with no op writing it yet (``assign`` or an ``out=`` fills it)."""
    helper = LayerHelper("create_tensor", name)
    return helper.block.create_var(name or helper.name, None, normalize_dtype(dtype),
                                   persistable=persistable)


def create_parameter(shape, dtype, name=None, attr=None, is_bias: bool = False,
                     default_initializer=None):
    """A trainable parameter of ``shape``, initialised in the startup program (Xavier, or
    zeros for a bias, unless ``attr`` or ``default_initializer`` names another)."""
    attr = ParamAttr.to_attr(attr) or ParamAttr()
    if name is not None and attr.name is None:
        attr = ParamAttr(name, attr.initializer, attr.learning_rate, attr.regularizer,
                         attr.trainable, attr.do_model_average,
                         gradient_clip=attr.gradient_clip, need_clip=attr.need_clip)
    helper = LayerHelper("create_parameter", name)
    return helper.create_parameter(attr, _ints("create_parameter", "shape", shape), dtype,
                                   is_bias, default_initializer)


def create_global_var(shape, value, dtype, persistable: bool = False, force_cpu: bool = False,
                      name=None):
    """A global-block variable filled with ``value`` by the startup program (a counter, a
    learning rate); ``persistable`` keeps it between runs. ``force_cpu`` is accepted, as
    graphc places every value itself."""
    shape = _ints("create_global_var", "shape", shape)
    if any(d < 0 for d in shape):
        raise ProgramError(f"create_global_var: shape {shape} must be fully known")
    dtype = normalize_dtype(dtype)
    helper = LayerHelper("global_var", name)
    name = name or helper.name
    var = default_main_program().global_block().create_var(
        name, shape, dtype, persistable=persistable, stop_gradient=True)
    startup = default_startup_program().global_block()
    if name not in startup.vars:
        Constant(float(value))(startup.create_var(name, shape, dtype, persistable=True),
                               startup)
    return var


def _random(op_type, shape, dtype, attrs):
    dtype = normalize_dtype(dtype)
    if dtype not in ("float32", "float64"):
        raise ProgramError(f"{op_type}: dtype {dtype} must be float32 or float64")
    from .tensor import shape_args
    shape, inputs = shape_args(op_type, shape)
    if not inputs:
        return _one_creation(op_type, {"shape": _ints(op_type, "shape", shape), "dtype": dtype,
                                       **attrs}, dtype)
    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op(op_type, inputs, {"Out": out}, {"shape": shape, "dtype": dtype, **attrs})
    return out


def uniform_random(shape, dtype="float32", min: float = -1.0, max: float = 1.0, seed: int = 0):
    """U[min, max) of ``shape``, drawn afresh each run (seed 0: the program's seeding rule)."""
    return _random("uniform_random", shape, dtype,
                   {"min": float(min), "max": float(max), "seed": int(seed)})


def gaussian_random(shape, mean: float = 0.0, std: float = 1.0, seed: int = 0,
                    dtype="float32"):
    """N(mean, std^2) of ``shape``, drawn afresh each run."""
    return _random("gaussian_random", shape, dtype,
                   {"mean": float(mean), "std": float(std), "seed": int(seed)})


def gaussian_random_batch_size_like(input, shape, input_dim_idx: int = 0,
                                    output_dim_idx: int = 0, mean: float = 0.0,
                                    std: float = 1.0, seed: int = 0, dtype="float32"):
    dtype = normalize_dtype(dtype)
    return _one("gaussian_random_batch_size_like", "gaussian_random_batch_size_like",
                {"Input": input},
                {"shape": _ints("gaussian_random_batch_size_like", "shape", shape),
                 "dtype": dtype, "mean": float(mean), "std": float(std), "seed": int(seed),
                 "input_dim_idx": int(input_dim_idx), "output_dim_idx": int(output_dim_idx)},
                dtype=dtype, stop_gradient=True)


def sampling_id(x, min: float = 0.0, max: float = 1.0, seed: int = 0, dtype="float32"):
    """One class id per row of the probabilities ``x`` [batch, classes], drawn with
    r ~ U[min, max). The ids are int64 whatever ``dtype`` says, as Paddle's kernel writes."""
    return _one("sampling_id", "sampling_id", {"X": x},
                {"min": float(min), "max": float(max), "seed": int(seed)}, dtype="int64",
                stop_gradient=True)


def _number(layer, arg, v):
    if isinstance(v, Variable):
        raise ProgramError(f"{layer}: '{arg}' must be a number; a Variable ('{v.name}') would "
                           "make the output's shape depend on data, which XLA cannot compile")
    return v


def linspace(start, stop, num, dtype):
    """num evenly spaced values from start to stop (both included)."""
    dtype = normalize_dtype(dtype)
    return _one_creation("linspace", {"start": float(_number("linspace", "start", start)),
                                      "stop": float(_number("linspace", "stop", stop)),
                                      "num": int(_number("linspace", "num", num)),
                                      "dtype": dtype}, dtype)


def eye(num_rows, num_columns=None, batch_shape=None, dtype="float32"):
    """The identity [num_rows, num_columns], tiled over ``batch_shape`` when given."""
    dtype = normalize_dtype(dtype)
    cols = -1 if num_columns is None else int(_number("eye", "num_columns", num_columns))
    out = _one_creation("eye", {"num_rows": int(_number("eye", "num_rows", num_rows)),
                                "num_columns": cols, "dtype": dtype}, dtype)
    if batch_shape:
        from .manipulation import expand
        from .tensor import reshape
        batch = _ints("eye", "batch_shape", batch_shape)
        out = reshape(out, [1] * len(batch) + list(out.shape))
        out = expand(out, batch + [1, 1])
        out.stop_gradient = True
    return out


def diag(diagonal):
    """The square matrix with ``diagonal`` (a 1-D Variable or numpy array) on its diagonal."""
    if isinstance(diagonal, np.ndarray):
        from .tensor import assign
        diagonal = assign(diagonal)
    return _one("diag", "diag", {"Diagonal": diagonal}, stop_gradient=True)


def _unique(op_type, x, dtype, outs):
    check_variable(op_type, "x", x)
    dtype = normalize_dtype(dtype)
    helper = LayerHelper(op_type)
    out = {"Out": helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)}
    for slot in outs:
        out[slot] = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op(op_type, {"X": x}, out, {"dtype": dtype})
    return tuple(out.values())


def unique(x, dtype="int32"):
    """(out, index): x's distinct values in order of first appearance and, for each element
    of x, its position in out. out has x's length, zero-padded past the distinct values
    (XLA needs static shapes): their number is ``reduce_max(index) + 1``."""
    return _unique("unique", x, dtype, ("Index",))


def unique_with_counts(x, dtype="int32"):
    """(out, index, count): ``unique`` and how often each distinct value occurs (count is
    zero-padded like out; its non-zero entries are Paddle's count)."""
    return _unique("unique_with_counts", x, dtype, ("Index", "Count"))


def shard_index(input, index_num, nshards, shard_id, ignore_value=-1):
    """Ids of shard ``shard_id`` relative to its start, ``ignore_value`` for the others."""
    return _one("shard_index", "shard_index", {"X": input},
                {"index_num": int(index_num), "nshards": int(nshards),
                 "shard_id": int(shard_id), "ignore_value": int(ignore_value)},
                stop_gradient=True)


def is_empty(x, cond=None):
    """A bool [1]: whether x has no elements."""
    check_variable("is_empty", "x", x)
    helper = LayerHelper("is_empty")
    cond = cond or helper.create_variable_for_type_inference("bool", stop_gradient=True)
    helper.append_op("is_empty", {"X": x}, {"Out": cond})
    return cond
