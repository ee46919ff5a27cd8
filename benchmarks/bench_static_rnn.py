"""A StaticRNN language model's training step (forward, backward, SGD) against the same model
written by hand as one jitted ``value_and_grad`` over a ``lax.scan``.

Run ``python benchmarks/bench_static_rnn.py [--hidden 200] [--steps 20] [--batch 20]
[--vocab 1000] [--rounds 7] [--iters 20]``. The model (Paddle's StaticRNN LM): ids
``[steps, batch, 1]`` -> embedding -> StaticRNN whose step is ``h = tanh(fc([word, h_prev]))``
-> fc to the vocabulary -> softmax_with_cross_entropy -> mean; SGD on every parameter. The
hand-written step is the same math on the same parameters (the script first checks that the
losses agree for two steps), jitted once with its parameters donated, as one would write it.
Both take the batch from host numpy arrays and fetch the loss every step; timed in turns,
medians of ``--rounds``. Prints the ratio graphc / hand-written (target <= 1.1).
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
from graphc import layers


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--steps", type=int, default=20, help="time steps of a batch")
    p.add_argument("--batch", type=int, default=20)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=20, help="training steps per timed round")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--no-check-data", action="store_true",
                   help="Executor(check_data=False): no per-step data checks (docs/errors.md)")
    return p.parse_args()


def graphc_model(a):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        ids = graphc.data("ids", [a.steps, a.batch, 1], "int64")
        label = graphc.data("label", [a.steps, a.batch, 1], "int64")
        emb = layers.embedding(ids, [a.vocab, a.hidden])
        rnn = layers.StaticRNN()
        with rnn.step():
            word = rnn.step_input(emb)
            prev = rnn.memory(shape=[-1, a.hidden], batch_ref=word)
            h = layers.fc([word, prev], a.hidden, act="tanh")
            rnn.update_memory(prev, h)
            rnn.step_output(h)
        logits = layers.fc(rnn(), a.vocab, num_flatten_dims=2)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        graphc.optimizer.SGD(a.lr).minimize(loss)
    return main, startup, loss


NAMES = ("embedding_0.w_0", "fc_0.w_0", "fc_0.w_1", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")


def hand_written(a):
    def loss_fn(params, ids, label):
        emb, w_x, w_h, b, w_out, b_out = params
        xs = emb[ids[..., 0]]  # [steps, batch, hidden]

        def step(h, x_t):
            h = jnp.tanh(x_t @ w_x + h @ w_h + b)
            return h, h

        _, hs = jax.lax.scan(step, jnp.zeros((ids.shape[1], a.hidden), xs.dtype), xs)
        logits = hs @ w_out + b_out
        picked = jnp.take_along_axis(logits, label, axis=-1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

    @jax.jit
    def train(params, ids, label):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, label)
        return loss, tuple(p - a.lr * g for p, g in zip(params, grads))

    return jax.jit(train.__wrapped__, donate_argnums=(0,))


def main():
    a = _parse()
    rng = np.random.default_rng(0)
    prog, startup, loss = graphc_model(a)
    scope, exe = graphc.Scope(), graphc.Executor(check_data=not a.no_check_data)
    exe.run(startup, scope=scope)
    params = tuple(jnp.asarray(np.asarray(scope[n])) for n in NAMES)
    train = hand_written(a)

    def batch():
        seq = rng.integers(0, a.vocab, (a.steps + 1, a.batch, 1)).astype(np.int64)
        return seq[:-1], seq[1:]

    batches = [batch() for _ in range(4)]

    def graphc_step(b):
        (value,) = exe.run(prog, feed={"ids": b[0], "label": b[1]}, fetch_list=[loss],
                           scope=scope)
        return float(np.asarray(value).reshape(-1)[0])

    state = {"params": params}

    def hand_step(b):
        value, state["params"] = train(state["params"], b[0], b[1])
        return float(value)

    # same parameters, same batches: the losses agree step by step
    for b in batches[:2]:
        lg, lh = graphc_step(b), hand_step(b)
        assert math.isclose(lg, lh, rel_tol=1e-4, abs_tol=1e-6), (lg, lh)
    print(f"losses agree ({lg:.6f} vs {lh:.6f})")

    def timed(fn):
        t0 = time.perf_counter()
        for i in range(a.iters):
            fn(batches[i % len(batches)])
        return (time.perf_counter() - t0) / a.iters

    g_times, h_times = [], []
    for _ in range(a.rounds):
        g_times.append(timed(graphc_step))
        h_times.append(timed(hand_step))
    g, h = statistics.median(g_times), statistics.median(h_times)
    print(f"train step: graphc StaticRNN {g * 1e3:.2f} ms, hand-written lax.scan "
          f"{h * 1e3:.2f} ms ({g / h:.2f}x, target <= 1.1)  [hidden {a.hidden}, steps "
          f"{a.steps}, batch {a.batch}, vocab {a.vocab}, {jax.devices()[0].device_kind}]")


if __name__ == "__main__":
    main()
