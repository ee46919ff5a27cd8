"""cudnn_lstm's rule: one lax.scan per layer and direction over the time-major input; the
gradient is the vjp of the same scans with the dropout masks the forward drew (Reserve)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


def _split_weights(w, input_size: int, hidden: int, layers: int, dirs: int):
    """[(W_x [4H, in], W_h [4H, H], b [4H])] per layer and direction, from the flat W."""
    out, off = [], 0
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * dirs
        for _ in range(dirs):
            parts = []
            for n, shape in ((4 * hidden * width, (4 * hidden, width)),
                             (4 * hidden * hidden, (4 * hidden, hidden)),
                             (4 * hidden, (4 * hidden,)), (4 * hidden, (4 * hidden,))):
                parts.append(w[off:off + n].reshape(shape))
                off += n
            wx, wh, bx, bh = parts
            out.append((wx, wh, bx + bh))
    return out


def _direction(x, h0, c0, wx, wh, b, reverse: bool):
    gates_x = jnp.einsum("tni,gi->tng", x, wx) + b  # the input half of every step at once

    def step(carry, gx):
        h, cell = carry
        g = gx + h @ wh.T
        i, f, cand, o = jnp.split(g, 4, axis=-1)
        cell = jax.nn.sigmoid(f) * cell + jax.nn.sigmoid(i) * jnp.tanh(cand)
        h = jax.nn.sigmoid(o) * jnp.tanh(cell)
        return (h, cell), h

    (h, cell), ys = jax.lax.scan(step, (h0, c0), gates_x, reverse=reverse)
    return ys, h, cell


def lstm_forward(x, h0, c0, w, masks, hidden: int, layers: int, dirs: int):
    """Out [T, N, H*dirs], last h and c [layers*dirs, N, H]; masks [layers-1, T, N, H*dirs]
    scale the input of every layer after the first (dropout)."""
    weights = _split_weights(w, x.shape[2], hidden, layers, dirs)
    hs, cs = [], []
    for layer in range(layers):
        if layer:
            x = x * masks[layer - 1]
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            ys, h, cell = _direction(x, h0[k], c0[k], *weights[k], reverse=d == 1)
            outs.append(ys)
            hs.append(h)
            cs.append(cell)
        x = jnp.concatenate(outs, axis=-1) if dirs > 1 else outs[0]
    return x, jnp.stack(hs), jnp.stack(cs)


def _shape(c, Input):
    return c["hidden_size"], c["num_layers"], 2 if c["is_bidirec"] else 1


@lowering("cudnn_lstm")
def _cudnn_lstm(c, Input, InitH, InitC, W):
    hidden, layers, dirs = _shape(c, Input)
    t, n = Input.shape[:2]
    shape = (layers - 1, t, n, hidden * dirs)
    p = c["dropout_prob"]
    if c["is_test"] or p == 0.0 or layers == 1:
        masks = jnp.ones(shape, Input.dtype)
    else:  # Paddle's cudnn dropout: upscale_in_train between layers
        keep = jax.random.uniform(c.replica_rng(max(c["seed"], 0)), shape, jnp.float32) >= p
        masks = keep.astype(Input.dtype) / jnp.asarray(1.0 - p, Input.dtype) if p < 1.0 \
            else jnp.zeros(shape, Input.dtype)
    out, h, cell = lstm_forward(Input, InitH, InitC, W, masks, hidden, layers, dirs)
    return {"Out": out, "LastH": h, "LastC": cell, "Reserve": masks}


@lowering("cudnn_lstm_grad")
def _cudnn_lstm_grad(c, Input, InitH, InitC, W, Reserve, **kw):
    hidden, layers, dirs = _shape(c, Input)

    def forward(x, h0, c0, w):
        return lstm_forward(x, h0, c0, w, Reserve, hidden, layers, dirs)

    outs, vjp = jax.vjp(forward, Input, InitH, InitC, W)
    cot = tuple(jnp.zeros_like(o) if kw.get(s + "@GRAD") is None
                else kw[s + "@GRAD"].astype(o.dtype).reshape(o.shape)
                for s, o in zip(("Out", "LastH", "LastC"), outs))
    grads = vjp(cot)
    return {s + "@GRAD": g for s, g in zip(("Input", "InitH", "InitC", "W"), grads)
            if s + "@GRAD" in c.out_types}
