"""Tensor-array ops (Paddle's LoDTensorArray): write an element, read one, the length.

An array's type is ``array<dtype[capacity, *element]>``: XLA needs the capacity statically;
writing past it, or reading at or past the length, is refused when run (DataError)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import INT_DTYPES, TensorType, array_type, dims_compatible, types_compatible

# the capacity of an array nothing bounds (docs/control_flow.md)
DEFAULT_ARRAY_CAPACITY = 128


def _index(c: InferContext, slot: str = "I") -> None:
    i = c.x(slot)
    c.check(i.dtype in INT_DTYPES and i.numel() == 1 and not i.lod_level and not i.array,
            f"the index {slot} must be an integer tensor of one element, got {i}")


def _write(c: InferContext):
    _index(c)
    x = c.x("X")
    c.check(not (x.sparse or x.array),
            f"X must be a dense tensor or a LoD value (what graphc's arrays hold), got {x}")
    if c.has("Array"):
        a = c.x("Array")
        c.check(a.array, f"Array must be a tensor array, got {a}")
        # an array of LoD values holds LoD values of its level; a dense X of the same rows
        # is stored as that many one-row sequences (a mixed array, docs/control_flow.md)
        dense_into_lod = a.element_lod and not x.lod_level and x.rank == a.element.rank \
            and dims_compatible(x.shape[1:], a.element.shape[1:])
        c.check((types_compatible(a.element, x) or dense_into_lod) and a.dtype == x.dtype
                and (a.element_lod == x.lod_level or dense_into_lod),
                f"X is {x} but the array holds {a.element}: an array's elements share one type "
                "(dense rows and LoD values of the same rows may mix: the array then holds "
                "LoD values)")
        return {"Out": a}
    return {"Out": array_type(x, c["capacity"] or DEFAULT_ARRAY_CAPACITY)}


def _read(c: InferContext):
    _index(c)
    a = c.x("X")
    c.check(a.array, f"X must be a tensor array, got {a}")
    return {"Out": a.element}


def _length(c: InferContext):
    a = c.x("X")
    c.check(a.array, f"X must be a tensor array, got {a}")
    return {"Out": TensorType((1,), "int64")}


register("write_to_array", "X I Array?", "Out", {"capacity": ("int", 0)},
         infer=_write, lod_inputs=("X",), lod="aware",  # LoD elements (beam search)
         doc="Out = Array (or a new array of `capacity` zeros) with element I set "
             "to X; the length becomes max(length, I + 1)")


def _empty(c: InferContext):
    shape = list(c["shape"])
    if c.has("Input"):  # the element's first dimension is Input's (a batch size)
        x, i = c.x("Input"), c["input_dim_idx"]
        c.check(len(shape) >= 2 and 0 <= i < x.rank,
                f"with Input, shape must be [capacity, batch, ...] and input_dim_idx {i} a "
                f"dimension of Input {list(x.shape)}")
        if len(shape) >= 2 and 0 <= i < x.rank:
            shape[1] = x.shape[i]
    c.check(len(shape) >= 1 and all(d >= -1 for d in shape) and shape[0] >= 1,
            f"shape must be [capacity >= 1, *element dims (-1: known once written)], got "
            f"{c['shape']}")
    # arr2lod: an array of LoD values (a loop writes them), its buffers sized by the loop
    element = TensorType(tuple(shape[1:]), c["dtype"], False, c["element_lod"])
    return {"Out": array_type(element, shape[0])}


register("empty_array", "Input?", "Out",
         {"shape": "ints", "dtype": "dtype", "input_dim_idx": ("int", 0),
          "element_lod": ("int", 0)}, infer=_empty,
         traits=(NO_GRAD,), doc="a tensor array of shape[0] zero elements of shape[1:], "
                                "none written (length 0); with Input, the elements' first "
                                "dimension is Input's input_dim_idx one (a batch size); a "
                                "dimension still unknown (-1) is its first write's")


def _to_tensor(c: InferContext):
    a = c.x("X")
    c.check(a.array, f"X must be a tensor array, got {a}")
    e, cap, axis = a.element, a.shape[0], c["axis"]
    rank = e.rank + 1 if c["use_stack"] else e.rank
    c.check(-rank <= axis < rank, f"axis {axis} is out of range for {rank} dimensions")
    axis %= max(rank, 1)
    shape = list(e.shape)
    if c["use_stack"]:
        shape.insert(axis, cap)
    else:
        shape[axis] = -1 if shape[axis] < 0 else shape[axis] * cap
    return {"Out": TensorType(tuple(shape), a.dtype), "OutIndex": TensorType((cap,), "int32")}


register(
    "tensor_array_to_tensor", "X", "Out OutIndex", {"axis": ("int", 1),
                                                    "use_stack": ("bool", False)},
    infer=_to_tensor,
    doc="the array's capacity elements stacked (use_stack) or concatenated along axis, those "
        "past its length zeros (XLA's static shapes); OutIndex[i] = element i's size along "
        "axis (1 when stacked), 0 past the length")
register("read_from_array", "X I", "Out", infer=_read,
         doc="element I of the array X (I < its length)")
register("lod_array_length", "X", "Out", infer=_length, traits=(NO_GRAD,),
         doc="the number of elements written to the array X (one past the highest index)")
