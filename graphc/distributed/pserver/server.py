"""A parameter server's loop: hold this server's blocks in a scope and its shards of distributed
tables, answer row pulls (tables and prefetched blocks), take every live trainer's gradients,
run the update, return the blocks trainers keep replicas of."""

from __future__ import annotations

import os

import numpy as np

from .. import watchdog
from ..programs import ServerInfo, ServerProgram
from .link import ANY
from .protocol import (
    BARRIER,
    COMPLETE,
    PULL,
    SAVE,
    SERVER,
    TAG_CONTROL,
    TAG_GRADS,
    TAG_LAYOUT,
    TAG_PARAMS,
    TAG_PULL,
    TAG_PUSH,
    TAG_ROWS,
    TAG_SAVE,
    Cluster,
    Layout,
    PServerError,
    pack,
    unpack,
    unpack_rows,
)
from .table import RowTable


def server_layout(program, info: ServerInfo) -> tuple[Layout, dict[str, list[str]]]:
    """The wire layout of a server program, and for each gradient block the feed names of
    its per-trainer copies (``w@GRAD.trainer_0``, ...; the block itself with one trainer)."""
    from ...ir.program import Parameter
    block = program.global_block()
    feeds = [v for v in block.vars.values() if v.is_data]
    per_trainer = info.sync_mode and info.trainers > 1
    grads: dict[str, list[str]] = {}
    feeds = [v for v in feeds if not v.name.endswith("@BAK")]  # DC-ASGD's backups: local
    for v in feeds:
        base = v.name.rsplit(".trainer_", 1)[0] if per_trainer else v.name
        grads.setdefault(base, []).append(v.name)
    specs = {v.name: (tuple(v.shape), str(v.dtype)) for v in feeds}
    row_grads = set(info.row_grads)
    grad_specs = tuple((b, *specs[names[0]]) for b, names in sorted(grads.items())
                       if b not in row_grads)
    rows = tuple((b, int(np.prod(specs[names[0]][0][1:])), specs[names[0]][1], "block")
                 for b, names in sorted(grads.items()) if b in row_grads)
    rows += tuple((t["name"], int(t["width"]), str(t["dtype"]), "table")
                  for t in info.tables)
    prefetched = set(info.prefetch_blocks)
    params = tuple(sorted((v.name, tuple(v.shape), str(v.dtype)) for v in block.vars.values()
                          if isinstance(v, Parameter) and v.name not in prefetched))
    pulls = tuple(t["name"] for t in info.tables) + tuple(sorted(
        v.name for v in block.vars.values() if v.name in prefetched))
    return Layout(info.server_id, grad_specs, params, rows, pulls), grads


class _State:
    """What one server holds besides its scope: the program, its layout, its table shards."""

    def __init__(self, program, exe, scope, info):
        self.program, self.exe, self.scope, self.info = program, exe, scope, info
        self.cluster: Cluster | None = None
        self.layout, self.feeds_of = server_layout(program, info)
        block = program.global_block()
        self.shapes = {n: (tuple(block.var(n).shape), str(block.var(n).dtype))
                       for names in self.feeds_of.values() for n in names}
        self.tables = {t["name"]: RowTable(t) for t in info.tables}
        self.stats = {"rounds": 0, "bytes_received": 0, "bytes_sent": 0, "rows_pulled": 0,
                      "rows_pushed": 0}
        self.has_update = bool(self.shapes)  # the graph has blocks to feed
        # all-reduces over the servers per round (global-norm clipping): a server with no
        # block to update takes part from here
        self.server_sums = sum(op.type == "ps_server_sum" for op in program.global_block().ops)

    def join(self) -> None:
        self.cluster = Cluster.join(SERVER, self.info.server_id, self.info.endpoints,
                                    self.info.trainers, self.max_message(),
                                    server_peers=self.server_sums > 0)
        self.link = self.cluster.link
        self.trainer_of = {r: t for t, r in enumerate(self.cluster.trainers)}

    def max_message(self) -> int:
        """The largest message a trainer may send this server: its gradient blocks, every
        row of its row entries pushed at once, or a pull of every row of its largest entry."""
        block = self.program.global_block()
        heights = {t["name"]: int(t["height"]) for t in self.info.tables}
        for name, _, _, kind in self.layout.rows:
            if kind == "block":
                heights[name] = int(self.shapes[self.feeds_of[name][0]][0][0])
        for name in self.layout.pulls:
            if name not in heights:
                heights[name] = int(block.var(name).shape[0])
        push = 8 * len(self.layout.rows) + sum(
            heights[name] * (8 + width * np.dtype(dtype).itemsize)
            for name, width, dtype, _ in self.layout.rows)
        pull = 8 * (1 + max([heights[n] for n in self.layout.pulls], default=0))
        return max(self.layout.nbytes("grads"), push, pull)

    def where(self) -> str:
        return f"pserver {self.info.endpoint}"

    def answer_pull(self, rank: int) -> None:
        """A trainer's pull: the current rows of the ids it sent, in that order."""
        msg = self.link.recv_bytes(rank, TAG_PULL).view(np.int64)
        names = self.layout.pulls
        if not msg.size or not 0 <= msg[0] < len(names):
            raise PServerError(f"server {self.info.server_id}: a pull from rank {rank} "
                               f"names entry {msg[:1].tolist()}, this server holds {names}")
        name, ids = names[int(msg[0])], msg[1:]
        if name in self.tables:
            rows = np.ascontiguousarray(self.tables[name].rows(ids))
        else:  # a prefetched is_sparse block, as its last update left it
            rows = np.ascontiguousarray(np.asarray(self.scope[name])[ids])
        self.link.send(rows.reshape(-1).view(np.uint8), rank, TAG_ROWS)
        self.stats["rows_pulled"] += len(msg) - 1
        self.stats["bytes_sent"] += rows.nbytes

    def receive(self, rank: int, t: int) -> tuple[dict, dict]:
        """Trainer ``t``'s gradients of one step after its BARRIER: dense blocks by name, and
        the pushed rows (is_sparse blocks densified; tables' (ids, values) by table)."""
        buf = np.empty(self.layout.nbytes("grads"), np.uint8)
        with watchdog.waiting(f"{self.where()} receiving from trainer {t}"):
            self.link.recv(buf, rank, TAG_GRADS)
        self.stats["bytes_received"] += buf.nbytes
        dense = unpack(buf, self.layout.grads)
        pushed = {}
        if self.layout.rows:
            with watchdog.waiting(f"{self.where()} receiving rows from trainer {t}"):
                rbuf = self.link.recv_bytes(rank, TAG_PUSH)
            self.stats["bytes_received"] += rbuf.nbytes
            for (name, _, _, kind), (ids, values) in zip(self.layout.rows,
                                                        unpack_rows(rbuf, self.layout.rows)):
                self.stats["rows_pushed"] += len(ids)
                if kind == "table":
                    pushed[name] = (ids, values)
                    continue
                shape, dtype = self.shapes[self.feeds_of[name][0]]
                block = np.zeros(shape, dtype)
                np.add.at(block, ids, values.reshape(len(ids), *shape[1:]))
                dense[name] = block
        return dense, pushed

    def update_tables(self, pushes: list[dict], scale: float) -> None:
        """SGD on each table's rows, pushed by one or more trainers (sync: their mean)."""
        for name, table in self.tables.items():
            parts = [p[name] for p in pushes if name in p]
            if not parts:
                continue
            ids = np.concatenate([p[0] for p in parts])
            values = np.concatenate([p[1] for p in parts])
            if scale != 1.0:
                values = values * values.dtype.type(scale)
            lr = float(np.asarray(self.scope[table.spec["lr"]]).reshape(-1)[0])
            table.sgd(ids, values, lr)

    def server_sum(self, x: np.ndarray) -> np.ndarray:
        """``x`` summed over every server (in sync rounds every server calls this alike)."""
        with watchdog.waiting(f"{self.where()} summing over the servers"):
            return self.link.server_sum(np.ascontiguousarray(x))

    def blocks(self) -> list[np.ndarray]:
        return [np.asarray(self.scope[n]) for n, _, _ in self.layout.params]


def serve(program, executor=None, scope=None) -> dict:
    """Run the server loop of ``program`` (from ``get_pserver_program``) until every trainer
    has completed; the scope must hold its blocks (run its startup program first). Returns
    counters: rounds, bytes received and sent, rows pulled and pushed."""
    from ...runtime.executor import Executor
    from ...runtime.scope import global_scope
    if not isinstance(program, ServerProgram):
        raise PServerError("serve() takes a server program from "
                           "DistributeTranspiler.get_pserver_program(endpoint)")
    try:  # refused before joining the cluster, as distributed.init() does
        timeout = watchdog.parse_timeout(os.environ.get(watchdog.ENV))
    except ValueError as exc:
        raise PServerError(str(exc)) from None
    exe = executor or Executor()
    scope = global_scope() if scope is None else scope
    info = program.info
    state = _State(program, exe, scope, info)
    state.join()
    link = state.link
    # The update step's ps_server_sum ops call this server through the serving executor's
    # host services: the server joins them while it serves. The user's executor (a subclass,
    # perhaps) runs every round, as in Paddle; its services are restored afterwards.
    saved = exe.services
    exe.services = saved.replace(server=state)
    try:
        _load_tables(program, state)
        # over zmq the link's own deadline names the peer first; the watchdog is the backstop
        watchdog.start(link.rank, timeout + (0 if link.name == "mpi" else 10.0))
        for rank in state.cluster.trainers:
            link.send(state.layout.to_bytes(), rank, TAG_LAYOUT)
        initial = pack(state.blocks())
        link.waitall([link.isend(initial, rank, TAG_PARAMS)  # trainers pull
                      for rank in state.cluster.trainers])
        if info.sync_mode and not info.geo:
            _serve_sync(state)
        else:
            _serve_async(state)
    finally:
        exe.services = saved
        link.close()
    return state.stats


def _control(state: _State, what: str, live) -> tuple[int, int, int]:
    """The next control message from any trainer: (kind, rank, trainer id)."""
    ctrl = np.empty(3, np.int64)
    with watchdog.waiting(f"{state.where()} {what}"):
        rank = state.link.recv(ctrl, ANY, TAG_CONTROL,
                               among=[state.cluster.trainers[t] for t in live])
    t, kind = state.trainer_of.get(rank), int(ctrl[0])
    if kind == COMPLETE and t is not None:
        state.link.retire(rank)  # its connection may end now
    if t is None or kind not in (BARRIER, COMPLETE, SAVE, PULL):
        raise PServerError(f"server {state.info.server_id}: unexpected control message "
                           f"{ctrl.tolist()} from rank {rank}")
    return kind, rank, t


def _serve_async(state: _State) -> None:
    """Each trainer's gradients (GEO: deltas) are applied as they arrive (no averaging, no
    waiting for the others); the trainer gets the blocks as they are right after its update."""
    link, info = state.link, state.info
    live = set(range(info.trainers))
    # DC-ASGD: each trainer's copy of the blocks as it last received them
    initial = {n: np.array(state.scope[n], copy=True) for n, _, _ in state.layout.params}
    backup = {t: dict(initial) for t in live} if info.dc_asgd else None
    # replies in flight: a blocking send would wait for a trainer busy computing (an async
    # trainer takes its reply only at its next step), stalling every other trainer
    outbox: list = []
    while live:
        kind, rank, t = _control(state, "waiting for any trainer", live)
        if kind == COMPLETE:
            live.discard(t)
            continue
        if kind == SAVE:
            _save(state, rank)
            continue
        if kind == PULL:
            state.answer_pull(rank)
            continue
        feeds, pushed = state.receive(rank, t)
        if backup is not None:
            feeds.update({f"{n}@BAK": a for n, a in backup[t].items()})
        if state.has_update:
            state.exe.run(state.program, feed=feeds, scope=state.scope)
        state.update_tables([pushed], 1.0)
        blocks = state.blocks()
        if backup is not None:
            backup[t] = {n: np.array(a, copy=True)
                         for (n, _, _), a in zip(state.layout.params, blocks)}
        out = pack(blocks)
        outbox.append((link.isend(out, rank, TAG_PARAMS), out))
        outbox = [(r, b) for r, b in outbox if not link.done(r)]
        state.stats["rounds"] += 1
        state.stats["bytes_sent"] += out.nbytes
    with watchdog.waiting(f"{state.where()} returning the last blocks"):
        link.waitall([r for r, _ in outbox])


def _serve_sync(state: _State) -> None:
    """Every round takes each live trainer's gradients (answering pulls and checkpoint
    requests as they come, from whichever trainer), applies their mean once, and returns the
    blocks to each of them."""
    link, info = state.link, state.info
    live = set(range(info.trainers))
    while live:
        pending, feeds, pushes = set(live), {}, {}
        while pending:
            kind, rank, t = _control(state, f"waiting for trainers {sorted(pending)}", live)
            if kind == PULL:
                state.answer_pull(rank)
            elif kind == SAVE:  # between this trainer's steps: the last round's state
                _save(state, rank)
            elif t not in pending:
                raise PServerError(f"server {info.server_id}: trainer {t} sent "
                                   f"{'BARRIER' if kind == BARRIER else 'COMPLETE'} twice in "
                                   "one round")
            elif kind == COMPLETE:
                live.discard(t)
                pending.discard(t)
            else:
                dense, pushes[t] = state.receive(rank, t)
                for name, arr in dense.items():
                    many = len(state.feeds_of[name]) > 1
                    feeds[f"{name}.trainer_{t}" if many else name] = arr
                pending.discard(t)
        arrived = sorted(pushes)
        if not arrived:
            break
        # a trainer that completed counts as a zero gradient (Paddle's semantics: the mean
        # still divides by every trainer)
        for names in state.feeds_of.values():
            for n in names:
                if n not in feeds:
                    shape, dtype = state.shapes[n]
                    feeds[n] = np.zeros(shape, dtype)
        if state.has_update:
            state.exe.run(state.program, feed=feeds, scope=state.scope)
        else:
            for _ in range(state.server_sums):
                state.server_sum(np.zeros(1, np.float32))
        state.update_tables([pushes[t] for t in arrived], 1.0 / info.trainers)
        out = pack(state.blocks())
        requests = [link.isend(out, state.cluster.trainers[t], TAG_PARAMS) for t in arrived]
        with watchdog.waiting(f"{state.where()} returning blocks"):
            link.waitall(requests)
        state.stats["rounds"] += 1
        state.stats["bytes_sent"] += out.nbytes * len(arrived)


def _save(state: _State, rank: int) -> None:
    from .checkpoint import save_server
    dirname = bytes(state.link.recv_bytes(rank, TAG_SAVE)).decode()
    save_server(dirname, state.program, state.scope, state.info.server_id, state.tables)


def _load_tables(program: ServerProgram, state: _State) -> None:
    """Table rows a checkpoint loaded (load_checkpoint left them on the program)."""
    loaded = program.loaded_tables
    if loaded is not None:
        for table in state.tables.values():
            table.load(loaded.arrays, f"checkpoint file {loaded.path}")
