"""Steps per second with ExecutionStrategy.num_iteration_per_run = K against K = 1, in one run.

Run ``python benchmarks/bench_iterations_per_run.py [--iterations 10] [--steps 2000]``.
A small MLP (32-32-10, batch 16, Momentum) is dispatch-bound: each ``Executor.run`` costs
more in Python and XLA dispatch than in arithmetic, which K steps per call (one
``lax.scan``) pay once. Three ways run interleaved in rounds: K = 1 (one feed dict per call),
K given as a list of K dicts (the executor checks and stacks them at every call), and K
given as arrays already stacked on a leading K axis. Losses of the first 2K steps are
compared first (they must match K = 1). Per-step times are per call divided by K; the
median is reported (the mean shows how noisy a shared machine is).
Target: K = 10 at least 1.5x the steps/s of K = 1.

On the 2-core development machine (shared, Python 3.11.7, jax 0.10.2, CPU), ``--steps 3000``:

    way                           us/step (median)  us/step (mean)   steps/s  vs K=1
    K=1                                      136.8           150.4      7312   1.00x
    K=10, list of 10 dicts                    32.9            36.7     30391   4.16x
    K=10, stacked arrays                      24.8            26.2     40258   5.51x
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import jax
import numpy as np

import graphc
from graphc import models, optimizer
from graphc.ir.default_programs import program_guard

LR, MU = 0.01, 0.9


def build(input_dim: int, hidden: int, classes: int):
    model = models.mlp(input_dim=input_dim, hidden=(hidden,), num_classes=classes,
                       batch_norm=False)
    with program_guard(model.main, model.startup):
        optimizer.Momentum(LR, MU).minimize(model.loss)
    return model


def make_feeds(count: int, batch: int, input_dim: int, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((batch, input_dim), dtype=np.float32),
             "label": rng.integers(0, classes, (batch, 1), dtype=np.int64)}
            for _ in range(count)]


class Runner:
    """One way of running the model: ``call()`` runs ``steps_per_call`` training steps."""

    def __init__(self, name: str, model, k: int, feeds, form: str):
        self.name, self.model, self.k = name, model, k
        self.exe, self.scope = graphc.Executor(), graphc.Scope()
        self.exe.run(model.startup, scope=self.scope)
        es = graphc.ExecutionStrategy(num_iteration_per_run=k)
        self.program = graphc.CompiledProgram(model.main, exec_strategy=es)
        if k == 1:
            self.feeds = feeds
        elif form == "list":  # a list of K dicts, stacked by the executor at every call
            self.feeds = [feeds[i:i + k] for i in range(0, len(feeds) - k + 1, k)]
        else:  # arrays already stacked on a leading K axis
            self.feeds = [{n: np.stack([f[n] for f in feeds[i:i + k]]) for n in feeds[0]}
                          for i in range(0, len(feeds) - k + 1, k)]
        self.i = 0

    def call(self):
        feed = self.feeds[self.i % len(self.feeds)]
        self.i += 1
        (loss,) = self.exe.run(self.program, feed=feed, fetch_list=[self.model.loss],
                               scope=self.scope)
        return loss  # numpy: the step has completed

    def losses(self, calls: int) -> np.ndarray:
        return np.concatenate([np.asarray(self.call()).reshape(-1) for _ in range(calls)])


def time_calls(runner: Runner, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        runner.call()
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10, help="K of the compared runs")
    parser.add_argument("--steps", type=int, default=2000, help="training steps timed per way")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timing rounds")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--input-dim", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--classes", type=int, default=10)
    args = parser.parse_args(argv)
    k = args.iterations
    feeds = make_feeds(4 * k, args.batch, args.input_dim, args.classes)
    model = build(args.input_dim, args.hidden, args.classes)
    runners = [Runner("K=1", model, 1, feeds, "dict"),
               Runner(f"K={k}, list of {k} dicts", model, k, feeds, "list"),
               Runner(f"K={k}, stacked arrays", model, k, feeds, "stacked")]

    # Same losses first: K steps per call compute what K single calls compute.
    want = runners[0].losses(2 * k)
    for r in runners[1:]:
        got = r.losses(2)
        if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"{r.name}: losses differ from K=1: {got} vs {want}")
    for r in runners:  # warm up (compiled already; settle caches)
        for _ in range(max(3, 30 // r.k)):
            r.call()

    times: dict[str, list[float]] = {r.name: [] for r in runners}
    per_round = max(1, args.steps // args.rounds)
    for _ in range(args.rounds):  # interleaved, so drift in machine speed hits all alike
        for r in runners:
            calls = max(1, per_round // r.k)
            times[r.name] += [t / r.k for t in time_calls(r, calls)]  # seconds per step

    print(f"graphc num_iteration_per_run benchmark: MLP {args.input_dim}-{args.hidden}-"
          f"{args.classes}, batch {args.batch}, Momentum; {args.steps} steps per way in "
          f"{args.rounds} interleaved rounds")
    print(f"python {platform.python_version()}, jax {jax.__version__}, "
          f"{jax.devices()[0].platform} x{len(jax.devices())}, {platform.machine()}")
    base = statistics.median(times["K=1"])
    print(f"{'way':<28} {'us/step (median)':>17} {'us/step (mean)':>15} {'steps/s':>9} "
          f"{'vs K=1':>7}")
    for r in runners:
        med, mean = statistics.median(times[r.name]), statistics.fmean(times[r.name])
        print(f"{r.name:<28} {med * 1e6:>17.1f} {mean * 1e6:>15.1f} {1 / med:>9.0f} "
              f"{base / med:>6.2f}x")
    best = min(statistics.median(times[r.name]) for r in runners[1:])
    ok = base / best >= 1.5
    print(f"target K={k} >= 1.5x the steps/s of K=1: {'met' if ok else 'NOT met'} "
          f"({base / best:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
