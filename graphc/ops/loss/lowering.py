"""Lowering rules for the loss ops in defs.py beside this file (Paddle 1.8's formulas).

Their gradients are JAX's derivatives of these rules (the generic grad); the finite-difference
cases in tests/test_gradients.py check each one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


@lowering("sigmoid_cross_entropy_with_logits")
def _sigmoid_ce(c, X, Label):
    # max(x, 0) - x * z + log(1 + exp(-|x|)): stable for large |x|
    loss = jnp.maximum(X, 0) - X * Label + jnp.log1p(jnp.exp(-jnp.abs(X)))
    keep = Label.astype(jnp.int32) != c["ignore_index"]  # Paddle compares int(label)
    loss = jnp.where(keep, loss, jnp.zeros((), X.dtype))
    if c["normalize"]:
        count = jnp.sum(keep).astype(X.dtype)
        loss = loss / jnp.maximum(count, jnp.asarray(1e-5, X.dtype))
    return {"Out": loss}


@lowering("cos_sim")
def _cos_sim(c, X, Y):
    x = X.reshape(X.shape[0], -1)
    y = Y.reshape(Y.shape[0], -1)
    x_norm = jnp.sqrt(jnp.sum(x * x, axis=1, keepdims=True))
    y_norm = jnp.sqrt(jnp.sum(y * y, axis=1, keepdims=True))
    dot = jnp.sum(x * y, axis=1, keepdims=True)  # a 1-row Y broadcasts over X's rows
    return {"Out": dot / (x_norm * y_norm), "XNorm": x_norm, "YNorm": y_norm}


@lowering("log_loss")
def _log_loss(c, Predicted, Labels):
    eps = jnp.asarray(c["epsilon"], Predicted.dtype)
    loss = -Labels * jnp.log(Predicted + eps) - (1 - Labels) * jnp.log(1 - Predicted + eps)
    return {"Loss": loss}


@lowering("huber_loss")
def _huber(c, X, Y):
    r = Y - X
    delta = jnp.asarray(c["delta"], X.dtype)
    a = jnp.abs(r)
    out = jnp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return {"Out": out, "Residual": r}


@lowering("smooth_l1_loss")
def _smooth_l1(c, X, Y, InsideWeight, OutsideWeight):
    diff = X - Y
    if InsideWeight is not None:
        diff = diff * InsideWeight
    sigma2 = jnp.asarray(c["sigma"] ** 2, X.dtype)
    a = jnp.abs(diff)
    val = jnp.where(a < 1 / sigma2, 0.5 * diff * diff * sigma2, a - 0.5 / sigma2)
    if OutsideWeight is not None:
        val = val * OutsideWeight
    return {"Diff": diff, "Out": jnp.sum(val.reshape(X.shape[0], -1), axis=1, keepdims=True)}


@lowering("bpr_loss")
def _bpr(c, X, Label):
    lead, classes = X.shape[:-1], X.shape[-1]
    X = X.reshape(-1, classes)  # [..., C]: one row per leading index, as Paddle's Y [..., 1]
    label = Label.reshape(-1).astype(jnp.int32)
    positive = jnp.take_along_axis(X, label[:, None], axis=1)
    # log sigmoid(x_label - x_j) summed over j != label
    terms = jax.nn.log_sigmoid(positive - X)
    others = jnp.arange(classes)[None, :] != label[:, None]
    total = jnp.sum(jnp.where(others, terms, jnp.zeros((), X.dtype)), axis=1, keepdims=True)
    return {"Y": (-total / jnp.asarray(max(classes - 1, 1), X.dtype)).reshape(*lead, 1)}


@lowering("margin_rank_loss")
def _margin_rank(c, X1, X2, Label):
    raw = -Label * (X1 - X2) + jnp.asarray(c["margin"], X1.dtype)
    return {"Out": jnp.maximum(raw, 0), "Activated": (raw > 0).astype(X1.dtype)}


@lowering("rank_loss")
def _rank(c, Label, Left, Right):
    d = Left - Right
    return {"Out": jnp.logaddexp(jnp.zeros((), d.dtype), d) - Label * d}


@lowering("kldiv_loss")
def _kldiv(c, X, Target):
    positive = Target > 0
    safe = jnp.where(positive, Target, jnp.ones((), Target.dtype))
    loss = jnp.where(positive, Target * (jnp.log(safe) - X), jnp.zeros((), X.dtype))
    reduction = c["reduction"]
    if reduction == "none":
        return {"Loss": loss}
    total = jnp.sum(loss)
    if reduction == "mean":
        total = total / loss.size
    elif reduction == "batchmean":
        total = total / X.shape[0]
    return {"Loss": total.reshape(1)}
