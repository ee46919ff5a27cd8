"""Training-step time and XLA memory of the amp pass (bfloat16) against float32, in one run.

Run ``python benchmarks/bench_amp.py [--steps 30] [--warmup 5] [--batch 128]``; see
benchmarks/README.md for the numbers measured and why bf16 is not faster on this CPU.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import graphc.amp
import jax
import numpy as np

import graphc
from graphc import models, optimizer
from graphc.passes import PassManager, make_pass

MODELS = {
    "mlp": lambda: models.mlp(784, (512, 512, 512), 10),  # with batch_norm, as bench_step
    "cnn": lambda: models.demo_cnn((1, 28, 28), 10, (16, 32)),
}


def build(name: str, amp: bool, batch: int):
    m = MODELS[name]()
    with graphc.program_guard(m.main, m.startup):
        optimizer.Momentum(0.01, 0.9).minimize(m.loss)
    bs = graphc.BuildStrategy(amp=amp)
    passes = [make_pass("dce")]
    if amp:
        graphc.amp.init_state(m.startup, bs)
        passes.append(make_pass("amp", **bs.pass_options("amp")))
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(m.startup, scope=scope)
    compiled = graphc.CompiledProgram(m.main, pass_manager=PassManager(passes))
    rng = np.random.default_rng(0)
    shape = [batch] + [int(d) for d in m.feeds[0].shape[1:]]
    feed = {m.feeds[0].name: rng.uniform(0, 1, shape).astype("float32"),
            "label": rng.integers(0, 10, (batch, 1)).astype("int64")}
    return m, exe, scope, compiled, feed


def measure(name: str, amp: bool, batch: int, steps: int, warmup: int) -> dict:
    m, exe, scope, compiled, feed = build(name, amp, batch)
    fetch = [m.loss]
    for _ in range(warmup):
        exe.run(compiled, feed=feed, fetch_list=fetch, scope=scope)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        out = exe.run(compiled, feed=feed, fetch_list=fetch, scope=scope, return_numpy=False)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - t0)
    mem = exe.compile(compiled, feed=feed, fetch_list=fetch).memory_analysis()
    loss = float(np.asarray(exe.run(compiled, feed=feed, fetch_list=fetch, scope=scope)[0])[0])
    return {"median_ms": statistics.median(times) * 1e3, "temp": mem.temp_size_in_bytes,
            "args": mem.argument_size_in_bytes, "out": mem.output_size_in_bytes,
            "alias": mem.alias_size_in_bytes, "loss": loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"batch {args.batch}, median of {args.steps} steps")
    print("| model | precision | step (ms) | temp bytes | argument bytes | output bytes "
          "| aliased | bf16/f32 step | bf16/f32 temp |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models:
        f32 = measure(name, False, args.batch, args.steps, args.warmup)
        bf16 = measure(name, True, args.batch, args.steps, args.warmup)
        for label, r in (("float32", f32), ("amp bf16", bf16)):
            ratio = (f"{r['median_ms'] / f32['median_ms']:.2f}",
                     f"{r['temp'] / max(f32['temp'], 1):.2f}")
            print(f"| {name} | {label} | {r['median_ms']:.2f} | {r['temp']:,} | "
                  f"{r['args']:,} | {r['out']:,} | {r['alias']:,} | {ratio[0]} | {ratio[1]} |")


if __name__ == "__main__":
    main()
