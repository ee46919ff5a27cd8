"""CTR-DNN with LoD slots (sparse ids -> embedding -> sequence_pool(sum) -> fc stack): graphc's
step time against a hand-written JAX step of the same model (packed tokens + segment_sum).

Run ``python benchmarks/bench_lod_ctr.py [--batch 512] [--slots 26] [--vocab 100000]
[--rounds 7] [--steps 10]``. Both sides get the same batches (random lengths 1-20 per slot)
and pay their own host work per step: graphc packs LoDTensors into buckets in
``Executor.run``; the hand-written step pads ids into the same bucket and builds segment ids
with numpy. Both run plain SGD with a sparse embedding update (scatter-add of the looked-up
rows). The script first checks that both give the same losses, then times them in turns.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import graphc
import graphc.fluid as fluid
from graphc import models
from graphc.runtime.lod import bucket


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--vocab", type=int, default=100_000)
    p.add_argument("--emb", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[400, 400, 400])
    p.add_argument("--batches", type=int, default=4, help="distinct batches, cycled")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--no-check-data", action="store_true",
                   help="Executor(check_data=False): no id range checks (docs/errors.md)")
    return p.parse_args()


def make_batches(a, rng):
    out = []
    for _ in range(a.batches):
        f = {"dense_input": rng.standard_normal((a.batch, 13)).astype("float32"),
             "label": rng.integers(0, 2, (a.batch, 1)).astype("int64")}
        for s in range(a.slots):
            lens = rng.integers(1, 21, a.batch).tolist()
            ids = rng.integers(0, a.vocab, (sum(lens), 1)).astype("int64")
            f[f"C{s + 1}"] = fluid.create_lod_tensor(ids, [lens], fluid.CPUPlace())
        out.append(f)
    return out


def hand_written(a, params: dict):
    """The same model as one jitted JAX step over padded ids and host segment ids."""
    names = [f"fc_{i}" for i in range(len(a.hidden) + 1)]

    def forward(dense_params, rows, feeds):
        pooled = []
        for s in range(a.slots):
            seg = feeds["seg"][s]
            pooled.append(jax.ops.segment_sum(rows[s], seg, num_segments=a.batch + 1)[:a.batch])
        h = jnp.concatenate([*pooled, feeds["dense"]], axis=1)
        for i, name in enumerate(names):
            h = h @ dense_params[name + ".w_0"] + dense_params[name + ".b_0"]
            h = jax.nn.relu(h) if i < len(names) - 1 else jax.nn.softmax(h)
        picked = jnp.take_along_axis(h, feeds["label"], axis=1)
        return jnp.mean(-jnp.log(picked))

    @jax.jit
    def step(emb, dense_params, feeds):
        rows = [emb[feeds["ids"][s]] for s in range(a.slots)]
        loss, (g_dense, g_rows) = jax.value_and_grad(forward, argnums=(0, 1))(
            dense_params, rows, feeds)
        new_dense = {k: v - a.lr * g_dense[k] for k, v in dense_params.items()}
        for s in range(a.slots):
            emb = emb.at[feeds["ids"][s]].add(-a.lr * g_rows[s], mode="drop")
        return emb, new_dense, loss

    def host(batch):
        ids, seg = [], []
        for s in range(a.slots):
            t = batch[f"C{s + 1}"]
            lens = np.asarray(t.recursive_sequence_lengths()[0])
            cap = bucket(int(lens.sum()))
            padded = np.full(cap, a.vocab, np.int32)  # padding: out of range, dropped
            padded[:lens.sum()] = np.asarray(t)[:, 0]
            ids.append(padded)
            seg_s = np.full(cap, a.batch, np.int32)
            seg_s[:lens.sum()] = np.repeat(np.arange(a.batch, dtype=np.int32), lens)
            seg.append(seg_s)
        return {"ids": ids, "seg": seg, "dense": batch["dense_input"],
                "label": batch["label"].astype(np.int32)}

    emb = jnp.asarray(params["SparseFeatFactors"])
    dense = {k: jnp.asarray(v) for k, v in params.items() if k != "SparseFeatFactors"}
    state = [emb, dense]

    def run(batch):
        state[0], state[1], loss = step(state[0], state[1], host(batch))
        return loss

    return run


def main():
    a = _parse()
    rng = np.random.default_rng(0)
    batches = make_batches(a, rng)
    m = models.ctr_dnn(a.slots, a.vocab, a.emb, tuple(a.hidden),
                       optimizer_fn=lambda: graphc.optimizer.SGD(a.lr))
    scope, exe = graphc.Scope(), graphc.Executor(check_data=not a.no_check_data)
    exe.run(m.startup, scope=scope)
    params = {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}
    hand = hand_written(a, params)

    def graphc_step(batch):
        return exe.run(m.main, feed=batch, fetch_list=[m.loss], scope=scope,
                       return_numpy=False)[0]

    # same losses from the same start (the first steps; also compiles both)
    for b in batches:
        ours, theirs = float(np.asarray(graphc_step(b))[0]), float(hand(b))
        assert abs(ours - theirs) <= 1e-4 * max(1.0, abs(theirs)), (ours, theirs)
    times = {"graphc": [], "hand-written JAX": []}
    fns = {"graphc": graphc_step, "hand-written JAX": hand}
    for _ in range(a.rounds):
        for name, fn in fns.items():  # in turns, so both see the same machine load
            jax.block_until_ready(fn(batches[0]))
            start = time.perf_counter()
            for i in range(a.steps):
                out = fn(batches[i % len(batches)])
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - start) / a.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["graphc"] / med["hand-written JAX"]
    print(f"CTR-DNN batch {a.batch}, {a.slots} slots (lengths 1-20), vocab {a.vocab}, "
          f"emb {a.emb}, hidden {a.hidden}; {jax.devices()[0].platform}")
    for k, v in med.items():
        print(f"  {k:18s} {v * 1e3:8.2f} ms/step  ({1 / v:6.1f} steps/s)")
    print(f"  ratio graphc / hand-written: {ratio:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()
