"""``fleetrun`` (and ``graphc fleetrun``): Paddle's launcher command line, taken as Paddle's
``python -m paddle.distributed.fleet.launch`` takes it, and run as a ``graphc launch`` job.

Collective flags (``--ips``, ``--gpus``, ``--nproc_per_node``) map onto graphc launch's
``--hosts``, ``--devices`` and ``--nproc_per_node``; parameter-server flags (``--server_num``,
``--worker_num``, ``--servers``, ``--workers``) onto ``--server_num`` / ``--worker_num``, every
rank getting Paddle's role variables with the endpoints the command named (fleetrun_rank.py).
Endpoints on several addresses make a multi-node job: each node's fleetrun starts the roles on
its own address, each a process meeting the others over ZeroMQ (ps_node.py). What graphc cannot
do (heterogeneous and elastic jobs, XPUs, rank mapping) is refused with the flag's name and
exit status 2, as argparse refuses a bad flag.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import ps_node
from .launch import LaunchError

USAGE_EXIT = 2  # argparse's status for a bad command line
FIRST_PORT = 6170  # Paddle's first port; fleetrun gives workers without one FIRST_PORT + S + i
SERVERS_ENV, WORKERS_ENV = "GRAPHC_FLEETRUN_SERVERS", "GRAPHC_FLEETRUN_WORKERS"
RANK_SHIM = str(Path(__file__).with_name("fleetrun_rank.py"))

# flag -> help; every one takes a value (Paddle's launcher has no switches)
SUPPORTED = {
    "--log_dir": "each rank's output also goes to LOG_DIR/workerlog.RANK (default: log; "
                 "servers are ranks 0..S-1, so their logs are workerlog.0.. rather than "
                 "Paddle's serverlog.N)",
    "--nproc_per_node": "collective: processes per node",
    "--run_mode": "collective or ps (ps-heter is refused); default: ps when a "
                  "parameter-server flag is given, else collective",
    "--gpus": "collective: comma-separated GPU ids, split evenly over a node's processes",
    "--selected_gpus": "the same as --gpus",
    "--ips": "collective: comma-separated node addresses (default: this node)",
    "--servers": "parameter servers' ip:port list; its length is the server count and its "
                 "order the server index; on several addresses, each node's fleetrun starts "
                 "the roles on its own address",
    "--workers": "trainers' ip[:port] list; its length is the worker count",
    "--server_num": "parameter-server job: this many servers",
    "--worker_num": "parameter-server job: this many trainers",
    "--http_port": "accepted and unused: MPI needs no gloo rendezvous port",
    # graphc launch's own bounds, which fleetrun lacks
    "--timeout": "graphc: stop the whole job after this many seconds (exit 124)",
    "--collective_timeout": "graphc: end the job when a rank waits longer than this many "
                            "seconds in a collective",
    "--mpirun": "graphc: the mpirun to use",
    "--node_ip": "graphc: this node's address in --servers/--workers (default: $POD_IP, else "
                 "every listed address of this host)",
}
REFUSED = {
    "--heter_workers": "heterogeneous parameter-server jobs (ps-heter) are not supported",
    "--heter_worker_num": "heterogeneous parameter-server jobs (ps-heter) are not supported",
    "--heter_devices": "heterogeneous parameter-server jobs (ps-heter) are not supported",
    "--xpus": "graphc runs on CPUs and GPUs; there are no XPUs",
    "--selected_xpus": "graphc runs on CPUs and GPUs; there are no XPUs",
    "--ranks": "rank mapping (auto-parallel lazy launch) is not supported",
    "--enable_rank_mapping": "rank mapping (auto-parallel lazy launch) is not supported",
    **{f: "elastic training is not supported" for f in (
        "--elastic_server", "--job_id", "--np", "--scale", "--host", "--force")},
}
PS_FLAGS = ("--servers", "--workers", "--server_num", "--worker_num", "--http_port")


class FleetrunError(LaunchError):
    """A fleetrun flag graphc does not support, or values that do not fit together."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetrun", allow_abbrev=False,
        description="Paddle's fleetrun command line, run as `graphc launch`; parameter "
                    "servers on several nodes: --servers/--workers on several addresses, each "
                    "node starting its own roles. Refused: " + ", ".join(sorted(REFUSED)) + ".")
    for flag, text in SUPPORTED.items():
        p.add_argument(flag, default=None, help=text)
    p.add_argument("training_script", help="the training script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def _check_flags(argv: list[str]) -> list[str]:
    """The flags given before the script, refusing unknown and unsupported ones by name."""
    given, i = [], 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token == "-":
            break  # the training script: the rest is its own
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name in ("-h", "--help"):
            i += 1
            continue
        if name in REFUSED:
            raise FleetrunError(f"fleetrun flag {name}: {REFUSED[name]}")
        if name not in SUPPORTED:
            raise FleetrunError(f"unknown fleetrun flag {name} (supported: "
                                f"{', '.join(SUPPORTED)})")
        given.append(name)
        i += 1 if "=" in token else 2
    return given


def _endpoints(raw: str, flag: str, first_port: int | None, here: bool = True) -> list[str]:
    """``raw``'s ip:port entries (a missing port is ``first_port + i`` where allowed), each
    on this node unless not ``here``, or FleetrunError naming the flag."""
    items = [e.strip() for e in raw.split(",")]
    if not raw.strip() or any(not e for e in items):
        raise FleetrunError(f"{flag} must be a comma-separated list of ip:port, got '{raw}'")
    out = []
    for i, item in enumerate(items):
        host, _, port = item.partition(":")
        if not port:
            if first_port is None:
                raise FleetrunError(f"{flag} entry '{item}' has no port (ip:port expected)")
            port = str(first_port + i)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise FleetrunError(f"{flag} entry '{item}' has no valid port")
        if here and not ps_node.is_local(host):
            raise FleetrunError(f"{flag} entry '{item}' is not on this node (a job on several "
                                "nodes lists both --servers and --workers)")
        out.append(f"{host}:{port}")
    if len(set(out)) != len(out):
        raise FleetrunError(f"{flag} names an endpoint twice: '{raw}'")
    return out


def _count(raw, flag: str) -> int | None:
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise FleetrunError(f"{flag} must be a whole number >= 1, got '{raw}'")
    return value


def _role_count(num, listed, num_flag: str, list_flag: str) -> int:
    if num is None and listed is None:
        raise FleetrunError(f"a parameter-server job needs {num_flag} or {list_flag}")
    if num is not None and listed is not None and num != len(listed):
        raise FleetrunError(f"{num_flag} {num} differs from the {len(listed)} endpoints of "
                            f"{list_flag}")
    return num if num is not None else len(listed)


def _hosts(raw: str | None) -> list[str]:
    return [e.strip().rpartition(":")[0] or e.strip() for e in (raw or "").split(",")
            if e.strip()]


def _address(host: str) -> str:
    try:
        return ps_node.address(host)
    except LaunchError as exc:
        raise FleetrunError(str(exc)) from None


def multinode(argv: list[str]) -> dict | None:
    """A parameter-server job whose --servers/--workers span several addresses (or with
    --node_ip or $POD_IP naming this node) -> what ps_node.run takes; else None."""
    given = _check_flags(argv)
    args = _parser().parse_args(argv)
    if args.run_mode not in (None, "ps") or not (args.servers and args.workers):
        return None  # (translate refuses a remote endpoint then)
    listed = _hosts(args.servers) + _hosts(args.workers)
    node = args.node_ip or os.environ.get("POD_IP", "").strip() or None
    addresses = {h: _address(h) for h in listed}
    if node is None and len(set(addresses.values())) < 2 and all(map(ps_node.is_local, listed)):
        return None  # one node: graphc launch's path
    for flag in ("--ips", "--gpus", "--selected_gpus", "--nproc_per_node", "--server_num",
                 "--worker_num"):
        if flag in given:
            raise FleetrunError(f"{flag} does not go with a multi-node parameter-server job: "
                                "--servers and --workers name every role")
    servers = _endpoints(args.servers, "--servers", None, here=False)
    workers = _endpoints(args.workers, "--workers", FIRST_PORT + len(servers), here=False)
    timeout = None
    if args.timeout is not None:
        try:
            timeout = float(args.timeout)
        except ValueError:
            timeout = -1.0
        if not timeout > 0:
            raise FleetrunError(f"--timeout must be a positive number of seconds, got "
                                f"'{args.timeout}'")
    try:  # what graphc launch --hosts --server_num checks too
        return ps_node.plan(servers, workers, node, args.training_script,
                            args.training_script_args,
                            args.log_dir if args.log_dir is not None else "log", timeout)
    except LaunchError as exc:
        raise FleetrunError(f"--servers/--workers: {exc}") from None


def translate(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """fleetrun's command line -> (``graphc launch`` arguments, extra environment), or
    FleetrunError naming the flag at fault."""
    given = _check_flags(argv)
    args = _parser().parse_args(argv)
    mode = args.run_mode
    if mode not in (None, "collective", "ps", "ps-heter"):
        raise FleetrunError(f"--run_mode must be collective, ps or ps-heter, got '{mode}'")
    if mode == "ps-heter":
        raise FleetrunError(f"--run_mode ps-heter: {REFUSED['--heter_workers']}")
    ps_given = [f for f in given if f in PS_FLAGS]
    if mode is None:
        mode = "ps" if ps_given else "collective"
    if mode == "collective" and ps_given:
        raise FleetrunError(f"{ps_given[0]} is a parameter-server flag; a collective job "
                            "takes --ips, --gpus and --nproc_per_node")
    out = ["--log_dir", args.log_dir if args.log_dir is not None else "log"]
    for flag in ("timeout", "collective_timeout", "mpirun"):
        if getattr(args, flag) is not None:
            out += [f"--{flag}", getattr(args, flag)]
    env: dict[str, str] = {}
    gpus = args.gpus if args.gpus is not None else args.selected_gpus
    if mode == "collective":
        if args.nproc_per_node is not None:
            out += ["--nproc_per_node", args.nproc_per_node]
        if gpus is not None:
            out += ["--devices", gpus]
        if args.ips is not None:
            ips = [h.strip() for h in args.ips.split(",") if h.strip()]
            if not ips:
                raise FleetrunError(f"--ips names no node: '{args.ips}'")
            if not (len(ips) == 1 and ps_node.is_local(ips[0])):  # one local ip: this node alone
                out += ["--hosts", ",".join(ips)]
    else:
        for flag in ("--ips", "--gpus", "--selected_gpus"):
            if flag in given:
                raise FleetrunError(f"{flag} is a collective flag; parameter-server jobs run "
                                    "on this node's CPUs (heterogeneous GPU trainers are not "
                                    "supported)")
        servers = _endpoints(args.servers, "--servers", None) if args.servers else None
        s = _role_count(_count(args.server_num, "--server_num"), servers, "--server_num",
                        "--servers")
        workers = (_endpoints(args.workers, "--workers", FIRST_PORT + s)
                   if args.workers else None)
        w = _role_count(_count(args.worker_num, "--worker_num"), workers, "--worker_num",
                        "--workers")
        servers = servers or [f"127.0.0.1:{FIRST_PORT + i}" for i in range(s)]
        workers = workers or [f"127.0.0.1:{FIRST_PORT + s + i}" for i in range(w)]
        if set(servers) & set(workers):
            raise FleetrunError(f"--servers and --workers share endpoint "
                                f"{sorted(set(servers) & set(workers))[0]}")
        if args.nproc_per_node is not None:
            out += ["--nproc_per_node", args.nproc_per_node]
        out += ["--server_num", str(s), "--worker_num", str(w)]
        env = {SERVERS_ENV: ",".join(servers), WORKERS_ENV: ",".join(workers)}
        # each rank sets its endpoints, then runs the script (fleetrun_rank.py)
        return out + [RANK_SHIM, args.training_script, *args.training_script_args], env
    return out + [args.training_script, *args.training_script_args], env


def _run_node(plan: dict) -> int:
    """This node's roles of a multi-node parameter-server job (ps_node.py)."""
    if not Path(plan["script"]).is_file():
        print(f"fleetrun: error: training script '{plan['script']}' does not exist",
              file=sys.stderr)
        return 1
    try:
        return ps_node.run(**plan)
    except LaunchError as exc:
        print(f"fleetrun: error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Run fleetrun's command line; returns the job's exit status (2: a refused flag)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        nodes = multinode(argv)
        if nodes is not None:
            return _run_node(nodes)
        launch_args, env = translate(argv)
    except FleetrunError as exc:
        print(f"fleetrun: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    script = launch_args[launch_args.index(RANK_SHIM) + 1] if RANK_SHIM in launch_args else None
    if script is not None and not Path(script).is_file():  # launch checks only the shim
        print(f"fleetrun: error: training script '{script}' does not exist", file=sys.stderr)
        return 1
    from .launch import add_arguments, launch
    parser = argparse.ArgumentParser(prog="graphc launch")
    add_arguments(parser)
    shown = [a for a in launch_args if a != RANK_SHIM]
    print(f"fleetrun: graphc launch {' '.join(shown)}", file=sys.stderr, flush=True)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # launch passes its environment on to every rank
    try:
        return launch(parser.parse_args(launch_args))
    except LaunchError as exc:
        print(f"fleetrun: error: {exc}", file=sys.stderr)
        return 1
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    sys.exit(main())
