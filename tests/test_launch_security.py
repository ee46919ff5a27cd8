"""What a stranger on the node can do to a launched job (issue 27): a connection to the
launcher's control port costs bounded memory and time and is dropped with a logged reason
while the launcher keeps watching its ranks; a one-node job listens on loopback only.

Every subprocess has a timeout, and each test kills what its job left (found by a unique
marker in the command line, killed by pid) even when it fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from graphc.distributed import watchdog
from graphc.distributed.control import HELLO_LINE, MAX_LINE, ControlServer
from graphc.testing.processes import job_processes

ROOT = Path(__file__).resolve().parent.parent
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
linux = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", watchdog.ENV)}
    return dict(env, PYTHONPATH=str(ROOT), CPU_NUM="1", **extra)


def _kill_all(marker: str) -> None:
    for pid, _ in job_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _flood(host: str, port: int, head: bytes, size: int, seconds: float = 20.0) -> None:
    """Send ``head`` then ``size`` bytes without a newline; stops when the peer drops us or
    after ``seconds`` (a stalled reader must not hang the test)."""
    chunk = b"x" * (1 << 20)
    deadline = time.monotonic() + seconds
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.settimeout(2.0)
            s.sendall(head)
            sent = 0
            while sent < size and time.monotonic() < deadline:
                try:
                    sent += s.send(chunk[:size - sent])
                except TimeoutError:
                    continue
    except OSError:
        pass  # dropped by the launcher: what a bounded reader does


def _poll_until(server: ControlServer, done, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        server.poll(0.05)


# -- the control port, in process ------------------------------------------------------------
@pytest.mark.parametrize("say_hello", [False, True])
def test_a_line_without_newline_is_dropped_and_the_ranks_are_still_read(say_hello):
    logged = []
    server = ControlServer(log=logged.append)
    host, port, token = server.address.rsplit(":", 2)
    try:
        good = socket.create_connection((host, int(port)), timeout=10)
        good.sendall(f"hello {token} 0 node0 100 200\n".encode())
        _poll_until(server, lambda: 0 in server.ranks)
        head = f"hello {token} 1 node1 101 201\n".encode() if say_hello else b""
        flood = threading.Thread(target=_flood, args=(host, int(port), head, 8 * MAX_LINE))
        flood.start()
        _poll_until(server, lambda: server.dropped)
        flood.join(timeout=30)
        assert not flood.is_alive()
        limit = MAX_LINE if say_hello else HELLO_LINE
        assert logged == server.dropped and len(logged) == 1, logged
        assert f"a line longer than {limit} bytes" in logged[0]
        assert logged[0].startswith("dropped a control connection from 127.0.0.1:")
        # no buffer kept for it, and the good rank's report is still taken
        assert all(len(k.data.buffer) <= MAX_LINE for k in server.selector.get_map().values()
                   if k.data is not None)
        good.sendall(b"exit 0 3 1.0 own\n")
        _poll_until(server, lambda: server.ranks[0].code is not None)
        assert server.ranks[0].code == 3
        if say_hello:  # a wrapper that breaks the rule is a lost rank (the job ends)
            assert server.ranks[1].lost
        good.close()
    finally:
        server.close()


def test_strangers_are_dropped_a_wrong_token_at_once_a_silent_one_after_the_hello_timeout():
    logged = []
    server = ControlServer(hello_timeout=0.5, log=logged.append)
    host, port, _token = server.address.rsplit(":", 2)
    try:
        wrong = socket.create_connection((host, int(port)), timeout=10)
        wrong.sendall(b"hello wrongtoken 0 evil 1 2\nexit 0 9 1.0 own\n")
        silent = socket.create_connection((host, int(port)), timeout=10)
        start = time.monotonic()
        _poll_until(server, lambda: len(logged) >= 2)
        assert time.monotonic() - start < 5
        assert "its first line is not a hello with the job's token" in logged[0]
        assert "no hello within 0.5 s" in logged[1]
        assert server.ranks == {} and len(server.selector.get_map()) == 1  # the listener
        for s in (wrong, silent):  # the launcher closed them
            s.settimeout(5)
            assert s.recv(16) == b""
            s.close()
    finally:
        server.close()


# -- the control port of a real launch -------------------------------------------------------
# Reads the launcher's control address from its wrapper's environment, then exits with 3
# once the test says so.
WAITER = textwrap.dedent("""
    import os, sys, time
    env = open(f"/proc/{os.getppid()}/environ", "rb").read().split(b"\\0")
    address = [e for e in env if e.startswith(b"GRAPHC_LAUNCH_CONTROL=")][0]
    open(sys.argv[1] + ".tmp", "wb").write(address.split(b"=", 1)[1])
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    go = sys.argv[1] + ".go"
    while not os.path.exists(go):
        time.sleep(0.05)
    sys.exit(3)
""")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@linux
@needs_mpi
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
def test_a_64_mb_line_to_the_control_port_neither_grows_nor_stalls_the_launcher(tmp_path):
    marker = f"graphc-sec-{uuid.uuid4().hex}"
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    address_file = tmp_path / "address"
    out = open(tmp_path / "launch.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "graphc", "launch", "--timeout", "100",
                             str(script), str(address_file), marker],
                            stdout=out, stderr=subprocess.STDOUT, env=_env())
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "launch.out").read_text()
            time.sleep(0.1)
        host, port, _token = address_file.read_text().rsplit(":", 2)
        before = _rss_kb(proc.pid)
        _flood(host, int(port), b"", 64 << 20, seconds=30)
        grown_mb = (_rss_kb(proc.pid) - before) / 1024
        # the rank watch goes on: the rank's exit ends the job with its status, promptly
        (tmp_path / "address.go").write_text("")
        exited = time.monotonic()
        code = proc.wait(timeout=40)
        took = time.monotonic() - exited
        text = (tmp_path / "launch.out").read_text()
        assert code == 3, text
        assert took < 15, (took, text)
        assert grown_mb < 16, grown_mb
        assert "dropped a control connection from 127.0.0.1:" in text, text
        assert f"a line longer than {HELLO_LINE} bytes" in text, text
        assert "rank 0 (127.0.0.1) exited with status 3" in text or "status 3" in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        _kill_all(marker)
        out.close()


# -- one-node jobs listen on loopback only ---------------------------------------------------
# Both ranks meet in MPI (the ranks' MPI and mpirun's runtime have set up everything they
# listen on), or in graphc.distributed.init() and a barrier (JAX's coordinator and gloo too),
# rank 0 says so, then both wait for the test's go.
MEET = textwrap.dedent("""
    import os, sys, time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    assert comm.allreduce(comm.Get_rank()) == 1
    if sys.argv[2] == "jax":
        import graphc.distributed as dist
        dist.init()
        dist.barrier()
    if comm.Get_rank() == 0:
        open(sys.argv[1], "w").write("ready")
    while not os.path.exists(sys.argv[1] + ".go"):
        time.sleep(0.05)
    comm.Barrier()
""")


def _listeners(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address) of every listening TCP socket those processes hold (what
    ``ss -ltnp`` shows, read from /proc)."""
    inodes = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hexaddr, port = local.split(":")
            raw = bytes.fromhex(hexaddr)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            addr = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, raw)
            found.append((inodes[inode], f"{addr}:{int(port, 16)}"))
    return found


def test_the_launcher_runs_one_node_jobs_on_loopback_and_multinode_jobs_as_before(tmp_path):
    import argparse

    from graphc.distributed.launch import add_arguments, build_command
    script = tmp_path / "t.py"
    script.write_text("")
    p = argparse.ArgumentParser()
    add_arguments(p)
    one, _ = build_command(p.parse_args(["--mpirun", "mpirun", str(script)]))
    assert " --mca btl ^tcp " in " ".join(one)
    two, _ = build_command(p.parse_args(["--mpirun", "mpirun", "--hosts", "a,b", str(script)]))
    assert "btl" not in two


def test_the_wrapper_takes_the_shim_out_of_the_script_s_environment():
    from graphc.distributed import loopback
    env = {"LD_PRELOAD": "/usr/lib/mine.so"}
    loopback.preload(env, "/tmp/x/bind_loopback.so")
    assert env["LD_PRELOAD"] == "/tmp/x/bind_loopback.so:/usr/lib/mine.so"
    loopback.remove(env)
    assert env == {"LD_PRELOAD": "/usr/lib/mine.so"}
    env = {}
    loopback.preload(env, "/tmp/x/bind_loopback.so")
    loopback.remove(env)
    assert env == {}


def test_without_a_compiler_the_launcher_warns_and_leaves_mpirun_as_it_is(tmp_path, monkeypatch,
                                                                        capsys):
    from graphc.distributed import launch, loopback
    monkeypatch.setattr(loopback, "_compiler", lambda: None)
    env = {}
    launch._preload_loopback_shim(env, str(tmp_path))
    assert env == {}
    assert ("graphc launch: no C compiler (cc) to build the loopback shim: mpirun's runtime "
            "listens on every interface of this node") in capsys.readouterr().err


@linux
@needs_mpi
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="needs cc")
@pytest.mark.parametrize("meet", ["mpi", "jax"])
def test_a_one_node_job_listens_on_loopback_only(tmp_path, meet):
    marker = f"graphc-sec-{uuid.uuid4().hex}"
    script = tmp_path / "meet.py"
    script.write_text(MEET)
    ready = tmp_path / "ready"
    out = open(tmp_path / "launch.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "graphc", "launch", "--nproc_per_node", "2",
                             "--timeout", "100", str(script), str(ready), meet, marker],
                            stdout=out, stderr=subprocess.STDOUT, env=_env())
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "launch.out").read_text()
            time.sleep(0.1)
        pids = {pid for pid, _ in job_processes(marker)} | {proc.pid}
        names = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for pid in pids
                 if Path(f"/proc/{pid}/comm").exists()}
        listening = _listeners(pids)
        (tmp_path / "ready.go").write_text("")
        code = proc.wait(timeout=60)
        text = (tmp_path / "launch.out").read_text()
        assert code == 0, text
        # the launcher's control port and mpirun's runtime listen, on loopback only
        holders = {pid for pid, _ in listening}
        assert proc.pid in holders and len(holders) >= 2, (listening, names)
        exposed = [(names.get(pid), a) for pid, a in listening
                   if not a.startswith(("127.0.0.1:", "::1:", "::ffff:127.0.0.1:"))]
        assert exposed == [], exposed
        assert "listens on every interface" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        _kill_all(marker)
        out.close()
