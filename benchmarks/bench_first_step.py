"""Time to first step: where the seconds before a deep program's first training step go, in
graphc and in the same net hand-written in JAX, and what a rerun in a new process saves.

Run ``python benchmarks/bench_first_step.py [--configs fc1250 fc12500 resnet50]
[--steps 5] [--budget 480] [--strategy roll_repeated_layers=true]``. Each configuration
runs in its own process (bounded by ``--budget`` seconds) with a fresh persistent
compilation cache, then once more in a new process that finds that cache (the rerun).
``--strategy FIELD=VALUE`` sets BuildStrategy fields for graphc's main program (e.g. to
compare a pass on and off); ``--old-startup`` also times the one-XLA-computation startup.
See benchmarks/README.md for the phases and the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# phase -> JAX's monitoring event whose durations it sums (during the first step)
_EVENTS = {"trace": "/jax/core/compile/jaxpr_trace_duration",
           "to HLO": "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "XLA compile": "/jax/core/compile/backend_compile_duration"}
WIDTH, BATCH, LR = 8, 16, 0.01


class _Events:
    """Sums JAX's compile-phase durations between ``start()`` and ``take()``."""

    def __init__(self):
        import jax.monitoring
        self.totals = dict.fromkeys(_EVENTS, 0.0)
        self.on = False
        names = {v: k for k, v in _EVENTS.items()}

        def listener(event, duration, **_):
            if self.on and event in names:
                self.totals[names[event]] += duration

        jax.monitoring.register_event_duration_secs_listener(listener)

    def start(self):
        self.totals = dict.fromkeys(_EVENTS, 0.0)
        self.on = True

    def take(self) -> dict:
        self.on = False
        return dict(self.totals)


def _clock():
    return time.perf_counter()


# -- graphc ------------------------------------------------------------------------------
def _fc_program(depth: int):
    import graphc
    from graphc import layers
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 1
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        x = graphc.data("x", [-1, WIDTH], "float32")
        y = graphc.data("y", [-1, 1], "float32")
        h = x
        for _ in range(depth):
            h = layers.fc(h, WIDTH, act="relu")
        loss = layers.mean(layers.square_error_cost(layers.fc(h, 1), y))
        graphc.optimizer.SGD(LR).minimize(loss)
    return main, start, loss


def _resnet_program():
    from graphc.models import resnet

    import graphc
    model = resnet(50)
    with graphc.program_guard(model.main, model.startup):
        graphc.optimizer.Momentum(0.1, 0.9).minimize(model.loss)
    return model.main, model.startup, model.loss


def _feed(config: str):
    import numpy as np
    rng = np.random.default_rng(0)
    if config == "resnet50":
        return {"image": rng.standard_normal((2, 3, 224, 224)).astype("float32"),
                "label": rng.integers(0, 1000, (2, 1)).astype("int64")}
    return {"x": rng.standard_normal((BATCH, WIDTH)).astype("float32"),
            "y": rng.standard_normal((BATCH, 1)).astype("float32")}


def run_graphc(config: str, steps: int, strategy: list[str], old_startup: bool) -> dict:
    import jax

    import graphc
    from graphc.runtime.startup import use_grouped_startup
    events = _Events()
    times = {}
    t = _clock()
    main, start, loss = (_resnet_program() if config == "resnet50"
                         else _fc_program(int(config[2:])))
    times["build"] = _clock() - t
    exe = graphc.Executor()
    if old_startup:
        with use_grouped_startup(False):
            t = _clock()
            exe.run(start, scope=graphc.Scope())
            times["old startup (not in total)"] = _clock() - t
    t = _clock()
    exe.run(start)
    jax.block_until_ready(list(graphc.global_scope()._vars.values()))
    times["exe.run(startup)"] = _clock() - t
    bs = graphc.BuildStrategy()
    for item in strategy:
        field, _, value = item.partition("=")
        setattr(bs, field, json.loads(value.lower()) if value.lower() in
                ("true", "false") or value.isdigit() else value)
    compiled = graphc.CompiledProgram(main, build_strategy=bs)
    t = _clock()
    graphc.lower(main)
    times["lower"] = _clock() - t
    t = _clock()
    exe._prepare(main, compiled, (loss.name,))  # lower + the BuildStrategy's passes
    times["passes"] = max(0.0, _clock() - t - times["lower"])
    feed = _feed(config)
    events.start()
    t = _clock()
    exe.run(compiled, feed=feed, fetch_list=[loss])
    first = _clock() - t
    phases = events.take()
    times.update(phases)
    times["first step: rest"] = max(0.0, first - sum(phases.values()))
    t = _clock()
    for _ in range(steps):
        exe.run(compiled, feed=feed, fetch_list=[loss])
    times["later step (each)"] = (_clock() - t) / steps
    return times


# -- the same net hand-written in JAX -----------------------------------------------------
def run_jax(config: str, steps: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    events = _Events()
    depth = int(config[2:])
    times = {}
    t = _clock()
    key = jax.random.key(1)
    params = []
    dims = [WIDTH] * (depth + 1) + [1]
    for i in range(depth + 1):  # eager init, as a JAX user writes it: Xavier and zeros
        key, sub = jax.random.split(key)
        limit = float(np.sqrt(6.0 / (dims[i] + dims[i + 1])))
        params.append((jax.random.uniform(sub, (dims[i], dims[i + 1]), jnp.float32,
                                          -limit, limit), jnp.zeros(dims[i + 1])))
    jax.block_until_ready(params)
    times["init (eager)"] = _clock() - t

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return jnp.mean(jnp.square(h @ w + b - y))

    @jax.jit
    def step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    feed = _feed(config)
    x, y = jnp.asarray(feed["x"]), jnp.asarray(feed["y"])
    events.start()
    t = _clock()
    params, loss = step(params, x, y)
    loss.block_until_ready()
    first = _clock() - t
    phases = events.take()
    times.update(phases)
    times["first step: rest"] = max(0.0, first - sum(phases.values()))
    t = _clock()
    for _ in range(steps):
        params, loss = step(params, x, y)
    loss.block_until_ready()
    times["later step (each)"] = (_clock() - t) / steps
    return times


def run_rerun(config: str, strategy: list[str]) -> dict:
    """Time to first step in a process that finds the first one's compilation cache."""
    import jax

    import graphc
    t = _clock()
    main, start, loss = (_resnet_program() if config == "resnet50"
                         else _fc_program(int(config[2:])))
    exe = graphc.Executor()
    exe.run(start)
    bs = graphc.BuildStrategy()
    for item in strategy:
        field, _, value = item.partition("=")
        setattr(bs, field, json.loads(value.lower()) if value.lower() in
                ("true", "false") or value.isdigit() else value)
    out = exe.run(graphc.CompiledProgram(main, build_strategy=bs), feed=_feed(config),
                  fetch_list=[loss])
    jax.block_until_ready(out)
    return {"time to first step (rerun)": _clock() - t}


# -- the driver ---------------------------------------------------------------------------
def _child(args) -> None:
    which, config = args.child
    if which == "graphc":
        result = run_graphc(config, args.steps, args.strategy, args.old_startup)
    elif which == "jax":
        result = run_jax(config, args.steps)
    else:
        result = run_rerun(config, args.strategy)
    print("RESULT " + json.dumps(result))


def _spawn(which: str, config: str, args, cache: str) -> dict | str:
    cmd = [sys.executable, __file__, "--child", which, config, "--steps", str(args.steps)]
    cmd += [x for s in args.strategy for x in ("--strategy", s)]
    cmd += ["--old-startup"] if args.old_startup else []
    env = dict(os.environ, GRAPHC_COMPILATION_CACHE=cache)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # graphc's cache, not one set by the caller
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=args.budget)
    except subprocess.TimeoutExpired:
        return f"over the {args.budget} s budget"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]


def _table(config: str, graphc_t, jax_t, rerun) -> str:
    rows = [f"## {config}"]
    if isinstance(graphc_t, str):
        rows.append(f"graphc: {graphc_t}")
        if isinstance(jax_t, dict):
            rows += [f"hand-written JAX {k}: {v:.2f} s" for k, v in jax_t.items()]
        return "\n".join(rows + [f"hand-written JAX: {jax_t}"] if isinstance(jax_t, str)
                         else rows)
    later = "later step (each)"

    def total(t):
        return sum(v for k, v in t.items() if k != later and "not in total" not in k)

    g_total = total(graphc_t)
    j_total = total(jax_t) if isinstance(jax_t, dict) else None
    rows.append(f"{'phase':<28}{'graphc s':>10}{'share':>8}{'JAX s':>10}{'share':>8}")
    keys = list(graphc_t) + [k for k in (jax_t if isinstance(jax_t, dict) else {})
                             if k not in graphc_t]
    for k in keys:
        if k == later:
            continue
        g = graphc_t.get(k)
        j = jax_t.get(k) if isinstance(jax_t, dict) else None
        rows.append(f"{k:<28}" + (f"{g:>10.2f}{g / g_total:>8.0%}" if g is not None
                                  else f"{'':>18}")
                    + (f"{j:>10.2f}{j / j_total:>8.0%}" if j is not None else ""))
    rows.append(f"{'time to first step':<28}{g_total:>10.2f}{'':>8}"
                + (f"{j_total:>10.2f}" if j_total else ""))
    rows.append(f"{'later step (each), ms':<28}{graphc_t[later] * 1e3:>10.2f}{'':>8}"
                + (f"{jax_t[later] * 1e3:>10.2f}" if isinstance(jax_t, dict) else ""))
    if isinstance(jax_t, str):
        rows.append(f"hand-written JAX: {jax_t}")
    if isinstance(rerun, dict):
        r = rerun["time to first step (rerun)"]
        rows.append(f"{'rerun, new process: first':<28}{r:>10.2f}  (persistent cache; "
                    f"{g_total / r:.1f}x faster than the first process)")
    else:
        rows.append(f"rerun: {rerun}")
    if j_total:
        rows.append(f"graphc / JAX: time to first step {g_total / j_total:.2f}x, "
                    f"later steps {graphc_t[later] / jax_t[later]:.2f}x")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", default=["fc1250", "fc12500", "resnet50"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget", type=int, default=480, help="seconds per process")
    ap.add_argument("--strategy", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--old-startup", action="store_true")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, strategy "
          f"{args.strategy or 'default'}")
    for config in args.configs:
        with tempfile.TemporaryDirectory() as cache:
            graphc_t = _spawn("graphc", config, args, cache)
            jax_t = (_spawn("jax", config, args, cache)
                     if config.startswith("fc") else "not written for this model")
            rerun = _spawn("rerun", config, args, cache) if isinstance(graphc_t, dict) \
                else "skipped"
        print(_table(config, graphc_t, jax_t, rerun), flush=True)


if __name__ == "__main__":
    main()
