"""Checkpoints of a program's persistable variables: one safetensors file (no pickle) plus
a readable manifest, each tensor with a checksum verified on load; writes are atomic."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import uuid

import numpy as np

from ..ir.errors import GraphcError
from ..ir.program import Program
from .scope import Scope, global_scope

TENSORS = "persistables.safetensors"
MANIFEST = "manifest.json"
FORMAT = "graphc-checkpoint/2"
# /1 (before per-tensor checksums) still loads; its tensors cannot be verified
READABLE_FORMATS = ("graphc-checkpoint/1", FORMAT)
CHECKSUM_KEY = "sha256:"  # safetensors metadata key prefix: "sha256:<tensor name>"


class CheckpointError(GraphcError):
    """A checkpoint is missing, corrupt, or does not match the program; nothing was changed."""


def persistables(program: Program) -> list:
    return [v for v in program.global_block().vars.values() if v.persistable]


def tensor_checksum(array: np.ndarray) -> str:
    """sha256 of a tensor's bytes in C order (what safetensors stores)."""
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


# -- atomic writes ---------------------------------------------------------------------------
# A temporary file names the host and process that write it, so the next save into the same
# directory can tell an interrupted save's leftovers (dead writer) from a live one's.
_TMP_PREFIX = ".tmp-"
_TMP_RE = re.compile(r"^\.tmp-(?P<host>[^-]+)-(?P<pid>\d+)-[0-9a-f]+(?:\..*)?$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (threads may race)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temporaries(directory: str) -> list[str]:
    """Remove temporaries left in ``directory`` by interrupted saves on this host (their
    writer process is gone); returns the names removed."""
    removed = []
    host = _host()
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = _TMP_RE.match(name)
        if not m or m["host"] != host or _pid_alive(int(m["pid"])):
            continue
        try:
            os.remove(os.path.join(directory, name))
            removed.append(name)
        except OSError:
            pass
    return removed


def atomic_write(path: str, write) -> None:
    """Call ``write(tmp_path)``, give the file the umask's permissions, then rename it onto
    ``path``; on any failure the temporary is removed and ``path`` is untouched."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f"{_TMP_PREFIX}{_host()}-{os.getpid()}-{uuid.uuid4().hex}")
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


_atomic_write = atomic_write  # the name other modules used before it was public


def prepare_directory(dirname: str) -> None:
    """Create ``dirname`` for a save (a plain file there is an error) and clear leftovers."""
    if os.path.exists(dirname) and not os.path.isdir(dirname):
        raise CheckpointError(f"cannot save into '{dirname}': it is a file, not a directory")
    try:
        os.makedirs(dirname, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create checkpoint directory '{dirname}': "
                              f"{exc.strerror or exc}") from None
    clean_stale_temporaries(dirname)


# -- tensors with checksums ------------------------------------------------------------------
def write_tensors(path: str, tensors: dict[str, np.ndarray], metadata: dict | None = None
                  ) -> dict[str, dict]:
    """Write ``tensors`` atomically as safetensors with a checksum per tensor in its metadata;
    returns each tensor's manifest entry (shape, dtype, sha256)."""
    from safetensors.numpy import save_file
    arrays = {n: np.ascontiguousarray(a) for n, a in tensors.items()}
    entries = {n: {"shape": list(a.shape), "dtype": str(a.dtype), "sha256": tensor_checksum(a)}
               for n, a in sorted(arrays.items())}
    meta = {"format": FORMAT, **(metadata or {}),
            **{CHECKSUM_KEY + n: e["sha256"] for n, e in entries.items()}}
    try:
        atomic_write(path, lambda tmp: save_file(arrays, tmp, metadata=meta))
    except OSError as exc:
        raise CheckpointError(f"cannot write '{path}': {exc.strerror or exc}") from None
    return entries


def read_tensors(path: str, names=None) -> dict[str, np.ndarray]:
    """Read tensors (all, or ``names``) from a safetensors file, verifying each one's
    checksum where the file records it; CheckpointError names the file and tensor."""
    from safetensors import SafetensorError, safe_open
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at '{path}'")
    try:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
            available = set(f.keys())
            wanted = sorted(available) if names is None else list(names)
            for name in wanted:
                if name not in available:
                    raise CheckpointError(f"'{path}' has no tensor '{name}'")
            out = {name: f.get_tensor(name) for name in wanted}
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise CheckpointError(f"cannot read '{path}': {exc} (truncated or not a graphc "
                              "checkpoint?)") from None
    for name, arr in out.items():
        want = meta.get(CHECKSUM_KEY + name)
        if want is not None and tensor_checksum(arr) != want:
            raise CheckpointError(f"'{path}': tensor '{name}' is corrupt (its checksum does "
                                  "not match the one recorded when it was saved)")
    return out


def recorded_checksums(path: str) -> dict[str, str]:
    """The per-tensor checksums a safetensors file's metadata records (header only)."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read '{path}': {exc}") from None
    return {k[len(CHECKSUM_KEY):]: v for k, v in meta.items() if k.startswith(CHECKSUM_KEY)}


def read_manifest(dirname: str) -> dict:
    """The manifest of a checkpoint directory, checked for shape: a JSON object with a known
    format tag and a ``tensors`` table."""
    path = os.path.join(dirname, MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"'{dirname}' has no {MANIFEST} (not a graphc checkpoint, or "
                              "its save was interrupted)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"'{path}' is not a valid manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in READABLE_FORMATS:
        raise CheckpointError(f"'{path}' is not a graphc checkpoint manifest (format "
                              f"{manifest.get('format') if isinstance(manifest, dict) else None!r},"
                              f" expected one of {list(READABLE_FORMATS)})")
    tensors = manifest.get("tensors")
    if not isinstance(tensors, dict) or not all(
            isinstance(e, dict) and isinstance(e.get("shape"), list)
            and isinstance(e.get("dtype"), str) for e in tensors.values()):
        raise CheckpointError(f"'{path}': 'tensors' must map each name to its shape and dtype")
    return manifest


# -- program checkpoints ---------------------------------------------------------------------
def save(program: Program, dirname: str, scope: Scope | None = None) -> str:
    """Save every persistable of ``program`` from ``scope``; returns the tensors' path."""
    scope = global_scope() if scope is None else scope
    tensors = {}
    for var in persistables(program):
        if var.name not in scope:
            raise CheckpointError(f"cannot save '{var.name}': it has no value in the scope "
                                  "(run the startup program first)")
        tensors[var.name] = np.asarray(scope[var.name])
    prepare_directory(dirname)
    path = os.path.join(dirname, TENSORS)
    entries = write_tensors(path, tensors)
    manifest = {"format": FORMAT, "tensors": entries}

    def write_manifest(tmp):
        with open(tmp, "w") as f:
            json.dump(manifest, f, indent=1)
    try:
        atomic_write(os.path.join(dirname, MANIFEST), write_manifest)
    except OSError as exc:
        raise CheckpointError(f"cannot write the manifest in '{dirname}': "
                              f"{exc.strerror or exc}") from None
    return path


def load(program: Program, dirname: str, scope: Scope | None = None) -> None:
    """Load every persistable of ``program`` into ``scope``; nothing changes on error."""
    scope = global_scope() if scope is None else scope
    path = os.path.join(dirname, TENSORS)
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at '{path}'")
    in_file = recorded_checksums(path)  # a truncated file fails here, before any comparison
    manifest = read_manifest(dirname)
    wanted = persistables(program)
    for var in wanted:
        if var.name not in manifest["tensors"]:
            raise CheckpointError(f"'{path}' has no tensor '{var.name}'")
    tensors = read_tensors(path, [v.name for v in wanted])
    staged = {}
    for var in wanted:
        arr, listed = tensors[var.name], manifest["tensors"][var.name].get("sha256")
        if listed is not None and listed != in_file.get(var.name):
            raise CheckpointError(f"'{path}': tensor '{var.name}' does not match its manifest "
                                  "entry (the manifest belongs to another save?)")
        if tuple(arr.shape) != tuple(var.shape) or str(arr.dtype) != var.dtype:
            raise CheckpointError(
                f"'{path}': tensor '{var.name}' is {arr.dtype}{list(arr.shape)} but the "
                f"program declares {var.dtype}{list(var.shape)}")
        staged[var.name] = arr
    for name, arr in staged.items():
        scope[name] = arr
