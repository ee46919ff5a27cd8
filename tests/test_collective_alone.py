"""Collective trainers started as plain processes with Paddle's variables (no mpirun, no
graphc launch) meet at the first endpoint and train as one job; a missing peer is named."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import graphc.distributed as dist
import graphc.fluid as fluid
from graphc.distributed import meet
from graphc.distributed.env import WorkerEnv, detect
from graphc.ir.errors import GraphcError

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "collective_alone_job.py"
sys.path.insert(0, str(ROOT / "tests"))
import collective_alone_job as job  # noqa: E402
from test_pserver_hosts import group_pids, listening  # noqa: E402


def _free_ports(n: int, hosts=("127.0.0.1",)) -> list[int]:
    """``n`` free ports, the i-th on ``hosts[i]`` (the last host for the rest); all held at
    once, so no two are the same."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for i, s in enumerate(socks):
            s.bind((hosts[min(i, len(hosts) - 1)], 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _trainer_env(tid: int, eps: list[str], deadline_ms: int = 60000) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "OMPI_", "PMI_", "SLURM_", "TRAINING_ROLE"))}
    env.update(PYTHONPATH=str(ROOT), CPU_NUM="1", PADDLE_TRAINER_ID=str(tid),
               PADDLE_TRAINERS_NUM=str(len(eps)), PADDLE_TRAINER_ENDPOINTS=",".join(eps),
               PADDLE_CURRENT_ENDPOINT=eps[tid], FLAGS_rpc_deadline=str(deadline_ms))
    env.pop("GRAPHC_COLLECTIVE_TIMEOUT", None)
    return env


def _start(tids, eps, args, deadline_ms=60000, **extra) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, str(JOB), *map(str, args)],
                             env={**_trainer_env(t, eps, deadline_ms), **extra},
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for t in tids]


def _finish(procs, timeout: float) -> list[tuple[int, str]]:
    """Every process's (exit status, output); every process group killed at the end."""
    try:
        return [(p.wait(timeout=timeout), p.communicate()[0]) for p in procs]
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def _listening_on(port: int) -> set[str]:
    """The local addresses (as /proc/net/tcp{,6} write them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            host, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(host)
    return found


@pytest.fixture(scope="module")
def one_process_reference():
    """The 1-process run on the concatenated (global) batches."""
    prog, startup, loss = job.build()
    with fluid.program_guard(prog, startup):
        job.optimizer().minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for batch in job.batches():
        exe.run(prog, feed=batch, fetch_list=[loss], scope=scope)
    return job.params(prog, scope)


@pytest.mark.parametrize("mode, hosts", [("nccl2", ("127.0.0.1", "127.0.0.1")),
                                         ("fleet", ("127.0.0.1", "127.0.0.1")),
                                         ("pe", ("127.0.0.1", "127.0.0.1")),
                                         ("nccl2", ("127.0.0.2", "127.0.0.3"))])
def test_trainers_started_alone_train_as_one_job(tmp_path, mode, hosts, one_process_reference):
    """Two trainers (subprocesses with PADDLE_* only): identical weights on both, equal to
    one process on the whole batch (also with the trainers' endpoints on two simulated hosts,
    loopback addresses 127.0.0.2 and .3). Today's failure mode (each trains alone) differs
    by ~0.1-0.8 per weight."""
    eps = [f"{h}:{p}" for h, p in zip(hosts, _free_ports(2, hosts), strict=True)]
    # fleet: the role maker's values in JAX's store are signed with the job's secret
    secret = {"GRAPHC_JOB_SECRET": "ours"} if mode == "fleet" else {}
    procs, seen = _start([0, 1], eps, [mode, tmp_path], **secret), set()
    end = time.monotonic() + 120
    while hosts[0] != hosts[1] and any(p.poll() is None for p in procs) \
            and time.monotonic() < end:  # simulated hosts: who listens where
        seen |= listening(group_pids({p.pid for p in procs}))
        time.sleep(0.05)
    results = _finish(procs, timeout=max(1.0, end - time.monotonic()))
    for tid, (code, out) in enumerate(results):
        assert code == 0, f"trainer {tid}:\n{out[-3000:]}"
    if hosts[0] != hosts[1]:  # JAX's coordinator (IPv4-mapped) and each trainer's gloo
        # listen on that trainer's own address only, never 127.0.0.1 or every interface
        hosts_seen = {a.rpartition(":")[0] for a in seen}
        assert hosts_seen <= {*hosts, "[0000000000000000FFFF00000200007F]"}, seen
        assert set(hosts) <= hosts_seen, seen
    got = [np.load(tmp_path / f"{t}.npz") for t in (0, 1)]
    for name, ref in one_process_reference.items():
        np.testing.assert_array_equal(got[0][name], got[1][name], err_msg=name)
        np.testing.assert_allclose(got[0][name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
    if mode == "fleet":  # role maker collectives over the joined runtime's store
        for g in got:
            assert g["gathered"].tolist() == [1, 11]
            assert g["reduced"].tolist() == [1, 5]  # max of [0, 5] and [1, 4]
            assert g["endpoints"].tolist() == eps


@pytest.mark.parametrize("started, named", [
    (0, r"trainer 1 \(127\.0\.0\.1:{p1}\) never joined within 3 s \(FLAGS_rpc_deadline"),
    (1, r"trainer 0, the job's coordinator at 127\.0\.0\.1:{p0}, is not listening after 3 s"),
])
def test_a_missing_peer_is_named_within_the_deadline(tmp_path, started, named):
    """Trainer 0 alone also shows where JAX's coordinator listens: its endpoint only."""
    import re
    ports = _free_ports(2)
    eps = [f"127.0.0.1:{p}" for p in ports]
    begin = time.monotonic()
    procs = _start([started], eps, ["nccl2", tmp_path], deadline_ms=3000)
    if started == 0:
        seen: set = set()
        while not seen and procs[0].poll() is None and time.monotonic() - begin < 30:
            seen = _listening_on(ports[0])
            time.sleep(0.05)
        # 127.0.0.1 (gRPC may take it as IPv4-mapped ::ffff:127.0.0.1), not every interface
        assert seen and seen <= {"0100007F", "0000000000000000FFFF00000100007F"}, seen
    (code, out), = _finish(procs, timeout=60)
    assert code != 0
    assert "DistributedError" in out
    assert re.search(named.format(p0=ports[0], p1=ports[1]), out), out[-2000:]
    assert time.monotonic() - begin < 40
    assert not list(tmp_path.glob("*.npz"))  # it never trained alone


def test_a_peer_lost_after_the_join_is_named(tmp_path):
    """Trainer 1 dies once the job met: trainer 0, waiting in its first step, ends within
    FLAGS_rpc_deadline (the collective deadline without a launcher), naming it."""
    ports = _free_ports(2)
    eps = [f"127.0.0.1:{p}" for p in ports]
    procs = _start([0, 1], eps, ["nccl2", tmp_path], deadline_ms=8000, COLL_TEST_DIE="1")
    begin = time.monotonic()
    (code0, out0), (code1, out1) = _finish(procs, timeout=90)
    assert code1 == 3 and "trainer 1 dies" in out1
    assert code0 == 124, out0[-2000:]
    assert f"trainer 1 (127.0.0.1:{ports[1]}) never arrived (FLAGS_rpc_deadline=8000 ms)" \
        in out0, out0[-2000:]
    assert time.monotonic() - begin < 60


# -- the variables, checked (no processes) ---------------------------------------------------
EPS2 = "127.0.0.1:7001,127.0.0.1:7002"


@pytest.mark.parametrize("env, expected", [
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": EPS2,
      "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:7002"},
     WorkerEnv("paddle", 1, 2, 1, 2, ("127.0.0.1:7001", "127.0.0.1:7002"))),
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:1,10.0.0.2:1,10.0.0.2:2"},
     WorkerEnv("paddle", 1, 3, 0, 2, ("10.0.0.1:1", "10.0.0.2:1", "10.0.0.2:2"))),
    ({"PADDLE_TRAINERS_NUM": "2"}, WorkerEnv("paddle", 0, 2)),
    ({"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1"}, WorkerEnv("none")),
    # a parameter-server job's trainers meet their servers, not each other
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "TRAINING_ROLE": "TRAINER",
      "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:6170"}, WorkerEnv("none")),
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "TRAINING_ROLE": "PSERVER"},
     WorkerEnv("none")),
    # TRAINING_ROLE=TRAINER alone is no parameter-server job
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "TRAINING_ROLE": "TRAINER"},
     WorkerEnv("paddle", 1, 2)),
    # a launcher's variables come first
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1", "PADDLE_TRAINERS_NUM": "2",
      "PADDLE_TRAINER_ENDPOINTS": EPS2}, WorkerEnv("openmpi", 1, 2)),
])
def test_detect_reads_paddles_collective_variables(env, expected):
    assert detect(env) == expected


@pytest.mark.parametrize("env, message", [
    ({"PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ID": "0"},
     "PADDLE_TRAINERS_NUM=2 but PADDLE_TRAINER_ENDPOINTS is not set"),
    ({"PADDLE_TRAINERS_NUM": "3", "PADDLE_TRAINER_ENDPOINTS": EPS2, "PADDLE_TRAINER_ID": "0"},
     "PADDLE_TRAINERS_NUM=3 but PADDLE_TRAINER_ENDPOINTS lists 2 endpoints"),
    ({"PADDLE_TRAINER_ENDPOINTS": EPS2}, "PADDLE_TRAINER_ID is not set"),
    ({"PADDLE_TRAINER_ENDPOINTS": EPS2, "PADDLE_TRAINER_ID": "2"},
     r"PADDLE_TRAINER_ID=2 is not in \[0, 2\)"),
    ({"PADDLE_TRAINER_ENDPOINTS": EPS2, "PADDLE_TRAINER_ID": "0",
      "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:7002"},
     "PADDLE_CURRENT_ENDPOINT=127.0.0.1:7002 but trainer 0's endpoint"),
    ({"PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:7001,127.0.0.1", "PADDLE_TRAINER_ID": "0"},
     "'127.0.0.1' is not host:port"),
    ({"PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:7001,127.0.0.1:7001", "PADDLE_TRAINER_ID": "0"},
     "lists an endpoint twice"),
])
def test_inconsistent_variables_are_named(env, message):
    with pytest.raises(dist.DistributedError, match=message):
        meet.from_environ(detect(env), env)


def test_transpile_arguments_are_checked():
    assert meet.from_transpile(1, EPS2, "127.0.0.1:7002").endpoints[1] == "127.0.0.1:7002"
    with pytest.raises(dist.DistributedError, match=r"trainer_id 2 is not in \[0, 2\)"):
        meet.from_transpile(2, EPS2, None)
    with pytest.raises(dist.DistributedError, match="current_endpoint 127.0.0.1:7001 is not "
                       "trainer 1's endpoint"):
        meet.from_transpile(1, EPS2, "127.0.0.1:7001")


def test_deadline_comes_from_flags_rpc_deadline():
    assert meet.deadline(None, {}) == (180.0, "FLAGS_rpc_deadline default 180 s")
    assert meet.deadline(None, {"FLAGS_rpc_deadline": "5000"})[0] == 5.0
    assert meet.deadline(7, {"FLAGS_rpc_deadline": "5000"})[0] == 7.0
    with pytest.raises(ValueError, match="FLAGS_rpc_deadline"):
        meet.deadline(None, {"FLAGS_rpc_deadline": "soon"})


def test_coordinator_binds_only_its_endpoint_and_peers_wait_for_it():
    """Trainer 0 asks JAX to bind exactly the first endpoint; trainer 1 joins once that
    endpoint listens (a stand-in initialize records the calls)."""
    calls = []

    def initialize(address, **kw):
        calls.append((address, kw))

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    eps = [f"127.0.0.1:{listener.getsockname()[1]}", "127.0.0.1:9"]
    try:
        for rank in (0, 1):
            meet.join(meet.from_transpile(rank, eps, eps[rank]), 5.0, "test", initialize)
    finally:
        listener.close()
    assert [c[0] for c in calls] == [eps[0], eps[0]]
    assert calls[0][1]["coordinator_bind_address"] == eps[0]
    assert calls[1][1]["coordinator_bind_address"] is None
    assert calls[0][1]["num_processes"] == 2 and calls[1][1]["process_id"] == 1


def test_a_multi_trainer_program_never_runs_alone(monkeypatch):
    """Here JAX's devices are in use (the test process), so the trainer cannot join:
    the data-parallel program raises instead of training alone."""
    monkeypatch.setitem(dist._STATE, "env", None)
    for name, value in {"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2",
                        "PADDLE_TRAINER_ENDPOINTS": EPS2}.items():
        monkeypatch.setenv(name, value)
    prog, _, loss = job.build()
    with pytest.raises(dist.DistributedError, match="trainer 0 of 2 .* can only train alone"):
        fluid.CompiledProgram(prog).with_data_parallel(loss_name=loss.name)
    c = fluid.DistributeTranspilerConfig()
    c.mode = "nccl2"
    with pytest.raises(dist.DistributedError, match="trainer 1 of 2 .* can only train alone"):
        fluid.DistributeTranspiler(c).transpile(1, program=prog, trainers=EPS2,
                                                current_endpoint="127.0.0.1:7002")
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "")
    with pytest.raises(dist.DistributedError, match="PADDLE_TRAINER_ENDPOINTS is not set"):
        dist.init()
    for name in ("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS"):
        monkeypatch.delenv(name)
    with pytest.raises(GraphcError, match=r"ParallelExecutor\(num_trainers=2, trainer_id=1\) "
                       r"but this process is trainer 0 of 1 \(none\)"):
        fluid.ParallelExecutor(False, loss_name=loss.name, main_program=prog, num_trainers=2,
                               trainer_id=1)


@pytest.mark.skipif(not (Path(sys.executable).with_name("mpirun").exists()
                         or shutil.which("mpirun")), reason="needs mpirun")
@pytest.mark.xdist_group("mpi")
def test_nccl2_transpile_under_graphc_launch_joins(tmp_path, one_process_reference):
    """The same nccl2 script under ``graphc launch --nproc_per_node 2`` (mpirun): the
    transpile joins the launcher's job (today each rank trained alone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "XLA_FLAGS"))}
    env.update(CPU_NUM="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "graphc", "launch", "--nproc_per_node", "2",
                           "--timeout", "150", str(JOB), "nccl2", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = [np.load(tmp_path / f"{t}.npz") for t in (0, 1)]
    for name, ref in one_process_reference.items():
        np.testing.assert_array_equal(got[0][name], got[1][name], err_msg=name)
        np.testing.assert_allclose(got[0][name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
