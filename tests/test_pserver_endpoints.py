"""Parameter-server processes that meet by endpoints over ZeroMQ (issue 27): 2 pservers and 2
trainers, each started alone with Paddle's variables as Paddle's test harness does (no mpirun).

Sync losses equal local training (trainers started first); async converges; a killed server
ends every other process, naming it; strangers (wrong secret, no secret, garbage, an
oversized frame) are dropped without disturbing the job.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.distributed.pserver import PServerError, zmq_link
from graphc.distributed.pserver import endpoints as settings
from graphc.distributed.pserver.link import transport
from graphc.distributed.pserver.protocol import Layout

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import pserver_sync_job as job  # noqa: E402

sys.path.pop(0)

pytestmark = [pytest.mark.xdist_group("pserver_endpoints")]
JOB = ROOT / "tests" / "pserver_endpoint_job.py"


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Job:
    """Four processes, each its own session (its own process group): killed in ``stop``."""

    def __init__(self, out: Path, **env):
        self.out, self.procs, self.ports = out, {}, free_ports(2)
        self.endpoints = [f"127.0.0.1:{p}" for p in self.ports]
        self.env = dict(os.environ, CPU_NUM="1", PYTHONPATH=str(ROOT),
                        PADDLE_PSERVERS_IP_PORT_LIST=",".join(self.endpoints),
                        PADDLE_TRAINERS_NUM="2", FLAGS_rpc_deadline="60000",
                        JAX_COMPILATION_CACHE_DIR=str(ROOT / ".pytest_cache" / "jax-compilation"))
        self.env.update(env)
        self.env.pop("XLA_FLAGS", None)
        for name in [n for n in self.env if n.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_"))]:
            del self.env[name]  # no MPI job around these processes

    def start(self, name: str) -> None:
        role, index = name[:-1], int(name[-1])
        env = dict(self.env, TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(index))
        if role == "pserver":
            env = dict(self.env, TRAINING_ROLE="PSERVER", POD_IP="127.0.0.1",
                       PADDLE_PORT=str(self.ports[index]))
        log = open(self.out / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen([sys.executable, str(JOB), str(self.out)], env=env,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        log.close()

    def wait(self, timeout: float) -> dict[str, int]:
        end = time.monotonic() + timeout
        for p in self.procs.values():
            p.wait(timeout=max(0.1, end - time.monotonic()))
        return {n: p.returncode for n, p in self.procs.items()}

    def log(self, name: str) -> str:
        return (self.out / f"{name}.log").read_text()

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-2500:]}" for n in self.procs)

    def wait_for(self, what, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < end, self.logs()
            time.sleep(0.05)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)


def local_run(steps: int):
    with fluid.unique_name.guard():  # the job's names, however many programs came before
        main, startup, loss = job.build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(np.asarray(exe.run(main, feed=b, fetch_list=[loss.name],
                                       scope=scope)[0]).reshape(-1)[0])
              for b in job.batches(max(steps, job.STEPS + 1))[:steps]]
    return losses, job.params(main, scope), job.params(main, _initial(startup))


def _initial(startup):
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    return scope


def strangers(endpoints: list[str], server: int, big: int) -> list[str]:
    """Knock on a server as strangers would: a CURVE client with another secret and a client
    without CURVE each say a HELLO naming a trainer the job lacks and send a control
    message; another sends one frame of ``big`` bytes; a raw TCP peer sends garbage.
    Returns what the two HELLOs got back."""
    import zmq
    endpoint = endpoints[server]
    ctx, got = zmq.Context(), []
    hello = {"job": zmq_link.JOB, "role": "TRAINER", "index": 7, "endpoints": endpoints,
             "trainers": 2}
    try:
        # the raw peer first: the zmq strangers' refused sends can take seconds, and a short
        # job may be over by then (a refused connection to a finished server proves nothing)
        host, port = endpoint.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=2) as raw:
                raw.settimeout(2)
                raw.sendall(b"\xff" * (1 << 20))
        except OSError:
            pass  # the server closed it (or the job already ended)
        socks = [ctx.socket(zmq.DEALER) for _ in range(3)]
        keys = settings.job_keys(b"not the job's secret")
        socks[0].curve_serverkey = keys["server"][0]
        socks[0].curve_publickey, socks[0].curve_secretkey = keys["client"]
        for s in socks:
            s.setsockopt(zmq.LINGER, 0)
            # a DEALER whose handshake the server just refused has no pipe, and a send on it
            # blocks until one exists: a stranger gives up instead (zmq.Again below)
            s.setsockopt(zmq.SNDTIMEO, 2000)
            s.connect(f"tcp://{endpoint}")
        for s in socks[:2]:
            _send_or_give_up(s, [zmq_link.HEADER.pack(zmq_link.MAGIC, zmq_link.TAG_HELLO),
                                 json.dumps(hello).encode()])
            _send_or_give_up(s, [zmq_link.HEADER.pack(zmq_link.MAGIC, 41), b"\0" * 24])
        _send_or_give_up(socks[2], [b"\0" * big])
        for s in socks[:2]:
            got.append(s.recv_multipart()[-1].decode() if s.poll(1500) else "nothing")
        for s in socks:
            s.close(0)
    finally:
        ctx.destroy(0)  # (term would wait forever for a socket an error left open)
    return got


def _send_or_give_up(sock, frames) -> None:
    """Send as a stranger would: if the server never lets the message in, move on."""
    import zmq
    try:
        sock.send_multipart(frames)
    except zmq.Again:
        pass


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_sync_job_started_trainers_first_equals_local_training(tmp_path):
    """Trainers first, then the servers in reverse order, each a process of its own with a
    job secret (CURVE, as off loopback); strangers knock meanwhile. The trainers' mean loss
    per step and their final parameters equal local training on the whole batches."""
    run = Job(tmp_path, GRAPHC_JOB_SECRET="s3cret-for-this-test", GRAPHC_PS_ENCRYPT="1")
    try:
        for name in ("trainer1", "trainer0", "pserver1", "pserver0"):
            run.start(name)
        run.wait_for(lambda: "listening on" in run.log("pserver0"), 60)
        got = strangers(run.endpoints, 0, 1 << 22)
        rcs = run.wait(120)
    finally:
        run.stop()
    assert rcs == dict.fromkeys(rcs, 0), run.logs()
    # with CURVE nothing reaches a stranger: not even the refusal of its HELLO
    assert got == ["nothing", "nothing"], got
    losses, params, _ = local_run(job.STEPS)
    t0, t1 = (json.loads((tmp_path / f"trainer{t}.losses.json").read_text()) for t in (0, 1))
    np.testing.assert_allclose((np.array(t0) + np.array(t1)) / 2, losses, atol=1e-5)
    for t in (0, 1):
        final = np.load(tmp_path / f"trainer{t}.final.npz")
        for name, value in params.items():
            np.testing.assert_allclose(final[name], value, atol=1e-5, err_msg=name)
    for s in (0, 1):
        assert json.loads((tmp_path / f"server{s}.json").read_text())["rounds"] == job.STEPS


ASYNC_STEPS = 16


def mse(p, steps: int) -> float:
    """The model's loss over the first ``steps`` global batches with parameters ``p``."""
    out = []
    for b in job.batches(steps):
        h = np.tanh(b["x"] @ p["fc_0.w_0"] + p["fc_0.b_0"])
        out.append(np.mean((h @ p["fc_1.w_0"] + p["fc_1.b_0"] - b["y"]) ** 2))
    return float(np.mean(out))


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_async_job_converges_and_a_loopback_stranger_is_dropped(tmp_path):
    """Async mode without a secret (loopback only): each gradient is applied as it comes;
    trainer 0's final parameters have a loss over the data below 0.7x the initial one and
    within 2x + 0.05 of local training's. A stranger's HELLO naming no trainer of the job is
    refused, and its oversized frame ends only its own connection."""
    run = Job(tmp_path, PS_TEST_MODE="async", PS_TEST_STEPS=str(ASYNC_STEPS),
              PS_TEST_LR="0.025")
    run.env.pop("GRAPHC_JOB_SECRET", None)
    try:
        for name in ("pserver0", "pserver1", "trainer0", "trainer1"):
            run.start(name)
        run.wait_for(lambda: "listening on" in run.log("pserver1"), 60)
        got = strangers(run.endpoints, 1, 8 << 20)
        rcs = run.wait(120)
    finally:
        run.stop()
    assert rcs == dict.fromkeys(rcs, 0), run.logs()
    assert got[0] == "nothing" and "this job has no trainer 7" in got[1], got
    assert "refused a peer: this job has no trainer 7" in run.log("pserver1")
    _, local, initial = local_run(ASYNC_STEPS)
    final = np.load(tmp_path / "trainer0.final.npz")
    trained = mse({n: final[n] for n in final.files}, ASYNC_STEPS)
    start, best = mse(initial, ASYNC_STEPS), mse(local, ASYNC_STEPS)
    assert trained < 0.7 * start and trained < 2 * best + 0.05, (trained, best, start)


def _training_job(tmp_path, deadline: float) -> Job:
    """2 servers and 2 trainers started alone, training 400 slow steps under
    FLAGS_rpc_deadline ``deadline`` s; returned once trainer 1 logged 2 losses (stopped on
    failure)."""
    run = Job(tmp_path, PS_TEST_STEPS="400", PS_TEST_STEP_SLEEP="0.05",
              FLAGS_rpc_deadline=str(int(deadline * 1000)))
    try:
        for name in ("pserver0", "pserver1", "trainer0", "trainer1"):
            run.start(name)
        losses = tmp_path / "trainer1.losses.json"
        run.wait_for(lambda: losses.exists() and len(json.loads(losses.read_text() or "[]"))
                     >= 2, 90)
    except BaseException:
        run.stop()
        raise
    return run


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_killed_server_ends_every_process_naming_it(tmp_path):
    """Server 1 is killed while the trainers train: each trainer exits non-zero at once
    naming it, and server 0, whose trainers went, exits non-zero naming a trainer; all
    within FLAGS_rpc_deadline."""
    deadline = 20.0
    run = _training_job(tmp_path, deadline)
    try:
        os.kill(run.procs["pserver1"].pid, signal.SIGKILL)
        killed = time.monotonic()
        rcs = run.wait(deadline + 15)
        took = time.monotonic() - killed
    finally:
        run.stop()
    assert all(rcs[n] != 0 for n in ("trainer0", "trainer1", "pserver0")), run.logs()
    print(f"every process ended {took:.1f} s after the kill")  # (shown with -s)
    assert took < deadline, f"{took:.1f} s"
    gone = f"pserver 1 ({run.endpoints[1]}) disconnected"
    for t in ("trainer0", "trainer1"):
        assert gone in run.log(t), run.logs()
    assert "pserver 0" in run.log("pserver0") and "trainer" in run.log("pserver0")
    assert "disconnected" in run.log("pserver0"), run.logs()


# -- ps27bench: a hung (not dead) trainer without a launcher
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_stopped_trainer_ends_every_process_naming_it(tmp_path):
    """Trainer 1 stops (SIGSTOP: alive, its connections open, answering nothing) while the
    sync job trains: each server notices by missed heartbeats and exits non-zero naming it,
    trainer 0 then exits non-zero naming a server, all within FLAGS_rpc_deadline; resumed,
    trainer 1 finds its servers gone and exits non-zero naming one."""
    deadline = 16.0  # heartbeats time out at half of it; the rest is the teardown's margin
    run = _training_job(tmp_path, deadline)
    try:
        stopped = run.procs["trainer1"]
        os.kill(stopped.pid, signal.SIGSTOP)
        start = time.monotonic()
        others = {n: run.procs[n] for n in ("pserver0", "pserver1", "trainer0")}
        for p in others.values():
            p.wait(timeout=max(0.1, start + deadline + 15 - time.monotonic()))
        took = time.monotonic() - start
        os.kill(stopped.pid, signal.SIGCONT)
        rc_stopped = stopped.wait(timeout=deadline + 15)
    finally:
        run.stop()
    rcs = {n: p.returncode for n, p in others.items()}
    assert all(rc != 0 for rc in rcs.values()) and rc_stopped != 0, (rcs, rc_stopped,
                                                                      run.logs())
    print(f"the others ended {took:.1f} s after the stop")  # (shown with -s)
    assert took < deadline, f"{took:.1f} s"
    for s in ("pserver0", "pserver1"):
        assert "trainer 1 disconnected" in run.log(s), run.logs()
    assert "pserver" in run.log("trainer0") and "disconnected" in run.log("trainer0"), \
        run.logs()
    assert "PServerError: trainer 1: pserver" in run.log("trainer1"), run.logs()


# -- fast checks of the link alone (no JAX, threads of this process) ----------------------------
def _server(endpoints, trainers, environ, out):
    """Server 0's join in a thread: ``out`` gets "joined" or the error."""
    def run():
        try:
            link, _, _ = zmq_link.join("PSERVER", 0, endpoints, trainers, 1 << 16, False,
                                       environ)
            link.close()
            out.append("joined")
        except PServerError as exc:
            out.append(str(exc))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(60)
@pytest.mark.parametrize("encrypt", ["0", "1"], ids=["plain", "curve"])
def test_a_trainer_with_another_secret_fails_at_once_naming_the_server(encrypt):
    """Loopback with a secret: PLAIN with a token from the secret (the ZAP handler refuses
    another token), or CURVE with GRAPHC_PS_ENCRYPT=1 (another secret's keys fail)."""
    endpoints, got = [f"127.0.0.1:{free_ports(1)[0]}"], []
    server = _server(endpoints, 1, {"GRAPHC_JOB_SECRET": "a", "FLAGS_rpc_deadline": "2500",
                                    "GRAPHC_PS_ENCRYPT": encrypt}, got)
    start = time.monotonic()
    with pytest.raises(PServerError, match=rf"trainer 0: pserver 0 \({endpoints[0]}\) "
                                           "(failed|refused) the handshake"):
        zmq_link.join("TRAINER", 0, endpoints, 1, 0, False,
                      {"GRAPHC_JOB_SECRET": "b", "FLAGS_rpc_deadline": "10000",
                       "GRAPHC_PS_ENCRYPT": encrypt})
    assert time.monotonic() - start < 2.0  # not the trainer's 10 s deadline
    server.join(10)
    assert got == [f"pserver 0 ({endpoints[0]}): trainer 0 never connected within "
                   "FLAGS_rpc_deadline=2500 ms"], got


@pytest.mark.timeout(60)
def test_a_trainer_transpiled_otherwise_is_refused_and_the_job_goes_on():
    """A trainer transpiled for 3 trainers is told why it is refused; the server still takes
    the right one (with the job's secret: PLAIN on loopback)."""
    endpoints, got = [f"127.0.0.1:{free_ports(1)[0]}"], []
    environ = {"FLAGS_rpc_deadline": "8000", "GRAPHC_JOB_SECRET": "ours"}
    with pytest.raises(PServerError, match=r"refused this process: trainer 1 was transpiled for "
                                           r".* and 3 trainers, pserver 0 .* and 2"):
        server = _server(endpoints, 2, environ, got)
        zmq_link.join("TRAINER", 1, endpoints, 3, 0, False, environ)
    links = []

    def trainer(t):
        links.append(zmq_link.join("TRAINER", t, endpoints, 2, 0, False, environ)[0])
    threads = [threading.Thread(target=trainer, args=(t,), daemon=True) for t in (0, 1)]
    for th in threads:
        th.start()
    server.join(10)
    for th in threads:
        th.join(10)
    assert got == ["joined"] and len(links) == 2
    for link in links:
        link.close()


def test_settings_are_checked():
    with pytest.raises(PServerError, match=r"\['10.1.2.3:6000'\] are not loopback: set "
                                           "GRAPHC_JOB_SECRET"):
        settings.job_secret(["127.0.0.1:6000", "10.1.2.3:6000"], {})
    assert settings.job_secret(["127.0.0.1:6000", "localhost:7"], {}) is None
    with pytest.raises(PServerError, match="FLAGS_rpc_deadline must be a number of "
                                           "milliseconds > 0, got 'soon'"):
        settings.rpc_deadline({"FLAGS_rpc_deadline": "soon"})
    assert settings.rpc_deadline({}) == 180.0
    assert transport({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1"}) == "mpi"
    assert transport({}) == "zmq"
    assert transport({"OMPI_COMM_WORLD_SIZE": "4", "GRAPHC_PS_TRANSPORT": "zmq"}) == "zmq"
    with pytest.raises(PServerError, match="GRAPHC_PS_TRANSPORT must be 'mpi' or 'zmq'"):
        transport({"GRAPHC_PS_TRANSPORT": "grpc"})
    assert not settings.encrypted(["127.0.0.1:1", "127.0.0.2:1"], {})
    assert settings.encrypted(["127.0.0.1:1"], {"GRAPHC_PS_ENCRYPT": "1"})
    assert settings.encrypted(["127.0.0.1:1", "10.1.2.3:1"], {})
    with pytest.raises(PServerError, match="is not host:port"):
        settings.split_endpoint("127.0.0.1")
    layout = Layout(1, (("w@GRAD", (4, 2), "float32"),), (("w", (4, 2), "float32"),),
                    (("t", 8, "float32", "table"),), ("t",))
    assert Layout.from_bytes(layout.to_bytes()) == layout
    with pytest.raises(PServerError, match="layout message is malformed"):
        Layout.from_bytes(b"\x80\x04 not json")


@pytest.mark.timeout(60)
def test_a_stopped_server_is_noticed_by_heartbeats_before_the_deadline():
    """A server that stops (SIGSTOP: its process is alive, its TCP connections open, but it
    answers nothing) is noticed when it misses ZeroMQ heartbeats (half the deadline), before
    the deadline, and the trainer's error names it."""
    endpoint = f"127.0.0.1:{free_ports(1)[0]}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), FLAGS_rpc_deadline="30000")
    code = ("import time\nfrom graphc.distributed.pserver import zmq_link\n"
            "print('imported', flush=True)\n"
            f"link = zmq_link.join('PSERVER', 0, ['{endpoint}'], 1, 1 << 16, False)\n"
            "print('joined', flush=True)\ntime.sleep(60)\n")
    server = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    link = None
    try:
        assert server.stdout.readline() == b"imported\n"
        link, _, _ = zmq_link.join("TRAINER", 0, [endpoint], 1, 0, False,
                                   {"FLAGS_rpc_deadline": "6000"})
        assert server.stdout.readline() == b"joined\n"
        os.kill(server.pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(PServerError, match=rf"trainer 0: pserver 0 \({endpoint}\) "
                                               "disconnected .*stopped answering heartbeats"):
            link.recv(np.empty(3, np.int64), 0, 43)
        # heartbeats time out after half the deadline (3 s): well before the 6 s deadline
        assert time.monotonic() - start < 5.8
    finally:
        if link is not None:
            link.close()
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)
