"""What a distributed process accepts from others (issue 27): a trainer facing a bogus server
(a giant frame, garbage, an oversized layout) ends at once with a graphc error naming it.

No JAX and no subprocesses: the bogus server is a ZeroMQ ROUTER in a thread of this process.
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
    ([WELCOME, _frame(43, b"\0" * (2 * MB))], r"disconnected .*a frame over this process's "
                                               r"bound of 1048576 bytes"),
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
