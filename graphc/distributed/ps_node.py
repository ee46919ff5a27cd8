"""One node's share of a parameter-server job on several nodes (``fleetrun --servers/--workers``
with endpoints on distinct addresses): every role whose address is this node's, one process each.

Roles meet over ZeroMQ by their endpoints (pserver/zmq_link.py), not MPI; the first local role
to fail ends this node's others, and the launcher exits with its status, naming it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .control import parent_death_signal
from .launch import LaunchError

GRACE_S = 5.0  # SIGTERM, then SIGKILL
NODE_IP_ENV = "POD_IP"  # Paddle's "this pod's address": which node this is, when set
# MPI's variables would make a role pick the MPI transport (pserver/link.py)
MPI_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "PRTE_", "SLURM_")


def host_of(endpoint: str) -> str:
    return endpoint.rsplit(":", 1)[0].strip("[]")


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
    """A role's output, line by line, to its log and to this launcher's stdout, prefixed."""
    for raw in iter(stream.readline, b""):
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
        args: list[str], log_dir: str, timeout: float | None = None) -> int:
    """Start this node's roles and watch them; returns 0 when every one succeeded, else the
    first failing role's status (124: ``timeout``; 128 + signal: the launcher was signalled)."""
    roles = local_roles(servers, workers, mine)
    if not roles:
        raise LaunchError(f"this node ({node}) runs no role of --servers {servers} and "
                          f"--workers {workers}: set {NODE_IP_ENV} or --node_ip to its address")
    logs = Path(log_dir)
    try:
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LaunchError(f"--log_dir '{log_dir}' cannot be created: {exc.strerror or exc}"
                          ) from None
    base = {k: v for k, v in os.environ.items() if not k.startswith(MPI_PREFIXES)}
    procs: list[tuple[str, subprocess.Popen]] = []
    pumps, files = [], []
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {s: signal.signal(s, _raise) for s in handled}
    try:
        for label, env in roles:
            name = (f"serverlog.{env['PADDLE_PSERVER_ID']}" if "PADDLE_PSERVER_ID" in env
                    else f"workerlog.{env['PADDLE_TRAINER_ID']}")
            log = open(logs / name, "wb")
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
        print(f"fleetrun: node {node} runs " + ", ".join(lbl for lbl, _ in procs),
              file=sys.stderr, flush=True)
        return _watch(procs, timeout)
    except _Signalled as sig:
        print(f"fleetrun: got {signal.Signals(sig.args[0]).name}; stopping this node's roles",
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


def _watch(procs, timeout: float | None) -> int:
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
                print(f"fleetrun: {label} {what}; stopping this node's other roles",
                      file=sys.stderr, flush=True)
                return code if code > 0 else 128 - code
        if not running:
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            print(f"fleetrun: the job ran past --timeout {timeout:g}s; stopping this node's "
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
