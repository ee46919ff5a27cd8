"""Per-step host overhead of Executor.run on a small model, against the same jitted step
written by hand, interleaved in one process (issue 18, "Per-step host overhead").

Run ``python benchmarks/bench_step_overhead.py [--calls 2000] [--rounds 20] [--profile]``.
The model is an MLP 32-32-10 (relu), softmax cross-entropy, Momentum, batch 16, int64
labels (so the label data check is in the step); both sides feed the same numpy batch and
bring the loss to host. Prints the median per-call times and their ratio (target <= 1.2).
``--profile`` prints a cProfile of Executor.run instead, by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import graphc
from graphc import layers, optimizer
from graphc.ir.program import program_guard

BATCH, IN, HIDDEN, CLASSES = 16, 32, 32, 10
LR, MU = 0.01, 0.9


def build():
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), graphc.unique_name.guard():
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


def setup():
    main, startup, loss = build()
    scope, exe = graphc.Scope(), graphc.Executor()  # data checks on (the default)
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((BATCH, IN), dtype=np.float32),
              "label": rng.integers(0, CLASSES, (BATCH, 1), dtype=np.int64)}
             for _ in range(4)]
    hand = hand_written(scope)

    def ours(feed):
        (out,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return out

    return ours, hand, feeds


def bench(calls: int, rounds: int) -> dict:
    ours, hand, feeds = setup()
    for i in range(200):
        ours(feeds[i % 4])
        hand(feeds[i % 4])
    samples = {"graphc": [], "hand": []}
    per_round = max(1, calls // rounds)
    for _ in range(rounds):  # interleaved, so load changes hit both alike
        for name, fn in (("graphc", ours), ("hand", hand)):
            for i in range(per_round):
                feed = feeds[i % 4]
                start = time.perf_counter()
                fn(feed)
                samples[name].append(time.perf_counter() - start)
    out = {k: statistics.median(v) for k, v in samples.items()}
    out["ratio"] = out["graphc"] / out["hand"]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per contender")
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds")
    ap.add_argument("--profile", action="store_true", help="cProfile Executor.run instead")
    args = ap.parse_args(argv)
    if args.profile:
        profile(args.calls)
        return 0
    r = bench(args.calls, args.rounds)
    print(f"MLP {IN}-{HIDDEN}-{CLASSES}, batch {BATCH}, Momentum, jax {jax.__version__} "
          f"({jax.devices()[0].device_kind}); median per call over {args.calls} calls:")
    print(f"  Executor.run {r['graphc'] * 1e6:7.1f} us   hand-written jit "
          f"{r['hand'] * 1e6:7.1f} us   ratio {r['ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
