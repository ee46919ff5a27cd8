"""The parameter-server wire protocol: who is who, the message tags, and how a server's blocks
are packed into one buffer per step. Both sides live here so they agree.

Messages (tagged point-to-point byte buffers between peers, over MPI or ZeroMQ: link.py;
never pickles):

- ``TAG_LAYOUT`` (40), server -> trainer, once: the ``Layout`` as JSON (block names,
  shapes, dtypes);
- ``TAG_CONTROL`` (41), trainer -> server, per step: int64 ``[kind, step, trainer_id]``,
  ``BARRIER`` (this step's gradients follow) or ``COMPLETE`` (no more steps);
- ``TAG_GRADS`` (42), trainer -> server, per step: uint8, the gradient blocks the server
  owns, in ``Layout.grads`` order;
- ``TAG_PARAMS`` (43), server -> trainer, once after the layout (the initial blocks, which
  a trainer's startup program pulls) and then per step: uint8, the server's parameter
  blocks after its update, in ``Layout.params`` order;
- ``TAG_SAVE`` (44), trainer -> server, after a ``SAVE`` control message: the checkpoint
  directory (UTF-8); the server writes its blocks there before it reads that trainer's
  next message (sync mode: at a round boundary).
- ``TAG_PULL`` (45), trainer -> server, after a ``PULL`` control message: int64 ``[entry,
  id, id, ...]``, distinct ids of one entry of ``Layout.pulls`` that this server holds (a
  distributed table's global ids, id % #servers == server; a prefetched block's rows,
  rebased to the block); ``TAG_ROWS`` (46), the reply: their rows, in that order, as they
  are now (sync: after the last round);
- ``TAG_PUSH`` (47), trainer -> server, right after ``TAG_GRADS`` when the layout has row
  entries: ``pack_rows`` of one (ids, values) pair per ``Layout.rows`` entry, distinct ids
  (a table's global ids; an is_sparse block's rows rebased to the block).

Row messages vary in length: the receiver takes them whole (``link.recv_bytes``). Setup
(``Cluster.join``) is one ``allgather`` of ``(role, index)`` over every MPI rank, or a HELLO
from each trainer to each server's endpoint (zmq_link.py); then the layouts. Both transports
keep the messages of one tag between two peers in order, so a step's messages never mix with
the next step's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import numpy as np

from ...ir.errors import GraphcError

TAG_LAYOUT, TAG_CONTROL, TAG_GRADS, TAG_PARAMS, TAG_SAVE = 40, 41, 42, 43, 44
TAG_PULL, TAG_ROWS, TAG_PUSH = 45, 46, 47
BARRIER, COMPLETE, SAVE, PULL = 1, 2, 3, 4
TRAINER, SERVER = "TRAINER", "PSERVER"


class PServerError(GraphcError):
    """A parameter-server job is misconfigured or its peers disagree (names the rank/role)."""


def comm_world():
    try:
        from mpi4py import MPI
    except ImportError as exc:  # the mpi extra
        raise PServerError("parameter-server training needs mpi4py (pip install "
                           "'graphc[mpi]') and a job started by mpirun or graphc launch"
                           ) from exc
    return MPI.COMM_WORLD


@dataclass(frozen=True)
class Layout:
    """A server's blocks: ``grads``/``params`` are ``(name, shape, dtype)`` in wire order."""

    server: int
    grads: tuple
    params: tuple
    # entries pushed as rows, ``(name, width, dtype, kind)``: kind "block" (an is_sparse
    # parameter's block, whose grads entry has the dense shape) or "table" (a distributed
    # table's shard, by name)
    rows: tuple = ()
    # what trainers may pull rows of: distributed tables' shards and the blocks of
    # remote-prefetched is_sparse tables (which are not in ``params``: never sent whole)
    pulls: tuple = ()

    def nbytes(self, which: str) -> int:
        return sum(int(np.prod(s)) * np.dtype(d).itemsize for _, s, d in getattr(self, which))

    def to_bytes(self) -> bytes:
        """JSON (never a pickle: a layout crosses the network)."""
        return json.dumps({"server": self.server, "grads": self.grads, "params": self.params,
                           "rows": self.rows, "pulls": self.pulls}).encode()

    @classmethod
    def from_bytes(cls, data) -> Layout:
        try:
            d = json.loads(bytes(data))
            specs = {k: tuple((n, tuple(int(x) for x in s), str(t)) for n, s, t in d[k])
                     for k in ("grads", "params")}
            if any(x < 0 for k in specs for _, s, _ in specs[k] for x in s):
                raise ValueError("a negative dimension")
            if any(np.dtype(t).hasobject for k in specs for _, _, t in specs[k]):
                raise ValueError("a dtype that is no number")
            return cls(int(d["server"]), specs["grads"], specs["params"],
                       tuple((n, int(w), str(t), str(k)) for n, w, t, k in d["rows"]),
                       tuple(str(n) for n in d["pulls"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise PServerError(f"a server's layout message is malformed ({exc}): a peer of "
                               "another graphc version or no graphc server") from None


def pack(arrays) -> np.ndarray:
    """One contiguous byte buffer of ``arrays`` (in order)."""
    if not arrays:
        return np.zeros(0, np.uint8)
    return np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays])


def unpack(buf: np.ndarray, specs) -> dict[str, np.ndarray]:
    out, i = {}, 0
    for name, shape, dtype in specs:
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        out[name] = buf[i:i + n].view(np.dtype(dtype)).reshape(shape).copy()
        i += n
    if i != buf.size:
        raise PServerError(f"a block buffer of {buf.size} bytes does not match the layout "
                           f"({i} bytes): trainer and server programs disagree")
    return out


def sum_rows(ids: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ids ascending, the sum of each one's value rows): a row gradient with its
    repeats merged, as pushed (trainer) and applied (server)."""
    if not len(ids):
        return ids, values
    uniq, inverse = np.unique(ids, return_inverse=True)
    total = np.zeros((len(uniq), *values.shape[1:]), values.dtype)
    np.add.at(total, inverse, values)
    return uniq, total


def pack_rows(entries) -> np.ndarray:
    """One byte buffer of ``(ids, values)`` pairs: their counts (int64), then each pair's
    int64 ids and values."""
    counts = np.array([len(ids) for ids, _ in entries], np.int64)
    parts = [counts]
    for ids, values in entries:
        parts += [np.asarray(ids, np.int64), values]
    return pack(parts)


def unpack_rows(buf: np.ndarray, specs) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``(ids, values)`` pairs of ``pack_rows``; ``specs`` are ``(name, width, dtype,
    kind)``."""
    k = len(specs)
    counts = buf[:8 * k].view(np.int64) if buf.size >= 8 * k else np.zeros(0, np.int64)
    sizes = [n * (8 + width * np.dtype(dtype).itemsize)
             for (_, width, dtype, _), n in zip(specs, counts.tolist())]
    i, out = 8 * k, []
    if len(counts) == k and i + sum(sizes) == buf.size:
        for (_name, width, dtype, _), n in zip(specs, counts.tolist()):
            ids = buf[i:i + 8 * n].view(np.int64)
            i += 8 * n
            size = n * width * np.dtype(dtype).itemsize
            out.append((ids, buf[i:i + size].view(np.dtype(dtype)).reshape(n, width)))
            i += size
    if i != buf.size:
        raise PServerError(f"a row buffer of {buf.size} bytes does not match its counts "
                           f"({i} bytes): trainer and server programs disagree")
    return out


@dataclass
class Cluster:
    """Every server's and trainer's peer number (an MPI rank, or over ZeroMQ: servers 0..S-1,
    then trainers) and the link carrying messages between them (link.py)."""

    link: object
    servers: list[int]  # server id -> peer
    trainers: list[int]  # trainer id -> peer

    @classmethod
    def join(cls, role: str, index: int, endpoints, num_trainers: int,
             max_bytes: int = 0, server_peers: bool = False) -> Cluster:
        """Meet the job's other processes: over MPI inside a multi-rank MPI job, else by
        ``endpoints`` (a server listens on its own; ``max_bytes``: its largest message;
        ``server_peers``: the servers sum values among themselves)."""
        from .link import transport
        if transport() == "mpi":
            return cls._join_mpi(role, index, len(endpoints), num_trainers)
        from .zmq_link import join
        link, servers, trainers = join(role, index, list(endpoints), num_trainers, max_bytes,
                                       server_peers)
        return cls(link, servers, trainers)

    @classmethod
    def _join_mpi(cls, role: str, index: int, num_servers: int, num_trainers: int) -> Cluster:
        from .link import MpiLink
        comm = comm_world()
        everyone = comm.allgather((role, int(index)))
        servers = sorted((i, r) for r, (ro, i) in enumerate(everyone) if ro == SERVER)
        trainers = sorted((i, r) for r, (ro, i) in enumerate(everyone) if ro == TRAINER)
        if [i for i, _ in servers] != list(range(num_servers)) or \
                [i for i, _ in trainers] != list(range(num_trainers)):
            raise PServerError(
                f"rank {comm.Get_rank()} ({role} {index}): the job's ranks are servers "
                f"{[i for i, _ in servers]} and trainers {[i for i, _ in trainers]}, but the "
                f"transpile expects servers 0..{num_servers - 1} and trainers "
                f"0..{num_trainers - 1}")
        # one line per rank, so a failing rank's role can be read beside the launcher's
        # message naming its rank
        print(f"graphc pserver: rank {comm.Get_rank()} is {role.lower()} {index} "
              f"({num_servers} servers, {num_trainers} trainers)", file=sys.stderr, flush=True)
        # collective over every rank, as the allgather: one communicator per role
        group = comm.Split(0 if role == SERVER else 1, comm.Get_rank())
        return cls(MpiLink(comm, group), [r for _, r in servers], [r for _, r in trainers])
