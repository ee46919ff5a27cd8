"""graphc on a GPU against hand-written JAX on the same GPU, in one run: the BERT-style
encoder's training step (bench_encoder.py's two programs) at each float32 product precision.

Run ``python benchmarks/bench_gpu.py [--hidden 768 --layers 4 --seq 128 --batch 32]
[--steps 30 --rounds 3]`` on a machine with a JAX GPU backend. graphc runs on CUDAPlace(0);
``highest`` is graphc's default (Paddle's float32 products), ``tensorfloat32`` what
``GRAPHC_MATMUL_PRECISION=tensorfloat32`` gives; the hand-written step runs under the same
JAX precision each time. Step times are medians of wall clock over interleaved rounds, each
step ending when its loss reached the host.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import jax
import numpy as np
from bench_encoder import Config, GraphcRunner, HandRunner, hlo_counts, make_batches

import graphc


def measure(cfg: Config, precision: str, steps: int, rounds: int) -> dict:
    os.environ["GRAPHC_MATMUL_PRECISION"] = precision
    with jax.default_matmul_precision(precision):
        batches = make_batches(cfg)
        ours = GraphcRunner(cfg, graphc.CUDAPlace(0))
        theirs = HandRunner(cfg, ours)
        counts = {"graphc": hlo_counts(ours.compiled_text(batches[0]))["instructions"],
                  "hand": hlo_counts(theirs.compiled_text(batches[0]))["instructions"]}
        first = ([ours(b) for b in batches], [theirs(b) for b in batches])
        per = math.ceil(steps / rounds)
        t = {"graphc": [], "hand": []}
        for _ in range(rounds):  # interleaved: drift hits both alike
            for who, run in (("graphc", ours), ("hand", theirs)):
                for i in range(per):
                    start = time.perf_counter()
                    run(batches[i % len(batches)])
                    t[who].append(time.perf_counter() - start)
    return {"counts": counts, "first": first,
            "ms": {who: statistics.median(v) * 1e3 for who, v in t.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Config(hidden=768, layers=4, heads=12, seq=128, batch=32, vocab=8000,
                      dropout=0.1)
    for name, default in vars(defaults).items():
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precisions", nargs="+", default=["highest", "tensorfloat32"])
    args = ap.parse_args(argv)
    cfg = Config(**{k: getattr(args, k) for k in vars(defaults)})
    gpu = jax.devices("gpu")[0]
    print(f"{cfg}, jax {jax.__version__}, {gpu.device_kind}", flush=True)
    for precision in args.precisions:
        r = measure(cfg, precision, args.steps, args.rounds)
        g, h = r["ms"]["graphc"], r["ms"]["hand"]
        print(f"[{precision}] step: graphc {g:.2f} ms, hand-written {h:.2f} ms, ratio "
              f"{g / h:.3f}; HLO instructions {r['counts']['graphc']} vs "
              f"{r['counts']['hand']}; first losses graphc "
              f"{np.round(r['first'][0], 4).tolist()} hand {np.round(r['first'][1], 4).tolist()}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
