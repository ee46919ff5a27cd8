"""How role makers' collectives reach their peers: MPI, the joined JAX runtime's key-value
store, a shared directory (GeneralRoleMaker), or nobody (one process); values as JSON."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid

import numpy as np

from .....ir.errors import GraphcError

MODES = {"sum": np.sum, "max": np.max, "min": np.min}
GROUPS = ("worker", "server", "all")
_POLL_S = 0.05
SECRET_ENV = "GRAPHC_JOB_SECRET"  # the job's, as the parameter servers read it


class RoleError(GraphcError):
    """A role maker's variables or arguments are missing or inconsistent (names which)."""


def reduce_into(values: list, output, mode: str) -> None:
    """Element-wise ``mode`` of the 1-D ``values`` (one per worker) written into ``output``."""
    arrays = [np.asarray(v) for v in values]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or len(arrays[0].shape) != 1:
        raise RoleError(f"all_reduce_worker takes one 1-D array per worker of one length; "
                        f"the workers gave shapes {sorted(shapes)}")
    result = MODES[mode](np.stack(arrays), axis=0)
    if len(output) != len(result):
        raise RoleError(f"all_reduce_worker: output has {len(output)} elements, input "
                        f"{len(result)}")
    for i, value in enumerate(result):
        output[i] = value.item() if isinstance(output, list) else value


def encode(value) -> str:
    """``value`` as JSON text; RoleError names a value JSON cannot carry."""
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise RoleError(f"role maker collectives carry numbers, strings, lists and dicts "
                        f"(as JSON); got {type(value).__name__}: {exc}") from None


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode: {mode!r} (all_reduce_worker takes 'sum', 'min' or "
                         "'max')")


class Alone:
    """One process: every group is this process."""

    def all_gather(self, value, group: str) -> list:
        return [json.loads(encode(value))]  # what the others would get

    def barrier(self, group: str) -> None:
        pass


class MPIComm:
    """MPI's COMM_WORLD (``all``) and the sub-communicators of the given worker and server
    ranks, made by the members only (MPI_Comm_create_group), so a worker-only call needs no
    server."""

    def __init__(self, worker_ranks, server_ranks=()):
        from mpi4py import MPI
        self._mpi, self._world = MPI, MPI.COMM_WORLD
        self._ranks = {"worker": sorted(worker_ranks), "server": sorted(server_ranks)}
        self._comms: dict = {"all": self._world}

    def _comm(self, group: str):
        if group not in self._comms:
            ranks = self._ranks[group]
            if self._world.Get_rank() not in ranks:
                raise RoleError(f"this rank is not one of the job's {group}s {ranks}")
            members = self._world.Get_group().Incl(ranks)
            self._comms[group] = self._world.Create_group(members, tag=GROUPS.index(group))
        return self._comms[group]

    def all_gather(self, value, group: str) -> list:
        return self._comm(group).allgather(json.loads(encode(value)))

    def barrier(self, group: str) -> None:
        self._comm(group).Barrier()


class StoreComm:
    """Collectives over a key-value store (``put(key, text)``, ``get(key, seconds)``): each
    member writes its value under the round's key, then reads every member's. Every process
    must call the collectives of a group in the same order (rounds are counted).

    With GRAPHC_JOB_SECRET each value carries an HMAC of its key and text under a key derived
    from the secret: a value someone else wrote in the store (JAX's coordinator takes any
    client; a shared directory, any writer) is refused, naming the key."""

    def __init__(self, store, members: dict, seconds: float, source: str, environ=None):
        self._store, self._members = store, members  # group -> (my index, size)
        self._seconds, self._source = seconds, source
        self._round = dict.fromkeys(GROUPS, 0)
        secret = (os.environ if environ is None else environ).get(SECRET_ENV, "")
        self._mac_key = (hashlib.sha256(b"graphc role maker\0" + secret.encode()).digest()
                         if secret else None)

    def _seal(self, key: str, text: str) -> str:
        if self._mac_key is None:
            return text
        return f"{self._mac(key, text)} {text}"

    def _open(self, key: str, sealed: str) -> str:
        if self._mac_key is None:
            return sealed
        mac, _, text = sealed.partition(" ")
        if not hmac.compare_digest(mac, self._mac(key, text)):
            raise RoleError(f"the value under '{key}' in the role makers' store is not signed "
                            f"with this job's {SECRET_ENV}: written by a process outside the "
                            f"job, or one with another secret ({self._source})")
        return text

    def _mac(self, key: str, text: str) -> str:
        return hmac.new(self._mac_key, f"{key}\0{text}".encode(), hashlib.sha256).hexdigest()

    def all_gather(self, value, group: str) -> list:
        if group not in self._members:
            raise RoleError(f"this process is not one of the job's {group}s")
        index, size = self._members[group]
        self._round[group] += 1
        key = f"{group}/{self._round[group]}"
        self._store.put(f"{key}/{index}", self._seal(f"{key}/{index}", encode(value)))
        values = []
        for i in range(size):
            text = self._store.get(f"{key}/{i}", self._seconds)
            if text is None:
                raise RoleError(f"{group} {i} did not reach collective {key} within "
                                f"{self._seconds:g} s ({self._source})")
            try:
                values.append(json.loads(self._open(f"{key}/{i}", text)))
            except json.JSONDecodeError:
                raise RoleError(f"the value under '{key}/{i}' in the role makers' store is no "
                                f"JSON ({self._source})") from None
        return values

    def barrier(self, group: str) -> None:
        self.all_gather(None, group)


class JaxStore:
    """The key-value store of JAX's distributed runtime (the job this process joined)."""

    def __init__(self, prefix: str = "graphc/role_maker"):
        from jax._src import distributed
        self._client, self._prefix = distributed.global_state.client, prefix

    def put(self, key: str, text: str) -> None:
        self._client.key_value_set(f"{self._prefix}/{key}", text)

    def get(self, key: str, seconds: float) -> str | None:
        try:
            return self._client.blocking_key_value_get(f"{self._prefix}/{key}",
                                                       int(seconds * 1000))
        except Exception:  # jaxlib's deadline error has no Python type of its own
            return None


class DirStore:
    """A directory every process of the job can read and write (a shared file system, or
    one node's disk): one file per key, written whole (rename) so a reader never sees half."""

    def __init__(self, path: str, prefix: str = ""):
        self._root = os.path.join(path, prefix or "graphc_role_maker")
        os.makedirs(self._root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self._root, *key.split("/"))

    def put(self, key: str, text: str) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def get(self, key: str, seconds: float) -> str | None:
        path, end = self._path(key), time.monotonic() + seconds
        while not os.path.exists(path):
            if time.monotonic() > end:
                return None
            time.sleep(_POLL_S)
        with open(path) as f:
            return f.read()
