"""JAX's CPU backend as a joined job needs it: gloo's listeners bound to this process's own
address, and the user's line that first started the backend (named when a join comes too late).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import socket
import sys

from .errors import DistributedError

# process: JAX's backends start once per process; where they started, and the address gloo
# binds once this process joined a job (None: gloo's default, this host name's address)
_STATE: dict = {"started_at": None, "gloo_host": None, "wrapped": False}
NODE_IP_ENV = "POD_IP"  # Paddle's "this pod's address"

# frames of these packages are not the user's line that started the backend
_INTERNAL = frozenset({"graphc", "jax", "jaxlib", "numpy", "importlib", "threading",
                       "concurrent", "contextlib", "functools"})


def _module(frame) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _internal(frame) -> bool:
    name = _module(frame)
    if name.startswith("graphc.testing"):
        return False  # graphc's test helpers are user code here, as in ir/source.py
    return name.split(".")[0] in _INTERNAL or frame.f_code.co_filename.startswith("<frozen")


def _caller() -> str:
    """``file:line`` of the innermost frame outside graphc and JAX, with the graphc call it
    made (``Executor.run``), or "?"."""
    frame, called = sys._getframe(1), None
    while frame is not None:
        if not _internal(frame):
            name = frame.f_code.co_filename
            if not name.startswith("<"):
                rel = os.path.relpath(name)
                name = name if rel.startswith("..") else rel
            return f"{name}:{frame.f_lineno}" + (f" ({called})" if called else "")
        if _module(frame).split(".")[0] == "graphc":
            called = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        frame = frame.f_back
    return "?"


def watch() -> None:
    """Wrap JAX's CPU backend factory, once and only before any backend started: the backend
    then records where it started, and makes gloo listen on this process's own address."""
    from jax._src import xla_bridge
    if _STATE["wrapped"] or xla_bridge.backends_are_initialized():
        return
    registration = xla_bridge._backend_factories.get("cpu")
    if registration is None:
        return
    original = registration.factory

    def make_cpu_client():
        _STATE["started_at"] = _caller()
        host = _STATE["gloo_host"]
        collectives = _gloo(host) if host else None
        return original(collectives=collectives) if collectives is not None else original()

    xla_bridge._backend_factories["cpu"] = dataclasses.replace(registration,
                                                               factory=make_cpu_client)
    _STATE["wrapped"] = True


def _gloo(host: str):
    """gloo's TCP collectives listening on ``host`` (JAX's default is this host name's
    address), when this process joined a job and chose gloo."""
    import jax
    from jax._src import distributed
    from jax._src.lib import _jax
    client = distributed.global_state.client
    if client is None or jax.config.jax_cpu_collectives_implementation != "gloo":
        return None
    return _jax.make_gloo_tcp_collectives(distributed_client=client, hostname=host)


def listen_on(host: str | None) -> None:
    """gloo listens on ``host`` once the backend starts (the process's own address)."""
    _STATE["gloo_host"] = host


def started_at() -> str | None:
    return _STATE["started_at"]


def own_address() -> str:
    """This node's address for listeners other nodes reach: $POD_IP, else what its host name
    resolves to; DistributedError when that is loopback (the others could not connect)."""
    pod = os.environ.get(NODE_IP_ENV, "").strip()
    name = pod or socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
    except OSError as exc:
        raise DistributedError(f"this node's address '{name}' does not resolve ({exc}): set "
                               f"{NODE_IP_ENV} to its address") from None
    if ipaddress.ip_address(addr).is_loopback and not pod:
        raise DistributedError(f"this node's host name '{name}' resolves to {addr} (loopback), "
                               "where the job's other nodes cannot connect: set "
                               f"{NODE_IP_ENV} to this node's address on their network")
    return addr


def too_late(what: str) -> DistributedError:
    """The error of a join after JAX's backend started: what to move where."""
    where = started_at()
    first = (f"JAX's backend already started at {where}" if where else
             "JAX's backend already started (before graphc was imported)")
    before = f"before {where.split(' ')[0]}" if where else "before anything uses JAX"
    return DistributedError(
        f"{what}, but {first}, and JAX joins a distributed job only before its backend "
        "starts, so this process can only train alone: call graphc.distributed.init() (or "
        f"fleet.init(is_collective=True), or the nccl2 transpile) {before} (the backend starts "
        "with the first Executor, CompiledProgram, program run or jax call)")
