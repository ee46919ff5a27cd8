"""Step time with each BuildStrategy pass on or off, against the hand-written JAX step of
bench_step.py, same model and numbers (MLP 784-512x3-10 with batch_norm; demo CNN).

Run: .venv/bin/python benchmarks/bench_passes_step.py [--models mlp cnn] [--steps 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_step import (  # noqa: E402  (the hand-written baseline and its harness)
    CHECK_STEPS,
    BaselineRunner,
    GraphcRunner,
    cases,
    make_batches,
    time_steps,
)

import graphc  # noqa: E402

OPTIONS = ["fuse_elewise_add_act_ops", "fuse_bn_act_ops", "fuse_all_optimizer_ops",
           "enable_inplace", "memory_optimize", "enable_sequential_execution"]


class StrategyRunner(GraphcRunner):
    """bench_step's graphc runner, running a CompiledProgram with one BuildStrategy."""

    def __init__(self, case, strategy: graphc.BuildStrategy):
        super().__init__(case)
        self.program = graphc.CompiledProgram(self.model.main, build_strategy=strategy)

    def __call__(self, feed) -> float:
        (loss,) = self.exe.run(self.program, feed=feed, fetch_list=[self.model.loss],
                               scope=self.scope)
        return float(np.asarray(loss).reshape(()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    variants = {"off": {}, **{o: {o: True} for o in OPTIONS},
                "all": {o: True for o in OPTIONS}}
    for selected in args.models:
        print(f"\n{'variant':<48} {'ms/step':>9} {'hand ms':>9} {'ratio':>7}  fused ops")
        for name, flags in variants.items():
            (case,) = cases([selected])
            batches = make_batches(case)
            ours = StrategyRunner(case, graphc.BuildStrategy(**flags))
            theirs = BaselineRunner(case, ours)
            a = [ours(batches[i % 4]) for i in range(CHECK_STEPS)]
            b = [theirs(batches[i % 4]) for i in range(CHECK_STEPS)]
            if not np.allclose(a, b, rtol=1e-4, atol=1e-4):
                raise AssertionError(f"{name}: losses differ from hand-written: {a} vs {b}")
            for i in range(args.warmup):
                ours(batches[i % 4])
                theirs(batches[i % 4])
            t_ours, t_hand = [], []
            for _ in range(args.steps // 5):  # interleave so machine drift hits both
                t_ours += time_steps(ours, batches, 5)
                t_hand += time_steps(theirs, batches, 5)
            stats = ours.program.graph(fetch_list=[ours.model.loss]).stats()
            fused = sum(n for t, n in stats.items() if t.startswith("fused"))
            g, h = statistics.median(t_ours) * 1e3, statistics.median(t_hand) * 1e3
            print(f"{case.name + ': ' + name:<48} {g:>9.2f} {h:>9.2f} {g / h:>7.3f}  {fused}")


if __name__ == "__main__":
    main()
