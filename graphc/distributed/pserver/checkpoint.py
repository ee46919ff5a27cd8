"""Checkpoints from the shard owners, with graphc.save's guarantees: each server writes its
blocks, optimizer state and table rows (safetensors, sha256 per tensor, atomic, umask)."""

# The first trainer writes the step (pserver_checkpoint.json). A resumed server checks
# everything it reads before it changes anything: the file's checksums and metadata (format,
# server, server count, tables), each block's shape and dtype, each table shard's rows (ids
# distinct, in range, owned by that server); a damaged input is a PServerCheckpointError
# naming the file, never a raw safetensors or JSON error, and nothing is loaded then.

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ...runtime.checkpoint import (
    CHECKSUM_KEY,
    CheckpointError,
    atomic_write,
    prepare_directory,
    tensor_checksum,
    write_tensors,
)
from .protocol import PServerError

META = "pserver_checkpoint.json"
FORMAT = "graphc-pserver-checkpoint/1"  # the server files' and the step file's format tag


class PServerCheckpointError(CheckpointError, PServerError):
    """A parameter server's checkpoint is missing, damaged, or not this server's; nothing was
    loaded."""


def server_file(dirname, server_id: int) -> Path:
    return Path(dirname) / f"pserver_{server_id}.safetensors"


def state_names(program) -> list[str]:
    """The persistables a server program holds: its blocks, their optimizer state, the
    learning rate (feeds excluded)."""
    return sorted(v.name for v in program.global_block().vars.values()
                  if v.persistable and not v.is_data)


def _table_meta(spec: dict) -> dict:
    return {"height": int(spec["height"]), "width": int(spec["width"]),
            "dtype": str(np.dtype(spec["dtype"]))}


# -- writing ---------------------------------------------------------------------------------
def save_server(dirname, program, scope, server_id: int, tables=None) -> Path:
    """Write this server's blocks, optimizer state and distributed-table rows (``tables``:
    name -> RowTable; ``<table>@IDS`` and ``<table>@ROWS``)."""
    path = server_file(dirname, server_id)
    arrays = {n: np.asarray(scope[n]) for n in state_names(program)}
    for table in (tables or {}).values():
        arrays.update(table.state())
    meta = {"pserver": json.dumps({
        "format": FORMAT, "server_id": int(server_id),
        "servers": len(program.info.endpoints),
        "tables": {t["name"]: _table_meta(t) for t in program.info.tables}})}
    _as_pserver_error(prepare_directory, str(dirname))
    _as_pserver_error(write_tensors, str(path), arrays, meta)
    return path


def save_meta(dirname, step: int, servers: int, trainers: int) -> None:
    path = Path(dirname) / META
    text = json.dumps({"format": FORMAT, "step": int(step), "servers": int(servers),
                       "trainers": int(trainers)})

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    _as_pserver_error(prepare_directory, str(dirname))
    try:
        atomic_write(str(path), write)
    except OSError as exc:
        raise PServerCheckpointError(f"cannot write '{path}': {exc.strerror or exc}") from None


def _as_pserver_error(fn, *args):
    try:
        return fn(*args)
    except PServerCheckpointError:
        raise
    except CheckpointError as exc:
        raise PServerCheckpointError(str(exc)) from None


# -- reading ---------------------------------------------------------------------------------
def _is_count(value, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def load_meta(dirname) -> dict:
    """``{"step": steps taken when saved, "servers", "trainers"}``, checked: a JSON object
    with this format's tag, whole numbers in range."""
    path = Path(dirname) / META
    if not path.is_file():
        raise PServerCheckpointError(f"'{dirname}' holds no parameter-server checkpoint "
                                     f"({META})")
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PServerCheckpointError(f"'{path}' is not a valid checkpoint step file: {exc}"
                                     ) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise PServerCheckpointError(
            f"'{path}' is not a graphc parameter-server step file (format "
            f"{meta.get('format') if isinstance(meta, dict) else None!r}, expected {FORMAT!r})")
    for key, least in (("step", 0), ("servers", 1), ("trainers", 1)):
        if not _is_count(meta.get(key), least):
            raise PServerCheckpointError(f"'{path}': '{key}' must be a whole number >= "
                                         f"{least}, got {meta.get(key)!r}")
    return {k: meta[k] for k in ("step", "servers", "trainers")}


def _read(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """A server file's metadata and tensors, each tensor's recorded sha256 verified."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            arrays = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise PServerCheckpointError(f"cannot read '{path}': {exc} (truncated or not a "
                                     "graphc parameter-server checkpoint?)") from None
    for name, arr in arrays.items():
        want = meta.get(CHECKSUM_KEY + name)
        if want is None:
            raise PServerCheckpointError(f"'{path}': tensor '{name}' has no recorded checksum "
                                         "(not written by graphc's save_server?)")
        if tensor_checksum(arr) != want:
            raise PServerCheckpointError(f"'{path}': tensor '{name}' is corrupt (its checksum "
                                         "does not match the one recorded when it was saved)")
    return meta, arrays


def _check_header(path: Path, meta: dict, info) -> None:
    try:
        head = json.loads(meta.get("pserver", ""))
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise PServerCheckpointError(f"'{path}' is not a graphc parameter-server checkpoint "
                                     f"(no '{FORMAT}' header)")
    servers = len(info.endpoints)
    if head.get("server_id") != info.server_id or head.get("servers") != servers:
        raise PServerCheckpointError(
            f"'{path}' was saved by server {head.get('server_id')!r} of "
            f"{head.get('servers')!r}, not server {info.server_id} of {servers}")
    tables = {t["name"]: _table_meta(t) for t in info.tables}
    if head.get("tables") != tables:
        raise PServerCheckpointError(f"'{path}': its distributed tables {head.get('tables')!r}"
                                     f" are not this program's {tables!r}")


def check_rows(path, spec: dict, ids: np.ndarray, rows: np.ndarray, server_id: int,
               servers: int) -> None:
    """A table shard's saved rows: int64 ids, distinct, in ``[0, height)`` and owned by this
    server (``id % servers == server_id``); rows ``[len(ids), width]`` of the table's dtype."""
    name, width, dtype = spec["name"], int(spec["width"]), np.dtype(spec["dtype"])
    where = f"'{path}': table '{name}'"
    if ids.dtype != np.int64 or ids.ndim != 1:
        raise PServerCheckpointError(f"{where} has ids of {ids.dtype}{list(ids.shape)}, "
                                     "expected a list of int64")
    if rows.dtype != dtype or rows.shape != (len(ids), width):
        raise PServerCheckpointError(f"{where} has rows {rows.dtype}{list(rows.shape)} for "
                                     f"{len(ids)} ids, expected {dtype}[{len(ids)}, {width}]")
    bad = ids[(ids < 0) | (ids >= int(spec["height"]))]
    if len(bad):
        raise PServerCheckpointError(f"{where} has ids outside [0, {spec['height']}): "
                                     f"{bad[:5].tolist()}")
    foreign = ids[ids % servers != server_id]
    if len(foreign):
        raise PServerCheckpointError(f"{where} has ids of another server (id % {servers} != "
                                     f"{server_id}): {foreign[:5].tolist()}")
    uniq, counts = np.unique(ids, return_counts=True)
    if len(uniq) != len(ids):
        raise PServerCheckpointError(f"{where} lists ids twice: "
                                     f"{uniq[counts > 1][:5].tolist()}")


def load_server(dirname, program, scope, server_id: int) -> tuple[Path, dict]:
    """Fill ``scope`` with this server's blocks from a checkpoint (after its startup), once
    every check passed; returns the file and every array it holds (table rows included)."""
    path = server_file(dirname, server_id)
    if not path.is_file():
        raise PServerCheckpointError(f"checkpoint '{dirname}' has no file for server "
                                     f"{server_id} ({path.name})")
    meta, arrays = _read(path)
    info = program.info
    _check_header(path, meta, info)
    names = state_names(program)
    rows = [f"{t['name']}@{k}" for t in info.tables for k in ("IDS", "ROWS")]
    missing = [n for n in names + rows if n not in arrays]
    extra = sorted(set(arrays) - set(names) - set(rows))
    if missing or extra:
        raise PServerCheckpointError(
            f"'{path}': " + "; ".join(p for p in (
                f"lacks {missing}" if missing else "", f"holds {extra}, unknown to this "
                "server's program" if extra else "") if p) + " (a checkpoint of another "
            "program or placement?)")
    for name in names:
        var = program.global_block().var(name)
        arr = arrays[name]
        if tuple(arr.shape) != tuple(var.shape) or str(arr.dtype) != str(np.dtype(var.dtype)):
            raise PServerCheckpointError(
                f"'{path}': '{name}' is {arr.dtype}{list(arr.shape)}, the program declares "
                f"{np.dtype(var.dtype)}{list(var.shape)}")
    for spec in info.tables:
        check_rows(path, spec, arrays[f"{spec['name']}@IDS"], arrays[f"{spec['name']}@ROWS"],
                   info.server_id, len(info.endpoints))
    for name in names:  # nothing was written to the scope before every check passed
        scope[name] = arrays[name]
    return path, arrays
