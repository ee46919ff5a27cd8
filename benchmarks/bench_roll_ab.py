"""Steady step with roll-repeated-layers (the default) against the same program unrolled
(``BuildStrategy(roll_repeated_layers=False)``), single steps interleaved in one process.

Run ``python benchmarks/bench_roll_ab.py [--workloads encoder resnet20 fc1250] [--steps 24]``.
Per workload: the layers rolled (scan_layers ops in the built graph), both runners' first
losses (equal within float32 rounding), then one step of each in turn, medians of process
CPU and wall time and rolled / unrolled (issue 28: never over 1.02).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _encoder(dropout: float):
    import bench_encoder as be
    cfg = be.Config(dropout=dropout)
    main, start, loss = be.build_graphc(cfg)
    return main, start, loss, be.make_batches(cfg, 3)


def _resnet20():
    import bench_cold_start as bc
    main, start, loss, feeds = bc._resnet20()
    return main, start, loss, feeds[:3]


def _fc(layers: int):
    import bench_roll_layers as br
    main, start, loss = br.build(layers)
    x = np.random.default_rng(1).uniform(-1, 1, (16, 8)).astype("float32")
    return main, start, loss, [{"x": x}]


BUILDERS = {"encoder": lambda: _encoder(0.0), "encoder-dropout": lambda: _encoder(0.1),
            "resnet20": _resnet20, "fc1250": lambda: _fc(1250)}


class Runner:
    def __init__(self, build, roll: bool):
        import graphc
        self.main, start, self.loss, self.feeds = build()
        self.scope, self.exe = graphc.Scope(), graphc.Executor()
        self.exe.run(start, scope=self.scope)
        self.program = graphc.CompiledProgram(
            self.main, build_strategy=graphc.BuildStrategy(roll_repeated_layers=roll))
        graph = self.program._build_graph((self.loss.name,))
        self.scans = sum(op.type == "scan_layers" for op in graph.ops())

    def __call__(self, i: int) -> float:
        (value,) = self.exe.run(self.program, feed=self.feeds[i % len(self.feeds)],
                                fetch_list=[self.loss], scope=self.scope)
        return float(np.asarray(value).reshape(-1)[0])


def measure(name: str, steps: int) -> None:
    runners = {"rolled": Runner(BUILDERS[name], True), "unrolled": Runner(BUILDERS[name], False)}
    for who, r in runners.items():
        w, c = time.perf_counter(), time.process_time()
        losses = [r(i) for i in range(3)]
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        print(f"{name} {who}: {r.scans} scan_layers ops, first 3 steps {wall:.1f} s wall "
              f"{cpu:.1f} s CPU, losses "
              f"{np.round(losses, 5).tolist()}", flush=True)
    times = {who: [] for who in runners}
    for i in range(steps):  # one step of each in turn: the machine's drift hits both alike
        for who, r in runners.items():
            w, c = time.perf_counter(), time.process_time()
            r(i)
            times[who].append((time.perf_counter() - w, time.process_time() - c))
    med = {who: [statistics.median(t[k] for t in ts) for k in (0, 1)]
           for who, ts in times.items()}
    (rw, rc), (uw, uc) = med["rolled"], med["unrolled"]
    print(f"{name}: rolled CPU {rc * 1e3:.2f} ms wall {rw * 1e3:.2f} ms; unrolled CPU "
          f"{uc * 1e3:.2f} ms wall {uw * 1e3:.2f} ms; rolled / unrolled CPU {rc / uc:.3f} "
          f"wall {rw / uw:.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["encoder", "resnet20", "fc1250"],
                    choices=sorted(BUILDERS))
    ap.add_argument("--steps", type=int, default=24)
    args = ap.parse_args()
    for name in args.workloads:
        measure(name, args.steps)


if __name__ == "__main__":
    main()
