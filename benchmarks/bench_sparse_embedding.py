"""Sparse (row-sparse, SelectedRows) against dense embedding gradients: step time and gradient
bytes over a vocabulary sweep, on 1 and N data-parallel CPU devices, against hand-written JAX.

Run ``python benchmarks/bench_sparse_embedding.py [--vocabs 10000 100000 1000000]
[--devices 4] [--optimizer sgd|momentum|adam] [--rounds 9] [--steps 200] [--round-s 0.1]``.
The model is ids [batch, 1] -> embedding [vocab, 64] -> fc(2) -> softmax_with_cross_entropy
-> mean. On a 2-core machine 4 XLA CPU devices share 2 cores: the 4-device numbers measure the
exchange and its overhead, not a speed-up.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import time

import jax

_ARGS = None


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocabs", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--devices", type=int, default=4,
                   help="data-parallel device count measured besides 1 (1: only 1 device)")
    p.add_argument("--batch", type=int, default=256, help="global batch, split over devices")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--optimizer", choices=("sgd", "momentum", "adam"), default="sgd")
    p.add_argument("--rounds", type=int, default=9, help="timed rounds per variant (median)")
    p.add_argument("--steps", type=int, default=200, help="most steps per timed round")
    p.add_argument("--round-s", type=float, default=0.1,
                   help="aim of one round's length: steps per round = round_s / step time "
                        "(from the warm-up), between 1 and --steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after compiling")
    p.add_argument("--sync-every", type=int, default=10,
                   help="wait for the outputs every this many steps within a round: XLA:CPU "
                        "(jax 0.10.2) deadlocks in a collective's rendezvous when about 100 "
                        "multi-device steps are queued unwaited (see the README)")
    p.add_argument("--no-settle", action="store_true",
                   help="no untimed step at the start of each round (see interleaved)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="rtol and atol of the graphc vs hand-written parameter check")
    return p.parse_args()


if __name__ == "__main__":
    _ARGS = _parse()
    jax.config.update("jax_num_cpu_devices", max(_ARGS.devices, 1))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import graphc  # noqa: E402
from graphc import layers  # noqa: E402

CLASSES = 2
SGD_LR, MOMENTUM_LR, MU, ADAM_LR = 0.1, 0.1, 0.9, 0.01
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
ROWS_BYTES = 4  # a SelectedRows' row indices are int32
TABLE, FC_W, FC_B = "embedding_0.w_0", "fc_0.w_0", "fc_0.b_0"
OPT_TYPES = ("sgd", "momentum", "adam")


# -- graphc ---------------------------------------------------------------------------------
def build(vocab: int, width: int, sparse: bool, opt: str):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 1
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = graphc.data("ids", [-1, 1], dtype="int64")
        label = graphc.data("label", [-1, 1], dtype="int64")
        emb = layers.embedding(ids, [vocab, width], is_sparse=sparse)
        logits = layers.fc(emb, CLASSES)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        if opt == "sgd":
            optimizer = graphc.optimizer.SGD(SGD_LR)
        elif opt == "momentum":
            optimizer = graphc.optimizer.Momentum(MOMENTUM_LR, MU)
        else:  # lazy_mode only changes a row-sparse gradient's update
            optimizer = graphc.optimizer.Adam(ADAM_LR, BETA1, BETA2, EPS, lazy_mode=True)
        optimizer.minimize(loss)
    return main, startup, loss


def batches(vocab: int, batch: int, count: int = 4) -> list[dict]:
    rng = np.random.RandomState(0)
    return [{"ids": rng.randint(0, vocab, (batch, 1)).astype("int64"),
             "label": rng.randint(0, CLASSES, (batch, 1)).astype("int64")}
            for _ in range(count)]


class GraphcVariant:
    """graphc's program on ``n`` devices (n > 1: with_data_parallel), run by the Executor."""

    def __init__(self, vocab: int, n: int, sparse: bool, args):
        self.vocab, self.n, self.sparse = vocab, n, sparse
        self.main, startup, self.loss = build(vocab, args.width, sparse, args.optimizer)
        self.exe, self.scope = graphc.Executor(), graphc.Scope()
        self.exe.run(startup, scope=self.scope)
        self.prog = self.main if n == 1 else graphc.CompiledProgram(self.main).with_data_parallel(
            loss_name=self.loss.name, places=graphc.cpu_places(n))
        self.feeds = batches(vocab, args.batch)
        self.i = 0

    def initial(self) -> dict:
        """Parameters after the startup program (before any step), as numpy."""
        return {k: np.array(self.scope[k]) for k in (TABLE, FC_W, FC_B)}

    def params(self) -> dict:
        return {k: self.scope[k] for k in (TABLE, FC_W, FC_B)}

    def run_once(self, feed):
        return self.exe.run(self.prog, feed=feed, fetch_list=[self.loss], scope=self.scope)[0]

    def step(self):
        feed = self.feeds[self.i % len(self.feeds)]
        self.i += 1
        return self.exe.run(self.prog, feed=feed, fetch_list=[self.loss], scope=self.scope,
                            return_numpy=False)[0]

    def bytes_accessed(self) -> float:
        compiled = self.exe.compile(self.prog, feed=self.feeds[0], fetch_list=[self.loss])
        return _bytes_accessed(compiled.cost_analysis())

    def gradient_bytes(self, batch: int) -> tuple[int, int, str]:
        """(table gradient bytes per device, bytes each device receives in the exchange, the
        exchange op), read from the compiled graph: the optimizer's Grad input of the table,
        and the collective on it."""
        cp = self.prog if self.n > 1 else graphc.CompiledProgram(self.main)
        graph = cp.graph([self.loss])
        grad_type, exchange = None, "none"
        for op in graph.ops():
            if op.type in OPT_TYPES and op.inputs["Param"][0].name == TABLE:
                grad_type = op.inputs["Grad"][0].type
            elif op.type in ("c_allgather_rows", "c_allreduce") and \
                    op.inputs["X"][0].name.startswith(TABLE + "@GRAD"):
                exchange = op.type
        assert grad_type is not None and grad_type.sparse == self.sparse, grad_type
        itemsize = np.dtype(grad_type.dtype).itemsize
        height, width = grad_type.shape
        if grad_type.sparse:  # one row (index + values) per id of the device's batch slice
            per_device = (batch // self.n) * (ROWS_BYTES + width * itemsize)
        else:
            per_device = height * width * itemsize
        if self.n == 1:
            return per_device, 0, exchange
        if exchange == "c_allgather_rows":  # every replica's rows and values
            received = self.n * per_device
        else:  # all-reduce result: the dense gradient (a ring moves 2(n-1)/n of it)
            received = per_device
        return per_device, received, exchange

    def fetched_gradient_bytes(self) -> int:
        """The table gradient as the executor fetches it (a SelectedRows' ``nbytes``; one
        more training step). Data parallel: the all-gathered value, concatenated over the
        devices, so divided by n here."""
        out = self.exe.run(self.prog, feed=self.feeds[0],
                           fetch_list=[self.loss, TABLE + "@GRAD"], scope=self.scope)[1]
        return out.nbytes // self.n


def _bytes_accessed(cost) -> float:
    if isinstance(cost, list | tuple):
        cost = cost[0]
    return float(cost.get("bytes accessed", float("nan"))) if cost else float("nan")


# -- hand-written JAX -----------------------------------------------------------------------
def _loss_of_rows(rows, w, b, label):
    """Mean softmax cross-entropy with hard labels [batch, 1]; the label's log-probability
    picked by a compare (a take_along_axis costs a gather and its scatter: slower on CPU)."""
    logp = jax.nn.log_softmax(rows @ w + b)
    return -jnp.mean(jnp.sum(jnp.where(label == jnp.arange(CLASSES), logp, 0.0), axis=1))


def _dense_update(opt: str, p, g, s, pows):
    """Paddle's dense update; ``s``: this parameter's optimizer state."""
    if opt == "sgd":
        return p - SGD_LR * g, s
    if opt == "momentum":
        v = MU * s["v"] + g
        return p - MOMENTUM_LR * v, {"v": v}
    b1p, b2p = pows
    m1 = BETA1 * s["m1"] + (1 - BETA1) * g
    m2 = BETA2 * s["m2"] + (1 - BETA2) * g * g
    lr_t = ADAM_LR * jnp.sqrt(1 - b2p) / (1 - b1p)
    p = p - lr_t * (m1 / (jnp.sqrt(m2) + EPS * jnp.sqrt(1 - b2p)))
    return p, {"m1": m1, "m2": m2}


def _rows_update(opt: str, table, idx, g_rows, s, pows, vocab: int):
    """The table's update from (row indices, row gradients), without a dense gradient:
    SGD scatter-adds; Momentum (Paddle's sparse kernel) still decays every velocity row;
    lazy Adam merges repeated rows, then reads and writes only those rows."""
    if opt == "sgd":
        return table.at[idx].add(-SGD_LR * g_rows), s
    if opt == "momentum":
        v = (MU * s["v"]).at[idx].add(g_rows)
        return table - MOMENTUM_LR * v, {"v": v}
    n = idx.shape[0]
    uniq, inv = jnp.unique(idx, size=n, fill_value=vocab, return_inverse=True)
    g = jax.ops.segment_sum(g_rows, inv.reshape(-1), num_segments=n)
    b1p, b2p = pows
    lr_t = ADAM_LR * jnp.sqrt(1 - b2p) / (1 - b1p)
    p_r, m1_r, m2_r = (t.at[uniq].get(mode="fill", fill_value=0)
                       for t in (table, s["m1"], s["m2"]))
    m1_r = BETA1 * m1_r + (1 - BETA1) * g
    m2_r = BETA2 * m2_r + (1 - BETA2) * g * g
    p_r = p_r - lr_t * (m1_r / (jnp.sqrt(m2_r) + EPS * jnp.sqrt(1 - b2p)))
    return (table.at[uniq].set(p_r, mode="drop"),
            {"m1": s["m1"].at[uniq].set(m1_r, mode="drop"),
             "m2": s["m2"].at[uniq].set(m2_r, mode="drop")})


def _opt_state(opt: str, p):
    if opt == "sgd":
        return {}
    if opt == "momentum":
        return {"v": jnp.zeros_like(p)}
    return {"m1": jnp.zeros_like(p), "m2": jnp.zeros_like(p)}


class HandVariant:
    """The same model and update written directly: jit (1 device) or jit(shard_map) over a
    ("dp",) mesh, state donated. Sparse: gather the batch's rows, gradients w.r.t. the rows,
    all-gather ids and row gradients (divided by n), scatter into the table. Dense: gradient
    w.r.t. the whole table, pmean, full-table update."""

    def __init__(self, vocab: int, n: int, sparse: bool, init: dict, args):
        self.vocab, self.n, self.sparse, opt = vocab, n, sparse, args.optimizer

        def local(state, ids, label):
            table, w, b = state["table"], state["w"], state["b"]
            idx = ids.reshape(-1).astype(jnp.int32)
            label = label.astype(jnp.int32)
            if sparse:
                rows = table[idx]
                loss, (g_tab, gw, gb) = jax.value_and_grad(_loss_of_rows, argnums=(0, 1, 2))(
                    rows, w, b, label)
            else:
                loss, (g_tab, gw, gb) = jax.value_and_grad(
                    lambda t, w, b: _loss_of_rows(t[idx], w, b, label), argnums=(0, 1, 2))(
                    table, w, b)
            if n > 1:
                gw, gb = lax.pmean(gw, "dp"), lax.pmean(gb, "dp")
                if sparse:
                    idx = lax.all_gather(idx, "dp", tiled=True)
                    g_tab = lax.all_gather(g_tab, "dp", tiled=True) / n
                else:
                    g_tab = lax.pmean(g_tab, "dp")
            pows = state.get("pows")
            if sparse:
                table, s_tab = _rows_update(opt, table, idx, g_tab, state["s_table"], pows,
                                            vocab)
            else:
                table, s_tab = _dense_update(opt, table, g_tab, state["s_table"], pows)
            w, s_w = _dense_update(opt, w, gw, state["s_w"], pows)
            b, s_b = _dense_update(opt, b, gb, state["s_b"], pows)
            new = {"table": table, "w": w, "b": b, "s_table": s_tab, "s_w": s_w, "s_b": s_b}
            if pows is not None:  # Adam's beta1^t, beta2^t (one pair serves every parameter)
                new["pows"] = (pows[0] * BETA1, pows[1] * BETA2)
            return new, loss.reshape(1)

        table, w, b = (jnp.asarray(init[k]) for k in (TABLE, FC_W, FC_B))
        state = {"table": table, "w": w, "b": b, "s_table": _opt_state(opt, table),
                 "s_w": _opt_state(opt, w), "s_b": _opt_state(opt, b)}
        if opt == "adam":
            state["pows"] = (jnp.float32(BETA1), jnp.float32(BETA2))
        if n == 1:
            self.fn = jax.jit(local, donate_argnums=(0,))
        else:
            mesh = Mesh(np.asarray(jax.devices()[:n]), ("dp",))
            self.fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), P("dp"), P("dp")),
                                            out_specs=(P(), P("dp")), check_vma=False),
                              donate_argnums=(0,))
            state = jax.device_put(state, NamedSharding(mesh, P()))
        self.state = state
        self.feeds = batches(vocab, args.batch)
        self.i = 0

    def params(self) -> dict:
        return {TABLE: np.asarray(self.state["table"]), FC_W: np.asarray(self.state["w"]),
                FC_B: np.asarray(self.state["b"])}

    def run_once(self, feed):
        self.state, loss = self.fn(self.state, feed["ids"], feed["label"])
        return np.asarray(loss)

    def step(self):
        feed = self.feeds[self.i % len(self.feeds)]
        self.i += 1
        self.state, loss = self.fn(self.state, feed["ids"], feed["label"])
        return loss

    def bytes_accessed(self) -> float:
        feed = self.feeds[0]
        return _bytes_accessed(self.fn.lower(self.state, feed["ids"], feed["label"])
                               .compile().cost_analysis())


# -- timing ---------------------------------------------------------------------------------
def warm(step, count: int) -> float:
    """Run ``count`` steps (the first compiles); seconds per step of the ones after it."""
    jax.block_until_ready(step())
    times = []
    for _ in range(max(count, 1)):
        t0 = time.perf_counter()
        jax.block_until_ready(step())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(steps: dict, per_round: dict, rounds: int, settle: bool = True,
                sync_every: int = 10) -> dict:
    """Median seconds per step of each callable; one round of each in turn, ``rounds`` times,
    so a burst of load on the shared machine hits every variant alike. The order rotates
    every round, so no variant always follows the same one (a round of a dense step at a
    large vocabulary leaves the caches cold and a gigabyte of buffers to release), and with
    ``settle`` a round of more than one step starts with one untimed step. Every
    ``sync_every`` steps the round waits for the outputs (no deeper queue of dispatched
    steps: XLA:CPU's collectives deadlock at about 100)."""
    times = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            step, k = steps[name], per_round[name]
            if settle and k > 1:
                jax.block_until_ready(step())
            t0 = time.perf_counter()
            for i in range(1, k + 1):
                out = step()
                if i % sync_every == 0:
                    jax.block_until_ready(out)
            jax.block_until_ready(out)
            times[name].append((time.perf_counter() - t0) / k)
    return {name: statistics.median(t) for name, t in times.items()}


def check_same(g: GraphcVariant, h: HandVariant, feed: dict, tol: float) -> float:
    """One step of each from the same parameters and batch: the parameters must agree.
    Returns the largest absolute difference."""
    lg, lh = np.asarray(g.run_once(feed)), h.run_once(feed)
    np.testing.assert_allclose(lg, lh, rtol=tol, atol=tol)
    worst = 0.0
    gp, hp = g.params(), h.params()
    for k in (TABLE, FC_W, FC_B):
        np.testing.assert_allclose(gp[k], hp[k], rtol=tol, atol=tol,
                                   err_msg=f"{k} after one step ({g.vocab}, {g.n} devices, "
                                           f"{'sparse' if g.sparse else 'dense'})")
        worst = max(worst, float(np.max(np.abs(gp[k] - hp[k]))))
    return worst


def measure(vocab: int, n: int, args) -> tuple[list[dict], tuple]:
    """Sparse and dense, graphc and hand-written, at one vocabulary and device count: a
    table row per layout, and the sparse pair (kept for the across-vocabulary timing)."""
    variants, rows = {}, []
    for sparse in (True, False):
        layout = "sparse" if sparse else "dense"
        g = GraphcVariant(vocab, n, sparse, args)
        h = HandVariant(vocab, n, sparse, g.initial(), args)
        diff = check_same(g, h, g.feeds[0], args.tolerance)
        per_dev, received, exchange = g.gradient_bytes(args.batch)
        fetched = g.fetched_gradient_bytes() if sparse else None
        if fetched is not None:
            assert fetched == (received or per_dev), (fetched, per_dev, received)
        variants[layout] = (g, h, per_dev, received, exchange, diff, fetched)
    steps, per_round = {}, {}
    for layout, (g, h, *_rest) in variants.items():
        t = warm(g.step, args.warmup)
        warm(h.step, args.warmup)
        k = max(1, min(args.steps, round(args.round_s / t)))
        steps[f"graphc {layout}"], steps[f"hand {layout}"] = g.step, h.step
        per_round[f"graphc {layout}"] = per_round[f"hand {layout}"] = k
    times = interleaved(steps, per_round, args.rounds, settle=not args.no_settle,
                        sync_every=args.sync_every)
    for layout, (g, h, per_dev, received, exchange, diff, fetched) in variants.items():
        rows.append({"vocab": vocab, "n": n, "layout": layout, "fetched": fetched,
                     "graphc": times[f"graphc {layout}"], "hand": times[f"hand {layout}"],
                     "steps": per_round[f"graphc {layout}"], "grad": per_dev,
                     "received": received, "exchange": exchange, "diff": diff,
                     "bytes_g": g.bytes_accessed(), "bytes_h": h.bytes_accessed()})
    return rows, variants["sparse"][:2]


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f}"


def main() -> None:
    args = _ARGS
    counts = [1] + ([args.devices] if args.devices > 1 else [])
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"jax {jax.__version__}, optimizer {args.optimizer}, batch {args.batch} (global), "
          f"width {args.width}, vocabs {args.vocabs}, devices {counts}, "
          f"{args.rounds} rounds", flush=True)
    t_start = time.perf_counter()
    results, sparse_pairs = [], {}
    for vocab in args.vocabs:
        for n in counts:
            t0 = time.perf_counter()
            rows, sparse_pairs[(vocab, n)] = measure(vocab, n, args)
            results += rows
            gc.collect()  # the dense variants' tables and optimizer state
            print(f"  vocab {vocab:>9,}, {n} device(s), {time.perf_counter() - t0:4.0f} s: "
                  + "; ".join(f"{r['layout']} {r['steps']} steps/round, max |graphc - hand| "
                              f"after step 1 {r['diff']:.1e}" for r in rows)
                  + f"; fetched sparse gradient {rows[0]['fetched']:,} B/device", flush=True)

    # The sweep measures each vocabulary at its own time, and the load of a shared machine
    # drifts in between; the sparse steps of every vocabulary are cheap enough to keep, so
    # they are timed once more in turns with each other: the vocabulary dependence is read
    # from these.
    across = {}
    for n in counts:
        steps = {}
        for vocab in args.vocabs:
            g, h = sparse_pairs[(vocab, n)]
            steps[("graphc", vocab)], steps[("hand", vocab)] = g.step, h.step
        per_round = {k: next(r["steps"] for r in results if r["vocab"] == k[1]
                             and r["n"] == n and r["layout"] == "sparse") for k in steps}
        times = interleaved(steps, per_round, args.rounds, settle=not args.no_settle,
                            sync_every=args.sync_every)
        across.update({(who, vocab, n): t for (who, vocab), t in times.items()})
    sparse_pairs.clear()

    print("\n## step time (median ms), table-gradient bytes per device (grad B) and received "
          "in the exchange (exch B), XLA's bytes accessed (MB = 1e6 B)")
    print(f"{'vocab':>9} {'dev':>3} {'layout':<6} {'graphc ms':>10} {'hand ms':>9} "
          f"{'ratio':>6} {'grad B':>12} {'exch B':>12} {'exchange':<16} "
          f"{'accessed MB graphc':>18} {'hand':>9}")
    for r in results:
        exch = f"{r['received']:,}" if r["n"] > 1 else "-"
        print(f"{r['vocab']:>9} {r['n']:>3} {r['layout']:<6} {r['graphc'] * 1e3:>10.3f} "
              f"{r['hand'] * 1e3:>9.3f} {r['graphc'] / r['hand']:>6.3f} {r['grad']:>12,} "
              f"{exch:>12} {r['exchange'] if r['n'] > 1 else '-':<16} "
              f"{_mb(r['bytes_g']):>18} {_mb(r['bytes_h']):>9}")

    lo, hi = min(args.vocabs), max(args.vocabs)
    print(f"\n## sparse steps of every vocabulary timed in turns (median ms; ratio: "
          f"t / t(vocab {lo:,}))")
    print(f"{'vocab':>9} {'dev':>3} {'graphc ms':>10} {'ratio':>6} {'hand ms':>9} {'ratio':>6}")
    for n in counts:
        for vocab in args.vocabs:
            tg, th = across[("graphc", vocab, n)], across[("hand", vocab, n)]
            print(f"{vocab:>9} {n:>3} {tg * 1e3:>10.3f} {tg / across[('graphc', lo, n)]:>6.2f} "
                  f"{th * 1e3:>9.3f} {th / across[('hand', lo, n)]:>6.2f}")

    print(f"\n## vocabulary dependence: t(vocab {hi:,}) / t(vocab {lo:,}), "
          f"{hi / lo:.0f}x the rows")
    by = {(r["vocab"], r["n"], r["layout"]): r for r in results}
    verdict = []
    for n in counts:
        a, b = by[(hi, n, "dense")], by[(lo, n, "dense")]
        sg = across[("graphc", hi, n)] / across[("graphc", lo, n)]
        sh = across[("hand", hi, n)] / across[("hand", lo, n)]
        verdict.append((n, sg))
        print(f"{n} device(s): sparse graphc {sg:6.2f}x (hand {sh:6.2f}x), in turns; "
              f"dense graphc {a['graphc'] / b['graphc']:7.2f}x "
              f"(hand {a['hand'] / b['hand']:7.2f}x), from the sweep")
    ok = all(ratio < 1.5 for _, ratio in verdict)
    print("sparse step time independent of vocabulary (graphc, t(largest)/t(smallest) < 1.5): "
          + ("YES" if ok else "NO") + " (" + ", ".join(
              f"{ratio:.2f}x on {n} device(s)" for n, ratio in verdict) + ")")
    if args.devices > 1:
        print(f"exchange on {args.devices} devices: sparse all-gathers {args.devices} x "
              f"{args.batch // args.devices} rows; dense all-reduces the whole table gradient "
              f"(a ring all-reduce sends and receives about 2(n-1)/n = "
              f"{2 * (args.devices - 1) / args.devices:.2f}x of it per device)")
    print(f"total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
