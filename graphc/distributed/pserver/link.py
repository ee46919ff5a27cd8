"""How the parameter server's messages travel: tagged byte buffers between numbered peers, over
MPI inside an MPI job, else over ZeroMQ between endpoints (zmq_link.py)."""

from __future__ import annotations

import os

import numpy as np

from ..env import detect
from .protocol import PServerError

ANY = -1  # any source (MPI's ANY_SOURCE)
TRANSPORT_ENV = "GRAPHC_PS_TRANSPORT"  # "mpi" | "zmq"; unset: MPI inside a multi-rank job

# Peers are numbered as MPI ranks would be; the server loop and the trainer's channel only call
# send / isend / recv / irecv / recv_bytes / waitall / done / server_sum / retire / close.


def transport(environ=None) -> str:
    """``mpi`` when this process is a rank of an MPI job of several ranks, else ``zmq`` (the
    processes meet by their endpoints); GRAPHC_PS_TRANSPORT chooses explicitly."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(TRANSPORT_ENV, "").strip().lower()
    if chosen in ("mpi", "zmq"):
        return chosen
    if chosen:
        raise PServerError(f"{TRANSPORT_ENV} must be 'mpi' or 'zmq', got '{chosen}'")
    env = detect(environ)
    return "mpi" if env.uses_mpi and env.size > 1 else "zmq"


class MpiLink:
    """The interface over an mpi4py communicator (COMM_WORLD) and the servers' communicator."""

    name = "mpi"

    def __init__(self, comm, group):
        from mpi4py import MPI
        self._mpi, self.comm, self.group = MPI, comm, group
        self.rank = comm.Get_rank()
        self.broken: str | None = None  # MPI ends the job itself when a rank dies

    def send(self, buf, dest: int, tag: int) -> None:
        self.comm.Send(buf, dest=dest, tag=tag)

    def isend(self, buf, dest: int, tag: int):
        return self.comm.Isend(buf, dest=dest, tag=tag)

    def recv(self, buf, source: int, tag: int, among=None) -> int:
        """Into ``buf``; returns the source rank (``source`` may be ANY)."""
        status = self._mpi.Status()
        self.comm.Recv(buf, source=self._mpi.ANY_SOURCE if source == ANY else source, tag=tag,
                       status=status)
        return status.Get_source()

    def irecv(self, buf, source: int, tag: int):
        return self.comm.Irecv(buf, source=source, tag=tag)

    def recv_bytes(self, source: int, tag: int) -> np.ndarray:
        """A message of unknown length: probe its size, then take it."""
        status = self._mpi.Status()
        self.comm.Probe(source=source, tag=tag, status=status)
        buf = np.empty(status.Get_count(self._mpi.BYTE), np.uint8)
        self.comm.Recv(buf, source=source, tag=tag)
        return buf

    def waitall(self, requests) -> None:
        self._mpi.Request.Waitall(list(requests))

    def done(self, request) -> bool:
        return request.Test()

    def server_sum(self, x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        self.group.Allreduce(x, out, op=self._mpi.SUM)
        return out

    def retire(self, rank: int) -> None:
        """Peer ``rank`` said it is done: its leaving is no failure (nothing to do in MPI)."""

    def close(self) -> None:
        """MPI's runtime outlives the loop."""
