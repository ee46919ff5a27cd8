"""CTR-DNN with LoD slots (sparse ids -> embedding -> sequence_pool(sum) -> fc stack): graphc
before and after issue 28 against a hand-written JAX step of the same model, in one run.

Run ``python benchmarks/bench_lod_ctr.py [--batch 512] [--slots 26] [--vocab 100000]
[--lengths 1 3] [--rounds 7] [--steps 10] [--fresh 10]``. "graphc before" is graphc with
``fuse_embedding_seq_pool`` off and each LoD feed in its own bucket
(``set_shared_bucket(False)``); "graphc" the defaults (one bucket for all of a step's LoD
feeds, the slots' lookups fused). All three get the same batches and pay their own host
work per step: graphc packs LoDTensors in ``Executor.run``; the hand-written step pads the
ids into one shared bucket and builds segment ids with numpy. Both run plain SGD with a
sparse embedding update (scatter-add of the looked-up rows); the hand-written step is the
compact form (all slots' ids in one gather and one segment sum). The script checks that all
give the same losses, then reports per variant: HLO instructions (every instruction line of
the optimised module, fused computations included), fusions, gathers and scatters, XLA's
bytes accessed, the first call's time (trace + compile + run), the steady step (timed in
turns, medians of ``--rounds``, cycling ``--batches`` batches) and the mean step over
``--fresh`` never-seen batches run back to back (where a batch makes a new signature, that
step compiles, as "before" does), and each one's ratio to hand-written JAX. Last, the host
work per step: the calling thread's CPU time inside each call (``time.thread_time``: feed
checks, LoD packing, dispatch; XLA runs the step on its own threads), medians over
``--rounds`` x ``--steps`` calls in turns (the target of issue 28: <= 0.8 ms).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

import graphc
import graphc.fluid as fluid
from graphc import models
from graphc.runtime import lod as rlod
from graphc.runtime.compile_cache import set_compilation_cache
from graphc.runtime.lod import bucket

HAND = "hand-written JAX"


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--vocab", type=int, default=100_000)
    p.add_argument("--emb", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[400, 400, 400])
    p.add_argument("--lengths", type=int, nargs=2, default=[1, 3], help="ids per sample")
    p.add_argument("--batches", type=int, default=4, help="distinct batches, cycled")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--fresh", type=int, default=10, help="never-seen batches per variant")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: this process's CPU time (all threads), steadier on a busy box")
    p.add_argument("--no-check-data", action="store_true",
                   help="Executor(check_data=False): no id range checks (docs/errors.md)")
    return p.parse_args()


def make_batches(a, rng, count):
    out = []
    for _ in range(count):
        f = {"dense_input": rng.standard_normal((a.batch, 13)).astype("float32"),
             "label": rng.integers(0, 2, (a.batch, 1)).astype("int64")}
        for s in range(a.slots):
            lens = rng.integers(a.lengths[0], a.lengths[1] + 1, a.batch).tolist()
            ids = rng.integers(0, a.vocab, (sum(lens), 1)).astype("int64")
            f[f"C{s + 1}"] = fluid.create_lod_tensor(ids, [lens], fluid.CPUPlace())
        out.append(f)
    return out


def hlo_stats(text: str, cost: dict | None) -> dict:
    ops = Counter(m.group(1) for m in re.finditer(r"= \S+ ([a-z][\w\-]*)\(", text))
    return {"instructions": sum(ops.values()), "fusions": ops["fusion"],
            "gathers": ops["gather"], "scatters": ops["scatter"],
            "MB accessed": (cost or {}).get("bytes accessed", float("nan")) / 1e6}


def hand_written(a, params: dict):
    """The same model as one jitted JAX step, written the compact way: every slot's ids in
    one padded vector (one shared bucket), one gather, one segment sum into
    ``slots * (batch + 1)`` segments whose segment ids the host builds, one scatter-add;
    returns (run(batch) -> loss, stats(batch) -> HLO stats)."""
    names = [f"fc_{i}" for i in range(len(a.hidden) + 1)]
    n, slots = a.batch, a.slots

    def forward(dense_params, rows, feeds):
        pooled = jax.ops.segment_sum(rows, feeds["seg"], num_segments=slots * (n + 1),
                                     indices_are_sorted=True)
        pooled = pooled.reshape(slots, n + 1, -1)[:, :n].transpose(1, 0, 2).reshape(n, -1)
        h = jnp.concatenate([pooled, feeds["dense"]], axis=1)
        for i, name in enumerate(names):
            h = h @ dense_params[name + ".w_0"] + dense_params[name + ".b_0"]
            h = jax.nn.relu(h) if i < len(names) - 1 else jax.nn.softmax(h)
        picked = jnp.take_along_axis(h, feeds["label"], axis=1)
        return jnp.mean(-jnp.log(picked))

    def step(emb, dense_params, feeds):
        rows = emb.at[feeds["ids"]].get(mode="fill", fill_value=0)
        loss, (g_dense, g_rows) = jax.value_and_grad(forward, argnums=(0, 1))(
            dense_params, rows, feeds)
        new_dense = {k: v - a.lr * g_dense[k] for k, v in dense_params.items()}
        emb = emb.at[feeds["ids"]].add(-a.lr * g_rows, mode="drop")
        return emb, new_dense, loss

    jitted = jax.jit(step)

    def host(batch):
        tensors = [batch[f"C{s + 1}"] for s in range(slots)]
        cap = bucket(max(np.asarray(t).shape[0] for t in tensors))  # one shared bucket
        ids = np.full((slots, cap), a.vocab, np.int32)  # padding: out of range, dropped
        seg = np.empty((slots, cap), np.int32)
        for s, t in enumerate(tensors):
            lens = np.asarray(t.recursive_sequence_lengths()[0])
            total = int(lens.sum())
            ids[s, :total] = np.asarray(t)[:, 0]
            seg[s, :total] = np.repeat(np.arange(n, dtype=np.int32), lens)
            seg[s, total:] = n
            seg[s] += s * (n + 1)
        return {"ids": ids.reshape(-1), "seg": seg.reshape(-1), "dense": batch["dense_input"],
                "label": batch["label"].astype(np.int32)}

    emb = jnp.asarray(params["SparseFeatFactors"])
    dense = {k: jnp.asarray(v) for k, v in params.items() if k != "SparseFeatFactors"}
    state = [emb, dense]

    def run(batch):
        state[0], state[1], loss = jitted(state[0], state[1], host(batch))
        return loss

    def stats(batch):
        compiled = jitted.lower(state[0], state[1], host(batch)).compile()
        return hlo_stats(compiled.as_text(), compiled.cost_analysis())

    return run, stats


class GraphcVariant:
    """One graphc configuration: its executor, scope, program and bucket policy."""

    def __init__(self, a, fused: bool, shared: bool):
        self.shared = shared
        m = models.ctr_dnn(a.slots, a.vocab, a.emb, tuple(a.hidden),
                           optimizer_fn=lambda: graphc.optimizer.SGD(a.lr))
        self.loss = m.loss
        self.scope = graphc.Scope()
        self.exe = graphc.Executor(check_data=not a.no_check_data)
        self.exe.run(m.startup, scope=self.scope)
        bs = graphc.BuildStrategy()
        bs.fuse_embedding_seq_pool = fused
        self.main = m.main
        self.prog = graphc.CompiledProgram(m.main, build_strategy=bs)

    def params(self) -> dict:
        return {p.name: np.asarray(self.scope[p.name])
                for p in self.main.global_block().all_parameters()}

    def __call__(self, batch):
        rlod.set_shared_bucket(self.shared)
        try:
            return self.exe.run(self.prog, feed=batch, fetch_list=[self.loss],
                                scope=self.scope, return_numpy=False)[0]
        finally:
            rlod.set_shared_bucket(True)

    def stats(self, batch) -> dict:
        rlod.set_shared_bucket(self.shared)
        try:
            step = self.exe.compile(self.prog, feed=batch, fetch_list=[self.loss])
        finally:
            rlod.set_shared_bucket(True)
        return hlo_stats(step.compiled_text(), step.cost_analysis())

    def compiles(self) -> int:
        return sum(len(p.steps) for p in self.exe._prepared[self.prog][1].values())


CLOCK = [time.perf_counter]  # --clock cpu: time.process_time


def _timed(fn, batch) -> float:
    start = CLOCK[0]()
    jax.block_until_ready(fn(batch))
    return CLOCK[0]() - start


def main():
    a = _parse()
    set_compilation_cache(None)  # every compile is a real one (no cache from earlier runs)
    if a.clock == "cpu":
        CLOCK[0] = time.process_time
    rng = np.random.default_rng(0)
    batches = make_batches(a, rng, a.batches)
    fresh = make_batches(a, rng, a.fresh)
    variants = {"graphc before": GraphcVariant(a, fused=False, shared=False),
                "graphc": GraphcVariant(a, fused=True, shared=True)}
    hand, hand_stats = hand_written(a, variants["graphc"].params())
    fns = {**variants, HAND: hand}
    first = {name: _timed(fn, batches[0]) for name, fn in fns.items()}  # compiles too
    # the same losses from the same start (the first steps; also compiles the variants)
    for b in batches[1:]:
        losses = {name: float(np.asarray(fn(b)).reshape(-1)[0]) for name, fn in fns.items()}
        ref = losses[HAND]
        assert all(abs(v - ref) <= 1e-4 * max(1.0, abs(ref)) for v in losses.values()), losses
    stats = {name: v.stats(batches[0]) for name, v in variants.items()}
    stats[HAND] = hand_stats(batches[0])
    times = {name: [] for name in fns}
    for _ in range(a.rounds):
        for name, fn in fns.items():  # in turns, so all see the same machine load
            jax.block_until_ready(fn(batches[0]))
            start = CLOCK[0]()
            for i in range(a.steps):
                out = fn(batches[i % len(batches)])
            jax.block_until_ready(out)
            times[name].append((CLOCK[0]() - start) / a.steps)
    before = {name: v.compiles() for name, v in variants.items()}
    fresh_ms = {}
    for name, fn in fns.items():  # each batch seen once, timed as the steady loop is
        start = CLOCK[0]()
        for b in fresh:
            out = fn(b)
        jax.block_until_ready(out)
        fresh_ms[name] = (CLOCK[0]() - start) / len(fresh)
    compiled = {name: v.compiles() - before[name] for name, v in variants.items()}
    host = {name: [] for name in fns}
    for _ in range(a.rounds):  # host work: the calling thread's CPU time inside each call
        for name, fn in fns.items():
            for i in range(a.steps):
                start = time.thread_time()
                out = fn(batches[i % len(batches)])
                host[name].append(time.thread_time() - start)
                jax.block_until_ready(out)  # (outside the timed part: XLA's threads)
    host_ms = {k: statistics.median(v) * 1e3 for k, v in host.items()}
    steady = {k: statistics.median(v) for k, v in times.items()}
    print(f"CTR-DNN batch {a.batch}, {a.slots} slots (ids per sample {a.lengths[0]}-"
          f"{a.lengths[1]}), vocab {a.vocab}, emb {a.emb}, hidden {a.hidden}, data checks "
          f"{'off' if a.no_check_data else 'on'}; {jax.devices()[0].device_kind}, "
          f"{a.clock} clock")
    cols = ["instructions", "fusions", "gathers", "scatters", "MB accessed"]
    print(f"  {'':16s}" + "".join(f"{c:>14s}" for c in cols)
          + f"{'first call s':>14s}{'steady ms':>11s}{'fresh ms':>10s}{'fresh compiles':>16s}")
    for name in fns:
        s = stats[name]
        print(f"  {name:16s}" + "".join(f"{s[c]:14.0f}" if c != "MB accessed" else
                                        f"{s[c]:14.1f}" for c in cols)
              + f"{first[name]:14.2f}{steady[name] * 1e3:11.2f}{fresh_ms[name] * 1e3:10.1f}"
              + f"{compiled.get(name, 0):>10d}/{a.fresh}")
    for name in variants:
        print(f"  {name} / hand-written: instructions "
              f"{stats[name]['instructions'] / stats[HAND]['instructions']:.2f}x, steady "
              f"{steady[name] / steady[HAND]:.2f}x, fresh batch "
              f"{fresh_ms[name] / fresh_ms[HAND]:.2f}x, first call "
              f"{first[name] / first[HAND]:.2f}x; its fresh batch / its steady step "
              f"{fresh_ms[name] / steady[name]:.2f}x")
    print(f"  {HAND} fresh batch / steady step {fresh_ms[HAND] / steady[HAND]:.2f}x")
    print("  host work per step (the calling thread's CPU time inside the call: feed checks, "
          "LoD packing, dispatch; the step runs on XLA's threads), median ms: "
          + ", ".join(f"{name} {ms:.3f}" for name, ms in host_ms.items())
          + f"; graphc / hand-written {host_ms['graphc'] / host_ms[HAND]:.2f}x")


if __name__ == "__main__":
    main()
