"""Backward and minimize scale linearly: time building an N-layer MLP, then
``Momentum.minimize`` on it (append_backward + one update op per parameter).

The issue's bar: minimize on a 12,500-layer MLP takes no longer than building it.
Run: .venv/bin/python benchmarks/bench_backward.py [--layers 1000 4000 12500]
"""

from __future__ import annotations

import argparse
import gc
import time

import graphc as fluid
from graphc import layers, optimizer


def build(n_layers: int, width: int = 8):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        h = fluid.data("x", [-1, width])
        label = fluid.data("label", [-1, 1], "int64")
        for _ in range(n_layers):
            h = layers.fc(h, width, act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(h, label))
    return main, startup, loss


def measure(n_layers: int) -> dict:
    gc.collect()
    t0 = time.perf_counter()
    main, startup, loss = build(n_layers)
    t1 = time.perf_counter()
    forward_ops = main.num_ops
    with fluid.program_guard(main, startup):
        optimizer.Momentum(0.01, 0.9).minimize(loss)
    t2 = time.perf_counter()
    return {"layers": n_layers, "forward ops": forward_ops, "total ops": main.num_ops,
            "build s": t1 - t0, "minimize s": t2 - t1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1000, 4000, 12500])
    args = parser.parse_args()
    print(f"{'layers':>7} {'fwd ops':>8} {'all ops':>8} {'build s':>8} {'minimize s':>11} "
          f"{'min/build':>9} {'us/op (minimize)':>17}")
    for n in args.layers:
        r = measure(n)
        added = r["total ops"] - r["forward ops"]
        print(f"{r['layers']:>7} {r['forward ops']:>8} {r['total ops']:>8} {r['build s']:>8.2f} "
              f"{r['minimize s']:>11.2f} {r['minimize s'] / r['build s']:>9.2f} "
              f"{r['minimize s'] / added * 1e6:>17.1f}")


if __name__ == "__main__":
    main()
