"""Time to first step and step time of a deep narrow training program (N x fc(8, relu), SGD)
with and without roll-repeated-layers, against the same net hand-written in unrolled JAX.

Usage: python benchmarks/bench_roll_layers.py [--layers 1250] [--steps 20] [--skip-jax]
       [--only roll|noroll|jax ...] [--breakdown]
Run with GRAPHC_COMPILATION_CACHE=0: a cached compile is no first step.
       python benchmarks/bench_roll_layers.py --resnet [--image 32] [--width 8]
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


def breakdown(n_layers: int, roll: bool, feed: np.ndarray) -> dict:
    """Where the time to first step goes: passes, trace + lower, XLA compile, first run
    (the runtime stacks the parameters then), in seconds, done stage by stage."""
    import jax

    import graphc as fluid
    from graphc.backends.jax import CompiledStep
    from graphc.backends.precision import with_graphc_x64
    main, startup, loss = build(n_layers)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    out = {}
    t0 = time.perf_counter()
    cp = fluid.CompiledProgram(main, build_strategy=fluid.BuildStrategy(
        roll_repeated_layers=roll))
    graph = cp._build_graph((loss.name,))
    out["passes"] = time.perf_counter() - t0

    @with_graphc_x64
    def stages():
        step = CompiledStep(graph, [loss.name], donate=True)
        t0 = time.perf_counter()
        scope.prepare_stacked(step)
        state = scope.gather(step.state_names)
        out["stack state"] = time.perf_counter() - t0
        split = len(step.updated_names)
        args = (tuple(state[:split]), tuple(state[split:]), (jax.numpy.asarray(feed),), 0)
        t0 = time.perf_counter()
        lowered = step._jitted.lower(*args)
        out["trace + lower"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled = lowered.compile()
        out["XLA compile"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        out["first run"] = time.perf_counter() - t0
    stages()
    return out


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


def compile_seconds(graph, fetch, feed_shapes) -> tuple[float, float]:
    """(trace + lower, XLA compile) seconds of one jitted training step of ``graph``."""
    from graphc.backends.jax.step import compile_step
    from graphc.backends.precision import with_graphc_x64
    step = compile_step(graph, fetch)

    @with_graphc_x64
    def go():
        t0 = time.perf_counter()
        lowered = step.lower(feed_shapes)
        t1 = time.perf_counter()
        lowered.compile()
        return t1 - t0, time.perf_counter() - t1
    return go()


def resnet(roll: bool, image: int, width: int, batch: int = 2) -> dict:
    """ResNet-50 (small images and widths: the compile time is the point) with SGD: pass
    statistics, pass time and the step's lower and compile time with and without rolling."""
    from graphc import models, optimizer
    from graphc.ir import lower, program_guard
    from graphc.passes import PassManager, make_pass
    m = models.resnet(50, num_classes=10, image_shape=(3, image, image), base_width=width)
    with program_guard(m.main, m.startup):
        optimizer.SGD(0.01).minimize(m.loss)
    g = lower(m.main)
    t0 = time.perf_counter()
    stats = {}
    if roll:
        report = PassManager([make_pass("roll-repeated-layers")]).run(
            g, keep=[g.latest(m.loss.name)])
        stats = report.stats()["roll-repeated-layers"]
    pass_s = time.perf_counter() - t0
    shapes = {f.name: tuple(batch if d < 0 else d for d in f.shape) for f in m.feeds}
    lower_s, compile_s = compile_seconds(g, [m.loss.name], shapes)
    return {"ops": g.num_ops, "pass_s": pass_s, "lower_s": lower_s, "compile_s": compile_s,
            "stats": stats}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=1250)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--skip-jax", action="store_true")
    ap.add_argument("--only", choices=["roll", "noroll", "jax"], action="append",
                    help="run only these configurations (repeatable)")
    ap.add_argument("--breakdown", action="store_true",
                    help="time to first step by stage (passes, lower, XLA compile, run)")
    ap.add_argument("--resnet", action="store_true",
                    help="only ResNet-50's compile time with and without the pass")
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--width", type=int, default=8)
    args = ap.parse_args()
    if args.resnet:
        # warm-up on other shapes: a process's first compile pays more, and a compile of the
        # very same module may be served from JAX's in-memory cache
        resnet(False, args.image // 2, args.width)
        for roll in (True, False):
            r = resnet(roll, args.image, args.width)
            print(f"resnet50 roll={roll}: {r['ops']} ops, pass {r['pass_s']:.2f} s, lower "
                  f"{r['lower_s']:.2f} s, XLA compile {r['compile_s']:.2f} s, {r['stats']}",
                  flush=True)
        return
    feed = np.random.default_rng(1).uniform(-1, 1, (args.batch, 8)).astype("float32")
    only = set(args.only or ["roll", "noroll", "jax"])
    if args.skip_jax:
        only.discard("jax")
    if args.breakdown:
        for roll in (True, False):
            if ("roll" if roll else "noroll") in only:
                parts = breakdown(args.layers, roll, feed)
                total = sum(parts.values())
                print(f"graphc roll={roll} breakdown ({total:.2f} s): " + ", ".join(
                    f"{k} {v:.2f} s ({v / total:.0%})" for k, v in parts.items()), flush=True)
        return
    rows = []
    for roll in (True, False):
        if ("roll" if roll else "noroll") not in only:
            continue
        first_s, step_s, l0, l1, _ = run_graphc(args.layers, args.steps, roll, feed)
        rows.append((f"graphc roll={roll}", first_s, step_s))
        print(f"graphc roll={roll}: first step {first_s:.2f} s, step {step_s * 1e3:.2f} ms, "
              f"loss {l0:.6g} -> {l1:.6g}", flush=True)
    if "jax" in only:
        first_s, step_s = run_jax(args.layers, args.steps, feed)
        print(f"hand-written JAX: first step {first_s:.2f} s, step {step_s * 1e3:.2f} ms")
        for name, f, st in rows:
            print(f"{name} vs hand-written: first step {f / first_s:.3f}, step "
                  f"{st / step_s:.3f}")


if __name__ == "__main__":
    main()
