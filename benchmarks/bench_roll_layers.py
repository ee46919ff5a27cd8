"""Time to first step and step time of a deep narrow training program (N x fc(8, relu), SGD)
with and without roll-repeated-layers, against the same net hand-written in unrolled JAX.

Usage: python benchmarks/bench_roll_layers.py [--layers 1250] [--steps 20] [--skip-jax]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def build(n_layers: int):
    import graphc as fluid
    from graphc import layers, optimizer
    from graphc.ir import program_guard, unique_name
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = layers.data("x", [8])
        h = x
        for _ in range(n_layers):
            h = layers.fc(h, 8, act="relu")
        loss = layers.mean(h)
        optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss


def run_graphc(n_layers: int, steps: int, roll: bool, feed: np.ndarray):
    import graphc as fluid
    main, startup, loss = build(n_layers)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        bs = fluid.BuildStrategy(roll_repeated_layers=roll)
        prog = fluid.CompiledProgram(main, build_strategy=bs)
        t0 = time.perf_counter()
        first = exe.run(prog, feed={"x": feed}, fetch_list=[loss])[0]
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(steps):
            out = exe.run(prog, feed={"x": feed}, fetch_list=[loss])[0]
        step_s = (time.perf_counter() - t0) / steps
        params = {p.name: np.asarray(scope.find_var(p.name).get_tensor())
                  for p in main.all_parameters()[:4]}
    return first_s, step_s, float(np.asarray(first).ravel()[0]), float(
        np.asarray(out).ravel()[0]), params


def run_jax(n_layers: int, steps: int, feed: np.ndarray):
    """The same net by hand, unrolled: a Python loop over the layers inside jax.jit."""
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(0)
    params = [(jnp.asarray(rng.uniform(-0.5, 0.5, (8, 8)).astype("float32")),
               jnp.zeros(8, "float32")) for _ in range(n_layers)]

    def loss_fn(ps, x):
        h = x
        for w, b in ps:
            h = jax.nn.relu(h @ w + b)
        return jnp.mean(h)

    @jax.jit
    def step(ps, x):
        loss, grads = jax.value_and_grad(loss_fn)(ps, x)
        return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(ps, grads)], loss

    t0 = time.perf_counter()
    params, loss = step(params, feed)
    jax.block_until_ready(loss)
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        params, loss = step(params, feed)
    jax.block_until_ready(loss)
    return first_s, (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=1250)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--skip-jax", action="store_true")
    args = ap.parse_args()
    feed = np.random.default_rng(1).uniform(-1, 1, (args.batch, 8)).astype("float32")
    rows = []
    for roll in (True, False):
        first_s, step_s, l0, l1, _ = run_graphc(args.layers, args.steps, roll, feed)
        rows.append((f"graphc roll={roll}", first_s, step_s))
        print(f"graphc roll={roll}: first step {first_s:.2f} s, step {step_s * 1e3:.2f} ms, "
              f"loss {l0:.6g} -> {l1:.6g}", flush=True)
    if not args.skip_jax:
        first_s, step_s = run_jax(args.layers, args.steps, feed)
        rows.append(("hand-written JAX (unrolled)", first_s, step_s))
        print(f"hand-written JAX: first step {first_s:.2f} s, step {step_s * 1e3:.2f} ms")
        print(f"ratios vs hand-written: first step {rows[0][1] / first_s:.3f}, "
              f"step {rows[0][2] / step_s:.3f}")


if __name__ == "__main__":
    main()
