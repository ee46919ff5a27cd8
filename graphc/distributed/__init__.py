"""Several processes and nodes: ``init()`` bootstraps JAX's distributed runtime under mpirun
(OpenMPI 4/5, MPICH), SLURM, or Paddle's trainer variables (meet.py), with gloo collectives
on CPU; then data-parallel programs span every process's devices. ``fleet`` is the seeds'
fleet-style front end.

A single process (no launcher) needs no call: ``init()`` is then a no-op, and
``worker_index() == 0``, ``worker_num() == 1``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys

from . import backend, meet, watchdog
from .env import WorkerEnv, detect, is_parameter_server_job, split_endpoints
from .errors import DistributedError

log = logging.getLogger("graphc.distributed")


# process: JAX's distributed runtime is joined once per process (init); its worker env
_STATE: dict = {"env": None}


def init(timeout_s: float | None = None) -> WorkerEnv:
    """Join the job this process was launched into (idempotent).

    Under mpirun the rank 0 process picks a free port and tells the others through MPI
    (mpi4py, the ``mpi`` extra), so no two jobs on a host collide and OpenMPI 5, whose
    variables JAX does not recognise, works; under SLURM JAX's own detection is used. A
    trainer started on its own with Paddle's variables (``PADDLE_TRAINER_ID``,
    ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_CURRENT_ENDPOINT``) meets
    the others at the first endpoint (meet.py). ``timeout_s`` bounds the wait for every peer
    (default: ``FLAGS_rpc_deadline`` milliseconds, else 180 s, Paddle's).

    Joining changes two JAX settings, and only when the job has several processes: the CPU
    device count (``CPU_NUM``, if set) and the CPU collectives implementation (gloo, unless
    the user chose one, e.g. "mpi"). It must run before anything uses JAX devices.

    Then a watchdog thread starts: a rank that waits in a collective (a multi-process step,
    ``barrier()``) longer than ``GRAPHC_COLLECTIVE_TIMEOUT`` seconds (default 1800, 0: no
    deadline) ends the job (watchdog.py); under ``graphc launch`` the launcher names the
    ranks that never arrived.
    """
    if _STATE["env"] is not None:
        return _STATE["env"]
    env = detect()
    if env.launcher == "paddle":
        env = meet.from_environ(env)
    return _join(env, timeout_s)


def join_trainers(trainer_id: int, trainers, current_endpoint: str | None = None,
                  timeout_s: float | None = None) -> WorkerEnv:
    """Join the collective job a ``nccl2`` transpile describes: ``trainers``, every trainer's
    ``ip:port``, and ``trainer_id``, this one's index there. Under a launcher (mpirun,
    SLURM) its ranks must be these trainers; one trainer joins nothing."""
    if isinstance(trainers, int) and not isinstance(trainers, bool):
        env = init(timeout_s) if trainers > 1 else WorkerEnv("none")
        if trainers > 1 and env.size != trainers:
            raise DistributedError(
                f"transpile(trainers={trainers}) in nccl2 mode: this process is alone (no "
                "launcher and no PADDLE_TRAINER_ENDPOINTS); pass trainers='ip:port,ip:port' "
                "(every trainer's endpoint) or start it with Paddle's variables")
        return env
    eps = split_endpoints(trainers)
    joined = _STATE["env"]
    launched = joined if joined is not None else detect()
    if joined is not None or (launched.size > 1 and launched.launcher != "paddle"):
        if len(eps) > 1 and (launched.size, launched.rank) != (len(eps), trainer_id):
            raise DistributedError(
                f"transpile(trainer_id={trainer_id}, trainers=<{len(eps)} endpoints>) but this "
                f"process is rank {launched.rank} of {launched.size} ({launched.launcher}): "
                "give each rank its own trainer_id and every rank's endpoint")
        return init(timeout_s)
    if len(eps) <= 1:
        return WorkerEnv("none")  # one trainer: nothing to join
    return _join(meet.from_transpile(trainer_id, eps, current_endpoint), timeout_s)


def join_if_collective() -> WorkerEnv:
    """Join the collective job the environment describes, if any (a data-parallel program's
    first need); a parameter-server job's trainers meet their servers instead."""
    if _STATE["env"] is not None:
        return _STATE["env"]
    env = detect()
    if env.size <= 1 or is_parameter_server_job():
        return env
    return init()


def _join(env: WorkerEnv, timeout_s: float | None) -> WorkerEnv:
    if env.size <= 1:
        _STATE["env"] = env
        return env
    try:
        collective_timeout, timeout_source = watchdog.setting(os.environ.get(watchdog.ENV))
        seconds, source = meet.deadline(timeout_s)
    except ValueError as exc:
        raise DistributedError(str(exc)) from None
    import jax

    from ..runtime.devices import _backends_started, configure_cpu_devices
    if _backends_started():  # jax.distributed.initialize refuses then: say what to move
        raise backend.too_late(f"this process is trainer {env.rank} of {env.size} "
                               f"({env.launcher})")
    configure_cpu_devices()  # CPU_NUM, if set
    # CPU collectives across processes need an implementation: gloo (JAX's default) unless
    # the user chose another (e.g. "mpi"); an empty setting would leave them unavailable
    if not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        if env.uses_mpi:
            address, one_node = _coordinator_by_mpi(env)
            # the coordinator and gloo listen on this node's own address (loopback for one
            # node), never on every interface (JAX's default for the coordinator)
            backend.listen_on("127.0.0.1" if one_node else backend.own_address())
            jax.distributed.initialize(address, num_processes=env.size, process_id=env.rank,
                                       initialization_timeout=int(seconds),
                                       coordinator_bind_address=address)
        elif env.launcher == "paddle":
            backend.listen_on(env.endpoints[env.rank].rpartition(":")[0].strip("[]"))
            meet.join(env, seconds, source, jax.distributed.initialize)
        else:
            jax.distributed.initialize(initialization_timeout=int(seconds))
    except (RuntimeError, ValueError) as exc:
        raise DistributedError(f"could not start JAX's distributed runtime as rank "
                               f"{env.rank} of {env.size} ({env.launcher}): {exc}") from None
    _STATE["env"] = env
    _exit_at_once_on_uncaught_exceptions()
    _mark_multiprocess_steps()
    watchdog.start(env.rank, collective_timeout, peers=meet.peers(env),
                   source=timeout_source)
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
    every rank runs on one node (then the host is 127.0.0.1, else rank 0's own address)."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise DistributedError("running under mpirun needs mpi4py: pip install "
                               "'graphc[mpi]'") from None
    comm = MPI.COMM_WORLD
    one_node = len(set(comm.allgather(socket.gethostname()))) == 1
    found = None
    if comm.Get_rank() == 0:
        try:  # (every rank gets the error too: none waits for an address that never comes)
            host = "127.0.0.1" if one_node else backend.own_address()
            with socket.socket() as s:
                s.bind((host, 0))
                found = (f"{host}:{s.getsockname()[1]}", None)
        except (DistributedError, OSError) as exc:
            found = (None, f"rank 0 found no address for the job's coordinator: {exc}")
    address, error = comm.bcast(found, root=0)
    if error is not None:
        raise DistributedError(error)
    return address, one_node


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


def _offer_the_join() -> None:
    """A data-parallel program (runtime/) joins the job through this process's host services:
    the runtime never imports graphc.distributed."""
    from ..runtime.host_services import process_services
    process_services().join_job = join_if_collective


_offer_the_join()
backend.watch()  # before anything starts JAX's backend: where it starts, where gloo listens

from . import fleet  # noqa: E402  (fleet uses the functions above)
from .strategy import DistributedStrategy  # noqa: E402

__all__ = ["DistributedError", "DistributedStrategy", "WorkerEnv", "barrier", "fleet", "init",
           "is_first_worker", "join_if_collective", "join_trainers", "shard_batches",
           "worker_index", "worker_num"]
