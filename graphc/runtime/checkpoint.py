"""Checkpoints of a program's persistable variables: one safetensors file (no pickle) plus
a readable manifest. Written to a temporary file and renamed; loads are all-or-nothing."""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from ..ir.errors import GraphcError
from ..ir.program import Program
from .scope import Scope, global_scope

TENSORS = "persistables.safetensors"
MANIFEST = "manifest.json"
FORMAT = "graphc-checkpoint/1"


class CheckpointError(GraphcError):
    """A checkpoint is missing, truncated, or does not match the program."""


def persistables(program: Program) -> list:
    return [v for v in program.global_block().vars.values() if v.persistable]


def _atomic_write(path: str, write) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save(program: Program, dirname: str, scope: Scope | None = None) -> str:
    """Save every persistable of ``program`` from ``scope``; returns the tensors' path."""
    from safetensors.numpy import save_file
    scope = global_scope() if scope is None else scope
    tensors = {}
    for var in persistables(program):
        if var.name not in scope:
            raise CheckpointError(f"cannot save '{var.name}': it has no value in the scope "
                                  "(run the startup program first)")
        tensors[var.name] = np.ascontiguousarray(scope[var.name])
    os.makedirs(dirname, exist_ok=True)
    manifest = {"format": FORMAT, "tensors": {
        n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in sorted(tensors.items())}}
    path = os.path.join(dirname, TENSORS)
    _atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata={"format": FORMAT}))

    def write_manifest(tmp):
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
    _atomic_write(os.path.join(dirname, MANIFEST), write_manifest)
    return path


def load(program: Program, dirname: str, scope: Scope | None = None) -> None:
    """Load every persistable of ``program`` into ``scope``; nothing changes on error."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    scope = global_scope() if scope is None else scope
    path = os.path.join(dirname, TENSORS)
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at '{path}'")
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read '{path}': {exc} (truncated or not a graphc "
                              "checkpoint?)") from None
    staged = {}
    for var in persistables(program):
        if var.name not in tensors:
            raise CheckpointError(f"'{path}' has no tensor '{var.name}'")
        arr = tensors[var.name]
        if tuple(arr.shape) != tuple(var.shape) or str(arr.dtype) != var.dtype:
            raise CheckpointError(
                f"'{path}': tensor '{var.name}' is {arr.dtype}{list(arr.shape)} but the "
                f"program declares {var.dtype}{list(var.shape)}")
        staged[var.name] = arr
    for name, arr in staged.items():
        scope[name] = arr


def save_persistables(executor, dirname: str, main_program: Program | None = None,
                      filename=None) -> str:
    """Paddle's spelling of ``save``."""
    from ..ir.program import default_main_program
    return save(main_program or default_main_program(), dirname)


def load_persistables(executor, dirname: str, main_program: Program | None = None,
                      filename=None) -> None:
    """Paddle's spelling of ``load``."""
    from ..ir.program import default_main_program
    load(main_program or default_main_program(), dirname)
