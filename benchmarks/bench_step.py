"""Training-step time of graphc against the same model hand-written in JAX, in one run.

Run ``python benchmarks/bench_step.py [--steps 50] [--warmup 10] [--models mlp cnn]``;
see benchmarks/README.md for what is compared and the targets (ratio <= 1.05, < 100 us).
``--data-checks`` instead times graphc's steps with and without their data checks
(Executor(check_data=...)), alternating step by step, and prints the ratios.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import graphc
from graphc import layers, models, optimizer
from graphc.ir.default_programs import program_guard

BATCH = 128
LR, MU = 0.01, 0.9  # Momentum(learning_rate=LR, momentum=MU)
BN_MOMENTUM, BN_EPS = 0.9, 1e-5  # graphc.layers.batch_norm's defaults
CNN_SHAPE = (1, 28, 28)  # demo_cnn()'s default image shape (C, H, W), channels (16, 32)
CHECK_STEPS = 3  # losses compared between graphc and the baseline before timing
CHECK_RTOL = CHECK_ATOL = 1e-4


# -- the hand-written baseline ----------------------------------------------------------
# Parameters and statistics are keyed by graphc's own names, so the scope copies over as is.

def bn_train(x, scale, bias, mean, var, axes):
    """Paddle's batch_norm in training mode: biased batch variance, running stats updated."""
    shape = [1] * x.ndim
    shape[1] = -1  # NCHW / [N, C]: the channel axis is 1
    mu = jnp.mean(x, axis=axes)
    sigma2 = jnp.mean(jnp.square(x - mu.reshape(shape)), axis=axes)
    y = (x - mu.reshape(shape)) * (jax.lax.rsqrt(sigma2 + BN_EPS) * scale).reshape(shape) \
        + bias.reshape(shape)
    return y, (mean * BN_MOMENTUM + mu * (1 - BN_MOMENTUM),
               var * BN_MOMENTUM + sigma2 * (1 - BN_MOMENTUM))


def softmax_ce_mean(logits, label):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, label.astype(jnp.int32), axis=-1))


def mlp_forward(params, stats, x, label, hidden=3):
    """fc -> batch_norm -> relu per hidden layer, then fc and softmax cross-entropy."""
    h, new_stats = x, {}
    for i in range(hidden):
        z = h @ params[f"fc_{i}.w_0"] + params[f"fc_{i}.b_0"]
        bn = f"batch_norm_{i}"
        z, (new_stats[f"{bn}.w_1"], new_stats[f"{bn}.w_2"]) = bn_train(
            z, params[f"{bn}.w_0"], params[f"{bn}.b_0"], stats[f"{bn}.w_1"],
            stats[f"{bn}.w_2"], axes=(0,))
        h = jax.nn.relu(z)
    logits = h @ params[f"fc_{hidden}.w_0"] + params[f"fc_{hidden}.b_0"]
    return softmax_ce_mean(logits, label), new_stats


def cnn_forward(params, stats, x, label, convs=2):
    """(conv 3x3 pad 1, no bias -> batch_norm -> relu -> max pool 2x2) twice, then fc."""
    h, new_stats = x, {}
    for i in range(convs):
        h = jax.lax.conv_general_dilated(h, params[f"conv2d_{i}.w_0"], (1, 1),
                                         [(1, 1), (1, 1)],
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        bn = f"batch_norm_{i}"
        h, (new_stats[f"{bn}.w_1"], new_stats[f"{bn}.w_2"]) = bn_train(
            h, params[f"{bn}.w_0"], params[f"{bn}.b_0"], stats[f"{bn}.w_1"],
            stats[f"{bn}.w_2"], axes=(0, 2, 3))
        h = jax.nn.relu(h)
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                  "VALID")
    logits = h.reshape(h.shape[0], -1) @ params["fc_0.w_0"] + params["fc_0.b_0"]
    return softmax_ce_mean(logits, label), new_stats


def hand_written_step(forward: Callable):
    """One jitted Momentum step (v = mu*v + g; p -= lr*v) with params/state donated."""

    def step(params, velocity, stats, x, label):
        (loss, new_stats), grads = jax.value_and_grad(forward, has_aux=True)(
            params, stats, x, label)
        velocity = jax.tree.map(lambda v, g: MU * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - LR * v, params, velocity)
        return params, velocity, new_stats, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


# -- the two contenders, behind one interface ------------------------------------------

@dataclass
class Case:
    name: str
    model: models.Model
    forward: Callable
    feed_shapes: dict[str, tuple]


def cases(selected: list[str]) -> list[Case]:
    known = {
        "mlp": lambda: Case("mlp 784-512x3-10 bn", models.mlp(batch_norm=True), mlp_forward,
                            {"x": (BATCH, 784)}),
        "cnn": lambda: Case(f"demo_cnn {'x'.join(map(str, CNN_SHAPE))}",
                            models.demo_cnn(image_shape=CNN_SHAPE), cnn_forward,
                            {"image": (BATCH, *CNN_SHAPE)}),
    }
    return [known[name]() for name in selected]


def make_batches(case: Case, count: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        feed = {n: rng.standard_normal(s, dtype=np.float32) for n, s in case.feed_shapes.items()}
        feed["label"] = rng.integers(0, 10, (BATCH, 1), dtype=np.int64)
        batches.append(feed)
    return batches


class GraphcRunner:
    def __init__(self, case: Case, check_data: bool = True):
        model = case.model
        self.opt = optimizer.Momentum(LR, MU)
        with program_guard(model.main, model.startup):
            self.opt.minimize(model.loss)
        self.model, self.scope = model, graphc.Scope()
        self.exe = graphc.Executor(check_data=check_data)
        self.exe.run(model.startup, scope=self.scope)

    def snapshot(self) -> dict[str, np.ndarray]:
        """A host copy of the scope (graphc donates its buffers, so copy before running)."""
        return {n: np.array(a) for n, a in self.scope._vars.items()}

    def __call__(self, feed) -> float:
        (loss,) = self.exe.run(self.model.main, feed=feed, fetch_list=[self.model.loss],
                               scope=self.scope)
        return float(np.asarray(loss).reshape(()))


class BaselineRunner:
    def __init__(self, case: Case, ours: GraphcRunner):
        init, main = ours.snapshot(), case.model.main
        trainable = [p.name for p in main.all_parameters() if p.trainable]
        stats = [p.name for p in main.all_parameters() if not p.trainable]
        self.params = {n: jnp.array(init[n]) for n in trainable}
        velocity = {n: ours.opt.get_accumulator("velocity", n).name for n in trainable}
        self.velocity = {n: jnp.array(init[velocity[n]]) for n in trainable}
        self.stats = {n: jnp.array(init[n]) for n in stats}
        self.step = hand_written_step(case.forward)

    def __call__(self, feed) -> float:
        inputs = [feed[k] for k in feed if k != "label"]
        self.params, self.velocity, self.stats, loss = self.step(
            self.params, self.velocity, self.stats, *inputs, feed["label"])
        return float(np.asarray(loss))


def time_steps(run: Callable[[dict], float], batches, steps: int) -> list[float]:
    times = []
    for i in range(steps):
        feed = batches[i % len(batches)]
        start = time.perf_counter()
        run(feed)  # the loss is fetched to host: the step has completed
        times.append(time.perf_counter() - start)
    return times


def bench_case(case: Case, steps: int, warmup: int, rounds: int) -> dict:
    batches = make_batches(case)
    ours = GraphcRunner(case)
    theirs = BaselineRunner(case, ours)
    ours_losses = [ours(batches[i % len(batches)]) for i in range(CHECK_STEPS)]
    theirs_losses = [theirs(batches[i % len(batches)]) for i in range(CHECK_STEPS)]
    if not np.allclose(ours_losses, theirs_losses, rtol=CHECK_RTOL, atol=CHECK_ATOL):
        raise AssertionError(f"{case.name}: graphc and the hand-written step disagree: "
                             f"{ours_losses} vs {theirs_losses}")
    for name, value in {**theirs.params, **theirs.stats}.items():  # updates agree too
        if not np.allclose(ours.scope[name], value, rtol=CHECK_RTOL, atol=CHECK_ATOL):
            raise AssertionError(f"{case.name}: '{name}' differs after {CHECK_STEPS} steps")
    for i in range(warmup):
        ours(batches[i % len(batches)])
        theirs(batches[i % len(batches)])
    # Interleave the two in rounds, so drift in the machine's speed hits both alike.
    t_ours, t_theirs = [], []
    per_round = math.ceil(steps / rounds)
    while len(t_ours) < steps:
        n = min(per_round, steps - len(t_ours))
        t_ours += time_steps(ours, batches, n)
        t_theirs += time_steps(theirs, batches, n)
    calls = max(10, steps)
    overhead = executor_host_time(ours.exe, case.model.main, batches[0], [case.model.loss],
                                  ours.scope, calls)
    hand_overhead = host_time(lambda: theirs(batches[0]), [(theirs, "step")], calls)
    return {"graphc": statistics.median(t_ours), "hand": statistics.median(t_theirs),
            "losses": (ours_losses, theirs_losses), "overhead": overhead,
            "hand_overhead": hand_overhead}


# -- host overhead of Executor.run on a cached program ---------------------------------

def _clocks() -> tuple[float, float]:
    """(wall, this thread's CPU) seconds: CPU time ignores the preemptions of a busy box."""
    return time.perf_counter(), time.thread_time()


class _TimedCall:
    """Wraps a step's jitted function: records how long each call takes until its outputs
    are ready, so Executor.run's own (host, Python) time is the rest of that run."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, (0.0, 0.0)

    def __call__(self, *args):
        start = _clocks()
        out = jax.block_until_ready(self.fn(*args))
        self.seconds = tuple(b - a for a, b in zip(start, _clocks()))
        return out

    def __getattr__(self, name):  # lower(), _cache_size(), ... of the wrapped function
        return getattr(self.fn, name)


def host_time(run: Callable[[], object], jitted: list[tuple[object, str]],
              calls: int) -> tuple[float, float]:
    """Median over ``calls`` of (time of ``run()`` - time inside the jitted functions it
    calls), seconds, as (wall clock, CPU time of the calling thread).

    ``jitted`` names them as (owner, attribute); each is wrapped for the measurement. What is
    left is the host work around the computation: for Executor.run the feed checks, cache
    lookups, reading and writing the scope; for both, releasing the donated buffers and
    turning the (already computed) loss into a numpy array.
    """
    run()  # compiled and cached
    wrappers = []
    for owner, attr in jitted:
        wrappers.append(_TimedCall(getattr(owner, attr)))
        setattr(owner, attr, wrappers[-1])
    try:
        wall, cpu = [], []
        for _ in range(calls):
            for w in wrappers:
                w.seconds = (0.0, 0.0)
            start = _clocks()
            run()
            end = _clocks()
            wall.append(end[0] - start[0] - sum(w.seconds[0] for w in wrappers))
            cpu.append(end[1] - start[1] - sum(w.seconds[1] for w in wrappers))
    finally:
        for (owner, attr), w in zip(jitted, wrappers):
            setattr(owner, attr, w.fn)
    return statistics.median(wall), statistics.median(cpu)


def executor_host_time(exe, program, feed, fetch_list, scope, calls: int):
    """host_time of Executor.run on a cached program."""

    def run():
        exe.run(program, feed=feed, fetch_list=fetch_list, scope=scope)

    run()
    step = exe.compile(program, feed=feed, fetch_list=fetch_list)  # the step run() uses
    return host_time(run, [(step, "_jitted")], calls)


def tiny_program():
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), graphc.unique_name.guard():
        x = layers.data("x", [-1, 4], "float32")
        loss = layers.mean(layers.fc(x, 2))
        optimizer.Momentum(LR, MU).minimize(loss)
    return main, startup, loss


def bench_tiny(calls: int) -> dict:
    """The tiny program three ways: Executor.run, its jitted step called with arguments made
    ready beforehand, and a hand-written jitted step of the same math. All three feed the
    same numpy batch and bring the loss to host with ``np.asarray``."""
    main, startup, loss = tiny_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((8, 4), np.float32)}
    overhead = executor_host_time(exe, main, feed, [loss], scope, calls)

    def run_executor():
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)

    step = exe.compile(main, feed=feed, fetch_list=[loss])
    state = scope._vars
    args = [tuple(jnp.array(state[v.var.name]) for v in step.updated_inputs),  # own copies
            tuple(state[v.var.name] for v in step.readonly_inputs),
            tuple(feed[v.var.name] for v in step.feed_inputs)]

    def run_jitted():
        new_updated, _created, fetched, _checks = step(*args, 0)
        args[0] = new_updated
        [np.asarray(a) for a in fetched]

    w, b, vw, vb = (jnp.zeros(s, jnp.float32) for s in ((4, 2), (2,), (4, 2), (2,)))

    def _tiny(w, b, vw, vb, x):
        loss, (gw, gb) = jax.value_and_grad(lambda w, b: jnp.mean(x @ w + b), (0, 1))(w, b)
        vw, vb = MU * vw + gw, MU * vb + gb
        return w - LR * vw, b - LR * vb, vw, vb, loss
    tiny = jax.jit(_tiny, donate_argnums=(0, 1, 2, 3))

    def run_hand():
        nonlocal w, b, vw, vb
        w, b, vw, vb, out = tiny(w, b, vw, vb, feed["x"])
        np.asarray(out)

    fns = {"executor": run_executor, "jitted": run_jitted, "hand": run_hand}
    samples = {k: [] for k in fns}
    for fn in fns.values():
        for _ in range(50):
            fn()
    for _ in range(10):  # interleaved rounds
        for k, fn in fns.items():
            for _ in range(max(1, calls // 10)):
                start = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - start)
    out = {k: statistics.median(v) for k, v in samples.items()}
    out["overhead"] = overhead
    return out


def bench_data_checks(selected: list[str], steps: int, warmup: int) -> None:
    """Each model's step with its data checks (labels in [0, classes): a device-side check,
    the update in a cond on it, the flag read before committing) and without, alternating
    step by step (the order flips every step, so drift in the machine's speed hits both
    alike); prints the median and the 10th percentile of each and their ratios."""
    print(f"data checks, {steps} steps each, alternating:")
    print(f"{'model':<22}{'checks ms':>11}{'no checks ms':>14}{'ratio':>8}"
          f"{'p10 ratio':>11}")
    for name in selected:
        on, off = (GraphcRunner(cases([name])[0], check_data=c) for c in (True, False))
        batches = make_batches(cases([name])[0])
        for i in range(warmup):
            on(batches[i % len(batches)])
            off(batches[i % len(batches)])
        times: dict[bool, list[float]] = {True: [], False: []}
        for i in range(steps):
            for check in ((True, False) if i % 2 else (False, True)):
                times[check] += time_steps(on if check else off, [batches[i % len(batches)]],
                                           1)
        a, b = statistics.median(times[True]), statistics.median(times[False])
        p10 = [sorted(times[c])[len(times[c]) // 10] for c in (True, False)]
        print(f"{name:<22}{a * 1e3:>11.3f}{b * 1e3:>14.3f}{a / b:>8.3f}{p10[0] / p10[1]:>11.3f}",
              flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50, help="timed steps per model (median)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps after compiling")
    ap.add_argument("--rounds", type=int, default=10,
                    help="the timed steps are split into this many interleaved rounds")
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    ap.add_argument("--overhead-calls", type=int, default=2000,
                    help="timed calls of the tiny program (0: skip it)")
    ap.add_argument("--data-checks", action="store_true",
                    help="time steps with and without data checks instead (see the doc)")
    args = ap.parse_args(argv)
    if args.data_checks:
        bench_data_checks(args.models, args.steps, args.warmup)
        return 0

    print(f"graphc {graphc.__version__}, jax {jax.__version__}, Python "
          f"{platform.python_version()}, {jax.devices()[0].platform} "
          f"({jax.devices()[0].device_kind}), batch {BATCH}, median of {args.steps} steps")
    rows = []
    for case in cases(args.models):
        r = bench_case(case, args.steps, args.warmup, args.rounds)
        rows.append((case.name, r))
        print(f"  {case.name}: first losses graphc {np.round(r['losses'][0], 5).tolist()} "
              f"hand {np.round(r['losses'][1], 5).tolist()}", flush=True)
    print()
    print(f"{'model':<22}{'graphc ms':>11}{'hand-written ms':>17}{'ratio':>8}")
    for name, r in rows:
        print(f"{name:<22}{r['graphc'] * 1e3:>11.3f}{r['hand'] * 1e3:>17.3f}"
              f"{r['graphc'] / r['hand']:>8.3f}")
    print()
    print("host time per step outside the jitted call, us, wall (CPU of the calling thread):")
    print(f"{'model':<22}{'graphc':>18}{'hand-written':>18}{'graphc - hand':>18}")
    for name, r in rows:
        cells = [r["overhead"], r["hand_overhead"],
                 tuple(a - b for a, b in zip(r["overhead"], r["hand_overhead"]))]
        print(f"{name:<22}" + "".join(f"{w * 1e6:>10.1f} ({c * 1e6:>5.1f})" for w, c in cells))
    if args.overhead_calls:
        o = bench_tiny(args.overhead_calls)
        print()
        print("tiny program (fc 4->2, Momentum, batch 8), median per call:")
        print(f"  Executor.run                           {o['executor'] * 1e6:8.1f} us")
        print(f"  its CompiledStep, arguments ready      {o['jitted'] * 1e6:8.1f} us")
        print(f"  hand-written jitted step               {o['hand'] * 1e6:8.1f} us")
        wall, cpu = o["overhead"]
        print(f"  host overhead (run - its jitted call)  {wall * 1e6:8.1f} us "
              f"(CPU time {cpu * 1e6:.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
