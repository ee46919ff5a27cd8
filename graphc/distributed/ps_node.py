"""One node's share of a parameter-server job on several nodes (``fleetrun --servers/--workers``,
``graphc launch --hosts --server_num``): every role whose address is this node's, a process each.

Roles meet over ZeroMQ by their endpoints (pserver/zmq_link.py), not MPI; the first local role
to fail ends this node's others, and the launcher exits with its status, naming it.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from .control import parent_death_signal
from .launch import LaunchError
from .pserver.endpoints import SECRET_ENV

GRACE_S = 5.0  # SIGTERM, then SIGKILL
NODE_IP_ENV = "POD_IP"  # Paddle's "this pod's address": which node this is, when set
# MPI's variables would make a role pick the MPI transport (pserver/link.py)
MPI_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PRTE_", "SLURM_")


def host_of(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[0].strip("[]")


def is_local(host: str) -> bool:
    """Whether ``host`` names this node (loopback, its host name, or one of its addresses)."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    try:
        mine = set(socket.gethostbyname_ex(socket.gethostname())[2])
        return socket.gethostbyname(host) in mine
    except OSError:
        return False


def address(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise LaunchError(f"host '{host}' does not resolve") from None


def plan(servers: list[str], workers: list[str], node: str | None, script: str, args: list[str],
         log_dir: str | None, timeout: float | None) -> dict:
    """What ``run`` takes for this node's roles of the job whose roles are ``servers`` and
    ``workers`` (``ip:port`` each): ``node`` (--node_ip, else $POD_IP, else every address of
    this host) picks this node's. Off loopback the job needs GRAPHC_JOB_SECRET (LaunchError)."""
    if set(servers) & set(workers):
        raise LaunchError(f"servers and workers share endpoint "
                          f"{sorted(set(servers) & set(workers))[0]}")
    hosts = {host_of(e) for e in servers + workers}
    outside = sorted(h for h in hosts if not ipaddress.ip_address(address(h)).is_loopback)
    if outside and not os.environ.get(SECRET_ENV):
        raise LaunchError(f"endpoints on {outside} are off loopback: set {SECRET_ENV} (the "
                          "same on every node) so that only the job's processes are admitted")
    node = node or os.environ.get(NODE_IP_ENV, "").strip() or None
    if node is not None:
        me = address(node)
        mine = lambda host: address(host) == me  # noqa: E731
    else:
        node, mine = "this host", is_local
    return {"servers": servers, "workers": workers, "node": node, "mine": mine,
            "script": script, "args": list(args), "log_dir": log_dir, "timeout": timeout}


def local_roles(servers: list[str], workers: list[str], mine) -> list[tuple[str, dict]]:
    """(label, role variables) of every role whose host ``mine(host)`` accepts (this node's),
    servers first, as Paddle's
    launcher gives them: TRAINING_ROLE, the endpoint lists, POD_IP/PADDLE_PORT, the ids."""
    common = {"PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers),
              "PADDLE_TRAINER_ENDPOINTS": ",".join(workers),
              "PADDLE_TRAINERS_NUM": str(len(workers)), "PADDLE_PSERVER_NUMS": str(len(servers)),
              "GRAPHC_PS_TRANSPORT": "zmq"}
    out = []
    for role, eps in (("PSERVER", servers), ("TRAINER", workers)):
        for i, ep in enumerate(eps):
            if not mine(host_of(ep)):
                continue
            env = dict(common, TRAINING_ROLE=role, POD_IP=host_of(ep),
                       PADDLE_PORT=ep.rsplit(":", 1)[1], PADDLE_CURRENT_ENDPOINT=ep)
            if role == "PSERVER":
                env["PADDLE_PSERVER_ID"] = str(i)
                out.append((f"pserver {i} ({ep})", env))
            else:
                env["PADDLE_TRAINER_ID"] = str(i)
                out.append((f"trainer {i} ({ep})", env))
    return out


def _pump(stream, prefix: str, log) -> None:
    """A role's output, line by line, to its log (if any) and to this launcher's stdout,
    prefixed."""
    for raw in iter(stream.readline, b""):
        if log is not None:
            log.write(raw)
            log.flush()
        sys.stdout.buffer.write(prefix.encode() + raw)
        sys.stdout.buffer.flush()
    stream.close()


class _Signalled(Exception):
    pass


def _raise(signum, _frame):
    raise _Signalled(signum)


def run(servers: list[str], workers: list[str], node: str, mine, script: str,
        args: list[str], log_dir: str | None, timeout: float | None = None,
        env: dict | None = None, prog: str = "fleetrun") -> int:
    """Start this node's roles and watch them; returns 0 when every one succeeded, else the
    first failing role's status (124: ``timeout``; 128 + signal: the launcher was signalled).
    ``log_dir``: each role's output also goes to serverlog.I / workerlog.I there; ``env``:
    variables every role gets besides its own; ``prog``: the launcher's name in messages."""
    roles = local_roles(servers, workers, mine)
    if not roles:
        raise LaunchError(f"this node ({node}) runs no role of servers {servers} and "
                          f"workers {workers}: set {NODE_IP_ENV} or --node_ip to its address")
    logs = None if log_dir is None else Path(log_dir)
    try:
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"--log_dir '{log_dir}' cannot be created: {exc.strerror or exc}"
                          ) from None
    base = {k: v for k, v in os.environ.items() if not k.startswith(MPI_PREFIXES)}
    base.update(env or {})
    procs: list[tuple[str, subprocess.Popen]] = []
    pumps, files = [], []
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {s: signal.signal(s, _raise) for s in handled}
    try:
        for label, env in roles:
            name = (f"serverlog.{env['PADDLE_PSERVER_ID']}" if "PADDLE_PSERVER_ID" in env
                    else f"workerlog.{env['PADDLE_TRAINER_ID']}")
            log = None if logs is None else open(logs / name, "wb")
            if log is not None:
                files.append(log)
            # each role its own session: stopping it stops whatever it started
            proc = subprocess.Popen([sys.executable, "-u", script, *args], env={**base, **env},
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=parent_death_signal(signal.SIGKILL))
            procs.append((label, proc))
            pump = threading.Thread(target=_pump, args=(proc.stdout, f"[{label}] ", log),
                                    daemon=True)
            pump.start()
            pumps.append(pump)
        print(f"{prog}: node {node} runs " + ", ".join(lbl for lbl, _ in procs),
              file=sys.stderr, flush=True)
        return _watch(procs, timeout, prog)
    except _Signalled as sig:
        print(f"{prog}: got {signal.Signals(sig.args[0]).name}; stopping this node's roles",
              file=sys.stderr)
        return 128 + sig.args[0]
    finally:
        for s in handled:
            signal.signal(s, signal.SIG_IGN)
        _stop([p for _, p in procs])
        for pump in pumps:
            pump.join(2.0)
        for f in files:
            f.close()
        for s, handler in previous.items():
            signal.signal(s, handler)


def _watch(procs, timeout: float | None, prog: str) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        running = 0
        for label, proc in procs:
            code = proc.poll()
            if code is None:
                running += 1
            elif code != 0:
                what = (f"was killed by {signal.Signals(-code).name}" if code < 0
                        else f"exited with status {code}")
                print(f"{prog}: {label} {what}; stopping this node's other roles",
                      file=sys.stderr, flush=True)
                return code if code > 0 else 128 - code
        if not running:
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            print(f"{prog}: the job ran past --timeout {timeout:g}s; stopping this node's "
                  "roles", file=sys.stderr, flush=True)
            return 124
        time.sleep(0.2)


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every live role's process group, SIGKILL after GRACE_S seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
