"""Tensor manipulation ops with Paddle 1.8's names and slots: slice, squeeze2/unsqueeze2,
flatten2, expand, gather, scatter, stack/unstack, one_hot, where_index, shape, fill/range."""

from __future__ import annotations

import math

from ...ir.errors import ShapeError
from ...ir.lod_rules import keeps_token_rows
from ...ir.opdef import INITIALIZER, NO_GRAD, RANDOM, register
from ...ir.shapes import normalize_axis, prod_or_unknown
from ...ir.types import DTYPES, FLOAT_DTYPES, INT_DTYPES, TensorType


def _xshape(x: TensorType) -> TensorType:
    return TensorType((0,) + x.shape, x.dtype)


def _ranked(c, slot: str) -> TensorType:
    """An input indexed by axis: a scalar (rank 0) has none."""
    t = c.x(slot)
    c.check(t.rank >= 1, f"{slot} must have at least one dimension, got {list(t.shape)}")
    return t


def _int_input(c, slot: str) -> TensorType:
    t = c.x(slot)
    c.check(t.dtype in INT_DTYPES, f"{slot} must be an integer tensor, got {t.dtype}")
    return t


# -- slicing --------------------------------------------------------------------------------------
def slice_bounds(dim: int, start: int, end: int) -> tuple[int, int]:
    """Paddle's slice bounds: negative ends count from the back, both clamp to [0, dim]."""
    start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
    start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    return start, max(start, end)


def _check_axes_lists(c, x, names):
    axes = c["axes"]
    for name in names:
        c.check(len(c[name]) == len(axes),
                f"{name} {c[name]} must have one entry per axis in axes {axes}")
    normed = [normalize_axis(a, x.rank, "axes entry") for a in axes]
    c.check(len(set(normed)) == len(normed), f"axes {axes} repeat an axis")
    return normed


def _decrease(c, shape: list[int], normed_axes) -> tuple[int, ...]:
    dec = [normalize_axis(a, len(shape), "decrease_axis entry") for a in c["decrease_axis"]]
    for a in dec:
        c.check(a in normed_axes and shape[a] in (1, -1),
                f"decrease_axis {c['decrease_axis']} must name sliced axes of size 1")
    return tuple(d for i, d in enumerate(shape) if i not in dec) or (1,)


def _slice(c):
    x = _ranked(c, "Input")
    axes = _check_axes_lists(c, x, ("starts", "ends"))
    shape = list(x.shape)
    for a, s, e in zip(axes, c["starts"], c["ends"]):
        if shape[a] >= 0:  # an unknown dimension stays unknown (known at run time)
            lo, hi = slice_bounds(shape[a], s, e)
            shape[a] = hi - lo
    return {"Out": TensorType(_decrease(c, shape, axes), x.dtype)}


register("slice", "Input", "Out", {"axes": "ints", "starts": "ints", "ends": "ints",
                                   "decrease_axis": ("ints", [])}, infer=_slice,
         doc="Out = Input[starts:ends] along axes (negative bounds count from the end, "
             "clamped to the dimension); decrease_axis drops size-1 sliced axes")


def _strided_slice(c):
    x = _ranked(c, "Input")
    axes = _check_axes_lists(c, x, ("starts", "ends", "strides"))
    c.check(all(s != 0 for s in c["strides"]), f"strides {c['strides']} contain 0")
    shape = list(x.shape)
    for a, s, e, st in zip(axes, c["starts"], c["ends"], c["strides"]):
        if shape[a] >= 0:
            shape[a] = len(range(*slice(s, e, st).indices(shape[a])))
    return {"Out": TensorType(_decrease(c, shape, axes), x.dtype)}


register("strided_slice", "Input", "Out", {
    "axes": "ints", "starts": "ints", "ends": "ints", "strides": "ints",
    "decrease_axis": ("ints", []),
}, infer=_strided_slice, doc="Out = Input[starts:ends:strides] along axes (Python's rules)")


# -- reshaping with XShape ------------------------------------------------------------------------
def squeeze_shape(shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    """Paddle 1.8's squeeze: the listed axes (every size-1 axis when none are listed). A listed
    axis must have size 1; one of unknown size (-1) is taken to be 1, as Paddle does."""
    rank = len(shape)
    if axes:
        drop = {normalize_axis(a, rank, "axes entry") for a in axes}
        for a in sorted(drop):
            if shape[a] not in (1, -1):
                raise ShapeError(f"axes {list(axes)}: dimension {a} of {list(shape)} has size "
                                 f"{shape[a]}; only size-1 dimensions can be squeezed")
    else:
        drop = {i for i, d in enumerate(shape) if d == 1}
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: tuple[int, ...], axes: list[int]) -> tuple[int, ...]:
    """Paddle's unsqueeze: insert size-1 axes one after another; a negative axis counts in
    the shape as it is after the earlier insertions (-1 appends)."""
    out = list(shape)
    for a in axes:
        pos = normalize_axis(a, len(out) + 1, "axes entry")
        out.insert(pos, 1)
    return tuple(out)


def _squeeze2(c):
    x = _ranked(c, "X") if c["axes"] else c.x("X")
    return {"Out": TensorType(squeeze_shape(x.shape, c["axes"]) or (1,), x.dtype),
            "XShape": _xshape(x)}


def _unsqueeze2(c):
    x = c.x("X")
    c.check(bool(c["axes"]), "axes must name at least one axis to insert")
    return {"Out": TensorType(unsqueeze_shape(x.shape, c["axes"]), x.dtype),
            "XShape": _xshape(x)}


def _flatten2(c):
    x = c.x("X")
    axis = c["axis"]
    c.check(0 <= axis <= x.rank, f"axis {axis} must be in [0, {x.rank}] for rank {x.rank}")
    shape = (prod_or_unknown(x.shape[:axis]), prod_or_unknown(x.shape[axis:]))
    return {"Out": TensorType(shape, x.dtype), "XShape": _xshape(x)}


# on a LoD value: only after the token dimension (Out keeps X's LoD, XShape does not)
_KEEP_ROWS = {"lod_inputs": ("X",), "lod_outputs": {"Out": ("X",)},
              "lod_fixup": keeps_token_rows}
register("squeeze2", "X", "Out XShape?", {"axes": ("ints", [])}, infer=_squeeze2, **_KEEP_ROWS,
         doc="drop the listed size-1 axes (every size-1 axis when axes is empty)")
register("unsqueeze2", "X", "Out XShape?", {"axes": "ints"}, infer=_unsqueeze2, **_KEEP_ROWS,
         doc="insert size-1 axes, one after another")
register("flatten2", "X", "Out XShape?", {"axis": ("int", 1)}, infer=_flatten2, **_KEEP_ROWS,
         doc="Out = X as a matrix [prod(shape[:axis]), prod(shape[axis:])]")


def _shape(c):
    return {"Out": TensorType((c.x("Input").rank,), "int32")}


register("shape", "Input", "Out", infer=_shape, traits=(NO_GRAD,),
         lod_inputs=("Input",), lod="aware",
         doc="Out = Input's shape as an int32 vector (known at run time); of a LoD value, "
             "its tokens' shape: the first entry counts the tokens, a value computed from "
             "data")


# -- expanding, gathering, scattering -------------------------------------------------------------
def _expand(c):
    x, times = c.x("X"), c["expand_times"]
    if c.has("ExpandTimes") or c.has("expand_times_tensor"):  # folded when traced
        c.check(len(times) == x.rank, f"expand_times {times} must have one entry per "
                                      f"dimension of X {list(x.shape)}")
        shape = tuple(d * t if d >= 0 and t >= 1 else -1 for d, t in zip(x.shape, times))
        return {"Out": TensorType(shape, x.dtype)}
    c.check(len(times) == x.rank, f"expand_times {times} must have one entry per dimension "
                                  f"of X {list(x.shape)}")
    c.check(all(t >= 1 for t in times), f"expand_times {times} must be positive")
    shape = tuple(-1 if d < 0 else d * t for d, t in zip(x.shape, times))
    return {"Out": TensorType(shape, x.dtype)}


def _expand_lod(attrs, ins, levels, out):
    """Paddle's expand shares X's LoD when dim 0 is tiled once (each token's row grows
    alone); tiling the tokens themselves would tile graphc's padded token buffer too."""
    if ins.get("ExpandTimes") or ins.get("expand_times_tensor"):
        raise ShapeError("expand of a LoD value needs expand_times as a list of ints (dim 0 "
                         "must stay 1), not a tensor")
    if attrs["expand_times"][:1] != [1]:
        raise ShapeError(f"expand_times {list(attrs['expand_times'])} tiles the tokens of a "
                         "LoD value along dim 0; keep expand_times[0] == 1 (Paddle keeps the "
                         "LoD then) or repeat sequences with sequence_expand")
    return out


register("expand", "X ExpandTimes? expand_times_tensor*?", "Out", {"expand_times": "ints"},
         infer=_expand, lod_inputs=("X",), lod_fixup=_expand_lod,
         doc="Out = X tiled expand_times[i] times along each dimension i")


def _expand_as(c):
    x, target = c.x("X"), c.x("target_tensor")
    c.check(x.rank == target.rank, f"X {list(x.shape)} and target_tensor "
                                   f"{list(target.shape)} differ in rank")
    c.check(all(a < 0 or b < 0 or (b % a == 0 if a else b == 0)
                for a, b in zip(x.shape, target.shape)),
            f"target_tensor {list(target.shape)} is not a multiple of X {list(x.shape)}")
    return {"Out": TensorType(target.shape, x.dtype)}


register("expand_as", "X target_tensor", "Out", infer=_expand_as,
         doc="Out = X tiled to target_tensor's shape (each dimension a multiple of X's)")


def _index_vector(c, slot: str) -> int:
    """Length of a 1-D index, or of an [N, 1] one (Paddle accepts both)."""
    idx = _int_input(c, slot)
    c.check(idx.rank == 1 or (idx.rank == 2 and idx.shape[1] == 1),
            f"{slot} must be [N] or [N, 1], got {list(idx.shape)}")
    return idx.shape[0]


def _gather(c):
    x = c.x("X")
    return {"Out": TensorType((_index_vector(c, "Index"),) + x.shape[1:], x.dtype)}


register("gather", "X Index", "Out", {"overwrite": ("bool", True)}, infer=_gather,
         lod_inputs=("Index",), lod_outputs={"Out": ("Index",)},
         doc="Out = X[Index] along dim 0; overwrite picks how the gradient of a repeated "
             "index is formed (one of its rows, or their sum)")


def _gather_nd(c):
    x, idx = c.x("X"), _int_input(c, "Index")
    c.check(idx.rank >= 1, f"Index must have at least one dimension, got {list(idx.shape)}")
    depth = idx.shape[-1]
    c.check(0 <= depth <= x.rank,
            f"Index {list(idx.shape)}: its last dimension must be at most X's rank {x.rank}")
    return {"Out": TensorType(idx.shape[:-1] + x.shape[depth:], x.dtype)}


# a LoD Index ([T, depth]: layers.where's rows) gathers one row per token, so Out keeps its LoD
register("gather_nd", "X Index", "Out", infer=_gather_nd,
         lod_inputs=("Index",), lod_outputs={"Out": ("Index",)},
         doc="Out[i...] = X[Index[i...]] (the last dimension of Index indexes X's leading ones)")


def _scatter(c):
    x, upd = c.x("X"), c.x("Updates")
    n = _index_vector(c, "Ids")
    c.check(upd.dtype == x.dtype, f"Updates is {upd.dtype} but X is {x.dtype}")
    c.check(x.rank >= 1, f"X must have at least one dimension, got {list(x.shape)}")
    c.check(upd.rank == x.rank and all(a == b or a < 0 or b < 0 for a, b in zip(
        upd.shape[1:], x.shape[1:])) and (n < 0 or upd.shape[0] < 0 or n == upd.shape[0]),
        f"Updates {list(upd.shape)} must be [len(Ids)={n}] + X's {list(x.shape[1:])}")
    return {"Out": x}


register("scatter", "X Ids Updates", "Out", {"overwrite": ("bool", True)}, infer=_scatter,
         doc="Out = X with rows Ids replaced by Updates (overwrite) or zeroed then summed")


# -- stacking -------------------------------------------------------------------------------------
def _stack(c):
    xs = c.xs("X")
    first = xs[0]
    for t in xs:
        c.check(t.dtype == first.dtype, f"inputs mix {first.dtype} and {t.dtype}")
        c.check(t.rank == first.rank and all(
            a == b or a < 0 or b < 0 for a, b in zip(t.shape, first.shape)),
            f"inputs {list(first.shape)} and {list(t.shape)} differ")
    axis = normalize_axis(c["axis"], first.rank + 1)
    shape = list(first.shape)
    shape.insert(axis, len(xs))
    return {"Y": TensorType(tuple(shape), first.dtype)}


register("stack", "X*", "Y", {"axis": ("int", 0)}, infer=_stack,
         doc="Y = the inputs stacked along a new axis")


def _unstack(c):
    x = _ranked(c, "X")
    axis = normalize_axis(c["axis"], x.rank)
    c.check(x.shape[axis] >= 0, f"axis {axis} of X {list(x.shape)} must be known")
    c.check(c["num"] == x.shape[axis],
            f"num {c['num']} must equal dimension {axis} of X {list(x.shape)}")
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return {"Y": [TensorType(shape or (1,), x.dtype) for _ in range(c["num"])]}


register("unstack", "X", "Y*", {"axis": ("int", 0), "num": "int"}, infer=_unstack,
         doc="Y = X split into num tensors along axis, which is dropped")


# -- one_hot, where -------------------------------------------------------------------------------
def _one_hot(c):
    x = _int_input(c, "X")
    depth = c["depth"]
    c.check(depth >= 1, f"depth {depth} must be positive")
    c.check(c["dtype"] in FLOAT_DTYPES | INT_DTYPES, f"dtype {c['dtype']} is not numeric")
    if c.op_type == "one_hot":  # Fluid 1.x: the trailing dimension of 1 becomes depth
        c.check(x.rank >= 2 and x.shape[-1] in (1, -1),
                f"X must end in a dimension of 1 ([N, 1]), got {list(x.shape)}; "
                "one_hot_v2 (fluid.one_hot) appends the depth dimension instead")
        shape = x.shape[:-1] + (depth,)
    else:
        shape = x.shape + (depth,)
    return {"Out": TensorType(shape, c["dtype"])}


_ONE_HOT_ATTRS = {"depth": "int", "dtype": ("dtype", "float32"),
                  "allow_out_of_range": ("bool", False)}
# a LoD X is one-hot encoded token by token and Out keeps its LoD (Paddle shares X's LoD
# with Out; ELMo one-hots its LoD next-word labels)
register("one_hot", "X", "Out", _ONE_HOT_ATTRS, infer=_one_hot, traits=(NO_GRAD,),
         lod_inputs=("X",),
         doc="Out = one-hot rows of depth for ids X [..., 1]; out-of-range ids give zeros")
register("one_hot_v2", "X", "Out", _ONE_HOT_ATTRS, infer=_one_hot, traits=(NO_GRAD,),
         lod_inputs=("X",),
         doc="Out = one-hot vectors of depth appended to X's shape")


def _where_index(c):
    cond = c.x("Condition")
    size = c["size"]
    c.check(size >= -1, f"size {size} must be -1 (unbounded) or a row count")
    if size >= 0:
        return {"Out": TensorType((size, cond.rank), "int64")}
    # the true count depends on the data: one sequence in a buffer of Condition's size, its
    # length the count, so row-wise ops, LoD-aware reductions and fetches see only those rows
    c.check(cond.rank >= 1, f"Condition must have at least one dimension, got {cond}")
    return {"Out": TensorType((-1, cond.rank), "int64").with_lod(1)}


register("where_index", "Condition", "Out", {"size": ("int", -1)}, infer=_where_index,
         traits=(NO_GRAD,),
         doc="Out = coordinates of Condition's true (non-zero) elements, one row each: a "
             "one-sequence LoD value of the true count (size -1), or exactly size rows (the "
             "first ones, padded with rows of -1)")


# -- creation -------------------------------------------------------------------------------------
def _range(c):
    start, end, step = c["start"], c["end"], c["step"]
    c.check(step != 0, "step must not be 0")
    c.check(all(math.isfinite(v) for v in (start, end, step)),
            f"start {start}, end {end} and step {step} must be finite")
    c.check(c["dtype"] in DTYPES and c["dtype"] != "bool", f"dtype {c['dtype']}")
    n = max(0, math.ceil((end - start) / step))
    c.check(n < 2 ** 31, f"range of {n} elements is too long")
    return {"Out": TensorType((n,), c["dtype"])}


register("range", "", "Out", {"start": "float", "end": "float", "step": ("float", 1.0),
                              "dtype": ("dtype", "int64")},
         infer=_range, traits=(INITIALIZER, NO_GRAD),
         doc="Out = [start, start + step, ...) below end (numbers, not tensors)")
register("fill_any_like", "X", "Out", {"value": ("float", 0.0)},
         infer=lambda c: {"Out": c.x("X")}, traits=(NO_GRAD,),
         doc="Out = value in X's shape and dtype")


def _batch_size_like(c):
    x, shape = c.x("Input"), list(c["shape"])
    i, o = c["input_dim_idx"], c["output_dim_idx"]
    c.check(0 <= i < x.rank, f"input_dim_idx {i} out of range for Input {list(x.shape)}")
    c.check(0 <= o < len(shape), f"output_dim_idx {o} out of range for shape {shape}")
    shape[o] = x.shape[i]
    c.check(all(d >= 0 for j, d in enumerate(shape) if j != o),
            f"shape {c['shape']} must be known apart from output_dim_idx {o}")
    return {"Out": TensorType(tuple(shape), c["dtype"])}


_LIKE = {"shape": "ints", "dtype": ("dtype", "float32"), "input_dim_idx": ("int", 0),
         "output_dim_idx": ("int", 0)}
register("fill_constant_batch_size_like", "Input", "Out",
         {**_LIKE, "value": ("float", 0.0), "force_cpu": ("bool", False)},
         infer=_batch_size_like, traits=(NO_GRAD,), lod_inputs=("Input",),
         doc="Out = value in shape, whose output_dim_idx dimension is Input's input_dim_idx "
             "(of a LoD Input, one row per token: Out takes its LoD)")
register("uniform_random_batch_size_like", "Input", "Out",
         {**_LIKE, "min": ("float", -1.0), "max": ("float", 1.0), "seed": ("int", 0)},
         infer=_batch_size_like, traits=(RANDOM, NO_GRAD),
         doc="Out ~ U[min, max) in shape, with Input's batch size")



_VALUE_SLOTS = {"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values",
                "bool": "bool_values"}


def _assign_value(c):
    shape, dtype = tuple(c["shape"]), c["dtype"]
    c.check(dtype in _VALUE_SLOTS, f"dtype {dtype} must be one of {sorted(_VALUE_SLOTS)}")
    c.check(all(d >= 0 for d in shape), f"shape {list(shape)} must be fully known")
    given = {name: len(c[name]) for name in _VALUE_SLOTS.values() if c[name]}
    c.check(set(given) <= {_VALUE_SLOTS[dtype]},
            f"a {dtype} tensor takes its values from {_VALUE_SLOTS[dtype]}, got {sorted(given)}")
    n = given.get(_VALUE_SLOTS[dtype], 0)
    c.check(n == math.prod(shape), f"{n} values for shape {list(shape)}")
    return {"Out": TensorType(shape, dtype)}


register("assign_value", "", "Out", {
    "shape": "ints", "dtype": "dtype", "fp32_values": ("floats", []),
    "int32_values": ("ints", []), "int64_values": ("ints", []), "bool_values": ("ints", []),
}, infer=_assign_value, traits=(INITIALIZER, NO_GRAD),
    doc="Out = the constant held in the attribute of its dtype (assign of a numpy array)")
