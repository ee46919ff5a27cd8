"""Variables in Paddle's files: one LoDTensor stream each, or all in one file sorted by name
(save_combine); atomic writes read back before they count, reads checked before any load."""

from __future__ import annotations

import os

import numpy as np

from ...runtime import checkpoint
from ...runtime.checkpoint import CheckpointError
from . import tensor_stream
from .tensor_stream import TensorStreamError


def is_graphc_checkpoint(dirname: str, filename: str | None) -> bool:
    """Whether graphc's own format (a checkpoint directory with its manifest) is there."""
    where = dirname if filename is None else os.path.join(dirname, filename)
    return os.path.isfile(os.path.join(where, checkpoint.MANIFEST))


def _write_verified(path: str, data: bytes) -> None:
    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with open(tmp, "rb") as f:  # what the disk holds is what was meant
            if f.read() != data:
                raise OSError(f"read-back of '{path}' differs from what was written")
    try:
        checkpoint.atomic_write(path, write)
    except OSError as exc:
        raise CheckpointError(f"cannot write '{path}': {exc.strerror or exc}") from None


def write(arrays: dict, dirname: str, filename: str | None = None) -> None:
    """Write ``{name: array}`` to ``dirname`` (one file each) or to ``dirname/filename``
    (in sorted-name order, as Paddle's save_combine)."""
    try:
        streams = {n: tensor_stream.encode(np.asarray(a)) for n, a in arrays.items()}
    except TensorStreamError as exc:
        raise CheckpointError(f"cannot save in Paddle's format: {exc}") from None
    checkpoint.prepare_directory(dirname)
    if filename is not None:
        _write_verified(os.path.join(dirname, filename),
                        b"".join(streams[n] for n in sorted(streams)))
        return
    for name, data in streams.items():
        path = os.path.join(dirname, name)
        if os.path.dirname(name):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        _write_verified(path, data)


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"no file '{path}'") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read '{path}': {exc.strerror or exc}") from None


def _check(var, array, path: str):
    """``array`` as the program declares ``var`` (dtype exact, -1 dims match any size)."""
    shape = list(var.shape or ())
    if array.dtype.name != var.dtype:
        raise CheckpointError(f"'{path}': variable '{var.name}' is {array.dtype.name}"
                              f"{list(array.shape)} but the program declares {var.dtype}"
                              f"{shape}")
    if len(shape) != array.ndim or any(d >= 0 and d != s for d, s in zip(shape, array.shape)):
        raise CheckpointError(f"'{path}': variable '{var.name}' has shape "
                              f"{list(array.shape)} but the program declares {shape}")
    return array


def _decode(data: bytes, pos: int, path: str, name: str):
    try:
        return tensor_stream.decode(data, pos)
    except TensorStreamError as exc:
        raise CheckpointError(f"'{path}': variable '{name}' is not a Paddle tensor: "
                              f"{exc}") from None


def encode_combined(arrays: dict) -> bytes:
    """``{name: array}`` as one combined stream (sorted by name, Paddle's save_combine)."""
    try:
        return b"".join(tensor_stream.encode(np.asarray(arrays[n])) for n in sorted(arrays))
    except TensorStreamError as exc:
        raise CheckpointError(f"cannot save in Paddle's format: {exc}") from None


def read_combined(variables, data: bytes, path: str) -> dict:
    """``{name: array}`` for ``variables`` from a combined stream ``data`` (``path`` names
    it in errors), each checked against its variable; the stream must hold exactly them."""
    out, pos = {}, 0
    for var in sorted(variables, key=lambda v: v.name):
        if pos >= len(data):
            raise CheckpointError(f"'{path}' ends before variable '{var.name}' (it holds "
                                  f"fewer than the {len(variables)} variables asked for)")
        array, _, pos = _decode(data, pos, path, var.name)
        out[var.name] = _check(var, array, path)
    if pos != len(data):
        raise CheckpointError(f"'{path}' has {len(data) - pos} bytes after the "
                              f"{len(variables)} variables asked for (another variable "
                              "set, or corrupted)")
    return out


def read(variables, dirname: str, filename: str | None = None) -> dict:
    """``{name: array}`` for ``variables`` read from Paddle's files, every one checked
    against the program (CheckpointError names the file and variable)."""
    if not os.path.isdir(dirname):
        raise CheckpointError(f"no saved variables at '{dirname}' (not a directory)")
    out = {}
    if filename is not None:
        path = os.path.join(dirname, filename)
        return read_combined(variables, _read_file(path), path)
    for var in variables:
        path = os.path.join(dirname, var.name)
        data = _read_file(path)
        array, _, pos = _decode(data, 0, path, var.name)
        if pos != len(data):
            raise CheckpointError(f"'{path}': {len(data) - pos} bytes after variable "
                                  f"'{var.name}' (corrupted)")
        out[var.name] = _check(var, array, path)
    return out


def read_all(dirname: str) -> dict:
    """Every per-variable file under ``dirname`` (name = path relative to it), unchecked:
    Paddle's load_program_state of a save_vars directory."""
    out = {}
    for root, _, files in os.walk(dirname):
        for fname in sorted(files):
            if fname.startswith(checkpoint._TMP_PREFIX) or fname == "__model__":
                continue  # a save's leftover temporary; an inference model's program
            path = os.path.join(root, fname)
            name = os.path.relpath(path, dirname).replace(os.sep, "/")
            data = _read_file(path)
            array, _, pos = _decode(data, 0, path, name)
            if pos != len(data):
                raise CheckpointError(f"'{path}': {len(data) - pos} bytes after variable "
                                      f"'{name}' (not one Paddle tensor file)")
            out[name] = array
    return out
