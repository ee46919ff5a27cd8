"""Round trips of a 4 MiB parameter block and a 24-byte control message on loopback over ZeroMQ
(plain and CURVE) and gRPC: why the parameter server's endpoint transport is ZeroMQ.

Run ``python benchmarks/bench_rpc_engines.py [--rounds 5]`` (gRPC needs ``pip install grpcio``;
without it only ZeroMQ is measured). Each engine echoes from a server process of its own;
rounds interleave the engines (15 big and 400 small round trips each) and the median of the
rounds' medians and the best round are printed. docs/distributed.md records the results.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time

import zmq

BIG, SMALL = 4 << 20, 24
OPTS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]


def zmq_echo(port: int, keys) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    if keys:
        s.curve_server = True
        s.curve_publickey, s.curve_secretkey = keys
    s.bind(f"tcp://127.0.0.1:{port}")
    while True:
        m = s.recv_multipart(copy=False)
        if len(m[-1]) == 1:  # the stop message
            break
        s.send_multipart(m, copy=False)


def grpc_echo(port: int) -> None:
    from concurrent import futures

    import grpc
    server = grpc.server(futures.ThreadPoolExecutor(2), options=OPTS)
    echo = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("e", {"Echo": echo}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def median_us(fn, n: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--port", type=int, default=7565)
    args = ap.parse_args()
    big, small = os.urandom(BIG), os.urandom(SMALL)
    server_keys, client_keys = zmq.curve_keypair(), zmq.curve_keypair()
    procs = [mp.Process(target=zmq_echo, args=(args.port, None)),
             mp.Process(target=zmq_echo, args=(args.port + 1, server_keys))]
    ctx = zmq.Context()
    plain, curve = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    curve.curve_serverkey = server_keys[0]
    curve.curve_publickey, curve.curve_secretkey = client_keys
    plain.connect(f"tcp://127.0.0.1:{args.port}")
    curve.connect(f"tcp://127.0.0.1:{args.port + 1}")

    def round_trip(sock):
        def go(buf):
            sock.send(buf, copy=False)
            sock.recv(copy=False)
        return go
    engines = {"zmq": round_trip(plain), "zmq+curve": round_trip(curve)}
    try:
        import grpc
        procs.append(mp.Process(target=grpc_echo, args=(args.port + 2,), daemon=True))
    except ImportError:
        grpc = None
        print("grpcio is not installed: measuring ZeroMQ only")
    for p in procs:
        p.start()
    if grpc is not None:
        channel = grpc.insecure_channel(f"127.0.0.1:{args.port + 2}", options=OPTS)
        grpc.channel_ready_future(channel).result(timeout=30)
        engines["grpc"] = channel.unary_unary("/e/Echo")
    results = {name: ([], []) for name in engines}
    try:
        for _ in range(args.rounds):
            for name, fn in engines.items():
                results[name][0].append(median_us(lambda f=fn: f(big), 15))
                results[name][1].append(median_us(lambda f=fn: f(small), 400))
    finally:
        plain.send(b"x")
        curve.send(b"x")
        for p in procs:
            if p.daemon:
                p.terminate()
            p.join(10)
        ctx.destroy(0)
    for name, (b, s) in results.items():
        print(f"{name:10s} 4 MiB round trip {statistics.median(b) / 1000:6.2f} ms (best "
              f"{min(b) / 1000:6.2f})   24 B round trip {statistics.median(s):5.0f} us (best "
              f"{min(s):5.0f})")


if __name__ == "__main__":
    main()
