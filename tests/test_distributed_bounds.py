"""What a distributed process accepts from others and where it listens (issue 27): a trainer
facing a bogus server ends at once naming it; role makers' store values are signed with the job
secret; the launcher's control port binds this node's own address; a join after JAX started
says which line to move.

The bogus server is a ZeroMQ ROUTER in a thread of this process; one short subprocess only.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

from graphc.distributed.pserver import PServerError, zmq_link
from graphc.distributed.pserver import endpoints as settings
from graphc.distributed.pserver.trainer import TrainerChannel

pytestmark = [pytest.mark.xdist_group("pserver_endpoints")]
MB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bogus_server(endpoint: str, replies, stop: threading.Event) -> threading.Thread:
    """A ROUTER on ``endpoint`` that answers a HELLO with ``replies`` (lists of frames)."""
    import zmq

    def run():
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(f"tcp://{endpoint}")
        try:
            while not stop.is_set():
                if sock.poll(50):
                    ident = sock.recv_multipart()[0]
                    for frames in replies:
                        sock.send_multipart([ident, *frames])
        finally:
            ctx.destroy(0)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _frame(tag: int, payload: bytes) -> list[bytes]:
    return [zmq_link.HEADER.pack(zmq_link.MAGIC, tag), payload]


WELCOME = _frame(zmq_link.TAG_WELCOME, b"")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("replies, message", [
    ([[b"\0" * (2 * MB)]], r"closed the connection before welcoming this process .*a frame "
                           r"over this process's bound of 1048576 bytes \(GRAPHC_PS_MAX_FRAME_MB"),
    # (zmq may report the closed connection before it hands over the welcome before it)
    ([WELCOME, _frame(43, b"\0" * (2 * MB))], r"(disconnected|closed the connection before "
                                               r"welcoming this process) .*a frame over this "
                                               r"process's bound of 1048576 bytes"),
    ([[b"garbage"]], r"sent 1 frame\(s\) of 7 bytes that are no graphc parameter-server "
                     "message"),
    ([WELCOME, *[_frame(46, b"x")] * 40], r"sent more than 32 messages \(tag 46\) that were "
                                          "not asked for"),
], ids=["giant-before-welcome", "giant-after-welcome", "garbage", "flood"])
def test_a_trainer_facing_a_bogus_server_fails_at_once_naming_it(replies, message):
    """FLAGS_rpc_deadline is 30 s; each failure comes within a few seconds, naming the
    server's endpoint, and nothing bigger than the bound was ever allocated."""
    endpoint = f"127.0.0.1:{_free_port()}"
    stop = threading.Event()
    server = _bogus_server(endpoint, replies, stop)
    environ = {"FLAGS_rpc_deadline": "30000", "GRAPHC_PS_MAX_FRAME_MB": "1"}
    start, link = time.monotonic(), None
    try:
        with pytest.raises(PServerError, match=rf"trainer 0: pserver 0 \({endpoint}\) "
                                               rf"(.|\n)*{message}"):
            link = zmq_link.join("TRAINER", 0, [endpoint], 1, 0, False, environ)[0]
            link.recv(np.empty(4, np.uint8), 0, 43)
    finally:
        if link is not None:
            link.close()
        stop.set()
        server.join(10)
    assert time.monotonic() - start < 10


def test_a_layout_over_the_bound_or_malformed_is_refused_naming_the_server():
    from graphc.distributed.pserver.protocol import Layout
    channel = TrainerChannel(0, ["127.0.0.1:7001", "127.0.0.1:7002"], 1)
    channel.link = type("Link", (), {"frame_bound": MB})()
    huge = Layout(1, (), (("w", (1 << 20, 4), "float32"),)).to_bytes()
    with pytest.raises(PServerError, match=r"trainer 0: pserver 1 \(127.0.0.1:7002\) announces "
                                           r"16777216 bytes of parameter blocks, over this "
                                           r"trainer's bound of 1048576 bytes"):
        channel._layout(1, huge)
    assert channel._layout(1, Layout(1, (), (("w", (4, 4), "float32"),)).to_bytes())
    for bad in ({"server": 0, "grads": [], "params": [["w", [-4], "float32"]], "rows": [],
                 "pulls": []},
                {"server": 0, "grads": [], "params": [["w", [4], "object"]], "rows": [],
                 "pulls": []}):
        with pytest.raises(PServerError, match="layout message is malformed"):
            channel._layout(0, json.dumps(bad).encode())
    assert settings.trainer_frame_bound({}) == 1024 * MB
    assert settings.trainer_frame_bound({"GRAPHC_PS_MAX_FRAME_MB": "0.5"}) == MB // 2
    with pytest.raises(PServerError, match="GRAPHC_PS_MAX_FRAME_MB must be a number of "
                                           "megabytes > 0, got 'lots'"):
        settings.trainer_frame_bound({"GRAPHC_PS_MAX_FRAME_MB": "lots"})


def test_role_maker_store_values_are_signed_with_the_job_secret(tmp_path):
    """Two workers meet in a directory store; a value a stranger (no secret, or another one)
    wrote under a worker's key is refused, naming the key."""
    from graphc.fluid.incubate.fleet.base.comm import DirStore, RoleError, StoreComm

    def comm(index, secret):
        return StoreComm(DirStore(str(tmp_path)), {"worker": (index, 2)}, 2.0, "test",
                         {"GRAPHC_JOB_SECRET": secret} if secret else {})
    ours = [comm(0, "s"), comm(1, "s")]
    out = [None, None]
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(
        i, ours[i].all_gather(10 + i, "worker"))) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert out == [[10, 11], [10, 11]]
    for stranger in (None, "another"):  # a fresh store each: no rounds before
        store = DirStore(str(tmp_path), f"job-{stranger}")
        mine = StoreComm(store, {"worker": (0, 2)}, 2.0, "test", {"GRAPHC_JOB_SECRET": "s"})
        theirs = StoreComm(store, {"worker": (1, 2)}, 2.0, "test",
                           {"GRAPHC_JOB_SECRET": stranger} if stranger else {})
        store.put("worker/1/1", theirs._seal("worker/1/1", "666"))
        with pytest.raises(RoleError, match="the value under 'worker/1/1' in the role makers' "
                                            "store is not signed with this job's "
                                            "GRAPHC_JOB_SECRET"):
            mine.all_gather(1, "worker")


def test_the_control_port_of_a_multinode_launch_binds_this_node_s_address(monkeypatch):
    from graphc.distributed import DistributedError
    from graphc.distributed.control import ControlServer
    monkeypatch.setenv("POD_IP", "127.0.0.2")
    server = ControlServer(multinode=True)
    try:
        assert server.sock.getsockname()[0] == "127.0.0.2"
        assert server.address.startswith("127.0.0.2:")
    finally:
        server.close()
    monkeypatch.delenv("POD_IP")
    monkeypatch.setattr(socket, "gethostname", lambda: "localhost")
    with pytest.raises(DistributedError, match="host name 'localhost' resolves to 127.0.0.1 "
                                               r"\(loopback\).*set POD_IP"):
        ControlServer(multinode=True)


LATE_JOIN = """\
import graphc.fluid as fluid
import graphc.distributed as dist
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    fluid.layers.create_parameter([2], "float32")
fluid.Executor(fluid.CPUPlace()).run(startup)
try:
    dist.init()
except dist.DistributedError as exc:
    print("ERROR", exc)
"""


@pytest.mark.timeout(90)
def test_a_join_after_jax_started_names_the_line_to_move(tmp_path):
    """jax.distributed refuses to start once JAX's backend has: the error names the line that
    started it and what to call before it."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path
    script = tmp_path / "late.py"
    script.write_text(LATE_JOIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "OMPI_", "PMI"))}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parent.parent), PADDLE_TRAINER_ID="1",
               PADDLE_TRAINERS_NUM="2", PADDLE_TRAINER_ENDPOINTS="127.0.0.1:9,127.0.0.1:10")
    proc = subprocess.Popen([sys.executable, "late.py"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out = proc.communicate(timeout=80)[0]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    # (graphc's Executor starts JAX's backend when it is made)
    assert ("ERROR this process is trainer 1 of 2 (paddle), but JAX's backend already started "
            "at late.py:6 (Executor.__init__)") in out, out
    assert "call graphc.distributed.init() (or fleet.init(is_collective=True), or the nccl2 " \
           "transpile) before late.py:6" in out, out
