"""Several processes and nodes: ``init()`` bootstraps JAX's distributed runtime under mpirun
(OpenMPI 4/5, MPICH) or SLURM, with gloo collectives on CPU; then data-parallel programs span
every process's devices. ``fleet`` is the seeds' fleet-style front end.

A single process (no launcher) needs no call: ``init()`` is then a no-op, and
``worker_index() == 0``, ``worker_num() == 1``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from ..ir.errors import GraphcError
from . import watchdog
from .env import WorkerEnv, detect

log = logging.getLogger("graphc.distributed")


class DistributedError(GraphcError):
    """The distributed runtime cannot start, or was asked for too late."""


# process: JAX's distributed runtime is joined once per process (init); its worker env
_STATE: dict = {"env": None}


def init(timeout_s: int = 120) -> WorkerEnv:
    """Join the job this process was launched into (idempotent).

    Under mpirun the rank 0 process picks a free port and tells the others through MPI
    (mpi4py, the ``mpi`` extra), so no two jobs on a host collide and OpenMPI 5, whose
    variables JAX does not recognise, works; under SLURM JAX's own detection is used.
    CPU devices per process come from ``CPU_NUM``; CPU collectives use gloo. Must run
    before anything uses JAX devices.

    Then a watchdog thread starts: a rank that waits in a collective (a multi-process step,
    ``barrier()``) longer than ``GRAPHC_COLLECTIVE_TIMEOUT`` seconds (default 1800, 0: no
    deadline) ends the job (watchdog.py); under ``graphc launch`` the launcher names the
    ranks that never arrived.
    """
    if _STATE["env"] is not None:
        return _STATE["env"]
    env = detect()
    if env.size <= 1:
        _STATE["env"] = env
        return env
    try:
        collective_timeout = watchdog.parse_timeout(os.environ.get(watchdog.ENV))
    except ValueError as exc:
        raise DistributedError(str(exc)) from None
    import jax

    from ..runtime.devices import _backends_started, configure_cpu_devices
    if _backends_started():
        raise DistributedError("graphc.distributed.init() must run before anything uses JAX "
                               "devices (call it, or fleet.init(), first in the script)")
    configure_cpu_devices()  # CPU_NUM, if set
    # CPU collectives across processes need an implementation: gloo (JAX's default) unless
    # the user chose another (e.g. "mpi"); an empty setting would leave them unavailable
    if not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        if env.uses_mpi:
            address, one_node = _coordinator_by_mpi(env)
            # one node: the coordinator listens on loopback only (JAX's default is every
            # interface)
            jax.distributed.initialize(address, num_processes=env.size, process_id=env.rank,
                                       initialization_timeout=timeout_s,
                                       coordinator_bind_address=address if one_node else None)
        else:
            jax.distributed.initialize(initialization_timeout=timeout_s)
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(f"could not start JAX's distributed runtime as rank "
                               f"{env.rank} of {env.size} ({env.launcher}): {exc}") from None
    _STATE["env"] = env
    _exit_at_once_on_uncaught_exceptions()
    _mark_multiprocess_steps()
    watchdog.start(env.rank, collective_timeout)
    log.info("rank %d of %d: %d local devices, %d in all", env.rank, env.size,
             jax.local_device_count(), jax.device_count())
    return env


def _exit_at_once_on_uncaught_exceptions() -> None:
    """An uncaught exception on one rank ends that process at once (after printing it).

    Otherwise the interpreter's exit runs jax.distributed's shutdown, which waits for every
    other rank, while they wait in a collective for this one: the job hung until gloo's
    30 s timeout instead of ending as soon as mpirun saw the rank fail.
    """
    previous = sys.excepthook

    def hook(exc_type, exc, tb):
        try:
            previous(exc_type, exc, tb)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(1)

    sys.excepthook = hook


def _mark_multiprocess_steps() -> None:
    """``Executor.run`` and a multi-process data-parallel step count as collective waits for
    the watchdog (a step's collectives may be waited on anywhere in ``run``: fetches, checks).

    The process's host services carry it (``collective_wait``, runtime/host_services.py):
    set here, once, when a process joins a job of several, so that a single process pays
    nothing; Executors made with services of their own take it only if those hold it.
    """
    from ..runtime.host_services import process_services

    process_services().collective_wait = watchdog.waiting


def _coordinator_by_mpi(env: WorkerEnv) -> tuple[str, bool]:
    """``host:port`` of a free port on rank 0, broadcast to every rank over MPI, and whether
    every rank runs on one node (then the host is 127.0.0.1)."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("running under mpirun needs mpi4py: pip install "
                               "'graphc[mpi]'") from None
    comm = MPI.COMM_WORLD
    one_node = len(set(comm.allgather(socket.gethostname()))) == 1
    address = None
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1" if one_node else "", 0))
            port = s.getsockname()[1]
        address = f"{'127.0.0.1' if one_node else socket.gethostname()}:{port}"
    return comm.bcast(address, root=0), one_node


def _env() -> WorkerEnv:
    return _STATE["env"] if _STATE["env"] is not None else detect()


def worker_index() -> int:
    """This process's rank (0 for a single process)."""
    return _env().rank


def worker_num() -> int:
    """How many processes the job has."""
    return _env().size


def is_first_worker() -> bool:
    return worker_index() == 0


def barrier(name: str = "graphc_barrier") -> None:
    """Wait until every process reaches this point (every device takes part)."""
    if worker_num() <= 1:
        return
    from jax.experimental import multihost_utils
    with watchdog.waiting(f"barrier('{name}')"):
        multihost_utils.sync_global_devices(name)


def shard_batches(batches, drop_last: bool = True) -> list:
    """This rank's share of ``batches``: every ``worker_num()``-th one from its index, cut to
    the same count on every rank (a rank with one batch more would wait forever in the last
    step's collectives, as the seeds warn). ``drop_last=False`` keeps every batch and
    requires the count to divide evenly."""
    batches = list(batches)
    n, rank = worker_num(), worker_index()
    if len(batches) % n and not drop_last:
        raise DistributedError(f"{len(batches)} batches do not split evenly over {n} "
                               "workers; pass drop_last=True to drop the remainder")
    per_rank = len(batches) // n
    return batches[rank::n][:per_rank]


from . import fleet  # noqa: E402  (fleet uses the functions above)
from .strategy import DistributedStrategy  # noqa: E402

__all__ = ["DistributedError", "DistributedStrategy", "WorkerEnv", "barrier", "fleet", "init",
           "is_first_worker", "shard_batches", "worker_index", "worker_num"]
