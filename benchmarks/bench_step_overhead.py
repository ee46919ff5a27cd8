"""Per-step host overhead of Executor.run on a small model, against the same jitted step
written by hand, interleaved in one process (issue 18, "Per-step host overhead").

Run ``python benchmarks/bench_step_overhead.py [--calls 2000] [--rounds 20] [--clock cpu]
[--profile] [--baseline DIR]``.
The model is an MLP 32-32-10 (relu), softmax cross-entropy, Momentum, batch 16, int64
labels (so the label data check is in the step); both sides feed the same numpy batch and
bring the loss to host. Prints the median per-call times and their ratio (target <= 1.2).
``--baseline DIR``: another checkout's ``graphc`` package (say ``git worktree add /tmp/base
HEAD~3``) runs as a third contender in the same process and rounds, imported under another
name (graphc's own imports are relative), so before and after meet the same machine load.
``--profile`` prints a cProfile of Executor.run instead, by cumulative time; ``--breakdown``
times each part of one run alone (feed checks, state gather and guard, the jitted call,
the data-check read-back, the commit, the fetch conversion, the x64 context).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import graphc

BATCH, IN, HIDDEN, CLASSES = 16, 32, 32, 10
LR, MU = 0.01, 0.9


def build(g=graphc):
    """The model, built with ``g`` (graphc, or a baseline checkout's package)."""
    layers, optimizer = g.layers, g.optimizer
    program_guard = importlib.import_module(g.__name__ + ".ir.default_programs").program_guard
    main, startup = g.Program(), g.Program()
    with program_guard(main, startup), g.unique_name.guard():
        x = layers.data("x", [-1, IN], "float32")
        label = layers.data("label", [-1, 1], "int64")
        h = layers.fc(x, HIDDEN, act="relu")
        logits = layers.fc(h, CLASSES)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        optimizer.Momentum(LR, MU).minimize(loss)
    return main, startup, loss


def hand_written(scope):
    """The same step in plain JAX, parameters taken from graphc's initialised scope."""
    names = ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")
    params = [jnp.array(np.asarray(scope[n])) for n in names]
    velocity = [jnp.zeros_like(p) for p in params]

    def loss_fn(params, x, label):
        w0, b0, w1, b1 = params
        logits = jax.nn.relu(x @ w0 + b0) @ w1 + b1
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, label.astype(jnp.int32), axis=-1))

    def step(params, velocity, x, label):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, label)
        velocity = [MU * v + g for v, g in zip(velocity, grads)]
        params = [p - LR * v for p, v in zip(params, velocity)]
        return params, velocity, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    state = [params, velocity]

    def run(feed):
        state[0], state[1], loss = jitted(state[0], state[1], feed["x"], feed["label"])
        return np.asarray(loss)

    return run


def baseline_package(checkout: str):
    """The ``graphc`` package of another checkout, imported as ``graphc_baseline``."""
    tmp = tempfile.mkdtemp(prefix="graphc-baseline-")
    shutil.copytree(os.path.join(checkout, "graphc"), os.path.join(tmp, "graphc_baseline"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(0, tmp)
    return importlib.import_module("graphc_baseline")


def runner(g=graphc):
    """``fn(feed)``: one Executor.run of the model built with package ``g``, and its scope."""
    main, startup, loss = build(g)
    scope, exe = g.Scope(), g.Executor()  # data checks on (the default)
    exe.run(startup, scope=scope)

    def ours(feed):
        (out,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return out

    return ours, scope


def setup():
    ours, scope = runner()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((BATCH, IN), dtype=np.float32),
              "label": rng.integers(0, CLASSES, (BATCH, 1), dtype=np.int64)}
             for _ in range(4)]
    return ours, hand_written(scope), feeds


def bench(calls: int, rounds: int, clock: str = "wall", baseline: str | None = None) -> dict:
    """Median per-call time of each contender. ``clock="wall"`` times each call alone
    (perf_counter); ``"cpu"`` times each round's calls together in this process's CPU time
    (all threads: XLA's too), steadier on a machine shared with other jobs. ``baseline``:
    a checkout whose graphc runs as a third contender (see the module doc)."""
    ours, hand, feeds = setup()
    contenders = {"graphc": ours, "hand": hand}
    if baseline:
        contenders["baseline"] = runner(baseline_package(baseline))[0]
    for i in range(200):
        for fn in contenders.values():
            fn(feeds[i % 4])
    samples = {name: [] for name in contenders}
    per_round = max(1, calls // rounds)
    for _ in range(rounds):  # interleaved, so load changes hit both alike
        for name, fn in contenders.items():
            if clock == "cpu":
                start = time.process_time()
                for i in range(per_round):
                    fn(feeds[i % 4])
                samples[name].append((time.process_time() - start) / per_round)
                continue
            for i in range(per_round):
                feed = feeds[i % 4]
                start = time.perf_counter()
                fn(feed)
                samples[name].append(time.perf_counter() - start)
    out = {k: statistics.median(v) for k, v in samples.items()}
    out["ratio"] = out["graphc"] / out["hand"]
    if baseline:
        out["baseline_ratio"] = out["baseline"] / out["hand"]
    return out


def profile(calls: int) -> None:
    ours, _, feeds = setup()
    for i in range(200):
        ours(feeds[i % 4])
    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        ours(feeds[i % 4])
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def breakdown() -> dict[str, float]:
    """Host cost of each part of one Executor.run, timed alone (min of 5 repeats, us of
    process CPU time): the parts the per-run path does, and what the full feed checks would
    cost per run."""
    import timeit

    from graphc.backends.precision import graphc_x64
    from graphc.runtime.feed_plan import feed_key
    from graphc.runtime.fetches import fetch_name, writable

    main, startup, loss = build()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((BATCH, IN), dtype=np.float32),
            "label": rng.integers(0, CLASSES, (BATCH, 1), dtype=np.int64)}
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    fetch = (loss.name,)
    prep = exe._prepare(main, None, fetch)
    step = exe.compile(main, feed=feed, fetch_list=[loss])
    guard = prep.state_guards[step]

    def t(fn, n=20000):  # this process's CPU time: other jobs on the machine disturb it less
        return min(timeit.repeat(fn, number=n, repeat=5, timer=time.process_time)) / n * 1e6

    def x64():
        with graphc_x64():
            pass

    out = {"x64 context (enter + exit)": t(x64)}
    with graphc_x64():
        out["feed checks: cached plan lookup"] = t(
            lambda: prep.feed.plans[(fetch, feed_key(feed))])
        out["feed checks: full (what a plan saves)"] = t(
            lambda: exe._step(prep, fetch, prep.feed.check_dict(main, feed, None)[1]))
        out["prepare lookup + fetch names"] = t(
            lambda: exe._prepare(*exe._unpack(main), tuple([fetch_name(loss)])))
        out["state gather from scope"] = t(lambda: scope.gather(step.state_names))
        inputs = scope.gather(step.state_names)
        split = len(step.updated_names)
        updated, readonly = tuple(inputs[:split]), tuple(inputs[split:])
        out["state type guard (check + ran)"] = t(
            lambda: (guard.check(scope, inputs), guard.ran(updated, readonly)))
        box = [updated]

        def call():
            new, _, fetched, checks = step(box[0], readonly, (feed["x"], feed["label"]), 0)
            box[0] = new
            jax.block_until_ready(fetched)
            return fetched, checks

        out["jitted call incl. feed transfer + device"] = t(call, 3000)
        fetched, checks = call()
        scope.commit(step.updated_names, box[0])
        if checks is not None:  # (a step with no checks left returns no summary)
            out["data-check read-back"] = t(
                lambda: any(row[0] for row in np.asarray(checks).tolist()))
        out["state commit"] = t(lambda: (scope.commit(step.updated_names, box[0]),
                                         scope.run_count(main)))
        out["fetch conversion"] = t(lambda: [writable(a) for a in fetched])
        # everything but XLA: the run with its jitted call answered at once
        done = step._jitted(box[0], readonly, (feed["x"], feed["label"]), None)
        jax.block_until_ready(done)
    jitted, step._jitted = step._jitted, lambda *args: done
    try:
        out["whole run, jitted call stubbed (host only)"] = t(
            lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope))
    finally:
        step._jitted = jitted
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per contender")
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: each round's calls in this process's CPU time (busy machines)")
    ap.add_argument("--profile", action="store_true", help="cProfile Executor.run instead")
    ap.add_argument("--breakdown", action="store_true",
                    help="time each part of one run alone instead")
    ap.add_argument("--baseline", metavar="DIR",
                    help="another checkout whose graphc runs beside this one (before/after)")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.calls)
        return 0
    if args.breakdown:
        for part, us in breakdown().items():
            print(f"  {part:44s} {us:7.2f} us")
        return 0
    r = bench(args.calls, args.rounds, args.clock, args.baseline)
    print(f"MLP {IN}-{HIDDEN}-{CLASSES}, batch {BATCH}, Momentum, jax {jax.__version__} "
          f"({jax.devices()[0].device_kind}); median per call over {args.calls} calls, "
          f"{args.clock} clock:")
    print(f"  Executor.run {r['graphc'] * 1e6:7.1f} us   hand-written jit "
          f"{r['hand'] * 1e6:7.1f} us   ratio {r['ratio']:.2f}")
    if args.baseline:
        print(f"  baseline ({args.baseline}) {r['baseline'] * 1e6:7.1f} us   ratio "
              f"{r['baseline_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
