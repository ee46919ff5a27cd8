"""Inference through graphc's predictor (Paddle's AnalysisConfig + zero-copy tensors) against
the same function written by hand with ``jax.jit`` and the same weights (issue 25).

Run ``python benchmarks/bench_predictor.py [--calls 1200] [--rounds 60] [--seconds 20]``
(``--profile``: a cProfile of the predictor at batch 1 instead).
Two saved inference models, each at batch 1 and 64:

- ``resnet``: 3x32x32 images, conv 3x3 (16) + batch norm + relu, two residual blocks
  (conv-bn-relu-conv-bn + identity, relu), global average pool, fc 10 + softmax;
- ``ctr``: 4 LoD slots of int64 ids (3 ids per sample and slot), one embedding table per
  slot (1000 x 16), sequence_pool(sum) per slot, concat, fc 64 relu, fc 1 sigmoid.

Both sides start from the same host numpy inputs and end with the output as a numpy array:
the predictor through ``copy_from_cpu`` / ``run()`` / ``copy_to_cpu`` (the zero-copy API);
the hand-written side calls its jitted function on the weights (device arrays passed as a
pytree argument, as flax's ``apply(params, x)`` does: not closed over as constants) and the
arrays (for ``ctr`` it first turns
the lengths into segment ids with ``np.repeat``, as any LoD consumer must) and converts the
result. The timings are interleaved in ``--rounds`` rounds (the order alternating); each
round gives a median per call, and the quietest round's (the minimum: load from other
processes only slows a round down) is the estimate, printed with the ratio predictor / hand
(target <= 1.1); the median over rounds follows in parentheses. Outputs are checked equal
(to 1e-5) first.

Paddle Inference (``--paddle-python``, found as ``paddle-venv/bin/python`` beside the
repository or a parent folder, skipped with a note when absent; ``--no-paddle``) runs the same
saved files and feeds in a subprocess of Paddle's interpreter (paddle_inference_side.py).
``--clock cpu`` times CPU time instead of wall time (steadier on a busy machine).

Results (shared 2-core CPU box, load average 12-14, JAX 0.10.2, PaddlePaddle 3.3.1, ``--clock
cpu --seconds 8 --rounds 40``; us per call: predictor vs hand, ratio, Paddle Inference; the
analysis and the before/after runs are in benchmarks/README.md, "bench_predictor.py"):

    resnet batch 1:     818 vs     765  1.07   Paddle    897
    resnet batch 64: 32,936 vs  32,686  1.01   Paddle 16,381
    ctr    batch 1:      91 vs      83  1.09   Paddle    244   (1.51 before the host pass)
    ctr    batch 64:    115 vs     102  1.13   Paddle    331   (1.71 before; 2.79 before
                                                                its own step)
    ctr x26 batch 1:    271 vs     347  0.78   Paddle    550   (1.48 before)
    ctr x26 batch 64:   363 vs     418  0.87   Paddle    907   (1.71 before)

The steady zero-copy call hands XLA one host array (the stacked tokens); the rest of the
CTR gap is the zero-copy API's own copies and the x64 context.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import graphc.fluid as fluid
from graphc.fluid import layers

SLOTS, VOCAB, EMB, IDS_PER_SAMPLE = 4, 1000, 16, 3


# -- models -------------------------------------------------------------------------------
def _conv_bn(x, filters, name, act="relu"):
    y = layers.conv2d(x, filters, 3, padding=1, param_attr=f"{name}.w", bias_attr=False)
    return layers.batch_norm(y, act=act, param_attr=f"{name}.scale", bias_attr=f"{name}.offset",
                             moving_mean_name=f"{name}.mean",
                             moving_variance_name=f"{name}.var")


def build_resnet():
    x = fluid.data("image", [-1, 3, 32, 32])
    h = _conv_bn(x, 16, "stem")
    for b in range(2):
        y = _conv_bn(_conv_bn(h, 16, f"b{b}a"), 16, f"b{b}b", act=None)
        h = layers.relu(layers.elementwise_add(h, y))
    pooled = layers.pool2d(h, pool_type="avg", global_pooling=True)
    out = layers.fc(pooled, 10, act="softmax", param_attr="fc.w", bias_attr="fc.b")
    return ["image"], out


def build_ctr(n_slots: int = SLOTS):
    slots = [fluid.data(f"slot{i}", [-1, 1], "int64", lod_level=1) for i in range(n_slots)]
    pooled = [layers.sequence_pool(layers.embedding(s, size=[VOCAB, EMB],
                                                    param_attr=f"emb{i}"), "sum")
              for i, s in enumerate(slots)]
    h = layers.fc(layers.concat(pooled, axis=1), 64, act="relu", param_attr="h.w",
                  bias_attr="h.b")
    out = layers.fc(h, 1, act="sigmoid", param_attr="o.w", bias_attr="o.b")
    return [s.name for s in slots], out


def save(build, dirname: str) -> None:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        feeds, out = build()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        scope = fluid.global_scope()
        rng = np.random.default_rng(1)
        for name in scope.keys():  # batch-norm statistics away from 0/1, so they count
            if name.endswith(".mean"):
                scope[name] = rng.standard_normal(np.shape(scope[name])).astype("float32") * .1
            elif name.endswith(".var"):
                scope[name] = rng.uniform(0.5, 1.5, np.shape(scope[name])).astype("float32")
        fluid.io.save_inference_model(dirname, feeds, [out], exe, main_program=main)


# -- hand-written JAX ---------------------------------------------------------------------
def hand_resnet(params):
    """The ResNet in plain JAX, the weights passed as a pytree argument (flax's idiom)."""
    def conv_bn(p, x, name, relu=True):
        y = jax.lax.conv_general_dilated(x, p[f"{name}.w"], (1, 1), ((1, 1), (1, 1)),
                                         dimension_numbers=("NCHW", "OIHW", "NCHW"))
        inv = p[f"{name}.scale"] / jnp.sqrt(p[f"{name}.var"] + 1e-5)
        y = (y - p[f"{name}.mean"][:, None, None]) * inv[:, None, None] \
            + p[f"{name}.offset"][:, None, None]
        return jax.nn.relu(y) if relu else y

    @jax.jit
    def f(p, image):
        h = conv_bn(p, image, "stem")
        for b in range(2):
            h = jax.nn.relu(h + conv_bn(p, conv_bn(p, h, f"b{b}a"), f"b{b}b", relu=False))
        pooled = jnp.mean(h, axis=(2, 3))
        return jax.nn.softmax(pooled @ p["fc.w"] + p["fc.b"], axis=-1)

    return lambda feed: np.asarray(f(params, feed["image"]))


def hand_ctr(params, batch: int, n_slots: int = SLOTS):
    """The CTR model in plain JAX, the weights passed as a pytree argument."""
    @jax.jit
    def f(p, ids, segs):
        pooled = [jax.ops.segment_sum(jnp.take(p[f"emb{i}"], ids[i][:, 0], axis=0), segs[i],
                                      num_segments=batch) for i in range(n_slots)]
        h = jax.nn.relu(jnp.concatenate(pooled, axis=1) @ p["h.w"] + p["h.b"])
        return jax.nn.sigmoid(h @ p["o.w"] + p["o.b"])

    def run(feed):
        ids = tuple(feed[f"slot{i}"][0] for i in range(n_slots))
        segs = tuple(np.repeat(np.arange(batch, dtype=np.int32), feed[f"slot{i}"][1])
                     for i in range(n_slots))
        return np.asarray(f(params, ids, segs))

    return run


# -- the predictor ------------------------------------------------------------------------
def predictor_runner(dirname: str, lod: bool):
    config = fluid.core.AnalysisConfig(dirname)
    config.disable_gpu()
    config.switch_use_feed_fetch_ops(False)
    config.switch_specify_input_names(True)
    predictor = fluid.core.create_paddle_predictor(config)
    inputs = {n: predictor.get_input_handle(n) for n in predictor.get_input_names()}
    output = predictor.get_output_handle(predictor.get_output_names()[0])

    def run(feed):
        for name, handle in inputs.items():
            if lod:
                data, _, offsets = feed[name]
                handle.copy_from_cpu(data)
                handle.set_lod([offsets])
            else:
                handle.copy_from_cpu(feed[name])
        predictor.run()
        return output.copy_to_cpu()

    return run, predictor


def params_of(predictor) -> dict:
    scope = predictor.core.scope
    return {n: jnp.asarray(np.asarray(scope[n])) for n in scope.keys()}


def feeds_for(model: str, batch: int, rng, n_slots: int = SLOTS) -> list[dict]:
    if model == "resnet":
        return [{"image": rng.standard_normal((batch, 3, 32, 32)).astype("float32")}
                for _ in range(4)]
    # each slot: (ids [T, 1], lengths for the hand side, offsets for set_lod, as a list)
    lengths = np.full(batch, IDS_PER_SAMPLE, np.int64)
    offsets = list(range(0, batch * IDS_PER_SAMPLE + 1, IDS_PER_SAMPLE))
    return [{f"slot{i}": (rng.integers(0, VOCAB, (batch * IDS_PER_SAMPLE, 1)), lengths,
                          offsets) for i in range(n_slots)} for _ in range(4)]


def bench_one(model: str, dirname: str, batch: int, calls: int, rounds: int,
              seconds: float = 20.0, clock=time.perf_counter, n_slots: int = SLOTS) -> dict:
    ours, predictor = predictor_runner(dirname, lod=model == "ctr")
    p = params_of(predictor)
    hand = hand_resnet(p) if model == "resnet" else hand_ctr(p, batch, n_slots)
    feeds = feeds_for(model, batch, np.random.default_rng(batch), n_slots)
    for feed in feeds:
        np.testing.assert_allclose(ours(feed), hand(feed), rtol=1e-5, atol=1e-5)
    start = time.perf_counter()
    for i in range(20):
        ours(feeds[i % 4])
        hand(feeds[i % 4])
    # at most about --seconds of timed calls per contender (ResNet at batch 64 is slow)
    per_call = (time.perf_counter() - start) / 40
    calls = max(rounds, min(calls, int(seconds / per_call)))
    rounds_of = {"predictor": [], "hand": []}
    per_round = max(1, calls // rounds)
    for r in range(rounds):  # interleaved, so load changes hit both alike
        order = (("predictor", ours), ("hand", hand))
        for name, fn in order if r % 2 == 0 else order[::-1]:
            times = []
            for i in range(per_round):
                feed = feeds[i % 4]
                start = clock()
                fn(feed)
                times.append(clock() - start)
            rounds_of[name].append(statistics.median(times))
    # noise on a shared machine only ever slows a round down: the quietest round's median
    # is the estimate ("best"); the median over rounds is printed beside it
    out = {}
    for name, meds in rounds_of.items():
        out[name], out[name + "_median"] = min(meds), statistics.median(meds)
    out["ratio"] = out["predictor"] / out["hand"]
    out["ratio_median"] = out["predictor_median"] / out["hand_median"]
    out["per_round"], out["feeds"] = per_round, feeds
    out["outputs"] = np.stack([ours(feed) for feed in feeds])
    return out


# -- Paddle Inference, in Paddle's own interpreter --------------------------------------------
def find_paddle_python(given: str | None) -> str | None:
    """``--paddle-python``, else a ``paddle-venv/bin/python`` beside the repository or one of
    its parent folders (where the fixtures' script installs Paddle), else None."""
    if given:
        return given if os.path.exists(given) else None
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while True:
        candidate = os.path.join(here, "paddle-venv", "bin", "python")
        if os.path.exists(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def bench_paddle(python: str, dirname: str, feeds: list, per_round: int, rounds: int,
                 threads: int, clock: str, tmp: str) -> tuple[dict | None, str]:
    """Paddle Inference on the same model and feeds (benchmarks/paddle_inference_side.py in a
    subprocess): its best and median round, and its outputs; (None, why) when it fails."""
    work = tempfile.mkdtemp(dir=tmp)
    arrays = {}
    for i, feed in enumerate(feeds):
        for name, value in feed.items():
            if isinstance(value, tuple):  # ctr: (ids, lengths, offsets)
                arrays[f"{i}/{name}"], arrays[f"{i}/{name}/offsets"] = value[0], \
                    np.asarray(value[2], np.int64)
            else:
                arrays[f"{i}/{name}"] = value
    np.savez(os.path.join(work, "feeds.npz"), **arrays)
    spec = {"model_dir": dirname, "feeds": os.path.join(work, "feeds.npz"),
            "num_feeds": len(feeds), "per_round": per_round, "rounds": rounds,
            "warmup": 20, "threads": threads, "clock": clock}
    with open(os.path.join(work, "spec.json"), "w") as f:
        json.dump(spec, f)
    side = os.path.join(os.path.dirname(os.path.abspath(__file__)), "paddle_inference_side.py")
    proc = subprocess.run([python, side, os.path.join(work, "spec.json")],
                          capture_output=True, text=True)
    if proc.returncode:
        return None, (proc.stderr.strip().splitlines() or ["failed"])[-1]
    meds = json.loads(proc.stdout.strip().splitlines()[-1])["rounds"]
    return {"best": min(meds), "median": statistics.median(meds),
            "outputs": np.load(os.path.join(work, "out.npy"))}, ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=1200, help="timed calls per contender")
    ap.add_argument("--rounds", type=int, default=60, help="interleaved rounds")
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="about this many seconds of timed calls per contender and case")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--models", nargs="+", default=["resnet", "ctr"])
    ap.add_argument("--slots", type=int, default=SLOTS,
                    help="the CTR model's LoD slots (26: Criteo's categorical features)")
    ap.add_argument("--profile", action="store_true", help="cProfile the predictor instead")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this process's CPU time (steadier on a busy machine)")
    ap.add_argument("--paddle-python", default=None,
                    help="a Python with paddlepaddle (default: paddle-venv/bin/python beside "
                         "the repository or a parent folder; skipped when there is none)")
    ap.add_argument("--paddle-threads", type=int, default=os.cpu_count() or 1,
                    help="Paddle Inference's CPU math threads (XLA uses every core)")
    ap.add_argument("--no-paddle", action="store_true", help="skip Paddle Inference")
    args = ap.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    paddle = None if args.no_paddle else find_paddle_python(args.paddle_python)
    print(f"devices: {jax.devices()}; clock: {args.clock}")
    if paddle is None:
        why = ("--no-paddle" if args.no_paddle else
               f"{args.paddle_python} does not exist" if args.paddle_python else
               "no paddle-venv/bin/python found; give --paddle-python PATH")
        print(f"Paddle Inference: skipped ({why})")
    else:
        print(f"Paddle Inference: {paddle} ({args.paddle_threads} threads, run after graphc "
              "and hand jax.jit in a subprocess; its ratio is against hand's time)")
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for model in args.models:
            dirs[model] = os.path.join(tmp, model)
            save(build_resnet if model == "resnet" else
                 functools.partial(build_ctr, args.slots), dirs[model])
        if args.profile:
            for model in args.models:
                ours, _ = predictor_runner(dirs[model], lod=model == "ctr")
                feeds = feeds_for(model, 1, np.random.default_rng(0), args.slots)
                for i in range(50):
                    ours(feeds[i % 4])
                prof = cProfile.Profile()
                prof.enable()
                for i in range(args.calls):
                    ours(feeds[i % 4])
                prof.disable()
                print(f"== {model}, batch 1")
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            return 0
        print(f"{'model':8} {'batch':>5} {'predictor us':>13} {'hand jax.jit us':>16} "
              f"{'ratio':>6} {'paddle us':>10} {'paddle/hand':>11}   "
              "(median over rounds: predictor, hand, ratio; paddle)")
        for model in args.models:
            for batch in args.batches:
                r = bench_one(model, dirs[model], batch, args.calls, args.rounds, args.seconds,
                              clock, args.slots)
                pd, why = (None, "skipped") if paddle is None else bench_paddle(
                    paddle, dirs[model], r["feeds"], r["per_round"], args.rounds,
                    args.paddle_threads, args.clock, tmp)
                if pd is not None:  # Paddle fuses conv + batch norm: a little rounding
                    np.testing.assert_allclose(pd["outputs"], r["outputs"], rtol=1e-4,
                                               atol=1e-5)
                paddle_cols = (f"{pd['best'] * 1e6:10.1f} {pd['best'] / r['hand']:11.2f}"
                               if pd else f"{'-':>10} {'-':>11}")
                paddle_median = f"; {pd['median'] * 1e6:.1f}" if pd else ""
                label = f"ctr x{args.slots}" if model == "ctr" and args.slots != SLOTS else model
                print(f"{label:8} {batch:5d} {r['predictor'] * 1e6:13.1f} "
                      f"{r['hand'] * 1e6:16.1f} {r['ratio']:6.2f} {paddle_cols}   "
                      f"({r['predictor_median'] * 1e6:.1f}, {r['hand_median'] * 1e6:.1f}, "
                      f"{r['ratio_median']:.2f}{paddle_median})", flush=True)
                if pd is None and paddle is not None:
                    print(f"  Paddle Inference failed: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
