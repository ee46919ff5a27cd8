"""Lowering rules for the ops in defs.py beside this file (Paddle 1.8's kernels' formulas).

Their gradients are JAX's derivatives of these rules (the generic grad), checked by finite
differences in tests/test_gradients.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from .defs import code_length


def _default_paths(label, num_classes, width):
    """Paddle's default tree: node c + num_classes's ancestors (index, bit, on-path mask)."""
    code = label.reshape(-1, 1).astype(jnp.int64) + num_classes
    j = jnp.arange(width, dtype=jnp.int64)
    index = (code >> (j + 1)) - 1
    bit = (code >> j) & 1
    # a path has bit_length(code) - 1 nodes
    length = jnp.floor(jnp.log2(code.astype(jnp.float64))).astype(jnp.int64)
    return index, bit, j < length


@lowering("hierarchical_sigmoid")
def _hsigmoid(c, X, W, Label, PathTable, PathCode, Bias):
    if PathTable is not None:
        table = PathTable.astype(jnp.int64)
        # a custom path ends at its first negative node
        on = jnp.cumprod(table >= 0, axis=1).astype(bool)
        index, bit = jnp.where(on, table, 0), PathCode.astype(jnp.int64)
    else:
        index, bit, on = _default_paths(Label, c["num_classes"], code_length(c["num_classes"]))
    pre = jnp.einsum("nd,nld->nl", X, W[index])
    if Bias is not None:
        pre = pre + Bias.reshape(-1)[index]
    pre = jnp.where(on, jnp.clip(pre, -40.0, 40.0), 0)
    bits = jnp.where(on, bit, 0).astype(X.dtype)
    soft = jnp.log1p(jnp.exp(pre))  # off-path zeros give log 2, which Paddle's Out keeps
    out = jnp.sum(soft, axis=1, keepdims=True) - jnp.sum(bits * pre, axis=1, keepdims=True)
    return {"Out": out, "PreOut": soft}


@lowering("row_conv")
def _row_conv(c, X, Filter):
    x = X if X.ndim == 3 else X[None]
    steps = x.shape[1]
    out = jnp.zeros_like(x)
    for k in range(Filter.shape[0]):  # future context: a handful of taps
        if k >= steps:
            break
        shifted = jnp.pad(x[:, k:], ((0, 0), (0, k), (0, 0)))
        out = out + shifted * Filter[k]
    return {"Out": out if X.ndim == 3 else out[0]}


@lowering("fsp_matrix")
def _fsp(c, X, Y):
    n, c1, h, w = X.shape
    x = X.reshape(n, c1, h * w)
    y = Y.reshape(n, Y.shape[1], h * w)
    return {"Out": jnp.einsum("nah,nbh->nab", x, y) / (h * w)}


@lowering("add_position_encoding")
def _position(c, X):
    _, steps, dim = X.shape
    half = dim // 2
    pos = jnp.arange(steps, dtype=X.dtype)[:, None]
    k = jnp.arange(half, dtype=X.dtype)[None, :]
    denom = jnp.power(jnp.asarray(10000.0, X.dtype), k / max(half - 1, 1))
    val = pos / denom
    enc = jnp.concatenate([jnp.sin(val), jnp.cos(val)], axis=1)
    return {"Out": c["alpha"] * X + c["beta"] * enc[None]}


@lowering("affine_grid")
def _affine_grid(c, Theta):
    _, _, h, w = c["output_shape"]
    xs = jnp.linspace(-1.0, 1.0, w, dtype=Theta.dtype)
    ys = jnp.linspace(-1.0, 1.0, h, dtype=Theta.dtype)
    gx, gy = jnp.meshgrid(xs, ys)  # [H, W]
    base = jnp.stack([gx, gy, jnp.ones_like(gx)], axis=-1)  # [H, W, 3]
    return {"Output": jnp.einsum("hwk,njk->nhwj", base, Theta)}


@lowering("grid_sampler")
def _grid_sampler(c, X, Grid):
    n, ch, h, w = X.shape
    gx = (Grid[..., 0] + 1) * (w - 1) / 2  # [N, H', W'] in pixels, corners aligned
    gy = (Grid[..., 1] + 1) * (h - 1) / 2
    x0, y0 = jnp.floor(gx), jnp.floor(gy)
    flat = X.reshape(n, ch, h * w)

    def tap(xi, yi, weight):
        inside = (xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1)
        idx = (jnp.clip(yi, 0, h - 1) * w + jnp.clip(xi, 0, w - 1)).astype(jnp.int32)
        vals = jax.vmap(lambda f, i: f[:, i])(flat, idx.reshape(n, -1))
        vals = vals.reshape(n, ch, *idx.shape[1:])
        return vals * jnp.where(inside, weight, 0)[:, None]

    wx1, wy1 = gx - x0, gy - y0
    wx0, wy0 = 1 - wx1, 1 - wy1
    out = (tap(x0, y0, wx0 * wy0) + tap(x0 + 1, y0, wx1 * wy0)
           + tap(x0, y0 + 1, wx0 * wy1) + tap(x0 + 1, y0 + 1, wx1 * wy1))
    return {"Output": out}


def _nce_prob(c, labels, dist):
    """The sampler's probability q of each label (Paddle's three samplers)."""
    n = c["num_total_classes"]
    if c["sampler"] == 0:
        return jnp.full(labels.shape, 1.0 / n)
    if c["sampler"] == 1:
        k = labels.astype(jnp.float64)
        return jnp.log((k + 2) / (k + 1)) / jnp.log(n + 1.0)
    return dist[labels]


def _nce_cost(c, Input, Weight, Bias, SampleWeight, CustomDistProbs, labels, num_true):
    logits = jnp.einsum("nd,nkd->nk", Input, Weight[labels])
    if Bias is not None:
        logits = logits + Bias.reshape(-1)[labels]
    o = jax.nn.sigmoid(logits)
    negs = labels.shape[1] - num_true
    b = (negs * _nce_prob(c, labels, CustomDistProbs)).astype(Input.dtype)
    true = jnp.arange(labels.shape[1]) < num_true
    cost = jnp.where(true, -jnp.log(o / (o + b)), -jnp.log(b / (o + b)))
    cost = jnp.sum(cost, axis=1, keepdims=True)
    if SampleWeight is not None:
        cost = cost * SampleWeight.reshape(-1, 1)
    return cost, o


def _nce_draw(c, shape, dist):
    if c["custom_neg_classes"]:
        return jnp.broadcast_to(jnp.asarray(c["custom_neg_classes"], jnp.int64), shape)
    key, n = c.rng(c["seed"]), c["num_total_classes"]
    if c["sampler"] == 0:
        return jax.random.randint(key, shape, 0, n).astype(jnp.int64)
    if c["sampler"] == 1:
        u = jax.random.uniform(key, shape, jnp.float64)
        return jnp.clip(jnp.exp(u * jnp.log(n + 1.0)).astype(jnp.int64) - 1, 0, n - 1)
    return jax.random.categorical(key, jnp.log(dist), shape=shape).astype(jnp.int64)


@lowering("nce")
def _nce(c, Input, Label, Weight, Bias, SampleWeight, CustomDistProbs):
    negs = len(c["custom_neg_classes"]) or c["num_neg_samples"]
    drawn = _nce_draw(c, (Input.shape[0], negs), CustomDistProbs)
    labels = jnp.concatenate([Label.astype(jnp.int64), drawn], axis=1)
    cost, o = _nce_cost(c, Input, Weight, Bias, SampleWeight, CustomDistProbs, labels,
                        Label.shape[1])
    return {"Cost": cost, "SampleLogits": o, "SampleLabels": labels}


@lowering("nce_grad")
def _nce_grad(c, **kw):
    """The vjp of the cost at the forward's own samples (a fresh draw would differ)."""
    labels, dcost = kw["SampleLabels"], kw["Cost@GRAD"]
    names = [s for s in ("Input", "Weight", "Bias") if kw.get(s) is not None]

    def cost(*args):
        vals = dict(zip(names, args))
        return _nce_cost(c, vals["Input"], vals["Weight"], vals.get("Bias"),
                         kw.get("SampleWeight"), kw.get("CustomDistProbs"), labels,
                         kw["Label"].shape[1])[0]

    _, vjp = jax.vjp(cost, *[kw[s] for s in names])
    return {f"{s}@GRAD": g for s, g in zip(names, vjp(dcost))}


@lowering("random_crop")
def _random_crop(c, X):
    shape = tuple(c["shape"])
    lead = X.shape[:X.ndim - len(shape)]
    tail = X.shape[X.ndim - len(shape):]
    flat = X.reshape(-1, *tail)
    room = jnp.asarray([d - s + 1 for d, s in zip(tail, shape)])
    starts = jax.random.randint(c.rng(c["seed"]), (flat.shape[0], len(shape)), 0, room)
    crop = jax.vmap(lambda x, s: jax.lax.dynamic_slice(x, tuple(s), shape))(flat, starts)
    return {"Out": crop.reshape(*lead, *shape)}


def _greedy_mask(m):
    """Paddle's pick over a [B, C] matrix: the largest entries, none sharing a row or column."""
    rows, cols = m.shape
    order = jnp.argsort(-m.reshape(-1), stable=True)

    def pick(state, k):
        used_r, used_c, mask = state
        r, col = k // cols, k % cols
        take = ~used_r[r] & ~used_c[col]
        return (used_r.at[r].set(used_r[r] | take), used_c.at[col].set(used_c[col] | take),
                mask.at[r, col].set(take)), None

    init = (jnp.zeros(rows, bool), jnp.zeros(cols, bool), jnp.zeros((rows, cols), bool))
    (_, _, mask), _ = jax.lax.scan(pick, init, order)
    return mask


@lowering("similarity_focus")
def _similarity_focus(c, X):
    axis = c["axis"]
    moved = jnp.moveaxis(X, axis, 1)  # [N, A, B, C] with A the chosen axis
    mask = jnp.zeros((moved.shape[0], *moved.shape[2:]), bool)
    for i in c["indexes"]:
        mask = mask | jax.vmap(_greedy_mask)(moved[:, i])
    out = jnp.broadcast_to(mask[:, None], moved.shape).astype(X.dtype)
    return {"Out": jnp.moveaxis(out, 1, axis)}
