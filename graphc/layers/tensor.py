"""Data declaration and tensor layers: data, fill_constant, cast, reshape, transpose,
concat, split, sums, assign, and the two on row-sparse values (merge, densify)."""

from __future__ import annotations

from ..ir.default_programs import default_main_program
from ..ir.errors import ArgumentAssertionError, ArgumentTypeError, ProgramError
from ..ir.program import Variable
from ..ir.types import normalize_dtype
from .helper import NUMERIC, LayerHelper, check_dtype, check_dtype_arg, check_type, check_variable

# Paddle 1.8's dtype lists: fill_constant's dtype, cast's input and output, assign's input
_FILL_DTYPES = ("bool", "float16", "float32", "float64", "int32", "int64")
_CAST_DTYPES = ("bool", "float16", "float32", "float64", "int32", "int64", "uint8")
_SUM_DTYPES = ("float32", "float64", "int32", "int64")


def _data_dims(name, shape, layer: str) -> list[int]:
    """The declared dims as ints (None -> -1); anything else is refused at the call site."""
    import numbers

    from ..ir.source import user_source  # local: keeps this shared module's imports as they are

    source = user_source()
    where = f"{layer} '{name}'" + (f" at {source}" if source else "")
    if shape is None or isinstance(shape, int | str) or getattr(shape, "__iter__", None) is None:
        # a TypeError, as Paddle 1.8's data layers check the shape's type
        raise ArgumentTypeError(f"{where}: shape must be a list such as [-1, 784], got "
                                f"{shape!r}")
    dims = []
    for d in shape:
        if d is None:
            dims.append(-1)
        elif isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise ProgramError(f"{where}: every dimension must be an integer (-1 or None for "
                               f"an unknown one), got {d!r} in shape {list(shape)!r}")
        else:
            dims.append(int(d))
    return dims


def declare_data(name: str, shape, dtype="float32", lod_level: int = 0,
                 stop_gradient: bool = True, layer: str = "data"):
    """Declare a fed input with its shape as given (``graphc.data`` / ``fluid.data``): the
    batch dimension is explicit, ``-1`` (or None) where unknown."""
    dims = _data_dims(name, shape, layer)
    if isinstance(lod_level, bool) or lod_level not in (0, 1, 2, 3):
        raise ProgramError(f"{layer} '{name}': lod_level={lod_level!r}; graphc takes LoD "
                           "levels 0 (dense), 1 (sequences), 2 (sequences of "
                           "sub-sequences) and 3 (one nesting more; only row-wise ops and "
                           "generate_mask_labels read it), see docs/lod.md")
    if lod_level and (not dims or dims[0] != -1):
        # a LoD value's first dimension counts the tokens of the whole batch
        raise ProgramError(f"{layer} '{name}': lod_level={lod_level} needs an unknown first "
                           f"dimension (the batch's token count, -1), got shape {dims}")
    block = default_main_program().global_block()
    if name in block.vars:
        # Paddle hands back the variable a name already has when the declaration agrees
        # (the book's word2vec declares its label twice); a different one is an error
        old = block.vars[name]
        if (tuple(old.shape), old.dtype, old.lod_level) == (tuple(dims), normalize_dtype(dtype),
                                                            lod_level) and old.is_data:
            return old
        raise ProgramError(f"{layer} '{name}' is already declared in this program as "
                           f"shape {list(old.shape)}, {old.dtype}, lod_level {old.lod_level}"
                           f"{'' if old.is_data else ' (not as data)'}; now asked for shape "
                           f"{dims}, {normalize_dtype(dtype)}, lod_level {lod_level}")
    return block.create_var(name, dims, normalize_dtype(dtype), is_data=True,
                            need_check_feed=True, stop_gradient=stop_gradient,
                            lod_level=lod_level)


def data(name: str, shape, append_batch_size=True, dtype="float32", lod_level: int = 0,
         type=None, stop_gradient: bool = True):
    """``fluid.layers.data`` (Fluid 1.x): ``shape`` is one sample's shape and -1 is prepended
    as the batch dimension, unless ``append_batch_size=False`` or a dimension is already
    unknown (-1 or None anywhere, as Paddle 1.8 decides). ``graphc.data`` takes the shape
    as given. A dtype given third (``data("x", [-1, 4], "int64")``, where Paddle's third
    parameter is ``append_batch_size``) is read as the dtype."""
    import builtins

    import numpy as np

    # a dtype in append_batch_size's place (``type`` here is Paddle's argument, not the builtin)
    if isinstance(append_batch_size, str | builtins.type | np.dtype):
        dtype, append_batch_size = append_batch_size, True
    dims = _data_dims(name, shape, "layers.data")
    if append_batch_size and all(d >= 0 for d in dims):
        dims = [-1, *dims]
    if type not in (None, "lod_tensor", "LOD_TENSOR"):
        raise ProgramError(f"layers.data '{name}': type={type!r}; only dense tensors "
                           "(LOD_TENSOR) can be fed")
    var = declare_data(name, dims, dtype, lod_level, stop_gradient, layer="layers.data")
    # Paddle 1.8 checks a feed's shape and dtype only for fluid.data; a layers.data feed
    # runs as fed (runtime/feed_shapes.py re-types the program for another shape)
    var.need_check_feed = False
    return var


def shape_args(layer: str, shape, slots=("ShapeTensor", "ShapeTensorList")):
    """A ``shape`` argument as (attr dims, op inputs). Ints give the attr alone; a 1-D int
    Variable, or a list holding [1] int Variables (``layers.shape(x)[0]``), becomes Paddle's
    ShapeTensor / ShapeTensorList input (ints of the list as fill_constant tensors, as
    Paddle builds them), with the attr holding what the build knows (-1 elsewhere). graphc
    compiles static shapes: the value must come from shapes (ir/shape_values.py), folded
    when the step is traced; one computed from data is a ShapeError naming ``layer``."""
    from ..ir.shape_values import shape_dims

    if not isinstance(shape, Variable) and not any(isinstance(d, Variable) for d in shape):
        return [int(d) for d in shape], {}
    dims, tensor, _ = shape_dims(shape, layer)
    if tensor is not None:
        return dims, {slots[0]: tensor}
    items = [d if isinstance(d, Variable) else fill_constant([1], "int32", int(d))
             for d in shape]
    return dims, {slots[1]: items}


def _token_count_of(dim):
    """The LoD value whose token count ``dim`` is (``layers.shape(x)[0]`` of a LoD ``x``),
    else None."""
    if not isinstance(dim, Variable):
        return None
    ops = dim.block.ops
    src = next((op for op in reversed(ops) if dim.name in op.output_arg_names), None)
    if src is None or src.type not in ("slice", "strided_slice") or \
            list(src.attrs.get("starts", ())) != [0] or list(src.attrs.get("ends", ())) != [1]:
        return None
    (shape_name,) = src.input("Input")
    shp = next((op for op in reversed(ops) if shape_name in op.output_arg_names), None)
    if shp is None or shp.type != "shape":
        return None
    x = dim.block.var(shp.input("Input")[0])
    return x if x.lod_level else None


def _check_fill_args(shape, dtype, out) -> str:
    """fill_constant's argument checks, in Paddle 1.8's order and with its error types."""
    import numbers
    dtype = check_dtype_arg("fill_constant", "dtype", dtype, _FILL_DTYPES)
    check_type("fill_constant", "shape", shape, (list, tuple, Variable),
               "a list, tuple or Variable")
    if out is not None:
        check_dtype("fill_constant", "out", out, (dtype,), written=True)
    if isinstance(shape, Variable):
        return dtype  # its dtype: shape_dims' DtypeError (a ShapeError and a TypeError)
    if not shape:
        raise ArgumentAssertionError("fill_constant: shape must not be empty (Paddle 1.8 "
                                     "asserts it)")
    for i, d in enumerate(shape):
        if isinstance(d, Variable):
            continue
        if isinstance(d, bool) or not isinstance(d, numbers.Real) or d != int(d):
            # an int-like float (3.0) passes, as it always did; 1.1 or a string does not
            raise ArgumentTypeError(f"fill_constant: shape[{i}] must be an int or an int "
                                    f"Variable, got {d!r}")
    return dtype


def fill_constant(shape, dtype, value, force_cpu: bool = False, out=None, name=None):
    dtype = _check_fill_args(shape, dtype, out)
    if isinstance(shape, list | tuple) and shape and out is None and \
            (lod := _token_count_of(shape[0])) is not None:
        # [shape(x)[0], ...] of a LoD x: one row per token of x, taking x's LoD (the token
        # count is data; XLA needs x's buffer, and the rows past the tokens are padding)
        from .manipulation import fill_constant_batch_size_like
        rest = [int(d) for d in shape[1:]]
        return fill_constant_batch_size_like(lod, [-1, *rest], dtype, value)
    shape, inputs = shape_args("fill_constant", shape)
    helper = LayerHelper("fill_constant", name)
    out = out or helper.create_variable_for_type_inference(normalize_dtype(dtype),
                                                           stop_gradient=True)
    helper.append_op("fill_constant", inputs, outputs={"Out": out},
                     attrs={"shape": shape, "dtype": normalize_dtype(dtype),
                            "value": float(value), "force_cpu": force_cpu})
    return out


def cast(x, dtype):
    check_dtype("cast", "x", x, _CAST_DTYPES)
    dtype = check_dtype_arg("cast", "dtype", dtype, _CAST_DTYPES)
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("cast", {"X": x}, {"Out": out}, {"in_dtype": x.dtype, "out_dtype": dtype})
    return out


def _with_xshape(op_type, x, attrs, act=None, name=None, inputs=None):
    check_variable(op_type.rstrip("2"), "x", x)
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    xshape = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op(op_type, {"X": x, **(inputs or {})}, {"Out": out, "XShape": xshape},
                     attrs)
    return helper.append_activation(out, act)


def reshape(x, shape, actual_shape=None, act=None, inplace: bool = False, name=None):
    """Reshape; 0 keeps the input's dimension, one -1 is inferred (Paddle rules). ``shape``
    may be (or hold) shape tensors, ``actual_shape`` a 1-D int tensor that wins over it, as
    in Paddle; both are folded when the step is traced (``shape_args``)."""
    check_dtype("reshape", "x", x, NUMERIC)
    check_type("reshape", "shape", shape, (list, tuple, Variable), "a list, tuple or Variable")
    if actual_shape is not None:
        check_type("reshape", "actual_shape", actual_shape, Variable, "a Variable or None")
    if not isinstance(shape, Variable):
        _check_reshape_list(x, shape)
    dims, inputs = shape_args("reshape", shape, ("Shape", "ShapeTensor"))
    if actual_shape is not None:
        from ..ir.shape_values import shape_dims
        dims, inputs = shape_dims(actual_shape, "reshape", "actual_shape")[0], {
            "Shape": actual_shape}
    return _with_xshape("reshape2", x, {"shape": dims}, act, name, inputs)


def _check_reshape_list(x, shape) -> None:
    """Paddle 1.8's asserts on a reshape shape list: one -1 at most, no other negative
    value, and a 0 (keep the input's dimension) only where the input has that dimension."""
    ints = [(i, int(d)) for i, d in enumerate(shape) if not isinstance(d, Variable)]
    if sum(d == -1 for _, d in ints) > 1:
        raise ArgumentAssertionError(f"reshape: shape {list(shape)} has more than one -1")
    for i, d in ints:
        if d < -1:
            raise ArgumentAssertionError(f"reshape: shape[{i}] is {d}; the only negative "
                                         "value a shape may hold is one -1")
        if d == 0 and i >= len(x.shape):
            raise ArgumentAssertionError(f"reshape: shape[{i}] is 0 (keep the input's "
                                         f"dimension {i}), but '{x.name}' has rank "
                                         f"{len(x.shape)}")


def transpose(x, perm, name=None):
    return _with_xshape("transpose2", x, {"axis": [int(p) for p in perm]}, name=name)


def concat(input, axis: int = 0, name=None):
    if not input:
        raise ProgramError("concat: input is empty")
    for x in input:
        check_variable("concat", "input", x)
    helper = LayerHelper("concat", name)
    out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("concat", {"X": list(input)}, {"Out": out}, {"axis": axis})
    return out


def split(input, num_or_sections, dim: int = -1, name=None):
    """Split along ``dim`` into ``num`` equal parts or the given section sizes."""
    check_variable("split", "input", input)
    dim = _static_int("split", "dim", dim)
    check_type("split", "num_or_sections", num_or_sections, (int, list, tuple),
               "an int, list or tuple")
    helper = LayerHelper("split", name)
    if isinstance(num_or_sections, int):
        n, attrs = num_or_sections, {"num": num_or_sections, "axis": dim}
    else:
        sections = [_static_int("split", f"num_or_sections[{i}]", s)
                    for i, s in enumerate(num_or_sections)]
        n, attrs = len(sections), {"sections": sections, "axis": dim}
    if n < 1:
        raise ProgramError(f"split: num_or_sections must give at least one part, got "
                           f"{num_or_sections!r}")
    outs = [helper.create_variable_for_type_inference(input.dtype) for _ in range(n)]
    helper.append_op("split", {"X": input}, {"Out": outs}, attrs)
    return outs


def _static_int(layer: str, arg: str, value) -> int:
    """An int argument Paddle 1.8 also takes as an int Variable (split's ``dim``, a section
    size): the Variable's value as the build folds it (a fill_constant, shape arithmetic);
    one computed from data is a ShapeError naming it (graphc compiles static shapes)."""
    if isinstance(value, Variable):
        from ..ir.shape_values import static_value
        check_dtype(layer, arg, value, ("int32", "int64"))
        v, known = static_value(value, layer, arg)
        if v.size != 1 or not known.all():
            raise ProgramError(f"{layer}: {arg} ('{value.name}') must hold one integer the "
                               "build can fold")
        return int(v.reshape(-1)[0])
    return int(check_type(layer, arg, value, int, "an int or an int Variable"))


def sums(input, out=None):
    check_type("sums", "input", input, (Variable, list, tuple), "a Variable, list or tuple")
    input = [input] if isinstance(input, Variable) else list(input)
    for v in input:
        check_dtype("sums", "input", v, _SUM_DTYPES)
    if out is not None:
        check_dtype("sums", "out", out, _SUM_DTYPES, written=True)
    helper = LayerHelper("sum")
    out = out or helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("sum", {"X": list(input)}, {"Out": out})
    return out


def assign(input, output=None):
    """output = input, a Variable or a numpy array (bool, float32, int32 or int64)."""
    if not isinstance(input, Variable):
        from .manipulation import assign_value
        return assign_value(input, output)
    helper = LayerHelper("assign")
    check_dtype("assign", "input", input, ("bool", *NUMERIC))
    output = output or helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("assign", {"X": input}, {"Out": output})
    return output


def merge_selected_rows(x, name=None):
    """A row-sparse value (an is_sparse embedding's gradient) with its repeated rows summed
    into one (unique rows ascending, then padding rows that keep the row count)."""
    return _from_selected_rows("merge_selected_rows", x, name)


def get_tensor_from_selected_rows(x, name=None):
    """The dense tensor a row-sparse value stands for (zeros outside its rows)."""
    return _from_selected_rows("get_tensor_from_selected_rows", x, name)


def _from_selected_rows(op_type: str, x, name):
    check_variable(op_type, "x", x)
    if not x.selected_rows:
        raise ProgramError(f"{op_type}: '{x.name}' is a dense tensor; it takes a row-sparse "
                           "value (SelectedRows), such as an is_sparse embedding's gradient")
    helper = LayerHelper(op_type, name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, {"X": x}, {"Out": out})
    return out
