"""multiclass_nms with static shapes: a greedy NMS per (image, class) as a fori_loop over the
score-sorted boxes, then the keep_top_k best rows per image packed as a LoD value."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering


def _overlap(b, normalized):
    """[M, M] Jaccard overlap as Paddle's JaccardOverlap (0 for disjoint boxes)."""
    add = 0.0 if normalized else 1.0

    def area(x):
        w, h = x[..., 2] - x[..., 0], x[..., 3] - x[..., 1]
        return jnp.where((w < 0) | (h < 0), 0.0, (w + add) * (h + add))
    p, q = b[:, None, :], b[None, :, :]
    disjoint = ((q[..., 0] > p[..., 2]) | (q[..., 2] < p[..., 0]) | (q[..., 1] > p[..., 3])
                | (q[..., 3] < p[..., 1]))
    iw = jnp.minimum(p[..., 2], q[..., 2]) - jnp.maximum(p[..., 0], q[..., 0]) + add
    ih = jnp.minimum(p[..., 3], q[..., 3]) - jnp.maximum(p[..., 1], q[..., 1]) + add
    inter = iw * ih
    a = area(b)
    return jnp.where(disjoint, 0.0, inter / (a[:, None] + a[None, :] - inter))


def _class_nms(boxes, score, c):
    """Kept mask of one class over its boxes sorted by score (descending, stable), and the
    order; the candidates are those over score_threshold, at most nms_top_k of them."""
    m = score.shape[0]
    order = jnp.argsort(-score, stable=True)
    s = score[order]
    cand = s > c["score_threshold"]
    if c["nms_top_k"] > -1:
        cand &= jnp.arange(m) < c["nms_top_k"]
    iou = _overlap(boxes[order], c["normalized"])
    eta = c["nms_eta"]

    def step(i, carry):
        keep, thr = carry
        ok = cand[i] & ~jnp.any(keep & (iou[i] > thr))
        keep = keep.at[i].set(ok)
        thr = jnp.where(ok & (eta < 1) & (thr > 0.5), thr * eta, thr)
        return keep, thr
    keep, _ = jax.lax.fori_loop(0, m, step, (jnp.zeros(m, bool),
                                             jnp.asarray(c["nms_threshold"], score.dtype)))
    return keep, order, s


def _image(boxes, scores, c, k):
    ncls, m = scores.shape
    keep, order, s = jax.vmap(lambda sc: _class_nms(boxes, sc, c))(scores)
    keep &= (jnp.arange(ncls) != c["background_label"])[:, None]
    flat = jnp.where(keep, s, -jnp.inf).reshape(-1)
    # the best k (ties: lower class, then earlier in score order), then Paddle's output
    # order: label ascending, score order within a label (the flat index already is that)
    _, best = jax.lax.top_k(flat, k)
    real = jnp.isfinite(flat[best])
    best = jnp.sort(jnp.where(real, best, ncls * m))
    real = best < ncls * m
    best = jnp.minimum(best, ncls * m - 1)
    label, pos = best // m, best % m
    rows = jnp.concatenate([label[:, None].astype(boxes.dtype), s[label, pos][:, None],
                            boxes[order[label, pos]]], axis=1)
    return jnp.where(real[:, None], rows, 0), jnp.sum(real)


@lowering("multiclass_nms")
def _multiclass_nms(c, BBoxes, Scores):
    n, ncls, m = Scores.shape
    k = c["keep_top_k"]
    k = min(k, ncls * m) if k > -1 else ncls * m
    rows, counts = jax.vmap(lambda b, s: _image(b, s, c, k))(BBoxes, Scores)
    # pack image i's rows at offset sum(counts[:i]) (a LoD value's tokens are contiguous)
    start = jnp.cumsum(counts) - counts
    j = jnp.arange(k)
    target = jnp.where(j[None, :] < counts[:, None], start[:, None] + j[None, :], n * k)
    data = jnp.zeros((n * k + 1, 6), BBoxes.dtype).at[target.reshape(-1)].set(
        rows.reshape(-1, 6))
    return {"Out": LoDArray(data[:n * k], (counts.astype(jnp.int32),))}
