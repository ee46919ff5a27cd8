"""Dtypes and tensor types of the IR: canonical names, short names, printing.

A TensorType is a shape (``-1`` for an unknown batch dimension), a dtype name, whether
the value is row-sparse (Paddle's SelectedRows) rather than dense, its LoD level, and
whether it is a tensor array (Paddle's LoDTensorArray, docs/control_flow.md).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .errors import DtypeError, ShapeError

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
        raise DtypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def short_dtype(dtype: str) -> str:
    return _SHORT[dtype]


def dtype_from_short(short: str) -> str:
    if short not in _FROM_SHORT:
        raise ShapeError(f"unknown dtype {short!r}; expected one of {', '.join(_FROM_SHORT)}")
    return _FROM_SHORT[short]


# Row indices of a row-sparse value are int32: a table must have fewer than 2**31 - 1 rows
# (the height itself marks padding, see TensorType), and int32 halves what data-parallel
# replicas exchange compared with int64.
ROWS_DTYPE = "int32"
MAX_SPARSE_HEIGHT = 2 ** 31 - 2
# LoD (variable-length sequences, docs/lod.md): level 1 = sequences of tokens, level 2 =
# sequences of sub-sequences of tokens, level 3 one nesting more (generate_mask_labels'
# polygons: image -> object -> polygon -> points). Row-wise ops take every level; an op that
# reads the LoD itself takes at most AWARE_LOD_LEVEL unless it opts in (register's
# max_lod_level): those were written for two levels.
MAX_LOD_LEVEL = 3
AWARE_LOD_LEVEL = 2


class TensorType(NamedTuple):
    """Static type of a value: shape (``-1`` = unknown), canonical dtype name and layout.

    ``sparse`` is False for a dense tensor. A *row-sparse* value (Paddle's SelectedRows)
    stands for the dense tensor ``shape`` (``shape[0]`` is its height) and holds some of its
    rows: int32 row indices and a values tensor of shape ``(n, *shape[1:])`` in ``dtype``.
    As in Paddle, ``n`` is not part of the static type: the step knows it when it runs (one
    row per looked-up id). Rows may repeat (their values add up); a row index equal to the
    height is padding (its values are zero and ignored).

    ``lod_level`` > 0 marks a LoD value (Paddle's LoDTensor with a LoD, docs/lod.md): a
    ragged batch of ``lod_level``-nested sequences whose tokens are stacked along dim 0, so
    ``shape[0]`` counts tokens (-1: known when run). Printed ``lod1<f32[-1,8]>``.

    ``array`` marks a tensor array (Paddle's LoDTensorArray): ``shape[0]`` is its capacity
    (a static bound: XLA needs one) and ``shape[1:]`` each element's shape; how many
    elements are written is known when run. Printed ``array<f32[16,4,8]>``.
    """

    shape: tuple[int, ...]
    dtype: str
    sparse: bool = False
    lod_level: int = 0
    array: bool = False
    # a tensor array of LoD values (beam search's per-step picks): its elements' LoD level;
    # the array itself is no LoD value (lod_level 0), so LoD checks pass it as any array
    element_lod: int = 0

    def __str__(self) -> str:
        dense = f"{_SHORT[self.dtype]}[{','.join(map(str, self.shape))}]"
        if self.array:
            inner = f"lod{self.element_lod}<{dense}>" if self.element_lod else dense
            return f"array<{inner}>"
        if self.lod_level:
            return f"lod{self.lod_level}<{dense}>"
        return f"selected_rows<{dense}>" if self.sparse else dense

    def with_lod(self, lod_level: int) -> TensorType:
        """The same type at another LoD level (0: the dense type of its packed tokens)."""
        return self if lod_level == self.lod_level else TensorType(
            self.shape, self.dtype, self.sparse, lod_level)

    @property
    def element(self) -> TensorType:
        """A tensor array's element type."""
        return TensorType(self.shape[1:], self.dtype, False, self.element_lod)

    @property
    def capacity(self) -> int:
        """A tensor array's capacity: the most elements it can hold."""
        return self.shape[0]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def value_shape(self) -> tuple[int, ...]:
        """The shape of the array holding the data: ``shape`` for a dense tensor, the
        ``[-1, *shape[1:]]`` values of a row-sparse one (the row count is known when run)."""
        return (-1, *self.shape[1:]) if self.sparse else self.shape

    def dense(self) -> TensorType:
        """The dense tensor type a row-sparse value stands for (itself when dense)."""
        return TensorType(self.shape, self.dtype, False, self.lod_level) if self.sparse else self

    def numel(self) -> int:
        """Number of elements held, or -1 when unknown (always, for a row-sparse value)."""
        shape = self.value_shape
        return -1 if any(d < 0 for d in shape) else math.prod(shape)


def sparse_type(shape, dtype: str) -> TensorType:
    """The row-sparse TensorType of rows of a dense ``shape`` (fully known, height first)."""
    shape = tuple(shape)
    if len(shape) < 1 or any(d < 0 for d in shape):
        raise ShapeError(f"a row-sparse value needs a fully known dense shape, got {list(shape)}")
    if shape[0] > MAX_SPARSE_HEIGHT:
        raise ShapeError(f"a row-sparse value's height must be below 2**31 - 1, got {shape[0]}")
    return TensorType(shape, dtype, True)


def array_type(element: TensorType, capacity: int) -> TensorType:
    """The type of a tensor array of ``capacity`` elements of the ``element`` type (a dense
    tensor, or a LoD value: then every element has a LoD of that level)."""
    if element.sparse or element.array:
        raise ShapeError(f"a tensor array holds dense tensors or LoD values, not {element}")
    if not (isinstance(capacity, int) and capacity >= 1):
        raise ShapeError(f"a tensor array's capacity must be a positive int, got {capacity!r}")
    return TensorType((capacity, *element.shape), element.dtype, array=True,
                      element_lod=element.lod_level)


def types_compatible(a: TensorType, b: TensorType) -> bool:
    """Same dtype and layout, and every dimension equal or unknown on either side: what the
    verifier demands of a declared type against the inferred one."""
    if a == b:
        return True
    return a.dtype == b.dtype and a.sparse == b.sparse and a.lod_level == b.lod_level and \
        a.array == b.array and a.element_lod == b.element_lod and \
        dims_compatible(a.shape, b.shape)


def lod_type(shape, dtype: str, lod_level: int) -> TensorType:
    """The TensorType of a LoD value: ``shape[0]`` counts tokens (-1 when fed)."""
    shape = tuple(shape)
    if not (isinstance(lod_level, int) and 0 <= lod_level <= MAX_LOD_LEVEL):
        raise ShapeError(f"lod_level must be 0 to {MAX_LOD_LEVEL} (graphc's LoD levels), got "
                         f"{lod_level!r}")
    if lod_level and not shape:
        raise ShapeError("a LoD value needs a token dimension: its shape cannot be a scalar")
    return TensorType(shape, dtype, False, lod_level)


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
