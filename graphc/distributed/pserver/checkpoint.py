"""Checkpoints from the shard owners: each server writes its own blocks and optimizer state
(safetensors, written to a temporary name and renamed), the first trainer the step; a resumed
job loads each server's file into its scope, and trainers pull the values at startup."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .protocol import PServerError

META = "pserver_checkpoint.json"


def server_file(dirname, server_id: int) -> Path:
    return Path(dirname) / f"pserver_{server_id}.safetensors"


def state_names(program) -> list[str]:
    """The persistables a server program holds: its blocks, their optimizer state, the
    learning rate (feeds excluded)."""
    return sorted(v.name for v in program.global_block().vars.values()
                  if v.persistable and not v.is_data)


def save_server(dirname, program, scope, server_id: int, tables=None) -> Path:
    """Write this server's blocks, optimizer state and distributed-table rows (``tables``:
    name -> RowTable; ``<table>@IDS`` and ``<table>@ROWS``)."""
    from safetensors.numpy import save_file
    path = server_file(dirname, server_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {n: np.ascontiguousarray(np.asarray(scope[n])) for n in state_names(program)}
    for table in (tables or {}).values():
        arrays.update(table.state())
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    save_file(arrays, str(tmp))
    os.replace(tmp, path)
    return path


def load_server(dirname, program, scope, server_id: int) -> tuple[Path, dict]:
    """Fill ``scope`` with this server's blocks from a checkpoint (after its startup);
    returns the file and every array it holds (distributed-table rows included)."""
    from safetensors.numpy import load_file
    path = server_file(dirname, server_id)
    if not path.is_file():
        raise PServerError(f"checkpoint '{dirname}' has no file for server {server_id} "
                           f"({path.name})")
    arrays = load_file(str(path))
    missing = [n for n in state_names(program) if n not in arrays]
    if missing:
        raise PServerError(f"checkpoint file {path}: lacks {missing} (a checkpoint of another "
                           "program or placement?)")
    for name in state_names(program):
        expected = tuple(program.global_block().var(name).shape)
        if tuple(arrays[name].shape) != expected:
            raise PServerError(f"checkpoint file {path}: '{name}' has shape "
                               f"{list(arrays[name].shape)}, the program {list(expected)}")
        scope[name] = arrays[name]
    return path, arrays


def save_meta(dirname, step: int, servers: int, trainers: int) -> None:
    path = Path(dirname) / META
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"step": step, "servers": servers, "trainers": trainers}))
    os.replace(tmp, path)


def load_meta(dirname) -> dict:
    """``{"step": steps taken when saved, "servers", "trainers"}``."""
    path = Path(dirname) / META
    if not path.is_file():
        raise PServerError(f"'{dirname}' holds no parameter-server checkpoint ({META})")
    return json.loads(path.read_text())
