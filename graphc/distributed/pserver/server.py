"""A parameter server's loop: hold this server's blocks in a scope, take every live trainer's
gradient blocks, run the server program (a compiled JAX step) on them, return the blocks."""

from __future__ import annotations

import os

import numpy as np

from .. import watchdog
from .protocol import (
    BARRIER,
    COMPLETE,
    SAVE,
    SERVER,
    TAG_CONTROL,
    TAG_GRADS,
    TAG_LAYOUT,
    TAG_PARAMS,
    TAG_SAVE,
    Cluster,
    Layout,
    PServerError,
    pack,
    unpack,
)


def server_layout(program, info: dict) -> tuple[Layout, dict[str, list[str]]]:
    """The wire layout of a server program, and for each gradient block the feed names of
    its per-trainer copies (``w@GRAD.trainer_0``, ...; the block itself with one trainer)."""
    from ...ir.program import Parameter
    block = program.global_block()
    feeds = [v for v in block.vars.values() if v.is_data]
    per_trainer = info["sync_mode"] and info["trainers"] > 1
    grads: dict[str, list[str]] = {}
    feeds = [v for v in feeds if not v.name.endswith("@BAK")]  # DC-ASGD's backups: local
    for v in feeds:
        base = v.name.rsplit(".trainer_", 1)[0] if per_trainer else v.name
        grads.setdefault(base, []).append(v.name)
    specs = {v.name: (tuple(v.shape), str(v.dtype)) for v in feeds}
    grad_specs = tuple((b, *specs[names[0]]) for b, names in sorted(grads.items()))
    params = tuple(sorted((v.name, tuple(v.shape), str(v.dtype)) for v in block.vars.values()
                          if isinstance(v, Parameter)))
    return Layout(info["server_id"], grad_specs, params), grads


def serve(program, executor=None, scope=None) -> dict:
    """Run the server loop of ``program`` (from ``get_pserver_program``) until every trainer
    has completed; the scope must hold its blocks (run its startup program first). Returns
    counters: rounds, bytes received and sent."""
    from ...runtime.executor import Executor
    from ...runtime.scope import global_scope
    info = getattr(program, "_ps_server", None)
    if info is None:
        raise PServerError("serve() takes a server program from "
                           "DistributeTranspiler.get_pserver_program(endpoint)")
    try:  # refused before joining the cluster, as distributed.init() does
        timeout = watchdog.parse_timeout(os.environ.get(watchdog.ENV))
    except ValueError as exc:
        raise PServerError(str(exc)) from None
    exe = executor or Executor()
    scope = global_scope() if scope is None else scope
    layout, feeds_of = server_layout(program, info)
    cluster = Cluster.join(SERVER, info["server_id"], len(info["endpoints"]), info["trainers"])
    comm = cluster.comm
    watchdog.start(comm.Get_rank(), timeout)
    for rank in cluster.trainers:
        comm.send(layout, dest=rank, tag=TAG_LAYOUT)
    initial = pack([np.asarray(scope[n]) for n, _, _ in layout.params])
    from mpi4py import MPI
    MPI.Request.Waitall([comm.Isend(initial, dest=rank, tag=TAG_PARAMS)  # trainers pull these
                         for rank in cluster.trainers])
    stats = {"rounds": 0, "bytes_received": 0, "bytes_sent": 0}
    if info["sync_mode"] and not info.get("geo"):
        _serve_sync(program, exe, scope, cluster, layout, feeds_of, info, stats)
    else:
        _serve_async(program, exe, scope, cluster, layout, info, stats)
    return stats


def _serve_async(program, exe, scope, cluster, layout, info, stats) -> None:
    """Each trainer's gradients (GEO: deltas) are applied as they arrive (no averaging, no
    waiting for the others); the trainer gets the blocks as they are right after its update."""
    from mpi4py import MPI
    comm, live = cluster.comm, set(range(info["trainers"]))
    trainer_of = {r: t for t, r in enumerate(cluster.trainers)}
    nbytes = layout.nbytes("grads")
    ctrl, status = np.empty(3, np.int64), MPI.Status()
    # DC-ASGD: each trainer's copy of the blocks as it last received them
    initial = {n: np.array(scope[n], copy=True) for n, _, _ in layout.params}
    backup = {t: dict(initial) for t in live} if info.get("dc_asgd") else None
    while live:
        with watchdog.waiting(f"pserver {info['endpoint']} waiting for any trainer"):
            comm.Recv(ctrl, source=MPI.ANY_SOURCE, tag=TAG_CONTROL, status=status)
        rank = status.Get_source()
        t = trainer_of.get(rank)
        if t is None or int(ctrl[0]) not in (BARRIER, COMPLETE, SAVE):
            raise PServerError(f"server {info['server_id']}: unexpected control message "
                               f"{ctrl.tolist()} from rank {rank}")
        if int(ctrl[0]) == COMPLETE:
            live.discard(t)
            continue
        if int(ctrl[0]) == SAVE:
            _save(program, scope, rank, cluster, info)
            continue
        buf = np.empty(nbytes, np.uint8)
        comm.Recv(buf, source=rank, tag=TAG_GRADS)
        stats["bytes_received"] += nbytes
        feeds = unpack(buf, layout.grads)
        if backup is not None:
            feeds.update({f"{n}@BAK": a for n, a in backup[t].items()})
        if layout.grads:
            exe.run(program, feed=feeds, scope=scope)
        blocks = [np.asarray(scope[n]) for n, _, _ in layout.params]
        if backup is not None:
            backup[t] = {n: np.array(a, copy=True) for (n, _, _), a in zip(layout.params, blocks)}
        out = pack(blocks)
        comm.Send(out, dest=rank, tag=TAG_PARAMS)
        stats["rounds"] += 1
        stats["bytes_sent"] += out.nbytes


def _serve_sync(program, exe, scope, cluster, layout, feeds_of, info, stats) -> None:
    """Every round waits for each live trainer's gradients, applies their mean once, and
    returns the blocks to each of them."""
    comm, sid = cluster.comm, info["server_id"]
    live = set(range(info["trainers"]))
    zeros = {n: np.zeros(s, d) for n, s, d in layout.grads}
    nbytes = layout.nbytes("grads")
    ctrl = np.empty(3, np.int64)
    while live:
        feeds, arrived = {}, []
        for t in sorted(live):
            kind = SAVE
            while kind == SAVE:  # a checkpoint request comes between a trainer's steps
                with watchdog.waiting(f"pserver {info['endpoint']} waiting for trainer {t}"):
                    comm.Recv(ctrl, source=cluster.trainers[t], tag=TAG_CONTROL)
                kind = int(ctrl[0])
                if kind == SAVE:
                    _save(program, scope, cluster.trainers[t], cluster, info)
            if kind == COMPLETE:
                live.discard(t)
                continue
            if kind != BARRIER:
                raise PServerError(f"server {sid}: unknown control message {kind} from "
                                   f"trainer {t}")
            buf = np.empty(nbytes, np.uint8)
            with watchdog.waiting(f"pserver {info['endpoint']} receiving from trainer {t}"):
                comm.Recv(buf, source=cluster.trainers[t], tag=TAG_GRADS)
            stats["bytes_received"] += nbytes
            for name, arr in unpack(buf, layout.grads).items():
                feeds[f"{name}.trainer_{t}" if len(feeds_of[name]) > 1 else name] = arr
            arrived.append(t)
        if not arrived:
            break
        # a trainer that completed counts as a zero gradient (Paddle's semantics: the mean
        # still divides by every trainer)
        for name, names in feeds_of.items():
            for n in names:
                feeds.setdefault(n, zeros[name])
        if layout.grads:
            exe.run(program, feed=feeds, scope=scope)
        out = pack([np.asarray(scope[n]) for n, _, _ in layout.params])
        requests = [comm.Isend(out, dest=cluster.trainers[t], tag=TAG_PARAMS) for t in arrived]
        from mpi4py import MPI
        with watchdog.waiting(f"pserver {info['endpoint']} returning blocks"):
            MPI.Request.Waitall(requests)
        stats["rounds"] += 1
        stats["bytes_sent"] += out.nbytes * len(arrived)


def _save(program, scope, rank: int, cluster, info) -> None:
    from .checkpoint import save_server
    dirname = cluster.comm.recv(source=rank, tag=TAG_SAVE)
    save_server(dirname, program, scope, info["server_id"])
