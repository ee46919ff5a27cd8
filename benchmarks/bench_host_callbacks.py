"""What an ordered host callback costs inside a jitted step: why the parameter-server trainer
exchanges all its blocks in one send and one recv per step, not one per parameter.

Run ``python benchmarks/bench_host_callbacks.py [--calls 200] [--counts 0 1 6 20]``: a jitted
function passing a [400, 400] float32 array through N ordered ``io_callback``s (each hands
the array to the host and back, as the send / recv rules do), N in ``--counts``; prints the
median time per call of 5 rounds and the cost per callback.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback


def chain(n: int):
    def f(x):
        for _ in range(n):
            x = io_callback(np.asarray, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                            ordered=True)
        return x
    return jax.jit(f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--counts", type=int, nargs="+", default=[0, 1, 6, 20])
    args = p.parse_args()
    x = jnp.ones((400, 400), jnp.float32)
    fns = {n: chain(n) for n in args.counts}
    for f in fns.values():
        f(x).block_until_ready()
    times = {n: [] for n in args.counts}
    for _ in range(5):  # rounds in turn: a busy spell hits every count
        for n, f in fns.items():
            t = time.perf_counter()
            for _ in range(args.calls):
                f(x).block_until_ready()
            times[n].append((time.perf_counter() - t) / args.calls)
    base = statistics.median(times[min(args.counts)])
    print(f"{'callbacks':>9}  {'ms/call':>8}  {'ms/callback':>11}")
    for n in args.counts:
        ms = statistics.median(times[n]) * 1e3
        per = (ms - base * 1e3) / n if n else 0.0
        print(f"{n:>9}  {ms:>8.3f}  {per:>11.3f}")


if __name__ == "__main__":
    main()
