"""Steady step with roll-repeated-layers (the default) against the same program unrolled
(``BuildStrategy(roll_repeated_layers=False)``), single steps interleaved in one process.

Run ``python benchmarks/bench_roll_ab.py [--workloads encoder resnet20 fc1250] [--steps 24]
[--rolled-all]``.
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


def _every_run_rolled():
    """The default pipeline with roll-repeated-layers rolling lone optimizer runs too
    (``min_update_only_ops=0``: the pass before small28's cost rule)."""
    import graphc
    from graphc.passes import PassManager, make_pass
    from graphc.passes.infra.pipeline import passes_for
    passes = [make_pass(p.name, min_update_only_ops=0) if p.name == "roll-repeated-layers"
              else p for p in passes_for(graphc.BuildStrategy())]
    return PassManager(passes)


class Runner:
    """``mode``: "rolled" (the default strategy), "unrolled" or "rolled-all" (see
    ``_every_run_rolled``)."""

    def __init__(self, build, mode: str):
        import graphc
        self.main, start, self.loss, self.feeds = build()
        self.scope, self.exe = graphc.Scope(), graphc.Executor()
        self.exe.run(start, scope=self.scope)
        self.program = graphc.CompiledProgram(
            self.main, build_strategy=graphc.BuildStrategy(roll_repeated_layers=mode != "unrolled"),
            pass_manager=_every_run_rolled() if mode == "rolled-all" else None)
        graph = self.program._build_graph((self.loss.name,))
        self.scans = sum(op.type == "scan_layers" for op in graph.ops())

    def __call__(self, i: int) -> float:
        (value,) = self.exe.run(self.program, feed=self.feeds[i % len(self.feeds)],
                                fetch_list=[self.loss], scope=self.scope)
        return float(np.asarray(value).reshape(-1)[0])


def measure(name: str, steps: int, modes=("rolled", "unrolled")) -> None:
    runners = {mode: Runner(BUILDERS[name], mode) for mode in modes}
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
    uw, uc = med["unrolled"]
    for who, (w, c) in med.items():
        print(f"{name} {who}: CPU {c * 1e3:.2f} ms, wall {w * 1e3:.2f} ms; / unrolled: CPU "
              f"{c / uc:.3f}, wall {w / uw:.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["encoder", "resnet20", "fc1250"],
                    choices=sorted(BUILDERS))
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--rolled-all", action="store_true",
                    help="also the pass rolling lone optimizer runs (before small28's rule)")
    args = ap.parse_args()
    modes = ("rolled", "unrolled", "rolled-all") if args.rolled_all else ("rolled", "unrolled")
    for name in args.workloads:
        measure(name, args.steps, modes)


if __name__ == "__main__":
    main()
