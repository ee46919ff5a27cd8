"""Dtypes and tensor types of the IR: canonical names, short names, printing.

A TensorType is a shape (``-1`` for an unknown batch dimension) and a dtype name.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .errors import ShapeError

# canonical name -> short name used by the textual IR (jaxpr style)
_SHORT = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "bool",
}
_FROM_SHORT = {v: k for k, v in _SHORT.items()}
DTYPES = tuple(_SHORT)
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8"})
_ALIASES = {"fp16": "float16", "fp32": "float32", "fp64": "float64", "bf16": "bfloat16",
            "float": "float32", "double": "float64", "int": "int32", "long": "int64"}


def normalize_dtype(dtype) -> str:
    """Return the canonical dtype name for a string, short name or numpy dtype."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, _FROM_SHORT.get(dtype, dtype))
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in _SHORT:
        raise ShapeError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def short_dtype(dtype: str) -> str:
    return _SHORT[dtype]


def dtype_from_short(short: str) -> str:
    if short not in _FROM_SHORT:
        raise ShapeError(f"unknown dtype {short!r}; expected one of {', '.join(_FROM_SHORT)}")
    return _FROM_SHORT[short]


class TensorType(NamedTuple):
    """Static type of a value: shape (``-1`` = unknown) and canonical dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{_SHORT[self.dtype]}[{','.join(map(str, self.shape))}]"

    @property
    def rank(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        """Number of elements, or -1 when a dimension is unknown."""
        return -1 if any(d < 0 for d in self.shape) else math.prod(self.shape)


def dims_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Same rank and every dimension equal or unknown (-1) on either side."""
    if a == b:  # the common case, and cheaper than the loop
        return True
    return len(a) == len(b) and all(x == y or x < 0 or y < 0 for x, y in zip(a, b))


def normalize_shape(shape) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"shape must be a sequence of ints, got {shape!r}") from exc
    for d in dims:
        if d < -1:
            raise ShapeError(f"shape {list(dims)} has a dimension below -1")
    return dims
