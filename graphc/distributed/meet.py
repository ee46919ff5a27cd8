"""Collective trainers started on their own meet by endpoints, as Paddle's do: trainer 0's
endpoint hosts JAX's coordinator (bound there only); a peer that never comes is named."""

# The wait is bounded here, before JAX's own deadline: JAX ends a process whose join times
# out with a C++ check failure, not an exception. A trainer whose coordinator never listens
# raises before it asks JAX to join; a coordinator whose peers never come prints the error
# naming them and exits 1 (its main thread waits inside JAX, which cannot be interrupted).

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from .env import WorkerEnv, endpoints_env, split_endpoints
from .errors import DistributedError
from .watchdog import RPC_DEADLINE_ENV, _number

DEFAULT_DEADLINE_S = 180.0  # Paddle's FLAGS_rpc_deadline default, 180000 ms
EXIT_NOT_JOINED = 1
_PROBE_EVERY_S = 0.2


def deadline(timeout_s: float | None, environ=None) -> tuple[float, str]:
    """(seconds, where they came from) of the join deadline."""
    if timeout_s is not None:
        return float(timeout_s), f"timeout_s={timeout_s:g}"
    raw = (os.environ if environ is None else environ).get(RPC_DEADLINE_ENV, "")
    if not raw.strip():
        return DEFAULT_DEADLINE_S, f"{RPC_DEADLINE_ENV} default {DEFAULT_DEADLINE_S:g} s"
    ms = _number(raw, RPC_DEADLINE_ENV, "milliseconds")
    return max(ms / 1000.0, 1.0), f"{RPC_DEADLINE_ENV}={ms:g} ms"


def _check_endpoints(eps: tuple[str, ...], what: str) -> None:
    for ep in eps:
        host, _, port = ep.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DistributedError(f"{what}: '{ep}' is not host:port")
    if len(set(eps)) != len(eps):
        raise DistributedError(f"{what} lists an endpoint twice: {','.join(eps)}")


def from_environ(env: WorkerEnv, environ=None) -> WorkerEnv:
    """The job Paddle's variables describe, checked: every variable a trainer started alone
    needs is named when missing or inconsistent."""
    environ = os.environ if environ is None else environ
    raw_eps = environ.get("PADDLE_TRAINER_ENDPOINTS", "")
    eps = split_endpoints(raw_eps)
    num = environ.get("PADDLE_TRAINERS_NUM", "").strip()
    if not eps:
        raise DistributedError(
            f"PADDLE_TRAINERS_NUM={num} but PADDLE_TRAINER_ENDPOINTS is not set: trainers "
            "started on their own meet at the first of their endpoints; set it to every "
            "trainer's ip:port, comma-separated (graphc launch and fleetrun set it)")
    _check_endpoints(eps, "PADDLE_TRAINER_ENDPOINTS")
    if num and (not num.isdigit() or int(num) != len(eps)):
        raise DistributedError(
            f"PADDLE_TRAINERS_NUM={num} but PADDLE_TRAINER_ENDPOINTS lists "
            f"{len(eps)} endpoints ({raw_eps})")
    tid = environ.get("PADDLE_TRAINER_ID", "").strip()
    if not tid:
        raise DistributedError(
            f"PADDLE_TRAINER_ID is not set: a trainer of a {len(eps)}-trainer "
            "job needs its index in PADDLE_TRAINER_ENDPOINTS")
    if not tid.isdigit() or not int(tid) < len(eps):
        raise DistributedError(
            f"PADDLE_TRAINER_ID={tid} is not in [0, {len(eps)}) (the trainers "
            f"of PADDLE_TRAINER_ENDPOINTS={raw_eps})")
    current = environ.get("PADDLE_CURRENT_ENDPOINT", "").strip()
    if current and current != eps[int(tid)]:
        raise DistributedError(
            f"PADDLE_CURRENT_ENDPOINT={current} but trainer {tid}'s endpoint in "
            f"PADDLE_TRAINER_ENDPOINTS is {eps[int(tid)]}")
    return endpoints_env(int(tid), eps)


def from_transpile(trainer_id: int, trainers, current_endpoint: str | None) -> WorkerEnv:
    """The job of a ``nccl2`` transpile: ``trainers`` is every trainer's endpoint
    (``"ip:port,ip:port"``), ``trainer_id`` this trainer's index there."""
    eps = split_endpoints(trainers)
    _check_endpoints(eps, "transpile(trainers=...)")
    if not 0 <= trainer_id < len(eps):
        raise DistributedError(
            f"transpile: trainer_id {trainer_id} is not in [0, {len(eps)}) "
            f"(trainers={','.join(eps)})")
    if current_endpoint and len(eps) > 1 and current_endpoint != eps[trainer_id]:
        raise DistributedError(
            f"transpile: current_endpoint {current_endpoint} is not trainer "
            f"{trainer_id}'s endpoint {eps[trainer_id]} in trainers={','.join(eps)}")
    return endpoints_env(trainer_id, eps)


def _listening(endpoint: str) -> bool:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _trainers(env: WorkerEnv, ranks) -> str:
    return ", ".join(f"trainer {r} ({env.endpoints[r]})" for r in ranks)


def peers(env: WorkerEnv) -> str:
    """Whom trainer ``env.rank`` of a job met by endpoints waits for in a collective (empty
    for other launchers: the watchdog then says "another rank")."""
    if env.launcher != "paddle" or not env.endpoints:
        return ""
    others = [r for r in range(env.size) if r != env.rank]
    return _trainers(env, others) if len(others) == 1 else f"one of {_trainers(env, others)}"


def join(env: WorkerEnv, seconds: float, source: str, initialize) -> None:
    """Join ``env``'s job with ``initialize`` (jax.distributed.initialize's signature)
    within ``seconds``; raises DistributedError when the coordinator never listens."""
    coordinator = env.endpoints[0]
    start = time.monotonic()
    if env.rank != 0:
        while not _listening(coordinator):
            if time.monotonic() - start > seconds:
                raise DistributedError(f"trainer {env.rank} of {env.size}: trainer 0, the job's "
                                f"coordinator at {coordinator}, is not listening after "
                                f"{seconds:g} s ({source}); start it (PADDLE_TRAINER_ID=0)")
            time.sleep(_PROBE_EVERY_S)
    left = max(seconds - (time.monotonic() - start), 1.0)
    others = [r for r in range(env.size) if r not in (0, env.rank)]
    if env.rank == 0:
        what = f"{_trainers(env, others)} never joined" if env.size == 2 else \
            f"not all of {_trainers(env, others)} joined"
    else:
        what = f"not all of {_trainers(env, others)} joined" if others else \
            "trainer 0 stopped answering"
    message = (f"trainer {env.rank} of {env.size}: {what} within {seconds:g} s ({source}); "
               f"the job meets at {coordinator} (trainer 0): start every trainer with "
               f"PADDLE_TRAINER_ENDPOINTS={','.join(env.endpoints)}")
    timer = threading.Timer(left, _give_up, (message,))
    timer.daemon = True
    timer.start()
    try:
        # JAX's own deadline comes after ours, which then names the missing peers
        initialize(coordinator, num_processes=env.size, process_id=env.rank,
                   initialization_timeout=int(left) + 30,
                   coordinator_bind_address=coordinator if env.rank == 0 else None)
    finally:
        timer.cancel()


def _give_up(message: str) -> None:
    """The main thread waits inside JAX, which cannot be interrupted: end the process."""
    try:
        sys.stderr.write(f"graphc.distributed.DistributedError: {message}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_NOT_JOINED)
