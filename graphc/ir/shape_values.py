"""Shape tensors (Paddle's ShapeTensor / ShapeTensorList inputs): values computed from shapes
alone, folded with NumPy at build time where known and at trace time always (docs/lod.md).

XLA compiles static shapes, so ``fill_constant(shape=[layers.shape(x)[0], 8])`` works when
the shape value comes from ``shape`` ops through the ops of ``FOLDABLE`` only: each traced
step knows its inputs' shapes, so the backend folds the value on the host while tracing.
A shape computed from data values (a fed tensor, a parameter) is refused at build time.
"""

from __future__ import annotations

import numpy as np

from .errors import DtypeError, ShapeError

# ops whose output is a host value when their inputs are (``shape``: always); the backend
# evaluates them while tracing (backends/evaluate.py) and the builder here
FOLDABLE = frozenset({
    "shape", "slice", "strided_slice", "cast", "concat", "fill_constant", "assign",
    "assign_value", "scale", "reshape2", "squeeze2", "unsqueeze2", "stack",
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
    "elementwise_floordiv", "elementwise_mod", "elementwise_max", "elementwise_min",
})
_ARITH = {"elementwise_add": np.add, "elementwise_sub": np.subtract,
          "elementwise_mul": np.multiply, "elementwise_floordiv": np.floor_divide,
          "elementwise_div": np.floor_divide, "elementwise_mod": np.mod,
          "elementwise_max": np.maximum, "elementwise_min": np.minimum}


def _producer(block, name: str):
    for op in reversed(block.ops):  # the last writer before the op being built
        if name in op.output_arg_names:
            return op
    return None


def static_value(var, layer: str, arg: str):
    """``var``'s value as far as the build knows it: (int64 array, known mask), unknown
    entries (a ``-1`` batch dimension) masked off. Raises ShapeError naming ``layer`` when
    the value depends on data rather than shapes (it could not be folded when tracing)."""
    block = var.block
    op = _producer(block, var.name)
    if op is None or op.type not in FOLDABLE:
        what = "a feed or state variable" if op is None else f"op {op.type}"
        raise ShapeError(
            f"{layer}: argument {arg} ('{var.name}') is computed from data values ({what}), "
            "not from shapes; graphc compiles static shapes, so a shape tensor must come from "
            "layers.shape(...) through slice/cast/concat/fill_constant/elementwise arithmetic"
            " (or give Python ints)")
    if op.type == "shape":  # reads its input's shape, never its values
        dims = np.asarray(block.var(op.input("Input")[0]).shape, np.int64)
        return dims, dims >= 0
    ins = {slot: [static_value(block.var(n), layer, arg) for n in op.input(slot)]
           for slot in op.input_names}
    value, known = _fold(op, ins, var)
    return value.astype(np.int64), known


def _fold(op, ins, var):
    a = op.attrs
    if op.type == "fill_constant" and not op.input_arg_names:
        v = np.full(a["shape"], a["value"])
        return v, np.ones(v.shape, bool)
    if op.type == "assign_value":
        v = np.asarray(a.get("int64_values") or a.get("int32_values") or a.get("fp32_values")
                       or [], np.float64).reshape(a["shape"])
        return v, np.ones(v.shape, bool)
    if op.type in ("fill_constant",):
        return _unknown(var)
    (v, k), *rest = [x for slot in op.input_names for x in ins.get(slot, [])]
    if op.type in ("cast", "assign"):
        return v, k
    if op.type == "scale":
        bias = a["bias"] if a.get("bias_after_scale", True) else a["bias"] * a["scale"]
        return v * a["scale"] + bias, k
    if op.type in _ARITH:
        w, kw = rest[0]
        with np.errstate(all="ignore"):
            out = _ARITH[op.type](v, np.where(kw, w, 1))
        return out, k & kw
    if op.type in ("slice", "strided_slice"):
        index = [slice(None)] * v.ndim
        strides = a.get("strides") or [1] * len(a["axes"])
        for ax, s, e, st in zip(a["axes"], a["starts"], a["ends"], strides):
            index[ax % v.ndim] = slice(s, e, st)
        v, k = v[tuple(index)], k[tuple(index)]
    elif op.type == "concat":
        vals = [(v, k), *rest]
        v = np.concatenate([x for x, _ in vals], axis=a["axis"] % v.ndim)
        k = np.concatenate([m for _, m in vals], axis=a["axis"] % k.ndim)
    elif op.type == "stack":
        vals = [(v, k), *rest]
        v, k = np.stack([x for x, _ in vals], a["axis"]), np.stack([m for _, m in vals], a["axis"])
    shape = var.shape
    if shape is not None and all(d >= 0 for d in shape) and int(np.prod(shape)) == v.size:
        v, k = v.reshape(shape), k.reshape(shape)
    return v, k


def _unknown(var):
    shape = tuple(d if d >= 0 else 1 for d in var.shape or (1,))
    return np.zeros(shape, np.int64), np.zeros(shape, bool)


def shape_dims(shape, layer: str, arg: str = "shape"):
    """A layer's ``shape`` argument (ints, a 1-D int Variable, or a list mixing ints and
    [1] int Variables) as (build-time dims with -1 where unknown, the shape Variable or
    None, the Variables of the list or []) for Paddle's ShapeTensor / ShapeTensorList."""
    from .program import Variable

    if isinstance(shape, Variable):
        _check_int(shape, layer, arg)
        value, known = static_value(shape, layer, arg)
        if shape.shape is None or len(shape.shape) != 1 or shape.shape[0] < 0:
            raise ShapeError(f"{layer}: argument {arg} ('{shape.name}', shape "
                             f"{list(shape.shape or [])}) must be a 1-D tensor of known size")
        dims = np.where(known, value, -1).reshape(-1)
        return [int(d) for d in dims], shape, []
    dims, tensors = [], []
    for i, d in enumerate(shape):
        if isinstance(d, Variable):
            _check_int(d, layer, f"{arg}[{i}]")
            value, known = static_value(d, layer, f"{arg}[{i}]")
            if value.size != 1:
                raise ShapeError(f"{layer}: argument {arg}[{i}] ('{d.name}', shape "
                                 f"{list(d.shape)}) must hold one integer")
            dims.append(int(value.reshape(-1)[0]) if known.reshape(-1)[0] else -1)
            tensors.append(d)
        else:
            dims.append(int(d))
    return dims, None, tensors


def _check_int(var, layer: str, arg: str) -> None:
    if var.dtype not in ("int32", "int64"):
        # a ShapeError and, as Paddle raises for it, a TypeError
        raise DtypeError(f"{layer}: argument {arg} ('{var.name}') must be int32 or int64, "
                         f"got {var.dtype}")
