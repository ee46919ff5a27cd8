"""detection_map with static shapes: the batch's (class, score, tp) records from a greedy
match per image and class, merged with the state table, then each class's AP from one sort."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.lowering import lowering

# Paddle compares a float recall with j / 10 in double: r < j/10 exactly when r is below the
# smallest float32 at or above j/10, so the float32 comparison needs that threshold
_ELEVEN = np.array([np.float32(j / 10) if float(np.float32(j / 10)) >= j / 10
                    else np.nextafter(np.float32(j / 10), np.float32(2))
                    for j in range(11)], np.float32)


def _iou(p, g):
    """[P, G] Jaccard overlap as Paddle's JaccardOverlap (0 for disjoint boxes)."""
    p, g = p[:, None, :], g[None, :, :]
    disjoint = ((g[..., 0] > p[..., 2]) | (g[..., 2] < p[..., 0]) | (g[..., 1] > p[..., 3])
                | (g[..., 3] < p[..., 1]))
    iw = jnp.minimum(p[..., 2], g[..., 2]) - jnp.maximum(p[..., 0], g[..., 0])
    ih = jnp.minimum(p[..., 3], g[..., 3]) - jnp.maximum(p[..., 1], g[..., 1])
    inter = iw * ih
    pa = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    ga = (g[..., 2] - g[..., 0]) * (g[..., 3] - g[..., 1])
    return jnp.where(disjoint, 0.0, inter / jnp.where(disjoint, 1.0, pa + ga - inter))


def _batch(c, det, label):
    """Positives per class [C] and the batch's records (class, score, tp) in Paddle's
    insertion order (image, class, score descending); ignored or padding rows get class C."""
    ncls = c["class_num"]
    d, g = det.data, label.data
    d_img, g_img = det.segment_ids(), label.segment_ids()
    n = det.num_sequences
    g_cls = g[:, 0].astype(jnp.int32)
    g_ok = (g_img < n) & (g_cls >= 0) & (g_cls < ncls)
    difficult = (jnp.abs(g[:, 1]) >= 1e-6) if g.shape[1] == 6 else jnp.zeros(g.shape[0], bool)
    counted = g_ok & (c["evaluate_difficult"] | ~difficult)
    pos = jnp.zeros(ncls + 1, jnp.int32).at[jnp.where(counted, g_cls, ncls)].add(1)[:ncls]

    d_cls = d[:, 0].astype(jnp.int32)
    score = d[:, 1]
    d_ok = (d_img < n) & (d_cls >= 0) & (d_cls < ncls)
    box = jnp.clip(d[:, 2:6], 0.0, 1.0)
    same = (d_img[:, None] == g_img[None, :]) & (d_cls[:, None] == g_cls[None, :]) & g_ok[None]
    iou = jnp.where(same, _iou(box, g[:, -4:]), -1.0)
    best = jnp.argmax(iou, axis=1)  # the first gt of the largest overlap, as Paddle's loop
    hit = jnp.max(iou, axis=1) > c["overlap_threshold"]
    ignored = hit & ~c["evaluate_difficult"] & difficult[best]
    # greedy by score: a hit is a true positive when no higher-ranked hit took its gt first
    rank = jnp.zeros(d.shape[0], jnp.int32).at[jnp.argsort(-score, stable=True)].set(
        jnp.arange(d.shape[0], dtype=jnp.int32))
    claim = d_ok & hit & ~ignored
    first = jnp.full(g.shape[0] + 1, d.shape[0], jnp.int32).at[
        jnp.where(claim, best, g.shape[0])].min(rank)
    tp = claim & (first[best] == rank)
    keep = d_ok & ~ignored
    cls = jnp.where(keep, d_cls, ncls)
    order = jnp.lexsort((rank, cls, jnp.where(keep, d_img, n)))
    return pos, cls[order], score[order], tp[order].astype(score.dtype)


def _average_precision(c, cls, score, tp, pos):
    """Per-class AP [C] of records sorted by class (stable: insertion order within it)."""
    ncls = c["class_num"]
    by_score = jnp.argsort(-score, stable=True)
    order = by_score[jnp.argsort(cls[by_score], stable=True)]  # class, score desc, insertion
    cls, tp = cls[order], tp[order]
    real = cls < ncls
    tp = jnp.where(real, tp, 0.0)
    fp = jnp.where(real, 1.0 - tp, 0.0)
    start = jnp.searchsorted(cls, cls, side="left")
    ctp, cfp = jnp.cumsum(tp), jnp.cumsum(fp)
    tp_sum = ctp - jnp.where(start > 0, ctp[start - 1], 0.0)
    fp_sum = cfp - jnp.where(start > 0, cfp[start - 1], 0.0)
    precision = tp_sum / jnp.maximum(tp_sum + fp_sum, 1.0)
    npos = jnp.concatenate([pos, jnp.ones(1, jnp.int32)])[cls].astype(tp.dtype)
    recall = tp_sum / jnp.maximum(npos, 1.0)
    seg = jnp.where(real, cls, ncls)
    if c["ap_type"] == "integral":
        prev = jnp.where(jnp.arange(cls.shape[0]) == start, 0.0, jnp.roll(recall, 1))
        step = jnp.abs(recall - prev)
        part = jnp.where(step > 1e-6, precision * step, 0.0)
        return jax.ops.segment_sum(part, seg, num_segments=ncls + 1)[:ncls]
    # max precision at recall >= j/10, j = 0..10 (Paddle's loop stops carrying its running
    # maximum down once every record is at or above j/10, but then the first record, a true
    # positive of precision 1, is among those it still scans: the same values)
    ge = recall[:, None] >= jnp.asarray(_ELEVEN, recall.dtype)[None, :]  # [R, 11]
    best = jax.ops.segment_max(jnp.where(ge, precision[:, None], 0.0), seg,
                               num_segments=ncls + 1)[:ncls]
    return jnp.sum(jnp.maximum(best, 0.0) / 11.0, axis=1)


@lowering("detection_map")
def _detection_map(c, DetectRes, Label, HasState, PosCount, TruePos, FalsePos):
    ncls, cap = c["class_num"], c["capacity"]
    pos, cls, score, tp = _batch(c, DetectRes, Label)
    dtype = score.dtype
    if PosCount is not None:
        on = HasState.reshape(-1)[0] != 0 if HasState is not None else jnp.asarray(False)
        pos = pos + jnp.where(on, PosCount.reshape(-1), 0)
        s_cls = TruePos[:, 0].astype(jnp.int32)
        s_ok = on & (s_cls >= 0) & (s_cls < ncls)
        cls = jnp.concatenate([jnp.where(s_ok, s_cls, ncls), cls])
        score = jnp.concatenate([TruePos[:, 1], score])
        tp = jnp.concatenate([TruePos[:, 2].astype(dtype), tp])
    ap = _average_precision(c, cls, score, tp, pos)
    counts = (pos > 0) & (pos != c["background_label"])
    n_cls = jnp.sum(counts)
    mean = jnp.sum(jnp.where(counts, ap, 0.0)) / jnp.maximum(n_cls, 1).astype(dtype)
    full = jnp.sum(cls < ncls) >= cap
    out_map = jnp.where(full, jnp.nan, mean).astype(dtype).reshape(1)
    # the table in class order, insertion order within a class (as Paddle's LoD lists)
    order = jnp.argsort(cls, stable=True)
    if order.shape[0] < cap:
        order = jnp.concatenate([order, jnp.full(cap - order.shape[0], -1, order.dtype)])
    order = order[:cap]
    empty = (order < 0) | (jnp.concatenate([cls, jnp.full(1, ncls, cls.dtype)])[order] >= ncls)
    rows = jnp.stack([cls[order].astype(dtype), score[order], tp[order]], axis=1)
    blank = jnp.asarray([-1.0, 0.0, 0.0], dtype)
    true_pos = jnp.where(empty[:, None], blank, rows)
    false_pos = true_pos.at[:, 2].set(jnp.where(empty, 0.0, 1.0 - tp[order]))
    return {"MAP": out_map, "AccumPosCount": pos.reshape(ncls, 1).astype(jnp.int32),
            "AccumTruePos": true_pos, "AccumFalsePos": false_pos}
