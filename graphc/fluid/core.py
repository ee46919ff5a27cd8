"""``fluid.core``: the names Fluid scripts take from Paddle's C++ core (places, Scope,
LoDTensor, VarDesc.VarType dtypes, EOFException), backed by graphc's runtime."""

from __future__ import annotations

import jax
import numpy as np

from .. import io as _io
from ..ir.errors import GraphcError
from ..ir.types import normalize_dtype
from ..runtime.places import CPUPlace, CUDAPlace, Place, is_compiled_with_cuda
from ..runtime.scope import Scope
from ._missing import missing

__all__ = ["CPUPlace", "CUDAPlace", "EOFException", "LoDError", "LoDTensor", "Place", "Scope",
           "VarDesc", "get_cuda_device_count", "is_compiled_with_cuda"]


class LoDError(GraphcError):
    """A LoD (level-of-detail, ragged sequence) feature was asked for; graphc has none yet."""


# The DataLoader's end-of-epoch signal (``except fluid.core.EOFException: loader.reset()``).
# graphc.io owns it where it defines one, so both spellings catch the same exception.
if hasattr(_io, "EOFException"):
    EOFException = _io.EOFException
else:
    class EOFException(GraphcError):
        """A non-iterable DataLoader (``iterable=False``) ran out of batches."""


def get_cuda_device_count() -> int:
    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


def is_compiled_with_mkldnn() -> bool:
    return False


class VarDesc:
    """``core.VarDesc.VarType.FP32`` ... : each dtype is graphc's dtype name, so
    ``var.dtype == core.VarDesc.VarType.FP32`` holds as it does in Paddle."""

    class VarType:
        BOOL = "bool"
        INT8 = "int8"
        UINT8 = "uint8"
        INT16 = "int16"
        INT32 = "int32"
        INT64 = "int64"
        FP16 = "float16"
        BF16 = "bfloat16"
        FP32 = "float32"
        FP64 = "float64"
        # variable kinds: graphc feeds dense tensors; row-sparse gradients are SELECTED_ROWS
        LOD_TENSOR = "lod_tensor"
        SELECTED_ROWS = "selected_rows"
        LOD_TENSOR_ARRAY = "lod_tensor_array"
        FEED_MINIBATCH = "feed_minibatch"
        FETCH_LIST = "fetch_list"
        STEP_SCOPES = "step_scopes"
        READER = "reader"
        RAW = "raw"


class LoDTensor:
    """A host tensor as Fluid scripts build feeds: ``t = LoDTensor(); t.set(array, place)``,
    ``np.array(t)``, ``t.shape()``. It feeds like the array it holds. LoD (sequence
    lengths) is not supported yet: those methods raise LoDError."""

    def __init__(self, array=None):
        self._array = None if array is None else np.asarray(array)

    def set(self, array, place=None) -> None:
        if place is not None and not isinstance(place, Place):
            raise GraphcError(f"LoDTensor.set: place must be a CPUPlace/CUDAPlace, got "
                              f"{type(place).__name__}")
        self._array = np.array(array)

    def _value(self) -> np.ndarray:
        if self._array is None:
            raise GraphcError("LoDTensor holds no value yet; call t.set(array, place) first")
        return self._array

    def __array__(self, dtype=None, copy=None):
        arr = self._value()
        return arr.astype(dtype) if dtype is not None else arr

    def shape(self) -> list[int]:
        return list(self._value().shape)

    def _dtype(self):
        return normalize_dtype(self._value().dtype)

    def numpy(self) -> np.ndarray:
        return self._value()

    def _lod(self, what: str):
        raise LoDError(f"LoDTensor.{what}: LoD (ragged sequences) is not supported yet "
                       "(graphc's LoD issue); pad sequences to a fixed length and feed a "
                       "dense array")

    def set_lod(self, lod):
        self._lod("set_lod")

    def set_recursive_sequence_lengths(self, lengths):
        self._lod("set_recursive_sequence_lengths")

    def lod(self):
        return []  # a dense tensor: no levels

    def recursive_sequence_lengths(self):
        return []

    def has_valid_recursive_sequence_lengths(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"LoDTensor({self._array!r})"


def create_lod_tensor(data, recursive_seq_lens, place) -> LoDTensor:
    """``fluid.create_lod_tensor``: a dense tensor when ``recursive_seq_lens`` is empty;
    sequence lengths need LoD, which is not supported yet (LoDError)."""
    if recursive_seq_lens:
        raise LoDError(f"create_lod_tensor: recursive_seq_lens={recursive_seq_lens!r} asks for "
                       "LoD (ragged sequences), which is not supported yet (graphc's LoD "
                       "issue); pad sequences to a fixed length and feed a dense array")
    tensor = LoDTensor()
    tensor.set(np.asarray(data.__array__() if isinstance(data, LoDTensor) else data), place)
    return tensor


def __getattr__(name: str):
    raise missing(__name__, name)
