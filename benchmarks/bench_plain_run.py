"""What a script that never wraps its program waits for: `exe.run(startup)` and the first
and later `exe.run(main)` steps of a plain Program (no CompiledProgram), in a fresh process.

Run ``python benchmarks/bench_plain_run.py [--layers 1250] [--resnet50] [--cache DIR|0]``.
A deep narrow net (N x fc(8, relu), SGD, batch 16) and, with ``--resnet50``, ResNet-50's
startup (25.6M parameters, read back to numpy). ``--cache 0`` turns the persistent
compilation cache off, so every number is a cold process's.
"""

from __future__ import annotations

import argparse
import os
import time


def deep_fc(layers_count: int) -> dict:
    import numpy as np

    import graphc
    from graphc import layers, optimizer
    t0 = time.perf_counter()
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        h = graphc.data("x", [-1, 8])
        for _ in range(layers_count):
            h = layers.fc(h, 8, act="relu")
        loss = layers.mean(h)
        optimizer.SGD(0.01).minimize(loss)
    t1 = time.perf_counter()
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    t2 = time.perf_counter()
    feed = {"x": np.random.default_rng(0).random((16, 8), dtype=np.float32)}
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    t3 = time.perf_counter()
    later = []
    for _ in range(21):
        a = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        later.append(time.perf_counter() - a)
    return {"build_s": t1 - t0, "startup_s": t2 - t1, "first_step_s": t3 - t2,
            "later_step_ms": sorted(later)[10] * 1e3}


def resnet50_startup() -> dict:
    import numpy as np

    import graphc
    from graphc import models
    model = models.resnet(depth=50)
    exe, scope = graphc.Executor(), graphc.Scope()
    t0 = time.perf_counter()
    exe.run(model.startup, scope=scope)
    values = [np.asarray(scope[name]) for name in scope.keys()]
    return {"startup_s": time.perf_counter() - t0,
            "params_M": sum(v.size for v in values) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=1250)
    ap.add_argument("--resnet50", action="store_true")
    ap.add_argument("--cache", default="0", help="GRAPHC_COMPILATION_CACHE (0: off)")
    args = ap.parse_args()
    os.environ["GRAPHC_COMPILATION_CACHE"] = args.cache
    r = deep_fc(args.layers)
    print(f"{args.layers} x fc(8): build {r['build_s']:.2f} s, exe.run(startup) "
          f"{r['startup_s']:.2f} s, first step {r['first_step_s']:.2f} s, later steps "
          f"{r['later_step_ms']:.1f} ms (median of 21)")
    if args.resnet50:
        r = resnet50_startup()
        print(f"ResNet-50: exe.run(startup) + reading {r['params_M']:.1f}M values back: "
              f"{r['startup_s']:.2f} s")


if __name__ == "__main__":
    main()
