"""multiclass_nms with static shapes: a greedy NMS per (image, class) as a fori_loop over the
score-sorted boxes, then the keep_top_k best rows per image packed as a LoD value."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering


def overlap(b, normalized):
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


def greedy_keep(iou, cand, threshold, eta, groups=None, n_groups=1):
    """Paddle's NMSFast over boxes already in score order: box i is kept when it is a
    candidate and overlaps no kept box by more than the adaptive threshold (times eta after
    each keep while over 0.5). ``groups`` [M] (optional, values < n_groups): an independent
    NMS per group over one overlap matrix, each with its own adaptive threshold."""
    m = cand.shape[0]
    g = jnp.zeros(m, jnp.int32) if groups is None else groups
    same = g[:, None] == g[None, :]

    def step(i, carry):
        keep, thr = carry
        t = thr[g[i]]
        ok = cand[i] & ~jnp.any(keep & same[i] & (iou[i] > t))
        keep = keep.at[i].set(ok)
        thr = thr.at[g[i]].set(jnp.where(ok & (eta < 1) & (t > 0.5), t * eta, t))
        return keep, thr
    thr0 = jnp.full((n_groups,), threshold, iou.dtype)
    keep, _ = jax.lax.fori_loop(0, m, step, (jnp.zeros(m, bool), thr0))
    return keep


def class_nms(boxes, score, c):
    """Kept mask of one class over its boxes sorted by score (descending, stable), and the
    order; the candidates are those over score_threshold, at most nms_top_k of them."""
    m = score.shape[0]
    order = jnp.argsort(-score, stable=True)
    s = score[order]
    cand = s > c["score_threshold"]
    if c["nms_top_k"] > -1:
        cand &= jnp.arange(m) < c["nms_top_k"]
    keep = greedy_keep(overlap(boxes[order], c["normalized"]), cand, c["nms_threshold"],
                       c["nms_eta"])
    return keep, order, s


def select_rows(keep, order, s, boxes, k):
    """The best k kept (class, box) pairs of one image ([C, M] masks in score order), in
    Paddle's output order (label ascending, score order within a label): rows [label, score,
    *box] (zero past the count), the count and each row's box index."""
    ncls, m = keep.shape
    flat = jnp.where(keep, s, -jnp.inf).reshape(-1)
    # ties of the best k: lower class, then earlier in score order (the flat index order)
    _, best = jax.lax.top_k(flat, k)
    real = jnp.isfinite(flat[best])
    best = jnp.sort(jnp.where(real, best, ncls * m))
    real = best < ncls * m
    best = jnp.minimum(best, ncls * m - 1)
    label, pos = best // m, best % m
    index = order[label, pos]
    rows = jnp.concatenate([label[:, None].astype(boxes.dtype), s[label, pos][:, None],
                            boxes[index]], axis=1)
    return jnp.where(real[:, None], rows, 0), jnp.sum(real), jnp.where(real, index, 0)


def pack(rows, counts):
    """[N, k, D] rows per image, ``counts`` [N] real ones each -> a LoD value whose image i
    starts at sum(counts[:i]) (a LoD value's tokens are contiguous, padding zero)."""
    n, k = rows.shape[:2]
    start = jnp.cumsum(counts) - counts
    j = jnp.arange(k)
    target = jnp.where(j[None, :] < counts[:, None], start[:, None] + j[None, :], n * k)
    data = jnp.zeros((n * k + 1,) + rows.shape[2:], rows.dtype).at[target.reshape(-1)].set(
        rows.reshape((n * k,) + rows.shape[2:]))
    return LoDArray(data[:n * k], (counts.astype(jnp.int32),))


def nms_bound(c, ncls, m):
    k = c["keep_top_k"]
    return min(k, ncls * m) if k > -1 else ncls * m


def multiclass_rows(c, BBoxes, Scores):
    """Per image: (rows [k, 6], count, box index [k]) of multiclass_nms."""
    ncls, m = Scores.shape[1:]
    k = nms_bound(c, ncls, m)

    def image(boxes, scores):
        keep, order, s = jax.vmap(lambda sc: class_nms(boxes, sc, c))(scores)
        keep &= (jnp.arange(ncls) != c["background_label"])[:, None]
        return select_rows(keep, order, s, boxes, k)
    return jax.vmap(image)(BBoxes, Scores)


@lowering("multiclass_nms")
def _multiclass_nms(c, BBoxes, Scores):
    rows, counts, _ = multiclass_rows(c, BBoxes, Scores)
    return {"Out": pack(rows, counts)}
