"""Steps/s of the demo model fed by graphc.io.DataLoader against a feed-dict loop, and the
fraction of step time spent waiting for data.

Run ``python benchmarks/bench_dataloader.py [--model cnn|mlp] [--batch 64] [--steps 200]
[--places 1] [--capacity 2]``.

The generator does a realistic amount of host work per batch: it takes uint8 images from a
pool, converts them to float32 and normalises them (``(x / 255 - mean) / std``), and draws
labels. Two ways train the same model from fresh parameters, interleaved in rounds:

- ``feed dict``: the loop itself calls the generator, then ``exe.run(feed=dict)``, which
  checks the NumPy arrays and copies them to the device inside the step;
- ``DataLoader``: ``for data in loader(): exe.run(feed=data)``; the loader's thread prepared
  and placed the batch (on the device, or sharded over ``--places`` devices) while the
  previous step ran.

"wait" is the time the loop spends getting the next batch (generator call for the feed-dict
loop, blocked in ``next()`` for the loader) divided by the total time of the loop; the step
fetches the loss, so each step ends when the device has finished it. Target: under 5% wait
with the loader when the generator is faster than a step.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import jax
import numpy as np


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--places", type=int, default=1,
                    help="data-parallel CPU devices (1: a plain Program on one device)")
    ap.add_argument("--capacity", type=int, default=2)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    jax.config.update("jax_num_cpu_devices", max(args.places, 1))
    from graphc.io import DataLoader

    import graphc
    from graphc import models, optimizer
    from graphc.ir.default_programs import program_guard

    if args.model == "cnn":
        model = models.demo_cnn()
        sample_shape = (1, 28, 28)
    else:
        model = models.mlp(input_dim=784, hidden=(256, 256))
        sample_shape = (784,)
    with program_guard(model.main, model.startup):
        optimizer.Momentum(0.01, 0.9).minimize(model.loss)
    feed_names = [v.name for v in model.feeds]

    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, (16 * args.batch, *sample_shape), dtype=np.uint8)
    labels = rng.integers(0, 10, (16 * args.batch, 1), dtype=np.int64)

    def generator(count):
        def gen():
            for i in range(count):
                j = (i % 16) * args.batch
                x = (pool[j:j + args.batch].astype(np.float32) / 255.0 - 0.1307) / 0.3081
                yield x, labels[j:j + args.batch]
        return gen

    total = args.warmup + args.steps

    def program():
        if args.places == 1:
            return model.main
        return graphc.CompiledProgram(model.main).with_data_parallel(
            loss_name=model.loss.name, places=graphc.cpu_places(args.places))

    def run_feed_dict():
        exe, scope = graphc.Executor(), graphc.Scope()
        exe.run(model.startup, scope=scope)
        prog, gen = program(), generator(total)()
        wait = 0.0
        for step in range(total):
            if step == args.warmup:
                wait, t_start = 0.0, time.perf_counter()
            t0 = time.perf_counter()
            x, y = next(gen)
            feed = dict(zip(feed_names, (x, y)))
            wait += time.perf_counter() - t0
            exe.run(prog, feed=feed, fetch_list=[model.loss], scope=scope)
        return time.perf_counter() - t_start, wait

    def run_loader():
        exe, scope = graphc.Executor(), graphc.Scope()
        exe.run(model.startup, scope=scope)
        prog = program()
        loader = DataLoader.from_generator(feed_list=model.feeds, capacity=args.capacity)
        loader.set_batch_generator(generator(total),
                                   places=prog if args.places > 1 else None)
        it = loader()
        wait = 0.0
        for step in range(total):
            if step == args.warmup:
                wait, t_start = 0.0, time.perf_counter()
            t0 = time.perf_counter()
            feed = next(it)
            wait += time.perf_counter() - t0
            exe.run(prog, feed=feed, fetch_list=[model.loss], scope=scope)
        elapsed = time.perf_counter() - t_start
        loader.reset()
        return elapsed, wait

    # the generator alone, for reference
    t0 = time.perf_counter()
    for _ in generator(args.steps)():
        pass
    gen_ms = (time.perf_counter() - t0) / args.steps * 1e3

    results = {"feed dict": [], "DataLoader": []}
    for _ in range(args.rounds):
        results["feed dict"].append(run_feed_dict())
        results["DataLoader"].append(run_loader())

    print(f"# {platform.processor() or platform.machine()}, python {sys.version.split()[0]}, "
          f"jax {jax.__version__}, model {args.model}, batch {args.batch}, "
          f"steps {args.steps} x {args.rounds} rounds, places {args.places}, "
          f"capacity {args.capacity}; generator alone {gen_ms:.2f} ms/batch")
    print(f"{'way':<12} {'ms/step':>9} {'steps/s':>9} {'wait %':>8} {'vs feed dict':>13}")
    base = None
    for name, runs in results.items():
        elapsed = statistics.median(e for e, _ in runs)
        wait = statistics.median(w / e for e, w in runs)
        sps = args.steps / elapsed
        base = base or sps
        print(f"{name:<12} {elapsed / args.steps * 1e3:>9.2f} {sps:>9.1f} "
              f"{wait * 100:>7.2f}% {sps / base:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
