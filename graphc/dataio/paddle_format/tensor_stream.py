"""Paddle's LoDTensor stream (lod_tensor.cc): uint32 version 0, LoD (uint64 levels, each a uint64
byte size + uint64 offsets), uint32 0, int32 size + TensorDesc protobuf, raw little-endian data."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np

from ...ir.errors import GraphcError
from .schema import messages

# VarType.Type number <-> NumPy dtype name of the element types graphc holds
DTYPE_NAMES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
               6: "float64", 20: "uint8", 21: "int8", 22: "bfloat16", 23: "complex64",
               24: "complex128"}
DTYPE_NUMBERS = {name: number for number, name in DTYPE_NAMES.items()}


class TensorStreamError(GraphcError):
    """Bytes that are not a well-formed LoDTensor stream (the caller names the file)."""


def _dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def dtype_number(dtype) -> int:
    name = np.dtype(dtype).name
    if name not in DTYPE_NUMBERS:
        raise TensorStreamError(f"element type {name} has no Paddle VarType number")
    return DTYPE_NUMBERS[name]


def encode(array, lod=()) -> bytes:
    """One variable in Paddle's stream: ``array`` (made C-contiguous, little-endian) with
    ``lod`` (a list of offset lists, Paddle's LoD; empty for a dense tensor)."""
    array = np.ascontiguousarray(array)
    desc = messages().TensorDesc(data_type=dtype_number(array.dtype), dims=list(array.shape))
    out = [struct.pack("<IQ", 0, len(lod))]
    for level in lod:
        out.append(struct.pack("<Q", 8 * len(level)))
        out.append(np.asarray(level, "<u8").tobytes())
    body = desc.SerializeToString()
    out.append(struct.pack("<Ii", 0, len(body)))
    out.append(body)
    out.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    return b"".join(out)


def _take(data: bytes, pos: int, size: int, what: str) -> tuple[bytes, int]:
    if size < 0 or pos + size > len(data):
        raise TensorStreamError(f"truncated: {what} needs {size} bytes at offset {pos}, "
                                f"{max(len(data) - pos, 0)} left")
    return data[pos:pos + size], pos + size


def decode(data: bytes, pos: int = 0) -> tuple[np.ndarray, list[list[int]], int]:
    """The tensor starting at ``pos``: (array, LoD, the offset after it)."""
    raw, pos = _take(data, pos, 12, "the header (version, LoD level count)")
    version, levels = struct.unpack("<IQ", raw)
    if version != 0:
        raise TensorStreamError(f"LoDTensor version {version} at offset {pos - 12} "
                                "(Paddle writes 0): not a Paddle tensor file, or corrupted")
    if levels > 16:
        raise TensorStreamError(f"{levels} LoD levels: corrupted")
    lod = []
    for _ in range(levels):
        raw, pos = _take(data, pos, 8, "a LoD level's size")
        (size,) = struct.unpack("<Q", raw)
        raw, pos = _take(data, pos, size, "a LoD level")
        if size % 8:
            raise TensorStreamError(f"a LoD level of {size} bytes (not whole uint64s)")
        lod.append(np.frombuffer(raw, "<u8").astype(np.int64).tolist())
    raw, pos = _take(data, pos, 8, "the tensor header")
    version, size = struct.unpack("<Ii", raw)
    if version != 0:
        raise TensorStreamError(f"tensor version {version} (Paddle writes 0): corrupted")
    raw, pos = _take(data, pos, size, "the TensorDesc")
    desc = messages().TensorDesc()
    from google.protobuf.message import DecodeError  # loaded by messages() (schema.py)
    try:
        desc.ParseFromString(raw)
    except DecodeError as exc:
        raise TensorStreamError(f"the TensorDesc does not parse ({exc})") from None
    if desc.data_type not in DTYPE_NAMES:
        raise TensorStreamError(f"element type {desc.data_type} (VarType.Type), which graphc "
                                "does not read")
    dims = list(desc.dims)
    if any(d < 0 for d in dims):
        raise TensorStreamError(f"negative dims {dims}: corrupted")
    dtype = _dtype(DTYPE_NAMES[desc.data_type]).newbyteorder("<")
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    raw, pos = _take(data, pos, count * dtype.itemsize, f"the data of a {dims} "
                     f"{dtype.name} tensor")
    array = np.frombuffer(raw, dtype).astype(dtype.newbyteorder("="))
    return array.reshape(dims), lod, pos
