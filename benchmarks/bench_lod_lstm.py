"""dynamic_lstm on LoD batches: graphc's training step against a hand-written ``lax.scan``
LSTM over the same batch padded to ``[max_len, batch, 4H]``, and the compile count over a
stream of random batches.

Run ``python benchmarks/bench_lod_lstm.py [--hidden 128] [--batch 32] [--min-len 5]
[--max-len 100] [--rounds 7] [--steps 5] [--stream 200]``. The model: LoD input [T, 4H]
-> dynamic_lstm (peepholes, Paddle's gate order) -> mean of the squared hidden states; SGD on the
weight and bias. The hand-written step is the same math (same parameters: the script first
checks equal losses) as one jitted ``value_and_grad`` over a masked ``lax.scan`` of
``max_len`` steps (one compile, as one would write it). Both pay their own host work per
step (graphc packs the LoDTensor into its bucket; the hand-written one pads with numpy),
and both fetch the loss. Timed in turns, medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.runtime import lod as rlod


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--min-len", type=int, default=5)
    p.add_argument("--max-len", type=int, default=100)
    p.add_argument("--batches", type=int, default=4, help="distinct timed batches, cycled")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=5, help="steps per timed round")
    p.add_argument("--stream", type=int, default=200, help="random batches for compile count")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--no-check-data", action="store_true",
                   help="Executor(check_data=False): no per-step data checks (docs/errors.md)")
    return p.parse_args()


def batch(a, rng):
    lens = rng.integers(a.min_len, a.max_len + 1, a.batch).tolist()
    x = rng.standard_normal((sum(lens), 4 * a.hidden)).astype("float32")
    return fluid.create_lod_tensor(x, [lens], fluid.CPUPlace())


def graphc_model(a):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 4 * a.hidden], "float32", lod_level=1)
        h, _ = layers.dynamic_lstm(x, 4 * a.hidden)
        loss = layers.mean(layers.square(h))
        graphc.optimizer.SGD(a.lr).minimize(loss)
    return main, startup, loss


def hand_written(a):
    hid = a.hidden

    def loss_fn(params, xs, mask):
        w, b = params
        gates_b, (w_ic, w_fc, w_oc) = b[0, :4 * hid], jnp.split(b[0, 4 * hid:], 3)

        def step(carry, inp):
            h, c = carry
            x_t, m = inp
            g_c, g_i, g_f, g_o = jnp.split(x_t + h @ w + gates_b, 4, axis=-1)
            new_c = jax.nn.sigmoid(g_f + w_fc * c) * c + \
                jax.nn.sigmoid(g_i + w_ic * c) * jnp.tanh(g_c)
            new_h = jax.nn.sigmoid(g_o + w_oc * new_c) * jnp.tanh(new_c)
            m = m[:, None]
            h, c = jnp.where(m, new_h, h), jnp.where(m, new_c, c)
            return (h, c), jnp.where(m, new_h, 0)

        zeros = jnp.zeros((xs.shape[1], hid), xs.dtype)
        _, hs = jax.lax.scan(step, (zeros, zeros), (xs, mask))
        return jnp.sum(hs * hs) / (jnp.sum(mask) * hid)

    @jax.jit
    def train(params, xs, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, xs, mask)
        return loss, jax.tree.map(lambda p, g: p - a.lr * g, params, grads)

    def run(params, t):
        lens = t.recursive_sequence_lengths()[0]
        data = np.array(t)
        xs = np.zeros((a.max_len, len(lens), 4 * hid), np.float32)
        mask = np.zeros((a.max_len, len(lens)), bool)
        start = 0
        for i, n in enumerate(lens):
            xs[:n, i] = data[start:start + n]
            mask[:n, i] = True
            start += n
        loss, params = train(params, xs, mask)
        return float(loss), params

    return run


def main():
    a = _parse()
    rng = np.random.default_rng(0)
    prog, startup, loss = graphc_model(a)
    scope, exe = graphc.Scope(), graphc.Executor(check_data=not a.no_check_data)
    exe.run(startup, scope=scope)
    params = (jnp.asarray(np.asarray(scope["lstm_0.w_0"])),
              jnp.asarray(np.asarray(scope["lstm_0.b_0"])))
    run_hand = hand_written(a)
    batches = [batch(a, rng) for _ in range(a.batches)]

    def graphc_step(t):
        (value,) = exe.run(prog, feed={"x": t}, fetch_list=[loss], scope=scope)
        return float(np.asarray(value).reshape(-1)[0])

    # same parameters, same batches: the losses agree step by step
    for t in batches[:2]:
        lg = graphc_step(t)
        lh, params = run_hand(params, t)
        assert math.isclose(lg, lh, rel_tol=2e-4, abs_tol=1e-6), (lg, lh)
    print(f"losses agree ({lg:.6f} vs {lh:.6f})")

    def timed(fn):
        t0 = time.perf_counter()
        for i in range(a.steps):
            fn(batches[i % len(batches)])
        return (time.perf_counter() - t0) / a.steps

    state = {"params": params}

    def hand(t):
        _, state["params"] = run_hand(state["params"], t)

    g_times, h_times = [], []
    for _ in range(a.rounds):
        g_times.append(timed(graphc_step))
        h_times.append(timed(hand))
    g, h = statistics.median(g_times), statistics.median(h_times)
    print(f"train step: graphc {g * 1e3:.1f} ms, hand-written lax.scan {h * 1e3:.1f} ms "
          f"({g / h:.2f}x)  [hidden {a.hidden}, batch {a.batch}, lengths "
          f"{a.min_len}-{a.max_len}, {jax.devices()[0].platform}]")

    # compile count over a stream of random batches
    sizes = [t.shape()[0] for t in batches]
    most, least = max(sizes), min(sizes)
    for _ in range(a.stream):
        t = batch(a, rng)
        most, least = max(most, t.shape()[0]), min(least, t.shape()[0])
        graphc_step(t)
    (prep,) = exe._prepared[prog][1].values()
    buckets = {rlod.bucket(n) for n in (least, most)}
    buckets = {b for b in (1 << k for k in range(31)) if min(buckets) <= b <= max(buckets)}
    print(f"compiled steps over {a.stream + a.batches} random batches: {len(prep.steps)} "
          f"(token counts {least}-{most}: {len(buckets)} buckets "
          f"{sorted(buckets)})")
    assert len(prep.steps) <= len(buckets)


if __name__ == "__main__":
    main()
