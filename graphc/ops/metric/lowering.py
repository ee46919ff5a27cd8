"""Lowering rule of the ``auc`` metric op: histogram update and trapezoid ROC AUC, as Paddle's
kernel computes them (bucket int(p * num_thresholds), a window of slide_steps batches)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray, pad_to_tokens
from ...backends.lowering import cross_replica, lowering


def roc_auc_from_histograms(pos, neg):
    """Area under the ROC curve of histograms indexed by score bucket (float64 [1]): the
    thresholds sweep from the highest bucket down, as Paddle's calcAuc does."""
    pos, neg = pos[::-1].astype(jnp.float64), neg[::-1].astype(jnp.float64)
    tot_pos, tot_neg = jnp.cumsum(pos), jnp.cumsum(neg)
    area = jnp.sum(neg * (2 * tot_pos - pos)) / 2  # |dx| * (y1 + y2) / 2 per bucket
    total_pos, total_neg = tot_pos[-1], tot_neg[-1]
    both = (total_pos > 0) & (total_neg > 0)
    auc = jnp.where(both, area / jnp.where(both, total_pos * total_neg, 1.0), 0.0)
    return auc.reshape(1)


def _histograms(c, Predict, Label):
    """This batch's counts of positive and negative examples per score bucket."""
    thresholds = c["num_thresholds"]
    weight = 1
    if isinstance(Predict, LoDArray):  # token rows: padding rows are no examples
        Label = pad_to_tokens(c, "Label", Label, Predict)[0]
        weight = Predict.valid().astype(jnp.int64)
    Predict, Label = (getattr(v, "data", v) for v in (Predict, Label))
    score = Predict[:, -1]
    # Paddle casts p * num_thresholds (in the prediction's type) to an unsigned integer; it
    # refuses p outside [0, 1], which a compiled step cannot, so such p are clamped
    index = jnp.clip((score * jnp.asarray(thresholds, score.dtype)).astype(jnp.int64), 0,
                     thresholds)
    positive = (Label.reshape(-1) != 0).astype(jnp.int64)
    empty = jnp.zeros(thresholds + 1, jnp.int64)
    return (empty.at[index].add(positive * weight),
            empty.at[index].add((1 - positive) * weight))


def _update(c, add_pos, add_neg, StatPos, StatNeg):
    """New state and AUC from the state and the counts to add."""
    window, buckets = c["slide_steps"], c["num_thresholds"] + 1
    pos, neg = StatPos.reshape(-1), StatNeg.reshape(-1)
    if window == 0:
        new_pos, new_neg = pos + add_pos, neg + add_neg
        auc = roc_auc_from_histograms(new_pos, new_neg)
    else:
        step = pos[-1]
        slot = step % window

        def slide(stat, added):
            rows = stat[:-1].reshape(window + 1, buckets)
            total = rows[window] - rows[slot] + added  # drop the oldest batch, add this one
            rows = rows.at[slot].set(added).at[window].set(total)
            return rows, total

        pos_rows, pos_total = slide(pos, add_pos)
        neg_rows, neg_total = slide(neg, add_neg)
        auc = roc_auc_from_histograms(pos_total, neg_total)
        counter = (step + 1).reshape(1)
        new_pos = jnp.concatenate([pos_rows.reshape(-1), counter])
        new_neg = jnp.concatenate([neg_rows.reshape(-1), counter])
    return {"AUC": auc, "StatPosOut": new_pos.reshape(StatPos.shape),
            "StatNegOut": new_neg.reshape(StatNeg.shape)}


# Under data parallelism every replica adds every replica's counts, so each holds the state
# (and reports the AUC) of the whole batch: N devices give what one device gives.
@lowering("auc")
def _auc(c, Predict, Label, StatPos, StatNeg):
    add_pos, add_neg = _histograms(c, Predict, Label)
    if c.replicas is not None and c.replicas.index is None:  # on devices, in shard_map
        add_pos = jax.lax.psum(add_pos, c.replicas.axes())
        add_neg = jax.lax.psum(add_neg, c.replicas.axes())
    return _update(c, add_pos, add_neg, StatPos, StatNeg)


@cross_replica("auc")
def _auc_replicas(c, per_replica: list[dict]) -> list[dict]:
    counts = [_histograms(c, ins["Predict"], ins["Label"]) for ins in per_replica]
    add_pos = sum(p for p, _ in counts)
    add_neg = sum(n for _, n in counts)
    return [_update(c, add_pos, add_neg, ins["StatPos"], ins["StatNeg"])
            for ins in per_replica]
