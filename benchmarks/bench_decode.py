"""Decoding with Paddle 1.8's API (dynamic_decode: one compiled while loop) against the same decoder
hand-written as one ``lax.while_loop``, greedy and beam search, in one run.

Run ``python benchmarks/bench_decode.py [--steps 100] [--batch 32] [--beam 4] [--hidden 256]
[--vocab 1000] [--repeats 10] [--random-lengths 200]``; the numbers measured are in
benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import graphc
import graphc.fluid as fluid
from graphc import layers

START, END = 0, 1
PA = fluid.ParamAttr


def weights(hidden: int, vocab: int) -> dict:
    rng = np.random.default_rng(0)
    shapes = {"init_w": (hidden, hidden), "z_w": (2 * hidden, hidden), "z_b": (hidden,),
              "c_w": (2 * hidden, hidden), "c_b": (hidden,), "emb": (vocab, hidden),
              "out_w": (hidden, vocab), "out_b": (vocab,)}
    w = {k: (rng.standard_normal(s) / np.sqrt(s[0])).astype("float32")
         for k, s in shapes.items()}
    w["out_b"][END] = -1e4  # never ends: every decode runs all its steps
    return w


# -- graphc: Paddle 1.8's decoding API --------------------------------------------------
class Cell:
    def __init__(self, hidden):
        self.hidden = hidden

    def __call__(self, inputs, states, **kwargs):
        xh = layers.concat([inputs, states], axis=1)
        z = layers.fc(xh, self.hidden, act="sigmoid", param_attr=PA(name="z_w"),
                      bias_attr=PA(name="z_b"))
        c = layers.fc(xh, self.hidden, act="tanh", param_attr=PA(name="c_w"),
                      bias_attr=PA(name="c_b"))
        h = z * states + (1.0 - z) * c
        return h, h


def build_graphc(kind: str, a, end_bias: float | None = None):
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [a.batch, a.hidden], "float32")
        h0 = layers.fc(enc, a.hidden, act="tanh", param_attr=PA(name="init_w"),
                       bias_attr=False)

        def embed(ids):
            return fluid.embedding(ids, size=[a.vocab, a.hidden], param_attr=PA(name="emb"))

        def logits(h):
            return layers.fc(h, a.vocab, num_flatten_dims=len(h.shape) - 1,
                             param_attr=PA(name="out_w"), bias_attr=PA(name="out_b"))

        if kind == "beam":
            dec = layers.BeamSearchDecoder(Cell(a.hidden), START, END, a.beam,
                                           embedding_fn=embed, output_fn=logits)
            ids, _ = layers.dynamic_decode(dec, inits=h0, max_step_num=a.steps - 1)
        else:
            start = layers.fill_constant([a.batch], "int64", START)
            helper = layers.GreedyEmbeddingHelper(embed, start, END)
            dec = layers.BasicDecoder(Cell(a.hidden), helper, output_fn=logits)
            outs, _ = layers.dynamic_decode(dec, inits=h0, max_step_num=a.steps - 1)
            ids = outs.sample_ids
    exe = graphc.Executor()
    exe.run(startup)
    scope = graphc.global_scope()
    for k, v in weights(a.hidden, a.vocab).items():
        if k == "out_b" and end_bias is not None:  # decodes that end after random lengths
            v = v.copy()
            v[END] = end_bias
        scope.find_var(k).get_tensor().set(v, graphc.CPUPlace())

    def run(enc_v):
        out = exe.run(main, feed={"enc": enc_v}, fetch_list=[ids], return_numpy=False)
        jax.block_until_ready(out)
        return np.asarray(out[0])
    run.compiles = lambda: sum(step.traces for prep in
                               exe._prepared[main][1].values() for step in prep.steps.values())
    return run


def random_lengths(a, batches: int) -> None:
    """Greedy decodes of ``batches`` random batches that end (END chosen) after random numbers
    of steps: the loop's trip count varies, the compiled program does not (one compile)."""
    run = build_graphc("greedy", a, end_bias=1.0)
    rng = np.random.default_rng(7)
    lengths = []
    for _ in range(batches):
        ids = run(rng.standard_normal((a.batch, a.hidden)).astype("float32") * 3)
        ended = ids == END
        first = np.where(ended.any(1), ended.argmax(1), ids.shape[1])
        lengths.append(int(first.max()))
    print(f"random lengths: {batches} batches, loop trip counts {min(lengths)}..{max(lengths)} "
          f"({len(set(lengths))} distinct), compiled steps: {run.compiles()}")


# -- the same decoders hand-written as one lax.while_loop -------------------------------
def _cell(w, x, h):
    xh = jnp.concatenate([x, h], axis=1)
    z = jax.nn.sigmoid(xh @ w["z_w"] + w["z_b"])
    c = jnp.tanh(xh @ w["c_w"] + w["c_b"])
    return z * h + (1.0 - z) * c


def hand_greedy(w, enc, steps):
    batch = enc.shape[0]
    h = jnp.tanh(enc @ w["init_w"])

    def body(s):
        t, h, tok, fin, ids = s
        h = _cell(w, w["emb"][tok], h)
        tok = jnp.argmax(h @ w["out_w"] + w["out_b"], axis=1)
        ids = lax.dynamic_update_index_in_dim(ids, tok, t, 0)
        return t + 1, h, tok, fin | (tok == END), ids

    def cond(s):
        return (s[0] < steps) & ~jnp.all(s[3])

    init = (0, h, jnp.full((batch,), START), jnp.zeros((batch,), bool),
            jnp.full((steps, batch), END))
    return lax.while_loop(cond, body, init)[4].T


def hand_beam(w, enc, steps, beam):
    batch, vocab = enc.shape[0], w["out_b"].shape[0]
    h = jnp.repeat(jnp.tanh(enc @ w["init_w"])[:, None], beam, axis=1)
    noend = jnp.full((vocab,), -1e9).at[END].set(0.0)
    rows = jnp.arange(batch)[:, None]

    def body(s):
        t, h, tok, logp, fin, ids, parents = s
        x = w["emb"][tok].reshape(batch * beam, -1)
        h_new = _cell(w, x, h.reshape(batch * beam, -1)).reshape(batch, beam, -1)
        step = jax.nn.log_softmax(h_new @ w["out_w"] + w["out_b"])
        step = jnp.where(fin[..., None], noend, step)
        scores, top = lax.top_k((step + logp[..., None]).reshape(batch, beam * vocab), beam)
        parent, tok = top // vocab, top % vocab
        fin = fin[rows, parent] | (tok == END)
        ids = lax.dynamic_update_index_in_dim(ids, tok, t, 0)
        parents = lax.dynamic_update_index_in_dim(parents, parent, t, 0)
        return t + 1, h_new[rows, parent], tok, scores, fin, ids, parents

    def cond(s):
        return (s[0] < steps) & ~jnp.all(s[4])

    logp = jnp.tile(jnp.array([0.0] + [-1e9] * (beam - 1)), (batch, 1))
    init = (0, h, jnp.full((batch, beam), START), logp, jnp.zeros((batch, beam), bool),
            jnp.full((steps, batch, beam), END), jnp.tile(jnp.arange(beam), (steps, batch, 1)))
    _, _, _, _, _, ids, parents = lax.while_loop(cond, body, init)

    def back(parent, xs):  # gather_tree: backtrace from the last step
        ids_t, parents_t = xs
        return jnp.take_along_axis(parents_t, parent, 1), jnp.take_along_axis(ids_t, parent, 1)

    last = jnp.tile(jnp.arange(beam), (batch, 1))
    _, path = lax.scan(back, last, (ids, parents), reverse=True)
    return path.transpose(1, 0, 2)


def build_hand(kind: str, a):
    # the weights are arguments, as graphc's parameters are (not constants folded in)
    w = {k: jnp.asarray(v) for k, v in weights(a.hidden, a.vocab).items()}
    fn = jax.jit(lambda w, enc: hand_beam(w, enc, a.steps, a.beam) if kind == "beam"
                 else hand_greedy(w, enc, a.steps))

    def run(enc_v):
        return np.asarray(jax.block_until_ready(fn(w, jnp.asarray(enc_v))))
    return run


def median_ms(runs, enc_v, repeats: int) -> list[float]:
    """The median time of each of ``runs``, measured in turns (run 1, run 2, run 1, ...) so
    that a busy machine slows both alike."""
    for run in runs:
        run(enc_v)  # compile
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, ts in zip(runs, times):
            t0 = time.perf_counter()
            run(enc_v)
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) * 1e3 for ts in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--random-lengths", type=int, default=0, metavar="N",
                    help="also decode N random batches of random lengths; count compiles")
    a = ap.parse_args()
    enc_v = np.random.default_rng(1).standard_normal((a.batch, a.hidden)).astype("float32")
    print(f"# {platform.processor() or platform.machine()}, {jax.devices()[0].platform}, jax "
          f"{jax.__version__}; {a.steps} steps, batch {a.batch}, beam {a.beam}, hidden "
          f"{a.hidden}, vocab {a.vocab}; median of {a.repeats} decodes")
    print("| decoder | graphc dynamic_decode (ms) | hand-written lax.while_loop (ms) | ratio |")
    print("|---|---:|---:|---:|")
    for kind in ("greedy", "beam"):
        ours, hand = build_graphc(kind, a), build_hand(kind, a)
        same = np.array_equal(ours(enc_v), hand(enc_v))
        t_ours, t_hand = median_ms([ours, hand], enc_v, a.repeats)
        print(f"| {kind}{'' if same else ' (ids differ!)'} | {t_ours:.1f} | {t_hand:.1f} | "
              f"{t_ours / t_hand:.2f}x |")
    if a.random_lengths:
        random_lengths(a, a.random_lengths)


if __name__ == "__main__":
    main()
