"""Tensor-array ops (Paddle's LoDTensorArray): write an element, read one, the length.

An array's type is ``array<dtype[capacity, *element]>``: XLA needs the capacity statically;
writing past it, or reading at or past the length, is refused when run (DataError)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import INT_DTYPES, TensorType, array_type, types_compatible

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
        # an array of LoD values holds LoD values of its level: every element has a LoD
        c.check(types_compatible(a.element, x) and a.dtype == x.dtype
                and a.element_lod == x.lod_level,
                f"X is {x} but the array holds {a.element}: an array's elements share one type")
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
    shape = c["shape"]
    c.check(len(shape) >= 1 and all(d >= -1 for d in shape) and shape[0] >= 1,
            f"shape must be [capacity >= 1, *element dims (-1: known once written)], got "
            f"{shape}")
    return {"Out": array_type(TensorType(tuple(shape[1:]), c["dtype"]), shape[0])}


register("empty_array", "", "Out", {"shape": "ints", "dtype": "dtype"}, infer=_empty,
         traits=(NO_GRAD,), doc="a tensor array of shape[0] zero elements of shape[1:], "
                                "none written (length 0); an unknown (-1) element dimension "
                                "is taken from the first write (docs/control_flow.md)")
register("read_from_array", "X I", "Out", infer=_read,
                 doc="element I of the array X (I < its length)")
register("lod_array_length", "X", "Out", infer=_length, traits=(NO_GRAD,),
         doc="the number of elements written to the array X (one past the highest index)")
