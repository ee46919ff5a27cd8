"""Parameter-server jobs that fail (issue 17): a server or trainer that raises, exits, is killed
or hangs ends the whole ``graphc launch`` job non-zero within 60 s, with a message naming the
rank and its role, and leaves nothing running; FLAGS_rpc_deadline is the hang deadline when
graphc's own is not set. The job is tests/pserver_failure_job.py (1 server x 2 trainers)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphc.distributed import watchdog
from graphc.distributed.control import ControlServer
from graphc.distributed.pserver import roles
from graphc.testing.processes import job_processes

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "pserver_failure_job.py"
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
HANG_S = 12  # the hang deadline of the hang cases: longer than a first step's compile
HOST = socket.gethostname()


def launch(out: Path, size: list[str], **env) -> tuple[subprocess.CompletedProcess, float]:
    """``graphc launch SIZE --timeout 100 pserver_failure_job.py OUT``; (result, seconds)."""
    full = dict(os.environ, CPU_NUM="1", PYTHONPATH=str(ROOT),
                JAX_COMPILATION_CACHE_DIR=str(ROOT / ".pytest_cache" / "jax-compilation"),
                **env)
    full.pop("XLA_FLAGS", None)
    for name in [n for n in full if n.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP",
                                                   "FLAGS_selected", "CUDA_VISIBLE"))]:
        del full[name]
    for name in (watchdog.ENV, watchdog.RPC_DEADLINE_ENV):
        if name not in env:
            full.pop(name, None)
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "graphc", "launch", *size, "--timeout",
                               "100", str(JOB), str(out)], capture_output=True, text=True,
                              env=full, timeout=120)
    finally:
        # nothing of the job may be left: every process with OUT in its command line is
        # gone (given a moment); whatever is left is killed by pid, and the test fails
        deadline, left = time.monotonic() + 5.0, job_processes(str(out))
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = job_processes(str(out))
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert not left, f"left running: {left}"
    return proc, time.monotonic() - start


PS = ["--server_num", "1", "--worker_num", "2"]
# fault -> (exit status, the launcher's message about the failing rank); rank 0 is pserver 0,
# ranks 1-2 trainers 0-1, and trainer 1 is the one that fails
CASES = {
    "server-raise": (1, f"rank 0 (pserver 0, {HOST}) exited with status 1"),
    "server-exit": (3, f"rank 0 (pserver 0, {HOST}) exited with status 3"),
    "server-kill": (137, f"rank 0 (pserver 0, {HOST}) was killed by SIGKILL (status 137)"),
    # the other ranks wait in the exchange (they report it): the hung one "never arrived"
    "server-hang": (124, f"never arrived: rank 0 (pserver 0, {HOST}), still running at"),
    "trainer-raise": (1, f"rank 2 (trainer 1, {HOST}) exited with status 1"),
    "trainer-kill": (137, f"rank 2 (trainer 1, {HOST}) was killed by SIGKILL (status 137)"),
    "trainer-hang": (124, f"never arrived: rank 2 (trainer 1, {HOST}), still running at"),
}
TIMES: dict[str, tuple[float, float]] = {}


@needs_mpi
@pytest.mark.xdist_group("mpi")
@pytest.mark.parametrize("fault", list(CASES))
def test_a_failing_rank_ends_the_job_naming_its_rank_and_role(tmp_path, fault):
    """Each fault ends the job with its status (124 for a hang) within 60 s of the fault, and
    the launcher's line names the rank and role. The server hang (its update never returns)
    uses --collective_timeout; the trainer hang (the servers wait for it) only Paddle's
    FLAGS_rpc_deadline, which must then be the deadline."""
    code, message = CASES[fault]
    size, env = list(PS), {"PS_FAULT": fault}
    if fault == "server-hang":
        size += ["--collective_timeout", str(HANG_S)]
    elif fault == "trainer-hang":
        env[watchdog.RPC_DEADLINE_ENV] = str(HANG_S * 1000)
    proc, took = launch(tmp_path, size, **env)
    ended = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out[-3000:]
    since_fault = ended - float((tmp_path / "fault_at").read_text())
    TIMES[fault] = (since_fault, took)
    print(f"{fault}: ended {since_fault:.1f} s after the fault, {took:.1f} s in all")
    assert since_fault < 60 and took < 60, (since_fault, took)
    lines = [ln for ln in out.splitlines() if ln.startswith("graphc launch:")]
    assert any(message in ln for ln in lines), out[-3000:]
    assert not (tmp_path / "trainer0.done").exists()  # the job did not go on without it
    if fault.endswith("raise"):
        assert f"{fault} on purpose" in out
    if fault == "server-hang":  # where it is stuck, and the trainers waiting for its blocks
        assert "pserver 0, " in lines[-1] and "pserver_failure_job.py:" in lines[-1], lines
        assert "waiting for the blocks of pservers [0]" in lines[-1], lines
        assert since_fault > HANG_S
    if fault == "trainer-hang":  # the deadline came from FLAGS_rpc_deadline
        assert f"the job hung ({watchdog.RPC_DEADLINE_ENV}={HANG_S * 1000} ms)" in lines[-1]
        assert f"rank 0 (pserver 0, {HOST}) waited" in lines[-1], lines
        assert since_fault > HANG_S


@needs_mpi
@pytest.mark.xdist_group("mpi")
def test_roles_are_named_without_server_num_from_what_the_ranks_announce(tmp_path):
    """``--nproc_per_node 3``: the launcher does not assign roles, but each parameter-server
    rank announces its role, so a failing server is still named as one."""
    proc, took = launch(tmp_path, ["--nproc_per_node", "3"], PS_FAULT="server-exit")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]
    assert f"graphc launch: rank 0 (pserver 0, {HOST}) exited with status 3" in out, out[-3000:]
    assert took < 60


# -- the pieces, without a job ----------------------------------------------------------------
def test_flags_rpc_deadline_is_the_deadline_when_graphc_s_is_not_set(monkeypatch):
    monkeypatch.delenv(watchdog.ENV, raising=False)
    monkeypatch.delenv(watchdog.RPC_DEADLINE_ENV, raising=False)
    assert watchdog.parse_timeout(None) == watchdog.DEFAULT_TIMEOUT
    monkeypatch.setenv(watchdog.RPC_DEADLINE_ENV, "6500")  # milliseconds, as in Paddle
    assert watchdog.parse_timeout(None) == 6.5
    assert watchdog.parse_timeout("") == 6.5
    assert watchdog.setting(None) == (6.5, "FLAGS_rpc_deadline=6500 ms")
    assert watchdog.parse_timeout("20") == 20.0  # graphc's own setting wins
    assert watchdog.setting("20") == (20.0, f"{watchdog.ENV}=20 s")
    monkeypatch.setenv(watchdog.RPC_DEADLINE_ENV, "0")
    assert watchdog.parse_timeout(None) == 0.0  # no deadline
    for bad in ("soon", "-5", "inf"):
        monkeypatch.setenv(watchdog.RPC_DEADLINE_ENV, bad)
        with pytest.raises(ValueError, match=f"FLAGS_rpc_deadline must be a number of "
                                             f"milliseconds >= 0.*'{bad}'"):
            watchdog.parse_timeout(None)
        assert watchdog.parse_timeout("3") == 3.0  # not read when graphc's is set
    env = {watchdog.RPC_DEADLINE_ENV: "1000"}  # an explicit environment
    assert watchdog.setting(None, environ=env) == (1.0, "FLAGS_rpc_deadline=1000 ms")


def test_the_launcher_exports_flags_rpc_deadline_as_every_rank_s_deadline(tmp_path, monkeypatch):
    import argparse

    from graphc.distributed.launch import LaunchError, add_arguments, build_command
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    p = argparse.ArgumentParser()
    add_arguments(p)
    monkeypatch.delenv(watchdog.ENV, raising=False)
    monkeypatch.setenv(watchdog.RPC_DEADLINE_ENV, "12000")
    args = p.parse_args(["--mpirun", "mpirun", *PS, str(script)])
    _, env = build_command(args)
    assert env[watchdog.ENV] == "12" and args.deadline_source == "FLAGS_rpc_deadline=12000 ms"
    args = p.parse_args(["--mpirun", "mpirun", "--collective_timeout", "4", str(script)])
    _, env = build_command(args)
    assert env[watchdog.ENV] == "4" and args.deadline_source == f"{watchdog.ENV}=4 s"
    monkeypatch.setenv(watchdog.ENV, "7")
    args = p.parse_args(["--mpirun", "mpirun", str(script)])
    assert build_command(args)[1][watchdog.ENV] == "7"
    monkeypatch.delenv(watchdog.ENV)
    monkeypatch.setenv(watchdog.RPC_DEADLINE_ENV, "later")
    with pytest.raises(LaunchError, match="FLAGS_rpc_deadline must be a number of millisec"):
        build_command(p.parse_args(["--mpirun", "mpirun", str(script)]))


def test_role_labels_and_announcements():
    assert [roles.role_label(r, 2, 3) for r in range(6)] == [
        "pserver 0", "pserver 1", "trainer 0", "trainer 1", "trainer 2", ""]
    assert roles.labels_from_environ({roles.SERVER_NUM_ENV: "1", roles.WORKER_NUM_ENV: "2"}) \
        == {0: "pserver 0", 1: "trainer 0", 2: "trainer 1"}
    assert roles.labels_from_environ({}) == {}
    assert roles.announced_role("graphc pserver: rank 3 is trainer 1 (2 servers, 2 trainers)") \
        == (3, "trainer 1")
    assert roles.announced_role("[rank 0] graphc pserver: rank 0 is pserver 0 (1 servers") \
        == (0, "pserver 0")
    assert roles.announced_role("rank 3 is trainer 1") is None


def _server_with(lines_per_rank, role_of=None):
    """A ControlServer that has read each rank's hello and then its lines."""
    server = ControlServer(roles=role_of)
    host, port, token = server.address.rsplit(":", 2)
    clients = []
    for rank, lines in enumerate(lines_per_rank):
        c = socket.create_connection((host, int(port)), timeout=10)
        c.sendall("".join(f"{line}\n" for line in
                          [f"hello {token} {rank} node{rank} 100 {200 + rank}", *lines])
                  .encode())
        clients.append(c)
    deadline = time.monotonic() + 10
    while len(server.ranks) < len(lines_per_rank) and time.monotonic() < deadline:
        server.poll(0.1)
    for _ in range(5):
        server.poll(0.05)
    return server, clients


def test_the_launcher_names_roles_the_rank_that_hangs_and_a_stuck_server():
    # rank 0 is a server waiting for trainer 1 (rank 2), which is not waiting for anyone;
    # rank 1 announced its role itself (a job launched without --server_num)
    server, clients = _server_with(
        [["state 0 wait 4 11.0 pserver 127.0.0.1:6170 waiting for trainers [1] | job.py:9 in run"],
         ["role 1 trainer 0", "exit 1 9 100.0 own"], []],
        role_of={0: "pserver 0", 2: "trainer 1"})
    try:
        assert server.ranks[1].describe_exit() == "rank 1 (trainer 0, node1) exited with status 9"
        assert server.hung(60.0) is None
        message = server.hung(10.0)
        assert re.fullmatch(r"rank 2 \(trainer 1, node2\) hung: no progress for 1[12] s; "
                            r"rank 0 \(pserver 0, node0\) waited 1[12] s in pserver "
                            r"127.0.0.1:6170 waiting for trainers \[1\] at job.py:9 in run; "
                            r"never arrived: rank 1 \(trainer 0, node1\), which exited with "
                            r"status 9; rank 2 \(trainer 1, node2\), which reported no status",
                            message), message
    finally:
        for c in clients:
            c.close()
        server.close()
    # a server that runs on without beginning a new wait is stuck; one whose count of waits
    # grows is not; a trainer running long is not (its step may be long)
    server, clients = _server_with(
        [["state 0 run 5 0 - | job.py:38 in fault"], ["state 1 run 7 0 - | job.py:80 in main"],
         ["state 2 run 0 0 - | job.py:81 in main"]],
        role_of={0: "pserver 0", 1: "pserver 1", 2: "trainer 0"})
    try:
        assert server.hung(5.0) is None
        time.sleep(0.4)
        clients[0].sendall(b"state 0 run 5 0 - | job.py:38 in fault\n")
        clients[1].sendall(b"state 1 run 8 0 - | job.py:80 in main\n")
        for _ in range(5):
            server.poll(0.05)
        assert re.fullmatch(r"rank 0 \(pserver 0, node0\) hung: no progress for \d s, still "
                            r"running at job.py:38 in fault without waiting for any trainer",
                            server.hung(0.3))
        assert server.hung(0) is None  # 0: no deadline
    finally:
        for c in clients:
            c.close()
        server.close()
