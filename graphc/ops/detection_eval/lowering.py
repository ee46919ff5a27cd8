"""detection_map with static shapes: the batch's (class, score, tp) records from a greedy
match per image and class, merged into the state table kept in AP order (class, score
descending), so a step sorts only its batch and each class's AP is one pass of cumsums."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.lowering import LoweringError, lowering

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


def _bisect(before, n: int, q: int):
    """For q queries: how many of n sorted items come before each (``before(i)`` [q] bool:
    item i, clipped to n - 1, comes before the query; true then false along the items)."""
    if n == 0:
        return jnp.zeros(q, jnp.int32)

    def step(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        go = before(jnp.minimum(mid, n - 1))
        live = lo < hi
        return jnp.where(live & go, mid + 1, lo), jnp.where(live & ~go, mid, hi)
    lo, _ = jax.lax.fori_loop(0, int(np.ceil(np.log2(n + 1))) + 1, step,
                              (jnp.zeros(q, jnp.int32), jnp.full(q, n, jnp.int32)))
    return lo


def _merge(t_cls, t_score, t_tp, cls, score, tp):
    """The table (sorted by class, score descending, insertion) and the batch's records
    (insertion order) merged in that order, the table's first on ties (inserted earlier):
    only the batch is sorted, the table is placed by binary search."""
    by_score = jnp.argsort(-score, stable=True)
    o = by_score[jnp.argsort(cls[by_score], stable=True)]
    cls, score, tp = cls[o], score[o], tp[o]
    nt, nb = t_cls.shape[0], cls.shape[0]
    # batch record k goes after every table row not after it; table row i after every
    # batch record strictly before it
    at_b = jnp.arange(nb) + _bisect(
        lambda i: (t_cls[i] < cls) | ((t_cls[i] == cls) & (t_score[i] >= score)), nt, nb)
    at_t = jnp.arange(nt) + _bisect(
        lambda k: (cls[k] < t_cls) | ((cls[k] == t_cls) & (score[k] > t_score)), nb, nt)
    where = jnp.concatenate([at_t, at_b])

    def put(a, b):
        return jnp.zeros(nt + nb, a.dtype).at[where].set(jnp.concatenate([a, b]))
    return put(t_cls, cls), put(t_score, score), put(t_tp, tp)


def _average_precision(c, cls, tp, pos):
    """Per-class AP [C] of records sorted by class, score descending (insertion on ties),
    non-records (class C) last: Paddle's order after its stable sort by score."""
    ncls = c["class_num"]
    n = cls.shape[0]
    real = cls < ncls
    tp = jnp.where(real, tp, 0.0)
    fp = jnp.where(real, 1.0 - tp, 0.0)
    idx = jnp.arange(n, dtype=jnp.int32)
    start = jnp.full(ncls + 1, n, jnp.int32).at[cls].min(idx)[cls]
    ctp, cfp = jnp.cumsum(tp), jnp.cumsum(fp)
    tp_sum = ctp - jnp.where(start > 0, ctp[start - 1], 0.0)
    fp_sum = cfp - jnp.where(start > 0, cfp[start - 1], 0.0)
    precision = tp_sum / jnp.maximum(tp_sum + fp_sum, 1.0)
    npos = jnp.concatenate([pos, jnp.ones(1, jnp.int32)])[cls].astype(tp.dtype)
    recall = tp_sum / jnp.maximum(npos, 1.0)
    if c["ap_type"] == "integral":
        prev = jnp.where(idx == start, 0.0, jnp.roll(recall, 1))
        step = jnp.abs(recall - prev)
        part = jnp.where(real & (step > 1e-6), precision * step, 0.0)
        return jax.ops.segment_sum(part, cls, num_segments=ncls + 1)[:ncls]
    # max precision at recall >= j/10, j = 0..10: each record's precision goes to the bucket
    # of the thresholds it reaches, then a running maximum from the top threshold down
    # (Paddle's loop stops carrying its running maximum down once every record is at or
    # above j/10, but then the first record, a true positive of precision 1, is among those
    # it still scans: the same values)
    reach = jnp.sum(recall[:, None] >= jnp.asarray(_ELEVEN, recall.dtype)[None, :], axis=1)
    top = jnp.zeros((ncls + 1) * 12, precision.dtype).at[cls * 12 + reach].max(
        jnp.where(real, precision, 0.0)).reshape(ncls + 1, 12)[:ncls]
    best = jax.lax.cummax(top, axis=1, reverse=True)[:, 1:]  # [C, 11]: thresholds reached > j
    return jnp.sum(best / 11.0, axis=1)


@lowering("detection_map")
def _detection_map(c, DetectRes, Label, HasState, PosCount, TruePos, FalsePos):
    ncls, cap = c["class_num"], c["capacity"]
    if DetectRes.num_sequences != Label.num_sequences:
        raise LoweringError(f"{c.where}: DetectRes holds {DetectRes.num_sequences} images but "
                            f"Label {Label.num_sequences}; they must be the same batch")
    pos, cls, score, tp = _batch(c, DetectRes, Label)
    dtype = score.dtype
    t_cls = jnp.zeros(0, jnp.int32)
    t_score, t_tp = jnp.zeros(0, dtype), jnp.zeros(0, dtype)
    if PosCount is not None:
        on = HasState.reshape(-1)[0] != 0 if HasState is not None else jnp.asarray(False)
        pos = pos + jnp.where(on, PosCount.reshape(-1), 0)
        t_cls = TruePos[:, 0].astype(jnp.int32)
        t_cls = jnp.where(on & (t_cls >= 0) & (t_cls < ncls), t_cls, ncls)
        t_score = jnp.where(t_cls < ncls, TruePos[:, 1], 0.0)
        t_tp = TruePos[:, 2].astype(dtype)
    cls, score, tp = _merge(t_cls, t_score, t_tp, cls, score, tp)
    ap = _average_precision(c, cls, tp, pos)
    counts = (pos > 0) & (pos != c["background_label"])
    mean = jnp.sum(jnp.where(counts, ap, 0.0)) / jnp.maximum(jnp.sum(counts), 1).astype(dtype)
    full = jnp.sum(cls < ncls) >= cap
    out_map = jnp.where(full, jnp.nan, mean).astype(dtype).reshape(1)
    if cls.shape[0] < cap:
        extra = cap - cls.shape[0]
        cls = jnp.concatenate([cls, jnp.full(extra, ncls, cls.dtype)])
        score = jnp.concatenate([score, jnp.zeros(extra, dtype)])
        tp = jnp.concatenate([tp, jnp.zeros(extra, dtype)])
    cls, score, tp = cls[:cap], score[:cap], tp[:cap]
    empty = cls >= ncls
    rows = jnp.stack([cls.astype(dtype), score, tp], axis=1)
    true_pos = jnp.where(empty[:, None], jnp.asarray([-1.0, 0.0, 0.0], dtype), rows)
    false_pos = true_pos.at[:, 2].set(jnp.where(empty, 0.0, 1.0 - tp))
    return {"MAP": out_map, "AccumPosCount": pos.reshape(ncls, 1).astype(jnp.int32),
            "AccumTruePos": true_pos, "AccumFalsePos": false_pos}
