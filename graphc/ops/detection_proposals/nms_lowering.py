"""multiclass_nms2, locality_aware_nms and retinanet_detection_output on the shared greedy NMS
of detection/nms_lowering.py: static row bounds, per-image row counts as the LoD."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from ..detection.nms_lowering import (
    greedy_keep,
    multiclass_rows,
    nms_bound,
    overlap,
    pack,
    select_rows,
)


@lowering("multiclass_nms2")
def _multiclass_nms2(c, BBoxes, Scores):
    rows, counts, index = multiclass_rows(c, BBoxes, Scores)
    m = BBoxes.shape[1]
    # Paddle's Index counts boxes over the whole batch: image i's box j is i * M + j
    index = index + (jnp.arange(BBoxes.shape[0]) * m)[:, None]
    real = jnp.arange(rows.shape[1])[None, :] < counts[:, None]
    index = jnp.where(real, index, 0).astype(jnp.int32)
    return {"Out": pack(rows, counts), "Index": pack(index[..., None], counts)}


def _merge_pass(boxes, score, c):
    """Paddle's locality-aware pass over the boxes in input order: a box overlapping the last
    unmerged box by more than nms_threshold merges into it (coordinates weighted by the
    scores, scores added); the merged boxes are the survivors."""
    m = score.shape[0]

    def step(i, carry):
        b, s, last, skip = carry
        prev = jnp.maximum(last, 0)
        ov = overlap(jnp.stack([b[i], b[prev]]), c["normalized"])[0, 1]
        merge = (last > -1) & (ov > c["nms_threshold"])
        merged = (b[i] * s[i] + b[prev] * s[prev]) / (s[i] + s[prev])
        b = b.at[prev].set(jnp.where(merge, merged, b[prev]))
        s = s.at[prev].set(jnp.where(merge, s[prev] + s[i], s[prev]))
        skip = skip.at[prev].set(jnp.where((last > -1) & ~merge, False, skip[prev]))
        return b, s, jnp.where(merge, last, i), skip
    b, s, last, skip = jax.lax.fori_loop(
        0, m, step, (boxes, score, jnp.asarray(-1), jnp.ones(m, bool)))
    skip = skip.at[jnp.maximum(last, 0)].set(jnp.where(last > -1, False, skip[0]))
    return b, s, ~skip


def _locality_image(boxes, scores, c, k):
    ncls, m = scores.shape

    def cls_step(b, cls_score):
        cls, score = cls_score
        nb, s, alive = _merge_pass(b, score, c)
        cand = alive & (s > c["score_threshold"])
        order = jnp.argsort(jnp.where(cand, -s, jnp.inf), stable=True)
        cand = cand[order]
        if c["nms_top_k"] > -1:
            cand &= jnp.arange(m) < c["nms_top_k"]
        keep = greedy_keep(overlap(nb[order], c["normalized"]), cand, c["nms_threshold"],
                           c["nms_eta"])
        # the background class is skipped: it neither merges (the boxes are shared by all
        # classes, as Paddle's kernel mutates them in place) nor keeps anything
        bg = cls == c["background_label"]
        return jnp.where(bg, b, nb), (keep & ~bg, order, s[order])
    final, (keep, order, s) = jax.lax.scan(cls_step, boxes, (jnp.arange(ncls), scores))
    rows, count, _ = select_rows(keep, order, s, final, k)
    return rows, count


@lowering("locality_aware_nms")
def _locality_aware_nms(c, BBoxes, Scores):
    k = nms_bound(c, *Scores.shape[1:])
    rows, counts = jax.vmap(lambda b, s: _locality_image(b, s, c, k))(BBoxes, Scores)
    return {"Out": pack(rows, counts)}


def _c_round(v):
    return jnp.floor(v + 0.5)  # C's round for the positive image sizes


def _retina_level(c, deltas, scores, anchors, info, last):
    """One level of one image: the nms_top_k best (anchor, class) scores over the threshold
    as (boxes, scores, classes, valid), decoded and clipped as Paddle's retinanet op."""
    m, ncls = scores.shape
    flat = scores.reshape(-1)
    thr = 0.0 if last else c["score_threshold"]
    k = m * ncls if c["nms_top_k"] < 0 else min(c["nms_top_k"], m * ncls)
    idx = jnp.argsort(jnp.where(flat > thr, -flat, jnp.inf), stable=True)[:k]
    valid = flat[idx] > thr
    a, cls = idx // ncls, idx % ncls
    an, d = anchors[a], deltas[a]
    aw, ah = an[:, 2] - an[:, 0] + 1, an[:, 3] - an[:, 1] + 1
    cx, cy = d[:, 0] * aw + an[:, 0] + aw / 2, d[:, 1] * ah + an[:, 1] + ah / 2
    w, h = jnp.exp(d[:, 2]) * aw, jnp.exp(d[:, 3]) * ah
    box = jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], -1) / info[2]
    hi = jnp.stack([_c_round(info[1] / info[2]), _c_round(info[0] / info[2])] * 2) - 1
    box = jnp.maximum(jnp.minimum(box, hi), 0)
    return box, flat[idx], cls, valid


def _retina_image(c, deltas, scores, anchors, info, ncls):
    parts = [_retina_level(c, d, s, a, info, lvl == len(deltas) - 1)
             for lvl, (d, s, a) in enumerate(zip(deltas, scores, anchors))]
    box, score, cls, valid = (jnp.concatenate(p) for p in zip(*parts))
    # one NMS per class over one score order: a stable sort keeps each class's own order
    order = jnp.argsort(jnp.where(valid, -score, jnp.inf), stable=True)
    box, score, cls, valid = box[order], score[order], cls[order], valid[order]
    keep = greedy_keep(overlap(box, False), valid, c["nms_threshold"], c["nms_eta"],
                       groups=cls, n_groups=ncls)
    # Paddle gathers the kept ones class by class, then stable-sorts them by score
    pos = jnp.arange(score.shape[0])
    best = jnp.lexsort((pos, cls, jnp.where(keep, -score, jnp.inf)))
    k = min(c["keep_top_k"], score.shape[0])
    best = best[:k]
    real = keep[best]
    rows = jnp.concatenate([(cls[best] + 1)[:, None].astype(box.dtype),
                            score[best][:, None], box[best]], axis=1)
    return jnp.where(real[:, None], rows, 0), jnp.sum(real)


@lowering("retinanet_detection_output")
def _retinanet_detection_output(c, BBoxes, Scores, Anchors, ImInfo):
    ncls = Scores[0].shape[2]
    rows, counts = jax.vmap(
        lambda d, s, info: _retina_image(c, d, s, Anchors, info, ncls))(BBoxes, Scores,
                                                                        ImInfo)
    return {"Out": pack(rows, counts)}
