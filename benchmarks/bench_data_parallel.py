"""Data parallelism on CPU devices: graphc's step with and without gradient bucketing against a
hand-written jit(shard_map) step; Reduce (sharded optimizer) vs AllReduce; device scaling.

Run ``python benchmarks/bench_data_parallel.py [--devices 8] [--layers 50] [--rounds 15]``.
The model is an MLP of ``--layers`` fc layers (2 parameter tensors each). On a 2-core machine
8 XLA CPU devices share 2 cores: the numbers measure overhead, not speed-up.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import jax

_ARGS = None


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--layers", type=int, default=50)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch-per-device", type=int, default=16)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--bucket-mb", type=float, default=32.0)
    p.add_argument("--bucket-layers", type=int, default=0,
                   help="fuse_grad_size_in_TFLOPS (max layers per bucket; 0: no bound)")
    return p.parse_args()


if __name__ == "__main__":
    _ARGS = _parse()
    jax.config.update("jax_num_cpu_devices", _ARGS.devices)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import graphc  # noqa: E402
from graphc import layers  # noqa: E402

LR, MU, CLASSES = 0.01, 0.9, 10


def build(layers_n: int, width: int, opt: str = "momentum"):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 1
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = graphc.data("x", [-1, width])
        y = graphc.data("y", [-1, 1], dtype="int64")
        h = x
        for _ in range(layers_n - 1):
            h = layers.fc(h, width, act="relu")
        logits = layers.fc(h, CLASSES)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        (graphc.optimizer.Momentum(LR, MU) if opt == "momentum"
         else graphc.optimizer.Adam(1e-3)).minimize(loss)
    return main, startup, loss


def data(batch: int, width: int):
    rng = np.random.RandomState(0)
    return {"x": rng.randn(batch, width).astype("float32"),
            "y": rng.randint(0, CLASSES, (batch, 1)).astype("int64")}


def time_rounds(step, rounds: int, steps: int) -> float:
    """Median seconds per step over ``rounds`` rounds of ``steps`` steps (after warm-up)."""
    for _ in range(3):
        step()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def interleaved(steps: dict, rounds: int, per_round: int) -> dict:
    """Median seconds per step of each callable, timed in turns."""
    for step in steps.values():
        for _ in range(3):
            jax.block_until_ready(step())
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                out = step()
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t0) / per_round)
    return {name: statistics.median(t) for name, t in times.items()}


def graphc_step(n: int, args, bucketing: bool, reduce: bool = False, opt: str = "momentum"):
    main, startup, loss = build(args.layers, args.width, opt)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    bs = graphc.BuildStrategy(fuse_all_reduce_ops=bucketing,
                              fuse_grad_size_in_MB=args.bucket_mb,
                              fuse_grad_size_in_TFLOPS=float(args.bucket_layers))
    if reduce:  # bucketing then also gathers the updated parameters in buckets
        bs.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
        bs.fuse_broadcast_ops = bucketing
    cp = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    feed = data(n * args.batch_per_device, args.width)
    exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)
    compiled = exe.compile(cp, feed=feed, fetch_list=[loss])

    def step():
        return exe.run(cp, feed=feed, fetch_list=[loss], scope=scope, return_numpy=False)[0]

    return step, compiled, cp


def hand_written_step(n: int, args):
    """The same MLP and Momentum update written directly: jit(shard_map), grads flattened into
    one buffer and all-reduced once (the best a user would write), state donated."""
    mesh = Mesh(np.asarray(jax.devices()[:n]).reshape(n), ("d",))
    rng = np.random.RandomState(1)
    dims = [args.width] * args.layers + [CLASSES]
    params = [(jnp.asarray(rng.randn(a, b).astype("float32") * 0.1),
               jnp.zeros((b,), jnp.float32)) for a, b in zip(dims[:-1], dims[1:])]
    vel = jax.tree.map(jnp.zeros_like, params)

    def loss_fn(params, x, y):
        h = x
        for i, (w, b) in enumerate(params):
            h = h @ w + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, y, axis=1))

    def local(params, vel, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        leaves, tree = jax.tree.flatten(grads)
        flat = lax.psum(jnp.concatenate([g.reshape(-1) for g in leaves]), "d") / n
        out, i = [], 0
        for g in leaves:
            out.append(flat[i:i + g.size].reshape(g.shape))
            i += g.size
        grads = jax.tree.unflatten(tree, out)
        vel = jax.tree.map(lambda v, g: MU * v + g, vel, grads)
        params = jax.tree.map(lambda p, v: p - LR * v, params, vel)
        return params, vel, loss.reshape(1)

    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P(), P("d"), P("d")),
                               out_specs=(P(), P(), P("d")), check_vma=False),
                 donate_argnums=(0, 1))
    feed = data(n * args.batch_per_device, args.width)
    x, y = feed["x"], feed["y"]  # host arrays every step, as graphc is fed
    state = {"p": params, "v": vel}

    def step():
        state["p"], state["v"], loss = fn(state["p"], state["v"], x, y)
        return loss

    return step


def collectives(text: str) -> int:
    return sum(text.count(k) for k in ("stablehlo.all_reduce", "stablehlo.reduce_scatter",
                                       "stablehlo.all_gather"))


def main() -> None:
    args = _ARGS
    n = args.devices
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__}, {n} CPU devices, MLP {args.layers} x {args.width} "
          f"({2 * args.layers} parameter tensors), batch {args.batch_per_device}/device")

    print("\n## bucketing vs none vs hand-written (AllReduce, Momentum), ms/step")
    # The three run in turns (one round of each, repeated), so a burst of load on this shared
    # machine hits all of them alike; the medians are compared.
    variants = {}
    for bucketing in (False, True):
        step, compiled, _ = graphc_step(n, args, bucketing)
        variants[f"graphc, bucketing {'on ' if bucketing else 'off'}"] = (
            step, collectives(compiled.lowered_text()))
    variants["hand-written shard_map"] = (hand_written_step(n, args), 1)
    times = interleaved({k: v[0] for k, v in variants.items()}, args.rounds, args.steps)
    hand = times["hand-written shard_map"]
    for name, (_, count) in variants.items():
        print(f"{name:<28} {times[name] * 1e3:8.2f} ms  {times[name] / hand:5.3f}x "
              f"hand-written  collectives in HLO: {count}")

    print("\n## Reduce vs AllReduce (Adam), per-device bytes from memory_analysis")
    runs = {}
    for name, reduce, bucketing in (("AllReduce", False, False),
                                    ("AllReduce, bucketed", False, True),
                                    ("Reduce", True, False), ("Reduce, bucketed", True, True)):
        step, compiled, _ = graphc_step(n, args, bucketing, reduce=reduce, opt="adam")
        runs[name] = (step, compiled)
    times = interleaved({k: v[0] for k, v in runs.items()}, max(3, args.rounds // 2), args.steps)
    for name, (_, compiled) in runs.items():
        mem = compiled.memory_analysis()
        # what each device holds of the Adam moments: rows are split over the devices
        moments = sum(int(np.prod(compiled.global_type_shape(v))) * 4
                      for v in compiled.updated_inputs if "moment" in v.var.name)
        if name.startswith("Reduce"):
            moments //= n
        print(f"{name:<20} {times[name] * 1e3:8.2f} ms/step  arguments "
              f"{mem.argument_size_in_bytes:>10,} B  temp {mem.temp_size_in_bytes:>10,} B  "
              f"moments per device {moments:>9,} B")

    print("\n## scaling, fixed batch per device (bucketing on)")
    base = None
    for k in (1, 2, 4, 8):
        if k > n:
            break
        step, _, _ = graphc_step(k, args, bucketing=True)
        t = time_rounds(step, max(3, args.rounds // 3), args.steps)
        sps = k * args.batch_per_device / t
        base = base or sps
        print(f"{k} devices: {sps:10.0f} samples/s  ({sps / base:4.2f}x of 1 device)")


if __name__ == "__main__":
    main()
