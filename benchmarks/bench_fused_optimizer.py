"""Step time with fuse-all-optimizer-ops: unfused, fused multi-tensor, fused coalesced, and the
same model hand-written in JAX, for Momentum and Adam; plus the optimizer update alone.

Run ``python benchmarks/bench_fused_optimizer.py [--steps 100] [--rounds 20]``; the README
beside it says what is compared. The layout that wins is fuse-all-optimizer-ops' default.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_step import BATCH, mlp_forward  # noqa: E402  (the same hand-written MLP)

import graphc  # noqa: E402
from graphc import models, optimizer  # noqa: E402
from graphc.backends.lowering import apply_rule  # noqa: E402
from graphc.ir.default_programs import program_guard
from graphc.ir.types import TensorType  # noqa: E402
from graphc.passes import PassManager, make_pass  # noqa: E402

LR, MU = 0.01, 0.9
ADAM_LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8
CHECK_STEPS = 3
VARIANTS = ("unfused", "multi_tensor", "coalesced")


def make_optimizer(name: str):
    return optimizer.Momentum(LR, MU) if name == "momentum" else optimizer.Adam(ADAM_LR)


# -- the hand-written baseline ----------------------------------------------------------

def hand_written_step(opt_name: str):
    """One jitted training step with Paddle's update formula, state donated."""

    def update(params, state, grads):
        if opt_name == "momentum":
            vel = jax.tree.map(lambda v, g: MU * v + g, state["velocity"], grads)
            return jax.tree.map(lambda p, v: p - LR * v, params, vel), {"velocity": vel}
        m1 = jax.tree.map(lambda m, g: BETA1 * m + (1 - BETA1) * g, state["m1"], grads)
        m2 = jax.tree.map(lambda m, g: BETA2 * m + (1 - BETA2) * g * g, state["m2"], grads)
        b1p, b2p = state["b1p"], state["b2p"]
        lr_t = ADAM_LR * jnp.sqrt(1 - b2p) / (1 - b1p)
        eps_t = EPS * jnp.sqrt(1 - b2p)
        params = jax.tree.map(lambda p, a, b: p - lr_t * (a / (jnp.sqrt(b) + eps_t)),
                              params, m1, m2)
        return params, {"m1": m1, "m2": m2, "b1p": b1p * BETA1, "b2p": b2p * BETA2}

    def step(params, state, stats, x, label):
        (loss, new_stats), grads = jax.value_and_grad(mlp_forward, has_aux=True)(
            params, stats, x, label)
        params, state = update(params, state, grads)
        return params, state, new_stats, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


class HandRunner:
    def __init__(self, opt_name: str, main, opt, init: dict):
        trainable = [p.name for p in main.all_parameters() if p.trainable]
        stats = [p.name for p in main.all_parameters() if not p.trainable]
        self.params = {n: jnp.array(init[n]) for n in trainable}
        self.stats = {n: jnp.array(init[n]) for n in stats}
        acc = opt.get_accumulator
        if opt_name == "momentum":
            self.state = {"velocity": {n: jnp.array(init[acc("velocity", n).name])
                                       for n in trainable}}
        else:  # every parameter's beta pows start equal: the baseline keeps one pair
            first = trainable[0]
            self.state = {
                "m1": {n: jnp.array(init[acc("moment1", n).name]) for n in trainable},
                "m2": {n: jnp.array(init[acc("moment2", n).name]) for n in trainable},
                "b1p": jnp.array(init[acc("beta1_pow_acc", first).name]).reshape(()),
                "b2p": jnp.array(init[acc("beta2_pow_acc", first).name]).reshape(())}
        self.step = hand_written_step(opt_name)

    def __call__(self, feed) -> float:
        self.params, self.state, self.stats, loss = self.step(
            self.params, self.state, self.stats, feed["x"], feed["label"])
        return float(np.asarray(loss))


# -- graphc, three ways ------------------------------------------------------------------

def pass_manager(variant: str) -> PassManager:
    passes = [make_pass("dce")]
    if variant != "unfused":
        passes.append(make_pass("fuse-all-optimizer-ops", layout=variant))
    return PassManager(passes)


class GraphcRunner:
    def __init__(self, model: models.Model, variant: str, init: dict):
        self.model = model
        self.compiled = graphc.CompiledProgram(model.main, pass_manager=pass_manager(variant))
        self.exe, self.scope = graphc.Executor(), graphc.Scope()
        for name, value in init.items():
            self.scope._vars[name] = jnp.array(value)

    def __call__(self, feed) -> float:
        (loss,) = self.exe.run(self.compiled, feed=feed, fetch_list=[self.model.loss],
                               scope=self.scope)
        return float(np.asarray(loss).reshape(()))

    def cost(self, feed) -> dict:
        step = self.exe.compile(self.compiled, feed=feed, fetch_list=[self.model.loss])
        return step.cost_analysis()


def make_batches(count: int = 4, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((BATCH, 784), dtype=np.float32),
             "label": rng.integers(0, 10, (BATCH, 1), dtype=np.int64)} for _ in range(count)]


def interleaved(runners: dict[str, Callable], batches, steps: int, rounds: int) -> dict:
    times = {k: [] for k in runners}
    per_round = max(1, steps // rounds)
    while len(next(iter(times.values()))) < steps:
        for name, run in runners.items():
            for i in range(per_round):
                start = time.perf_counter()
                run(batches[i % len(batches)])
                times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_training(opt_name: str, steps: int, warmup: int, rounds: int) -> dict:
    model = models.mlp(batch_norm=True)
    opt = make_optimizer(opt_name)
    with program_guard(model.main, model.startup):
        opt.minimize(model.loss)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(model.startup, scope=scope)
    init = {n: np.array(a) for n, a in scope._vars.items()}
    batches = make_batches()
    runners = {v: GraphcRunner(model, v, init) for v in VARIANTS}
    runners["hand"] = HandRunner(opt_name, model.main, opt, init)
    losses = {k: [r(batches[i % len(batches)]) for i in range(CHECK_STEPS)]
              for k, r in runners.items()}
    for k in VARIANTS:  # the fused programs compute exactly what the unfused one does
        if not np.allclose(losses[k], losses["unfused"], rtol=1e-6, atol=1e-6):
            raise AssertionError(f"{opt_name}: {k} losses {losses[k]} != {losses['unfused']}")
    if not np.allclose(losses["hand"], losses["unfused"], rtol=1e-4, atol=1e-4):
        raise AssertionError(f"{opt_name}: hand-written losses {losses['hand']} != "
                             f"{losses['unfused']}")
    ref_scope = runners["unfused"].scope
    # With Adam, the biases of the fc layers right before a batch_norm have a gradient of
    # exactly 0 in theory: float32 noise that XLA rounds differently once the update is laid
    # out differently, and that Adam scales up to +-lr. Their updates are not compared.
    noise = tuple(f"fc_{i}.b_0" for i in range(3)) if opt_name == "adam" else ()
    for k in VARIANTS[1:]:
        for name, value in ref_scope._vars.items():
            if name.startswith(noise):
                continue
            np.testing.assert_allclose(runners[k].scope[name], value, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{opt_name} {k}: {name}")
    for i in range(warmup):
        for r in runners.values():
            r(batches[i % len(batches)])
    result = interleaved(runners, batches, steps, rounds)
    cost = {v: runners[v].cost(batches[0]) for v in VARIANTS}
    fused_ops = {v: runners[v].compiled.last_report.stats() for v in VARIANTS[1:]}
    return {"times": result, "losses": losses, "cost": cost, "stats": fused_ops}


# -- the optimizer update alone ----------------------------------------------------------

def update_only(opt_name: str, variant: str, shapes: list[tuple]):
    """A jitted update of every parameter (state donated) through graphc's lowering rules."""
    f32 = "float32"
    state_slots = {"momentum": ["Velocity"], "adam": ["Moment1", "Moment2"]}[opt_name]
    attrs = ({"mu": MU, "use_nesterov": False} if opt_name == "momentum" else
             {"beta1": BETA1, "beta2": BETA2, "epsilon": EPS, "lazy_mode": False})

    def member_ins(i, params, grads, states, pows, lr):
        ins = {"Param": [params[i]], "Grad": [grads[i]], "LearningRate": [lr]}
        ins.update({s: [states[s][i]] for s in state_slots})
        if opt_name == "adam":
            ins.update({"Beta1Pow": [pows[0][i]], "Beta2Pow": [pows[1][i]]})
        return ins

    def out_types(n):
        outs = {"ParamOut": [TensorType(s, f32) for s in shapes[:n]]}
        outs.update({f"{s}Out": [TensorType(x, f32) for x in shapes[:n]] for s in state_slots})
        if opt_name == "adam":
            outs.update({k: [TensorType((1,), f32)] * n for k in ("Beta1PowOut", "Beta2PowOut")})
        return outs

    def update(params, states, pows, grads, lr):
        n = len(params)
        if variant == "unfused":
            results = [apply_rule(opt_name, attrs, member_ins(i, params, grads, states, pows,
                                                              lr),
                                  {k: [v[i]] for k, v in out_types(n).items()}, opt_name)
                       for i in range(n)]
            outs = {k: [r[k][0] for r in results] for k in results[0]}
        else:
            ins = {k: [] for k in member_ins(0, params, grads, states, pows, lr)}
            for i in range(n):
                for k, v in member_ins(i, params, grads, states, pows, lr).items():
                    ins[k] += v
            ins["LearningRate"] = [lr]
            outs = apply_rule(f"fused_{opt_name}", {**attrs, "layout": variant}, ins,
                              out_types(n), opt_name)
        new_states = {s: outs[f"{s}Out"] for s in state_slots}
        new_pows = (outs["Beta1PowOut"], outs["Beta2PowOut"]) if opt_name == "adam" else pows
        return outs["ParamOut"], new_states, new_pows

    return jax.jit(update, donate_argnums=(0, 1, 2))


def bench_update(opt_name: str, steps: int, rounds: int) -> dict:
    model = models.mlp(batch_norm=True)
    shapes = [tuple(p.shape) for p in model.main.all_parameters() if p.trainable]
    rng = np.random.default_rng(1)
    grads = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    lr = jnp.full((1,), LR, jnp.float32)
    fns = {v: update_only(opt_name, v, shapes) for v in VARIANTS}
    args = {}
    for v in VARIANTS:
        params = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
        n_states = 1 if opt_name == "momentum" else 2
        names = ["Velocity"] if opt_name == "momentum" else ["Moment1", "Moment2"]
        states = {names[k]: [jnp.zeros(s, jnp.float32) for s in shapes]
                  for k in range(n_states)}
        pows = ([jnp.full((1,), BETA1, jnp.float32) for _ in shapes],
                [jnp.full((1,), BETA2, jnp.float32) for _ in shapes])
        args[v] = [params, states, pows]

    def runner(v):
        def run(_feed):
            out = fns[v](*args[v], grads, lr)
            jax.block_until_ready(out)
            args[v] = list(out)
        return run

    runners = {v: runner(v) for v in VARIANTS}
    for _ in range(5):
        for r in runners.values():
            r(None)
    times = interleaved(runners, [None], steps, rounds)
    cost = {}
    for v in VARIANTS:
        c = fns[v].lower(*args[v], grads, lr).compile().cost_analysis()
        cost[v] = dict(c[0] if isinstance(c, list) else c or {})
    return {"times": times, "cost": cost,
            "numel": sum(int(np.prod(s)) for s in shapes), "tensors": len(shapes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100, help="timed steps per variant (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20,
                    help="variants alternate in this many rounds")
    ap.add_argument("--optimizers", nargs="+", default=["momentum", "adam"],
                    choices=["momentum", "adam"])
    args = ap.parse_args(argv)
    dev = jax.devices()[0]
    print(f"graphc {graphc.__version__}, jax {jax.__version__}, Python "
          f"{platform.python_version()}, {dev.platform} ({dev.device_kind}), "
          f"{os.cpu_count()} CPUs, batch {BATCH}, median of {args.steps} steps")
    print("\ntraining step, MLP 784-512x3-10 with batch_norm (Executor.run, loss fetched):")
    print(f"{'optimizer':<10}{'unfused ms':>12}{'multi_tensor':>14}{'coalesced':>12}"
          f"{'hand ms':>10}{'mt/unf':>8}{'co/unf':>8}{'unf/hand':>9}   XLA bytes accessed "
          "(unfused / multi_tensor / coalesced)")
    for opt_name in args.optimizers:
        r = bench_training(opt_name, args.steps, args.warmup, args.rounds)
        t = r["times"]
        nbytes = " / ".join(f"{r['cost'][v].get('bytes accessed', float('nan')) / 1e6:.1f}M"
                            for v in VARIANTS)
        print(f"{opt_name:<10}{t['unfused'] * 1e3:>12.3f}{t['multi_tensor'] * 1e3:>14.3f}"
              f"{t['coalesced'] * 1e3:>12.3f}{t['hand'] * 1e3:>10.3f}"
              f"{t['multi_tensor'] / t['unfused']:>8.3f}{t['coalesced'] / t['unfused']:>8.3f}"
              f"{t['unfused'] / t['hand']:>9.3f}   {nbytes}", flush=True)
        stats = r["stats"]["multi_tensor"]["fuse-all-optimizer-ops"]
        print(f"{'':<10}fuse-all-optimizer-ops: {stats}; first losses "
              f"{np.round(r['losses']['unfused'], 5).tolist()}")
    print("\noptimizer update alone (the MLP's trainable parameters, jitted, state donated):")
    print(f"{'optimizer':<10}{'unfused us':>12}{'multi_tensor':>14}{'coalesced':>12}"
          f"{'mt/unf':>8}{'co/unf':>8}   XLA bytes accessed (unfused / mt / coalesced)")
    for opt_name in args.optimizers:
        r = bench_update(opt_name, args.steps, args.rounds)
        t = r["times"]
        nbytes = " / ".join(f"{r['cost'][v].get('bytes accessed', float('nan')) / 1e6:.1f}M"
                            for v in VARIANTS)
        print(f"{opt_name:<10}{t['unfused'] * 1e6:>12.1f}{t['multi_tensor'] * 1e6:>14.1f}"
              f"{t['coalesced'] * 1e6:>12.1f}{t['multi_tensor'] / t['unfused']:>8.3f}"
              f"{t['coalesced'] / t['unfused']:>8.3f}   {nbytes}", flush=True)
    print(f"({r['tensors']} tensors, {r['numel'] / 1e6:.2f}M elements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
