"""The trainer's side of the exchange: the channel the send/recv and row pull/push rules call from
inside the compiled step (backends/rules/pserver.py), and "complete" when the trainer is done."""

from __future__ import annotations

import atexit
import os

import numpy as np

from .. import watchdog
from .endpoints import FRAME_ENV
from .protocol import (
    BARRIER,
    COMPLETE,
    PULL,
    SAVE,
    TAG_CONTROL,
    TAG_GRADS,
    TAG_LAYOUT,
    TAG_PARAMS,
    TAG_PULL,
    TAG_PUSH,
    TAG_ROWS,
    TAG_SAVE,
    TRAINER,
    Cluster,
    Layout,
    PServerError,
    pack,
    pack_rows,
    sum_rows,
    unpack,
)


class TrainerChannel:
    """Gradient blocks given by ``send`` wait here until ``send_barrier`` ships one buffer per
    server; the first ``recv`` of a step takes one buffer from each server. ``pipelined``
    (async mode, Paddle's communicator): that recv posts the receive of this step's reply
    and returns the previous step's, so a trainer never waits for the servers' update of
    its own gradients (staleness one step; half-async and sync wait)."""

    def __init__(self, trainer_id: int, endpoints: list[str], trainers: int):
        self.trainer_id, self.endpoints, self.trainers = trainer_id, list(endpoints), trainers
        self.cluster: Cluster | None = None
        self.link = None  # the cluster's link (link.py), once joined
        self.layouts = []
        self.step = 0
        self.done = False
        self._grads: dict[str, np.ndarray] = {}
        self._rows: dict[tuple[int, str], list] = {}  # (server, entry) -> [(ids, values)]
        self._params: dict[str, np.ndarray] | None = None
        self._geo_old: dict[str, np.ndarray] | None = None
        self._geo_step = 0
        self._requests: list = []
        self._keep: list = []  # buffers of pending sends
        self.bytes_sent = 0
        self.bytes_received = 0
        self.pipelined = False
        self._startup_pull = False
        self._pending: list | None = None  # pipelined: (buffers, requests) of the last reply
        self._latest: dict[str, np.ndarray] | None = None  # pipelined: the newest blocks

    def _setup(self) -> None:
        if self.cluster is not None:
            return
        try:  # refused before joining, as the servers do
            timeout = watchdog.parse_timeout(os.environ.get(watchdog.ENV))
        except ValueError as exc:
            raise PServerError(str(exc)) from None
        self.cluster = Cluster.join(TRAINER, self.trainer_id, self.endpoints, self.trainers)
        link = self.link = self.cluster.link
        atexit.register(self.complete)
        # a stuck server is seen from here too (over zmq the link's deadline comes first)
        watchdog.start(link.rank, timeout + (0 if link.name == "mpi" else 10.0))
        self.layouts = [self._layout(s, link.recv_bytes(r, TAG_LAYOUT))
                        for s, r in enumerate(self.cluster.servers)]
        # every server sends its initial blocks once (Paddle's trainers pull their initial
        # parameters): the trainer's startup program reads them (recv with initial=True)
        self._initial = {}
        for layout, rank in zip(self.layouts, self.cluster.servers):
            buf = np.empty(layout.nbytes("params"), np.uint8)
            link.recv(buf, rank, TAG_PARAMS)
            self._initial.update(unpack(buf, layout.params))

    def _layout(self, server: int, data) -> Layout:
        """Server ``server``'s layout, whose sizes this trainer will allocate: within the
        link's frame bound (a server sends no bigger message)."""
        layout = Layout.from_bytes(data)
        bound, size = getattr(self.link, "frame_bound", 0), layout.nbytes("params")
        if bound and size > bound:
            raise PServerError(f"trainer {self.trainer_id}: pserver {server} "
                               f"({self.endpoints[server]}) announces {size} bytes of parameter "
                               f"blocks, over this trainer's bound of {bound} bytes "
                               f"({FRAME_ENV}): not a server of this job?")
        return layout

    def _server(self, endpoint: str) -> int:
        try:
            return self.endpoints.index(endpoint)
        except ValueError:
            raise PServerError(f"trainer {self.trainer_id}: block for unknown endpoint "
                               f"'{endpoint}' (servers: {self.endpoints})") from None

    # -- called by the rules ----------------------------------------------------------
    def send(self, names, epmap, arrays) -> None:
        self._setup()
        for name, ep, a in zip(names, epmap, arrays):
            self._server(ep)
            self._grads[name] = np.ascontiguousarray(a)

    def send_rows(self, names, epmap, split: str, sections, rows, values) -> None:
        """Queue a row gradient for ``send_barrier``: repeated rows summed, each row routed
        to its server (split "mod": row % #servers, a table's global id; "range": block i
        holds sections[i] rows, sent rebased to the block)."""
        self._setup()
        uniq, total = sum_rows(rows, values)
        total = total.reshape(len(uniq), -1)
        if split == "mod":
            owner = uniq % len(names)
            for i, (name, ep) in enumerate(zip(names, epmap)):
                mine = owner == i
                self._rows.setdefault((self._server(ep), name), []).append(
                    (uniq[mine], total[mine]))
            return
        start = 0
        for name, ep, count in zip(names, epmap, sections):
            mine = (uniq >= start) & (uniq < start + count)
            self._rows.setdefault((self._server(ep), name), []).append(
                (uniq[mine] - start, total[mine]))
            start += count

    def pull(self, table: str, ids: np.ndarray, keep: np.ndarray, width: int, dtype,
             route: dict) -> np.ndarray:
        """The rows of ``ids`` of a table whose rows stay on the servers (each distinct id
        once); rows of ids not ``keep``-t (padding, out of range) are zeros. ``route``:
        split "mod" (a distributed table: row r on server r % #servers) or "range" (an
        is_sparse table's blocks: ``sections`` rows each, named ``varnames``, on ``epmap``)."""
        self._setup()
        out = np.zeros((len(ids), width), dtype)
        uniq, inverse = np.unique(ids[keep], return_inverse=True)
        if not len(uniq):
            return out
        link = self.link
        if route["split"] == "mod":
            nservers = len(self.cluster.servers)
            parts = [(s, table, uniq % nservers == s, 0) for s in range(nservers)]
        else:
            parts, start = [], 0
            for name, ep, count in zip(route["varnames"], route["epmap"], route["sections"]):
                parts.append((self._server(ep), name, (uniq >= start) & (uniq < start + count),
                              start))
                start += count
        asks, sends = [], []
        for s, entry, mine, base in parts:
            if not mine.any():
                continue
            layout, rank = self.layouts[s], self.cluster.servers[s]
            if entry not in layout.pulls:
                raise PServerError(f"trainer {self.trainer_id}: server {s} holds no rows of "
                                   f"'{entry}' (table '{table}'; it serves {layout.pulls})")
            msg = np.concatenate([[layout.pulls.index(entry)], uniq[mine] - base]
                                 ).astype(np.int64)
            ctrl = np.array([PULL, self.step, self.trainer_id], np.int64)
            sends += [link.isend(ctrl, rank, TAG_CONTROL), link.isend(msg, rank, TAG_PULL)]
            asks.append((mine, rank, s, msg, ctrl))
            self.bytes_sent += msg.nbytes
        rows = np.empty((len(uniq), width), dtype)
        for mine, rank, s, _, _ in asks:
            part = np.empty((int(mine.sum()), width), dtype)
            with watchdog.waiting(f"trainer {self.trainer_id} waiting for rows of '{table}' "
                                  f"from pserver {s}"):
                link.recv(part.reshape(-1).view(np.uint8), rank, TAG_ROWS)
            rows[mine] = part
            self.bytes_received += part.nbytes
        link.waitall(sends)
        out[keep] = rows[inverse]
        return out

    def send_barrier(self) -> None:
        """Ship this step's blocks: one buffer per server (each server's blocks in its
        layout's order), after a BARRIER control message, then its row entries."""
        self._setup()
        link = self.link
        for s, (layout, rank) in enumerate(zip(self.layouts, self.cluster.servers)):
            missing = [n for n, _, _ in layout.grads if n not in self._grads]
            if missing:
                raise PServerError(f"trainer {self.trainer_id}: server {layout.server} expects "
                                   f"gradient blocks {missing} that this step did not send")
            buf = pack([self._grads[n] for n, _, _ in layout.grads])
            ctrl = np.array([BARRIER, self.step, self.trainer_id], np.int64)
            self._keep += [buf, ctrl]
            self._requests.append(link.isend(ctrl, rank, TAG_CONTROL))
            self._requests.append(link.isend(buf, rank, TAG_GRADS))
            self.bytes_sent += buf.nbytes
            if layout.rows:
                rbuf = pack_rows([self._entry(s, name, width, dtype)
                                  for name, width, dtype, _ in layout.rows])
                self._keep.append(rbuf)
                self._requests.append(link.isend(rbuf, rank, TAG_PUSH))
                self.bytes_sent += rbuf.nbytes
        self._grads.clear()
        self._rows.clear()

    def _entry(self, server: int, name: str, width: int, dtype) -> tuple:
        parts = self._rows.get((server, name), [])
        if not parts:
            return np.zeros(0, np.int64), np.zeros((0, width), dtype)
        return (np.concatenate([p[0] for p in parts]).astype(np.int64),
                np.ascontiguousarray(np.concatenate([p[1] for p in parts]), dtype=dtype))

    def recv(self, names, epmap, initial: bool = False) -> list[np.ndarray]:
        self._setup()
        if initial:
            self._startup_pull = True  # its fetch_barrier is no step
            return self._lookup(self._initial, names)
        if self._grads or self._rows:  # async graphs have no send_barrier: the first recv
            self.send_barrier()  # ships
        if self._params is None:
            self._params = self._pipelined() if self.pipelined else self._unpack(
                self._post_replies())
        return self._lookup(self._params, names)

    def _post_replies(self) -> tuple[list, list]:
        """Receives of one reply (the parameter blocks) from every server."""
        bufs, reqs = [], []
        for layout, rank in zip(self.layouts, self.cluster.servers):
            bufs.append(np.empty(layout.nbytes("params"), np.uint8))
            reqs.append(self.link.irecv(bufs[-1], rank, TAG_PARAMS))
        return bufs, reqs

    def _unpack(self, posted: tuple[list, list]) -> dict[str, np.ndarray]:
        bufs, reqs = posted
        with watchdog.waiting(f"trainer {self.trainer_id} waiting for the blocks of pservers "
                              f"{list(range(len(bufs)))}"):
            self.link.waitall(reqs)
        params = {}
        for layout, buf in zip(self.layouts, bufs):
            params.update(unpack(buf, layout.params))
            self.bytes_received += buf.nbytes
        return params

    def _pipelined(self) -> dict[str, np.ndarray]:
        if self._pending is not None:
            self._latest = self._unpack(self._pending)
        self._pending = self._post_replies()
        if self._latest is None:
            self._latest = dict(self._initial)
        return self._latest

    def _lookup(self, blocks: dict, names) -> list[np.ndarray]:
        try:
            return [blocks[n] for n in names]
        except KeyError as exc:
            raise PServerError(f"trainer {self.trainer_id}: no server returned the parameter "
                               f"block {exc}") from None

    def drop_step(self) -> None:
        """The step's data checks refused it: forget what it queued (nothing was shipped:
        every exchange of the step sees the refusal), so the servers never see the step."""
        self._grads.clear()
        self._rows.clear()

    def fetch_barrier(self) -> None:
        if self._startup_pull:  # the startup program's pull of the initial values
            self._startup_pull = False
            return
        if self._requests and self._params is None:
            self.recv([], [])  # a step that received no block still takes the servers' reply
        self.link.waitall(self._requests)
        self._requests, self._keep, self._params = [], [], None
        self.step += 1

    def geo_exchange(self, spec: dict, olds, xs) -> list[np.ndarray]:
        """GEO-SGD: every ``push_nums``-th step, send each block's delta (the change since the
        last sync, divided by the trainer count), take the servers' blocks, and move the
        local parameters by what the others pushed meanwhile; otherwise return ``xs``."""
        self._setup()
        names = spec["params"]
        if self._geo_old is None:  # the values every trainer and server started from
            self._geo_old = {n: np.array(o, copy=True) for n, o in zip(names, olds)}
        self._geo_step += 1
        if self._geo_step % spec["push_nums"]:
            return list(xs)
        local = {n: np.array(x, copy=True) for n, x in zip(names, xs)}
        old, where, i = self._geo_old, {}, 0
        for name, count in zip(names, spec["counts"]):
            for _ in range(count):
                block, s, e = spec["blocks"][i], spec["starts"][i], spec["ends"][i]
                i += 1
                delta = (local[name][s:e] - old[name][s:e]) / spec["trainers"]
                old[name][s:e] += delta
                self._grads[f"{block}@DELTA"] = delta.astype(old[name].dtype)
                where[block] = (name, s, e)
        self.send_barrier()  # ships the deltas as this step's "gradients"
        self.recv([], [])  # every server's blocks, in self._params
        for block, value in self._params.items():
            name, s, e = where[block]
            local[name][s:e] += value - old[name][s:e]
            old[name][s:e] = value
        self.fetch_barrier()
        return [local[n] for n in names]

    def save(self, dirname: str) -> None:
        """Ask every server to write its blocks to ``dirname`` now (between steps); the
        step count goes beside them."""
        from .checkpoint import save_meta
        self._setup()
        self.link.waitall(self._requests)
        for rank in self.cluster.servers:
            self.link.send(np.array([SAVE, self.step, self.trainer_id], np.int64), rank,
                           TAG_CONTROL)
            self.link.send(str(dirname).encode(), rank, TAG_SAVE)
        save_meta(dirname, self.step, len(self.endpoints), self.trainers)

    # -- lifetime ------------------------------------------------------------------
    def complete(self) -> None:
        """Tell every server this trainer takes no more steps (Paddle's COMPLETE), so a
        server never waits for it: uneven data does not hang the others."""
        if self.done:
            return
        self.done = True
        if self.cluster is not None and self.link.broken:  # a peer failed: say nothing more
            self.link.close()
            return
        self._setup()  # a trainer that took no step still joins, so the servers can start
        link = self.link
        try:
            if self._pending is not None:  # pipelined: the last reply is taken, not left
                self._latest, self._pending = self._unpack(self._pending), None
            link.waitall(self._requests)
            for rank in self.cluster.servers:
                link.send(np.array([COMPLETE, self.step, self.trainer_id], np.int64), rank,
                          TAG_CONTROL)
        finally:
            link.close()  # over zmq: after what is queued was delivered
