"""Paddle 1.x's LoDTensor file format (what fluid.io.save_vars and the save op write), read
and written with NumPy: the load op's host side."""

from __future__ import annotations

import struct

import numpy as np

from ...ir.errors import GraphcError

# VarType.Type codes of framework.proto for the tensor dtypes
_CODES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
          6: "float64", 20: "uint8", 21: "int8"}
_DTYPE_CODES = {v: k for k, v in _CODES.items()}


class PaddleTensorFileError(GraphcError):
    """A file is not one LoDTensor in Paddle's format (or is truncated)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf):
            raise PaddleTensorFileError("truncated TensorDesc")
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def _tensor_desc(buf: bytes) -> tuple[str, list[int]]:
    """data_type (field 1) and dims (field 2, packed or not) of a TensorDesc message."""
    code, dims, i = None, [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            if field == 1:
                code = value
            elif field == 2:
                dims.append(value - (1 << 64) if value >> 63 else value)
        elif wire == 2:
            size, i = _varint(buf, i)
            if field == 2:
                j = i
                while j < i + size:
                    value, j = _varint(buf, j)
                    dims.append(value - (1 << 64) if value >> 63 else value)
            i += size
        else:
            raise PaddleTensorFileError(f"unexpected wire type {wire} in TensorDesc")
    if code not in _CODES:
        raise PaddleTensorFileError(f"unsupported tensor data type code {code}")
    return _CODES[code], dims


def _read_header(f, path: str):
    def take(fmt):
        size = struct.calcsize(fmt)
        raw = f.read(size)
        if len(raw) != size:
            raise PaddleTensorFileError(f"'{path}' is truncated")
        return struct.unpack(fmt, raw)[0]

    if take("<I") != 0:
        raise PaddleTensorFileError(f"'{path}': unsupported LoDTensor version")
    lod = []
    for _ in range(take("<Q")):
        size = take("<Q")
        lod.append(list(np.frombuffer(f.read(size), "<u8").astype(np.int64)))
    if take("<I") != 0:
        raise PaddleTensorFileError(f"'{path}': unsupported Tensor version")
    desc = f.read(take("<i"))
    dtype, dims = _tensor_desc(desc)
    return dtype, dims, lod


def read_tensor_header(path: str) -> tuple[str, list[int]]:
    """(dtype, shape) of the LoDTensor file ``path``, without reading its data."""
    with _open(path) as f:
        dtype, dims, _ = _read_header(f, path)
    return dtype, dims


def read_lod_tensor(path: str) -> tuple[np.ndarray, list[list[int]]]:
    """(array, LoD offsets per level) of the LoDTensor file ``path``."""
    with _open(path) as f:
        dtype, dims, lod = _read_header(f, path)
        count = int(np.prod(dims)) if dims else 1
        raw = f.read(count * np.dtype(dtype).itemsize)
    if len(raw) != count * np.dtype(dtype).itemsize:
        raise PaddleTensorFileError(f"'{path}' is truncated: {dims} {dtype} needs "
                                    f"{count * np.dtype(dtype).itemsize} bytes")
    return np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")).reshape(dims).copy(), lod


def write_lod_tensor(path: str, array, lod=()) -> None:
    """Write ``array`` (and LoD offsets per level) as Paddle's save op does."""
    array = np.ascontiguousarray(array)
    dtype = str(array.dtype)
    if dtype not in _DTYPE_CODES:
        raise PaddleTensorFileError(f"cannot write a {dtype} tensor in Paddle's format")
    desc = bytes([0x08]) + _encode(_DTYPE_CODES[dtype])
    for d in array.shape:
        desc += bytes([0x10]) + _encode(d)
    with open(path, "wb") as f:
        f.write(struct.pack("<IQ", 0, len(lod)))
        for level in lod:
            f.write(struct.pack("<Q", 8 * len(level)))
            f.write(np.asarray(level, "<u8").tobytes())
        f.write(struct.pack("<Ii", 0, len(desc)) + desc)
        f.write(array.astype(array.dtype.newbyteorder("<")).tobytes())


def _encode(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _open(path: str):
    try:
        return open(path, "rb")
    except OSError as exc:
        raise PaddleTensorFileError(f"cannot read tensor file '{path}': "
                                    f"{exc.strerror or exc}") from None
