"""A BERT-style encoder's training step (Adam + linear warmup, dropout) in graphc and by hand in
JAX: the compiled programs' sizes and the steady step time, in one run (issue 28).

Run ``python benchmarks/bench_encoder.py [--hidden 256 --layers 4 --seq 128 --batch 16]
[--dropout 0.1] [--hlo-only] [--steps 20 --rounds 4]``. ``--hlo-only`` prints, for both
compiled steps, the HLO instruction, fusion, s64-shape and while-loop counts and stops; the
step times are interleaved rounds, medians of wall clock and of process CPU time.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import graphc
from graphc import layers, optimizer
from graphc.ir.default_programs import program_guard

WARMUP_STEPS, PEAK_LR = 1000, 1e-4  # linear_lr_warmup(PEAK_LR, WARMUP_STEPS, 0, PEAK_LR)
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
LN_EPS = 1e-5


@dataclass
class Config:
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    seq: int = 128
    batch: int = 16
    vocab: int = 1000
    dropout: float = 0.1

    @property
    def n_dropouts(self) -> int:  # the embeddings' + 4 per layer, as ERNIE's encoder
        return 1 + 4 * self.layers


# -- graphc -------------------------------------------------------------------------------

def _attr(name):
    return graphc.ParamAttr(name=name)


def _dropout(x, cfg):
    if not cfg.dropout:
        return x
    return layers.dropout(x, cfg.dropout, dropout_implementation="upscale_in_train")


def _fc(x, size, name, act=None):
    return layers.fc(x, size, num_flatten_dims=2, param_attr=_attr(name + ".w"),
                     bias_attr=_attr(name + ".b"), act=act)


def _ln(x, name):
    return layers.layer_norm(x, begin_norm_axis=2, epsilon=LN_EPS,
                             param_attr=_attr(name + ".scale"), bias_attr=_attr(name + ".bias"))


def build_graphc(cfg: Config):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 7
    B, S, H, nh = cfg.batch, cfg.seq, cfg.hidden, cfg.heads
    dh = H // nh
    with program_guard(main, startup):
        ids = layers.data("src_ids", [B, S, 1], append_batch_size=False, dtype="int64")
        pos = layers.data("pos_ids", [B, S, 1], append_batch_size=False, dtype="int64")
        label = layers.data("label", [B, S, 1], append_batch_size=False, dtype="int64")
        x = layers.embedding(ids, [cfg.vocab, H], param_attr=_attr("word_emb"))
        x = x + layers.embedding(pos, [S, H], param_attr=_attr("pos_emb"))
        x = _dropout(_ln(x, "emb_ln"), cfg)
        for i in range(cfg.layers):
            p = f"l{i}"

            def heads(t):
                return layers.transpose(layers.reshape(t, [B, S, nh, dh]), [0, 2, 1, 3])

            q, k, v = (heads(_fc(x, H, f"{p}.{n}")) for n in "qkv")
            probs = _dropout(layers.softmax(layers.matmul(q, k, transpose_y=True,
                                                          alpha=dh ** -0.5)), cfg)
            ctx = layers.reshape(layers.transpose(layers.matmul(probs, v), [0, 2, 1, 3]),
                                 [B, S, H])
            x = _ln(x + _dropout(_fc(ctx, H, f"{p}.o"), cfg), f"{p}.ln1")
            ffn = _dropout(layers.gelu(_fc(x, 4 * H, f"{p}.ffn1")), cfg)
            x = _ln(x + _dropout(_fc(ffn, H, f"{p}.ffn2"), cfg), f"{p}.ln2")
        logits = _fc(x, cfg.vocab, "out")
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        lr = layers.linear_lr_warmup(PEAK_LR, WARMUP_STEPS, 0.0, PEAK_LR)
        optimizer.Adam(lr, BETA1, BETA2, EPS).minimize(loss)
    return main, startup, loss


class GraphcRunner:
    """``strategy``: BuildStrategy settings ({"roll_repeated_layers": False}); the program
    then runs as a CompiledProgram with them."""

    def __init__(self, cfg: Config, place=None, strategy: dict | None = None):
        self.main, startup, self.loss = build_graphc(cfg)
        self.program = self.main if not strategy else graphc.CompiledProgram(
            self.main, build_strategy=graphc.BuildStrategy(**strategy))
        self.scope, self.exe = graphc.Scope(), graphc.Executor(place)
        self.exe.run(startup, scope=self.scope)
        self.init = {n: np.array(a) for n, a in self.scope._vars.items()}
        self.params = [p.name for p in self.main.all_parameters()]

    def __call__(self, feed) -> float:
        (loss,) = self.exe.run(self.program, feed=feed, fetch_list=[self.loss],
                               scope=self.scope)
        return float(np.asarray(loss).reshape(()))

    def compiled_text(self, feed) -> str:
        step = self.exe.compile(self.program, feed=feed, fetch_list=[self.loss])
        return step.compiled_text({k: v.shape for k, v in feed.items()})


# -- by hand ------------------------------------------------------------------------------

def _layer_norm(x, scale, bias):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), -1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * scale + bias


def hand_forward(cfg: Config, p, ids, pos, label, key):
    B, S, H, nh = cfg.batch, cfg.seq, cfg.hidden, cfg.heads
    dh = H // nh
    keys = iter(jax.random.split(key, cfg.n_dropouts))

    def drop(t):
        if not cfg.dropout:
            return t
        keep = jax.random.bernoulli(next(keys), 1.0 - cfg.dropout, t.shape)
        return jnp.where(keep, t / (1.0 - cfg.dropout), 0.0)

    def fc(t, name):
        return t @ p[name + ".w"] + p[name + ".b"]

    def ln(t, name):
        return _layer_norm(t, p[name + ".scale"], p[name + ".bias"])

    x = p["word_emb"][ids[..., 0]] + p["pos_emb"][pos[..., 0]]
    x = drop(ln(x, "emb_ln"))
    for i in range(cfg.layers):
        pre = f"l{i}"

        def heads(t):
            return t.reshape(B, S, nh, dh).transpose(0, 2, 1, 3)

        q, k, v = (heads(fc(x, f"{pre}.{n}")) for n in "qkv")
        probs = drop(jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) * dh ** -0.5, -1))
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(B, S, H)
        x = ln(x + drop(fc(ctx, f"{pre}.o")), f"{pre}.ln1")
        ffn = drop(jax.nn.gelu(fc(x, f"{pre}.ffn1"), approximate=False))
        x = ln(x + drop(fc(ffn, f"{pre}.ffn2")), f"{pre}.ln2")
    logp = jax.nn.log_softmax(fc(x, "out"), -1)
    return -jnp.mean(jnp.take_along_axis(logp, label, -1))


def hand_step(cfg: Config):
    @jax.jit
    def step(params, m1, m2, t, ids, pos, label, key):
        loss, grads = jax.value_and_grad(
            lambda ps: hand_forward(cfg, ps, ids, pos, label, jax.random.fold_in(key, t)))(
            params)
        tf = t.astype(jnp.float32)  # the warmup schedule, once per step, in float32
        lr = jnp.where(tf < WARMUP_STEPS, PEAK_LR * tf / WARMUP_STEPS, PEAK_LR)
        t1 = tf + 1
        b1p, b2p = BETA1 ** t1, BETA2 ** t1
        lr_t = lr * jnp.sqrt(1 - b2p) / (1 - b1p)
        eps = EPS * jnp.sqrt(1 - b2p)
        m1 = jax.tree.map(lambda m, g: BETA1 * m + (1 - BETA1) * g, m1, grads)
        m2 = jax.tree.map(lambda m, g: BETA2 * m + (1 - BETA2) * g * g, m2, grads)
        params = jax.tree.map(lambda w, a, b: w - lr_t * (a / (jnp.sqrt(b) + eps)),
                              params, m1, m2)
        return params, m1, m2, t + 1, loss
    return step


class HandRunner:
    def __init__(self, cfg: Config, ours: GraphcRunner):
        self.params = {n: jnp.asarray(ours.init[n]) for n in ours.params}
        self.m1 = jax.tree.map(jnp.zeros_like, self.params)
        self.m2 = jax.tree.map(jnp.zeros_like, self.params)
        self.t, self.key = jnp.int32(0), jax.random.key(7)
        self.step = hand_step(cfg)

    def args(self, feed):
        return (self.params, self.m1, self.m2, self.t, feed["src_ids"].astype(np.int32),
                feed["pos_ids"].astype(np.int32), feed["label"].astype(np.int32), self.key)

    def __call__(self, feed) -> float:
        self.params, self.m1, self.m2, self.t, loss = self.step(*self.args(feed))
        return float(loss)

    def compiled_text(self, feed) -> str:
        return self.step.lower(*self.args(feed)).compile().as_text()


# -- measuring ----------------------------------------------------------------------------

def hlo_counts(text: str) -> dict[str, int]:
    """Instructions (every ``name = shape op(...)`` line, fused computations' too), fusions,
    instructions with an s64 in their shape, and while loops of an optimised HLO module."""
    lines = [ln for ln in text.splitlines() if re.match(r"\s*(ROOT )?%?[\w.\-]+ = ", ln)]
    shape = re.compile(r"= (\([^=]*?\)|\S+) ")
    return {"instructions": len(lines),
            "fusions": sum(bool(re.search(r" fusion\(", ln)) for ln in lines),
            "s64 shapes": sum("s64" in (m.group(1) if (m := shape.search(ln)) else "")
                              for ln in lines),
            "while loops": sum(bool(re.search(r" while\(", ln)) for ln in lines)}


def make_batches(cfg: Config, count: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    pos = np.broadcast_to(np.arange(cfg.seq).reshape(1, -1, 1), (cfg.batch, cfg.seq, 1))
    return [{"src_ids": rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq, 1), dtype=np.int64),
             "pos_ids": np.ascontiguousarray(pos, dtype=np.int64),
             "label": rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq, 1), dtype=np.int64)}
            for _ in range(count)]


def timed(run, feed) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    run(feed)
    return time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in vars(Config()).items():
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--hlo-only", action="store_true")
    ap.add_argument("--dump", metavar="DIR", help="write both compiled steps' HLO text there")
    ap.add_argument("--steps", type=int, default=20, help="timed steps of each")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    cfg = Config(**{k: getattr(args, k) for k in vars(Config())})
    print(f"{cfg}, jax {jax.__version__}, {jax.devices()[0].platform}", flush=True)
    batches = make_batches(cfg)
    ours = GraphcRunner(cfg)
    theirs = HandRunner(cfg, ours)
    texts = {"graphc": ours.compiled_text(batches[0]),
             "hand-written": theirs.compiled_text(batches[0])}
    if args.dump:
        for who, text in texts.items():
            with open(f"{args.dump}/{who}.hlo", "w") as f:
                f.write(text)
    counts = {who: hlo_counts(text) for who, text in texts.items()}
    print(f"{'compiled step':<14}" + "".join(f"{k:>14}" for k in counts["graphc"]))
    for who, c in counts.items():
        print(f"{who:<14}" + "".join(f"{v:>14}" for v in c.values()))
    ratio = counts["graphc"]["instructions"] / counts["hand-written"]["instructions"]
    print(f"instructions graphc / hand-written: {ratio:.3f}", flush=True)
    if args.hlo_only:
        return 0
    a = [ours(b) for b in batches]
    b = [theirs(b) for b in batches]
    print(f"first losses: graphc {np.round(a, 4).tolist()} hand {np.round(b, 4).tolist()}")
    if not cfg.dropout and not np.allclose(a, b, rtol=1e-3, atol=1e-3):
        raise AssertionError(f"graphc and the hand-written step disagree: {a} vs {b}")
    per = math.ceil(args.steps / args.rounds)
    t_ours, t_hand = [], []
    for _ in range(args.rounds):  # interleaved, so the machine's drift hits both alike
        t_ours += [timed(ours, batches[i % 3]) for i in range(per)]
        t_hand += [timed(theirs, batches[i % 3]) for i in range(per)]
    for clock, i in (("wall", 0), ("process CPU", 1)):
        g = statistics.median(t[i] for t in t_ours)
        h = statistics.median(t[i] for t in t_hand)
        print(f"steady step ({clock}): graphc {g * 1e3:.1f} ms, hand-written {h * 1e3:.1f} ms,"
              f" ratio {g / h:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
