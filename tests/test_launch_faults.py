"""Launched jobs always end, with nothing left running (issue 19): a rank failing by any route
ends the job with that rank's status and name; a signal to the launcher (even SIGKILL) takes
the job with it; a rank that never arrives at a collective ends the job after the collective
deadline, named; bad launcher values are refused before anything starts.

Process control is tested with tiny scripts that do not import JAX; a collective, with the
smallest graphc job (init + barrier). Every subprocess has a timeout, and every test kills
what its job left (found by a unique marker in the command line, killed by pid) even when
it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from graphc.distributed import watchdog
from graphc.distributed.launch import LaunchError, build_command
from graphc.testing.processes import job_processes

ROOT = Path(__file__).resolve().parent.parent
GRAPHC = [sys.executable, "-m", "graphc"]
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
linux = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")

# rank 1 fails by the route in argv[1] one second in; rank 0 sleeps (nothing else happens)
TINY = textwrap.dedent("""
    import os, signal, sys, time
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    print("started", rank, flush=True)
    mode = sys.argv[1]
    if rank == 1 and mode != "ok":
        time.sleep(1)
        if mode == "sys.exit":
            sys.exit(3)
        if mode == "os._exit":
            os._exit(3)
        if mode == "raise":
            raise RuntimeError("rank 1 gives up")
        if mode == "signal":
            os.kill(os.getpid(), signal.SIGTERM)
    if mode != "ok":
        time.sleep(300)
""")

# the smallest graphc job with a collective: rank 0 waits in barrier() for rank 1
COLLECTIVE = textwrap.dedent("""
    import sys, time
    import graphc.distributed as dist
    dist.init()
    dist.barrier()
    print("after the first barrier", flush=True)
    if dist.worker_index() == 1:
        if sys.argv[1] == "sys.exit":
            sys.exit(3)
        time.sleep(300)  # rank 1 hangs outside any collective
    dist.barrier()
""")


# a training step of a tiny program over 2 processes x 1 device; rank 1 hangs after step 1
TRAINING = textwrap.dedent("""
    import sys, time
    import numpy as np
    import graphc as fluid
    import graphc.distributed as dist
    dist.init()
    x = fluid.data("x", [-1, 4])
    loss = fluid.layers.mean(fluid.layers.fc(x, 1))
    fluid.optimizer.SGD(0.1).minimize(loss)
    bs = fluid.DistributedStrategy().to_build_strategy(num_trainers=2, local_devices=1)
    step = fluid.CompiledProgram(fluid.default_main_program(), build_strategy=bs)
    step.with_data_parallel(loss_name=loss.name, places=[fluid.CPUPlace(i) for i in range(2)])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    batch = {"x": np.ones((1, 4), "float32")}
    exe.run(step, feed=batch, fetch_list=[loss])
    print("first step done", flush=True)
    if dist.worker_index() == 1:
        time.sleep(300)
    exe.run(step, feed=batch, fetch_list=[loss])
""")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", watchdog.ENV)}
    return dict(env, PYTHONPATH=str(ROOT), CPU_NUM="1", **extra)


def left_behind(marker: str, wait: float) -> list[tuple[int, str]]:
    """The job's processes still there after up to ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        found = job_processes(marker)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)


def kill_all(marker: str) -> None:
    for pid, _ in job_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Job:
    """``graphc launch --nproc_per_node 2 SCRIPT MODE MARKER`` in the background."""

    def __init__(self, tmp_path, text: str, mode: str, *flags, env=None):
        self.marker = f"graphc-fault-{uuid.uuid4().hex}"
        script = tmp_path / "train.py"
        script.write_text(text)
        self.out_path = tmp_path / "launch.out"
        self.out = open(self.out_path, "w")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            [*GRAPHC, "launch", "--nproc_per_node", "2", *flags, str(script), mode,
             self.marker], stdout=self.out, stderr=subprocess.STDOUT, env=env or _env())

    def output(self) -> str:
        return self.out_path.read_text()

    def wait_for(self, text: str, count: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while self.output().count(text) < count:
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, f"no {count} x {text!r}:\n{self.output()}"
            time.sleep(0.2)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"the job did not end in {timeout:.0f} s:\n{self.output()}") \
                from None

    def cleanup(self) -> list[tuple[int, str]]:
        """What the job left behind (after a short wait), then kill it by pid."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        leftover = left_behind(self.marker, wait=10.0)
        kill_all(self.marker)
        self.out.close()
        return leftover


# -- 1. any rank exiting non-zero ends the job, with that rank's status and name ----------
@linux
@needs_mpi
@pytest.mark.xdist_group("mpi")
@pytest.mark.parametrize("mode, status", [("sys.exit", 3), ("os._exit", 3), ("raise", 1),
                                          ("signal", 128 + signal.SIGTERM)])
def test_a_failing_rank_ends_the_job_with_its_status(tmp_path, mode, status):
    job = Job(tmp_path, TINY, mode)
    try:
        job.wait_for("started", 2)
        failing = time.monotonic()  # rank 1 fails about a second later
        code = job.wait(timeout=60)
        elapsed = time.monotonic() - failing
    finally:
        leftover = job.cleanup()
    out = job.output()
    assert code == status, out
    host = socket.gethostname()
    how = ("was killed by SIGTERM" if mode == "signal" else "exited with")
    assert f"graphc launch: rank 1 ({host}) {how}" in out and f"status {status}" in out, out
    assert elapsed < 30, f"{elapsed:.0f} s to end"
    assert not leftover, leftover
    if mode == "raise":  # the user's traceback, without the runner's frames
        assert "[rank 1] RuntimeError: rank 1 gives up" in out
        assert "runpy" not in out and "script_runner" not in out, out


@linux
@needs_mpi
@pytest.mark.xdist_group("mpi")
def test_a_job_whose_ranks_succeed_exits_0(tmp_path):
    job = Job(tmp_path, TINY, "ok")
    try:
        code = job.wait(timeout=60)
    finally:
        leftover = job.cleanup()
    out = job.output()
    assert code == 0, out
    assert "[rank 0] started 0" in out and "[rank 1] started 1" in out
    assert "graphc launch:" not in out, out
    assert not leftover, leftover


@linux
@needs_mpi
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
def test_sys_exit_mid_training_ends_a_job_waiting_in_a_collective(tmp_path):
    """The issue's case: rank 1 calls sys.exit(3) while rank 0 waits in a collective. Rank 1
    used to hang in jax.distributed's exit barrier for ever, and the job with it (with
    --timeout: exit 124 when that ran out); now it ends in seconds with status 3."""
    job = Job(tmp_path, COLLECTIVE, "sys.exit", "--timeout", "100")
    try:
        job.wait_for("after the first barrier", 2)
        failing = time.monotonic()
        code = job.wait(timeout=120)
        elapsed = time.monotonic() - failing
    finally:
        leftover = job.cleanup()
    out = job.output()
    assert code == 3, out
    assert elapsed < 60, f"{elapsed:.0f} s to end"
    assert f"graphc launch: rank 1 ({socket.gethostname()}) exited with status 3" in out, out
    assert not leftover, leftover


# -- 2. a signal to the launcher, even SIGKILL, takes the whole job with it ---------------
@linux
@needs_mpi
@pytest.mark.xdist_group("mpi")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_a_signalled_launcher_takes_its_job_with_it(tmp_path, sig):
    job = Job(tmp_path, TINY, "sleep", "--timeout", "200")
    try:
        job.wait_for("started", 2)
        assert len(job_processes(job.marker)) >= 5  # mpirun, 2 wrappers, 2 scripts
        job.proc.send_signal(sig)
        code = job.wait(timeout=30)
        gone_in = 15.0
        leftover = left_behind(job.marker, wait=gone_in)
    finally:
        leftover_after_cleanup = job.cleanup()
    assert code == (-sig if sig == signal.SIGKILL else 128 + sig), job.output()
    assert not leftover, f"still running {gone_in:.0f} s after {sig.name}: {leftover}"
    assert not leftover_after_cleanup
    if sig != signal.SIGKILL:
        assert f"got {sig.name}; stopping every rank" in job.output()


def test_a_rank_wrapper_kills_its_script_group_when_the_launcher_goes_away(tmp_path):
    """Without mpirun: the wrapper's control connection closes (as when the launcher is
    SIGKILLed), and the script and a process it started are killed; the wrapper had said
    hello with its rank, host and pids first."""
    marker = f"graphc-fault-{uuid.uuid4().hex}"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"])
        print("ready", flush=True)
        time.sleep(300)
    """))
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(30)
    env = {k: v for k, v in _env().items() if not k.startswith(("OMPI_", "PMI_", "SLURM_"))}
    env.update(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="2",
               GRAPHC_LAUNCH_CONTROL=f"127.0.0.1:{server.getsockname()[1]}:tok")
    wrapper = subprocess.Popen([sys.executable, "-m", "graphc.distributed.rank", str(script),
                                marker], env=env, stdout=subprocess.PIPE, text=True)
    try:
        conn, _ = server.accept()
        conn.settimeout(30)
        hello = conn.recv(4096).decode().split()
        assert hello[:4] == ["hello", "tok", "1", socket.gethostname()], hello
        assert wrapper.stdout.readline() == "[rank 1] ready\n"
        deadline = time.monotonic() + 20  # the child may still be starting
        while len(job_processes(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(job_processes(marker)) == 3  # wrapper, script, its child
        conn.close()  # the launcher is gone
        code = wrapper.wait(timeout=30)
        leftover = left_behind(marker, wait=10.0)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait(timeout=10)
        kill_all(marker)
        server.close()
    assert code == 128 + signal.SIGTERM
    assert not leftover, leftover


# -- 3. a rank that never arrives: the collective deadline ends the job, naming it -------
@linux
@needs_mpi
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
def test_a_hanging_rank_ends_the_job_after_the_collective_deadline(tmp_path):
    job = Job(tmp_path, COLLECTIVE, "hang", env=_env(**{watchdog.ENV: "5"}))
    try:
        code = job.wait(timeout=120)
    finally:
        leftover = job.cleanup()
    out = job.output()
    host = socket.gethostname()
    assert code == 124, out
    assert f"the job hung ({watchdog.ENV}=5 s)" in out, out
    assert f"rank 0 ({host}) waited" in out and "in barrier('graphc_barrier') at train.py:" \
        in out, out
    assert f"never arrived: rank 1 ({host}), still running at train.py:10" in out, out
    assert not leftover, leftover


@linux
@needs_mpi
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
def test_a_rank_that_never_arrives_at_a_training_step_is_named(tmp_path):
    """Rank 0 waits in the second data-parallel step (Executor.run) for rank 1, which hangs
    between steps: the deadline (the flag this time) ends the job and says where each is."""
    job = Job(tmp_path, TRAINING, "hang", "--collective_timeout", "5")
    try:
        code = job.wait(timeout=150)
    finally:
        leftover = job.cleanup()
    out = job.output()
    host = socket.gethostname()
    assert code == 124, out
    assert out.count("first step done") == 2, out
    assert re.search(rf"the job hung \({watchdog.ENV}=5 s\): rank 0 \({host}\) waited \d+ s "
                     r"in Executor.run at train.py:20 in <module>; never arrived: rank 1 "
                     rf"\({host}\), still running at train.py:19 in <module>", out), out
    assert not leftover, leftover


def test_the_watchdog_ends_a_rank_that_waits_too_long_without_a_launcher():
    """Under a plain mpirun or srun the rank's own watchdog enforces the deadline."""
    code = textwrap.dedent("""
        import time
        from graphc.distributed import watchdog
        watchdog.start(rank=3, timeout=1.0, interval=0.2)
        with watchdog.waiting("a data-parallel step"):
            time.sleep(30)
    """)
    env = {k: v for k, v in _env().items() if k != watchdog.STATUS_FD_ENV}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 124, proc.stderr
    assert time.monotonic() - start < 20
    assert proc.stderr.startswith("graphc: rank 3 waited 1 s in a data-parallel step at "
                                  "<string>:6 in <module>: another rank never arrived "
                                  f"({watchdog.ENV}=1); ending this rank"), proc.stderr


def test_collective_timeout_values():
    assert watchdog.parse_timeout(None) == watchdog.DEFAULT_TIMEOUT == 1800
    assert watchdog.parse_timeout("") == 1800
    assert watchdog.parse_timeout("0") == 0 and watchdog.parse_timeout("2.5") == 2.5
    for bad in ("-1", "abc", "nan", "inf"):
        with pytest.raises(ValueError, match=f"{watchdog.ENV} must be a number of seconds "
                                             f">= 0 \\(0: no deadline\\), got '{bad}'"):
            watchdog.parse_timeout(bad)


# -- 4. bad values are refused before anything starts --------------------------------------
def _cli(capsys, monkeypatch, *argv) -> tuple[int, str]:
    from graphc.cli import main

    from graphc.distributed import launch as launch_mod

    def refuse(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(launch_mod.subprocess, "Popen", refuse)
    code = main(["launch", *map(str, argv)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (("--timeout", "-5"), "--timeout must be a positive number of seconds, got '-5'"),
    (("--timeout", "0"), "--timeout must be a positive number of seconds, got '0'"),
    (("--timeout", "soon"), "--timeout must be a positive number of seconds, got 'soon'"),
    (("--timeout", "nan"), "--timeout must be a positive number of seconds, got 'nan'"),
    (("--nproc_per_node", "0"), "--nproc_per_node must be at least 1, got 0"),
    (("--nproc_per_node", "-2"), "--nproc_per_node must be at least 1, got -2"),
    (("--nproc_per_node", "two"), "--nproc_per_node must be a whole number, got 'two'"),
    (("--nproc_per_node", "1.5"), "--nproc_per_node must be a whole number, got '1.5'"),
    (("--collective_timeout", "-1"), "--collective_timeout must be a number of seconds >= 0"),
    (("--hosts", ","), "--hosts names no node: ','"),
])
def test_bad_launcher_values_are_one_line_and_start_nothing(tmp_path, capsys, monkeypatch,
                                                           argv, message):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, err = _cli(capsys, monkeypatch, *argv, script)
    assert code == 1
    assert err.startswith(f"graphc: error: LaunchError: {message}"), err
    assert len(err.strip().splitlines()) == 1, err


def test_a_missing_script_and_a_bad_environment_value_start_nothing(tmp_path, capsys,
                                                                    monkeypatch):
    code, err = _cli(capsys, monkeypatch, tmp_path / "missing.py")
    assert code == 1 and err.strip() == ("graphc: error: LaunchError: training script "
                                         f"'{tmp_path / 'missing.py'}' does not exist")
    script = tmp_path / "train.py"
    script.write_text("")
    code, err = _cli(capsys, monkeypatch, "--log_dir", script, script)
    assert code == 1 and err.strip() == (f"graphc: error: LaunchError: --log_dir '{script}' "
                                         "is a file, not a directory")
    monkeypatch.setenv(watchdog.ENV, "forever")
    code, err = _cli(capsys, monkeypatch, script)
    assert code == 1 and err.strip() == (f"graphc: error: LaunchError: {watchdog.ENV} must be "
                                         "a number of seconds >= 0 (0: no deadline), got "
                                         "'forever'")


def test_no_script_at_all_is_argparse_usage_exit_2(capsys):
    from graphc.cli import main
    with pytest.raises(SystemExit) as info:
        main(["launch", "--nproc_per_node", "2"])
    assert info.value.code == 2
    assert "the following arguments are required: script" in capsys.readouterr().err


def test_timeout_minus_5_from_the_shell_starts_nothing(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    proc = subprocess.run([*GRAPHC, "launch", "--timeout", "-5", str(script)],
                          capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 1
    assert proc.stdout == ""  # the script never ran
    assert proc.stderr.strip() == ("graphc: error: LaunchError: --timeout must be a positive "
                                   "number of seconds, got '-5'")


def test_the_collective_deadline_reaches_every_rank(tmp_path, monkeypatch):
    import argparse

    from graphc.distributed.launch import add_arguments
    script = tmp_path / "t.py"
    script.write_text("")
    p = argparse.ArgumentParser()
    add_arguments(p)
    monkeypatch.delenv(watchdog.ENV, raising=False)
    cmd, env = build_command(p.parse_args(["--mpirun", "mpirun", str(script)]))
    assert env[watchdog.ENV] == "1800" and cmd[cmd.index(watchdog.ENV) - 1] == "-x"
    assert "GRAPHC_LAUNCH_CONTROL" in cmd  # the wrappers' connection to the launcher
    monkeypatch.setenv(watchdog.ENV, "600")
    _, env = build_command(p.parse_args(["--mpirun", "mpirun", str(script)]))
    assert env[watchdog.ENV] == "600"
    _, env = build_command(p.parse_args(["--mpirun", "mpirun", "--collective_timeout", "0",
                                         str(script)]))
    assert env[watchdog.ENV] == "0"  # the flag wins over the environment; 0: no deadline
    with pytest.raises(LaunchError, match="--timeout must be a positive number"):
        build_command(p.parse_args(["--mpirun", "mpirun", "--timeout", "inf", str(script)]))


# -- the launcher's reading of its control connections --------------------------------------
def _server_with(*lines_per_rank):
    from graphc.distributed.control import ControlServer
    server = ControlServer()
    host, port, token = server.address.rsplit(":", 2)
    clients = []
    for rank, lines in enumerate(lines_per_rank):
        c = socket.create_connection((host, int(port)), timeout=10)
        c.sendall("".join(f"{line}\n" for line in
                          [f"hello {token} {rank} node{rank} 100 {200 + rank}", *lines])
                  .encode())
        clients.append(c)
    deadline = time.monotonic() + 10
    while (sum(len(lines) for lines in lines_per_rank) and time.monotonic() < deadline
           and len(server.ranks) < len(lines_per_rank)):
        server.poll(0.1)
    for _ in range(5):
        server.poll(0.05)
    return server, clients


def test_the_rank_that_failed_on_its_own_is_named_not_the_ranks_it_took_down():
    # rank 0's failure (a peer gone in gloo: status 1, reported first, stopped by mpirun
    # later) and rank 2's SIGTERM from mpirun arrive around rank 1's own exit 3
    server, clients = _server_with(["exit 0 1 100.500 own"], ["exit 1 3 100.100 own"],
                                   ["exit 2 143 100.050 stopped"])
    try:
        time.sleep(0.6)  # the settling time
        failure = server.failure()
        assert failure.code == 3 and failure.describe() == "rank 1 (node1) exited with status 3"
        assert server.hung(5.0) is None
    finally:
        for c in clients:
            c.close()
        server.close()


def test_a_lost_wrapper_and_stray_connections():
    from graphc.distributed.control import ControlServer
    server = ControlServer()
    host, port, token = server.address.rsplit(":", 2)
    try:
        stray = socket.create_connection((host, int(port)), timeout=10)
        stray.sendall(b"hello wrongtoken 0 evil 1 2\nexit 0 9 1.0 own\n")
        good = socket.create_connection((host, int(port)), timeout=10)
        good.sendall(f"hello {token} 1 node1 100 201\n".encode())
        for _ in range(10):
            server.poll(0.05)
        assert list(server.ranks) == [1]  # the stray connection is not believed
        good.close()  # its wrapper died without an exit report
        for _ in range(10):
            server.poll(0.05)
        time.sleep(0.6)
        failure = server.failure()
        assert failure.code == 1
        assert failure.describe() == ("rank 1 (node1): its wrapper process died without "
                                      "reporting a status")
        stray.close()
    finally:
        server.close()


def test_the_hung_message_names_who_waits_and_who_never_arrived():
    server, clients = _server_with(
        ["state 0 wait 7 12.0 a data-parallel step | train.py:30 in <module>"],
        ["state 1 run 0 0 - | train.py:25 in load_batch"],
        ["state 2 wait 3 11.0 Executor.run | train.py:30 in <module>"],
        ["exit 3 0 1.0 own"])
    try:
        assert server.hung(60.0) is None and server.hung(0) is None
        message = server.hung(11.5)
        # (the waits grow by the time since the reports arrived)
        assert re.fullmatch(
            r"rank 0 \(node0\) waited 1[23] s in a data-parallel step at train.py:30 in "
            r"<module>; rank 2 \(node2\) waited 1[12] s in Executor.run at train.py:30 in "
            r"<module>; never arrived: rank 1 \(node1\), still running at train.py:25 in "
            r"load_batch; rank 3 \(node3\), which exited with status 0", message), message
        assert server.failure() is None
        assert server.progress_summary() == (  # what --timeout prints
            " (rank 0 (node0) waiting in a data-parallel step at train.py:30 in <module>; "
            "rank 1 (node1), still running at train.py:25 in load_batch; "
            "rank 2 (node2) waiting in Executor.run at train.py:30 in <module>)")
    finally:
        for c in clients:
            c.close()
        server.close()


@pytest.mark.parametrize("flags, message", [
    (["--devices", "a,b"], "--devices must be comma-separated GPU ids"),
    (["--devices", "0,0"], "--devices names a GPU twice"),
    (["--log_dir", "/proc/graphc-no-such-dir"], "--log_dir '/proc/graphc-no-such-dir' cannot"),
])
def test_bad_device_and_log_dir_flags_are_launch_errors(tmp_path, flags, message):
    import argparse

    from graphc.distributed.launch import add_arguments
    script = tmp_path / "t.py"
    script.write_text("")
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(LaunchError, match=message):
        build_command(p.parse_args(["--mpirun", "mpirun", *flags, str(script)]))


def test_an_mpirun_that_does_not_exist_is_a_launch_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    proc = subprocess.run([*GRAPHC, "launch", "--mpirun", str(tmp_path / "no-mpirun"),
                           str(script)], capture_output=True, text=True, timeout=60, env=_env())
    assert proc.returncode == 1 and proc.stdout == ""
    assert "LaunchError: cannot start mpirun" in proc.stderr, proc.stderr
