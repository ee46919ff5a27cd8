"""Variable indexing (``x[:, 1:3]``, ``x[::-1]``, ``layers.shape(x)[0]``) and ``astype``, as
Paddle patches them onto Variable: ``slice`` ops, ``strided_slice`` where a step is not 1, and
``gather`` for a first index that is an integer Variable of one element (``x[i]``: a row).

An integer index drops its dimension (``decrease_axis``); when every dimension is dropped the
result keeps shape ``[1]``, as Paddle's slice ops do. Gradients are the slice ops' own.
"""

from __future__ import annotations

import math

from ..ir.errors import ProgramError, ShapeError
from ..ir.program import Variable
from .helper import LayerHelper

# Paddle's stand-ins for an open slice end: far beyond any dimension, clamped by the ops
_END, _BEFORE_START = 2 ** 31 - 1, -(2 ** 31) + 1


def _index(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, Variable):
            raise ProgramError(f"indexing '{what}' with the Variable '{value.name}' is "
                               "supported as the first index only (one integer element: a "
                               "row); a Variable slice bound would make the result's shape "
                               "depend on data: use layers.gather for data-dependent rows")
        try:
            return int(value.__index__())
        except (AttributeError, TypeError):
            raise ProgramError(f"'{what}' index {value!r} is not an int or a slice of ints") \
                from None
    return value


def _axis_bounds(var: Variable, axis: int, item):
    """(start, end, step, decrease) for one axis, or None when the axis is taken whole."""
    if isinstance(item, slice):
        if item.start is None and item.stop is None and item.step in (None, 1):
            return None
        step = 1 if item.step is None else _index(item.step, var.name)
        if step == 0:
            raise ProgramError(f"'{var.name}'[...]: slice step cannot be zero")
        start = item.start if item.start is not None else (0 if step > 0 else -1)
        stop = item.stop if item.stop is not None else (_END if step > 0 else _BEFORE_START)
        return _index(start, var.name), _index(stop, var.name), step, False
    i = _index(item, var.name)
    size = var.shape[axis]
    if size >= 0 and not -size <= i < size:
        raise ShapeError(f"'{var.name}' (shape {list(var.shape)}): index {i} is out of range "
                         f"for dimension {axis} of size {size}")
    return i, (_END if i == -1 else i + 1), 1, True


def getitem(var: Variable, item):
    """``var[item]`` for ints and slices (Python's rules, negative bounds and steps)."""
    items = item if isinstance(item, tuple) else (item,)
    if any(it is Ellipsis or it is None for it in items):
        raise ProgramError(f"'{var.name}'[...]: Ellipsis and None (new axis) indices are not "
                           "supported, as in Paddle 1.8; use layers.unsqueeze for a new axis")
    if var.shape is None:
        raise ProgramError(f"'{var.name}' has no shape yet; it cannot be indexed")
    if len(items) > len(var.shape):
        raise ShapeError(f"'{var.name}' (shape {list(var.shape)}) has {len(var.shape)} "
                         f"dimensions, indexed with {len(items)}")
    if isinstance(items[0], Variable):
        row = _row(var, items[0])
        return getitem(row, items[1:]) if len(items) > 1 else row
    axes, starts, ends, strides, decrease = [], [], [], [], []
    for axis, it in enumerate(items):
        bounds = _axis_bounds(var, axis, it)
        if bounds is None:
            continue
        start, end, step, drop = bounds
        axes.append(axis)
        starts.append(start)
        ends.append(end)
        strides.append(step)
        if drop:
            decrease.append(axis)
    if not axes:
        return var
    op_type = "slice" if all(s == 1 for s in strides) else "strided_slice"
    attrs = {"axes": axes, "starts": starts, "ends": ends, "decrease_axis": decrease}
    if op_type == "strided_slice":
        attrs["strides"] = strides
    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(var.dtype, var.stop_gradient)
    helper.append_op(op_type, {"Input": var}, {"Out": out}, attrs)
    return out


def _row(var: Variable, index: Variable) -> Variable:
    """``var[index]`` for an integer Variable of one element: the row it names (a negative
    one counts from the end), with dimension 0 dropped (shape ``[1]`` for a 1-D ``var``)."""
    from .logic import less_than
    from .manipulation import gather, shape, squeeze
    from .math import elementwise_add, elementwise_mul
    from .tensor import cast, fill_constant, reshape
    if index.dtype not in ("int32", "int64") or index.shape is None or \
            any(d < 0 for d in index.shape) or math.prod(index.shape) != 1:
        raise ProgramError(f"'{var.name}'[{index.name}]: a Variable index must be an integer "
                           f"tensor of one element (a row), got {index.dtype} "
                           f"{list(index.shape or ())}; use layers.gather for several rows")
    idx = reshape(index, [1])
    size = var.shape[0]
    if size >= 0:
        size = fill_constant([1], index.dtype, size)
    else:
        size = cast(getitem(shape(var), slice(0, 1)), index.dtype)
    # Python's rule for a negative index: add the dimension's size (gather checks the range)
    negative = cast(less_than(idx, fill_constant([1], index.dtype, 0)),
                           index.dtype)
    idx = elementwise_add(idx, elementwise_mul(negative, size))
    out = gather(var, idx)
    return out if len(var.shape) == 1 else squeeze(out, [0])


def astype(self: Variable, dtype):
    """``self`` cast to ``dtype`` (Paddle 1.8's ``Variable.astype``)."""
    from .tensor import cast
    return cast(self, dtype)


def to_string(self: Variable, throw_on_error, with_details=False) -> str:
    """The variable described as text (with_details adds its flags)."""
    if not with_details:
        return f"{self.name}: {self.dtype}{list(self.shape or ())}"
    return repr(self) + f" lod_level={self.lod_level} persistable={self.persistable}"


def _dygraph_only(name: str):
    def method(self, *args, **kwargs):
        # Paddle 1.8 refuses these on a static-graph Variable too (they read eager values)
        raise ProgramError(f"Variable.{name} works only in dygraph mode, which graphc does not "
                           f"have; in a static program fetch '{self.name}' (or its @GRAD) "
                           "with Executor.run")
    method.__name__ = name
    return method


_DYGRAPH_ONLY = ("backward", "clear_gradient", "detach", "gradient", "numpy", "set_value")


def patch_indexing() -> None:
    Variable.__getitem__ = getitem
    # __getitem__ alone would make iter(var) walk indices 0, 1, ... (forever for a -1 dim)
    # and isinstance checks for sequences ambiguous: a Variable stays non-iterable
    Variable.__iter__ = None
    Variable.astype = astype
    Variable.to_string = to_string
    for name in _DYGRAPH_ONLY:
        setattr(Variable, name, _dygraph_only(name))
