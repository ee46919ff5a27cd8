"""rpn_target_assign and retinanet_target_assign with static shapes: each image's boxes
padded to the LoD bucket, the anchor labelling as masks over all anchors, and the kept rows
packed per image (at most N * A; rpn: N * min(A, rpn_batch_size_per_im)) as LoD values."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering
from .mining_lowering import pack_rows


def per_image(x: LoDArray):
    """[N, cap, ...] sequences of ``x`` padded with zeros, and the [N, cap] real-row mask."""
    n, cap = x.lengths[0].shape[0], x.capacity
    seg = x.segment_ids()
    pos = jnp.arange(cap) - jnp.concatenate([x.offsets(), jnp.zeros(1, jnp.int32)])[seg]
    out = jnp.zeros((n, cap, *x.data.shape[1:]), x.data.dtype)
    out = out.at[seg, pos].set(x.data, mode="drop")
    real = jnp.zeros((n, cap), bool).at[seg, pos].set(True, mode="drop")
    return out, real


def overlaps(anchor, gt):
    """[A, G] IoU of pixel boxes (+1 sizes), as Paddle's BboxOverlaps."""
    a, g = anchor[:, None, :], gt[None, :, :]
    iw = jnp.maximum(jnp.minimum(a[..., 2], g[..., 2]) - jnp.maximum(a[..., 0], g[..., 0]) + 1,
                     0)
    ih = jnp.maximum(jnp.minimum(a[..., 3], g[..., 3]) - jnp.maximum(a[..., 1], g[..., 1]) + 1,
                     0)
    inter = iw * ih

    def area(b):
        return (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)
    return inter / (area(a) + area(g) - inter)


def box_to_delta(ex, gt):
    """Paddle's BoxToDelta on pixel boxes without weights: (dx, dy, dw, dh)."""
    ew, eh = ex[..., 2] - ex[..., 0] + 1, ex[..., 3] - ex[..., 1] + 1
    gw, gh = gt[..., 2] - gt[..., 0] + 1, gt[..., 3] - gt[..., 1] + 1
    return jnp.stack([(gt[..., 0] + 0.5 * gw - ex[..., 0] - 0.5 * ew) / ew,
                      (gt[..., 1] + 0.5 * gh - ex[..., 1] - 0.5 * eh) / eh,
                      jnp.log(gw / ew), jnp.log(gh / eh)], axis=-1)


def _labels(anchor, inside, gt, usable, pos_thr, neg_thr):
    """Per image: IoU argmax box of each anchor, fg candidates (an anchor at some box's best
    IoU within 1e-5, or IoU >= pos_thr) and bg candidates (best IoU < neg_thr), inside only."""
    ov = jnp.where(inside[:, None] & usable[None, :], overlaps(anchor, gt), -1.0)
    amax, arg = jnp.max(ov, axis=1), jnp.argmax(ov, axis=1)
    gmax = jnp.max(ov, axis=0)
    at_best = jnp.any(usable[None, :] & (jnp.abs(ov - gmax[None, :]) < 1e-5), axis=1)
    fg = inside & (at_best | (amax >= pos_thr))
    bg = inside & (amax < neg_thr)
    return fg, bg, arg


def _first_k(mask, k, key):
    """The k entries of ``mask`` first in ``key`` order (ties by index), and that order."""
    order = jnp.argsort(jnp.where(mask, key, jnp.inf), stable=True)
    rank = jnp.zeros(mask.shape, jnp.int32).at[order].set(jnp.arange(mask.shape[0],
                                                                        dtype=jnp.int32))
    return mask & (rank < k), order


def _in_order(mask, bound):
    """Indices of ``mask`` ascending, padded to ``bound`` entries."""
    return jnp.argsort(~mask, stable=True)[:bound]


def _gather_targets(anchor, gt, arg, loc, keep_loc):
    return jnp.where(keep_loc[:, None], box_to_delta(anchor[loc], gt[arg[loc]]), 0.0)


@lowering("rpn_target_assign")
def _rpn_target_assign(c, Anchor, GtBoxes, IsCrowd, ImInfo):
    a = Anchor.shape[0]
    boxes, real = per_image(GtBoxes)
    crowd, _ = per_image(IsCrowd)
    n = boxes.shape[0]
    bound = min(a, c["rpn_batch_size_per_im"])
    fg_max = int(c["rpn_fg_fraction"] * c["rpn_batch_size_per_im"])
    keys = (jax.random.uniform(c.rng(c["seed"]), (n, 2, a)) if c["use_random"]
            else jnp.broadcast_to(jnp.arange(a, dtype=jnp.float32), (n, 2, a)))
    t = c["rpn_straddle_thresh"]

    def image(gt, ok, cr, info, key):
        if t >= 0:
            inside = ((Anchor[:, 0] >= -t) & (Anchor[:, 1] >= -t)
                      & (Anchor[:, 2] < info[1] + t) & (Anchor[:, 3] < info[0] + t))
        else:
            inside = jnp.ones(a, bool)
        usable = ok & (cr.reshape(ok.shape[0], -1)[:, 0] == 0)
        gt = gt * info[2]
        fg, bg, arg = _labels(Anchor, inside, gt, usable, c["rpn_positive_overlap"],
                              c["rpn_negative_overlap"])
        # Paddle's reservoir sampling keeps a uniform subset; use_random=False the first ones
        fg, fg_order = _first_k(fg, fg_max, key[0])
        n_fg = jnp.sum(fg)
        bg, _ = _first_k(bg, c["rpn_batch_size_per_im"] - n_fg, key[1])
        # an anchor both sampled fg and bg ends bg; Paddle still emits a location row for it
        # (the first sampled fg anchor, weight 0) ahead of the real fg rows
        fake = jnp.sum(fg & bg)
        fg &= ~bg
        p = jnp.arange(bound)
        real_fg = _in_order(fg, bound)
        loc = jnp.where(p < fake, fg_order[0], real_fg[jnp.maximum(p - fake, 0)])
        keep_loc = p < fake + jnp.sum(fg)
        score = jnp.argsort(jnp.where(fg, 0, jnp.where(bg, 1, 2)), stable=True)[:bound]
        keep_score = p < jnp.sum(fg) + jnp.sum(bg)
        label = (p < jnp.sum(fg)).astype(jnp.int32)
        weight = jnp.broadcast_to((p >= fake)[:, None], (bound, 4)).astype(Anchor.dtype)
        return (loc, keep_loc, score, keep_score, label, weight,
                _gather_targets(Anchor, gt, arg, loc, keep_loc))

    loc, keep_loc, score, keep_score, label, weight, target = jax.vmap(image)(
        boxes, real, crowd, ImInfo, keys)
    offset = (jnp.arange(n, dtype=jnp.int32) * a)[:, None]
    return {"LocationIndex": pack_rows(keep_loc, loc.astype(jnp.int32) + offset),
            "ScoreIndex": pack_rows(keep_score, score.astype(jnp.int32) + offset),
            "TargetBBox": pack_rows(keep_loc, target),
            "TargetLabel": pack_rows(keep_score, label[..., None]),
            "BBoxInsideWeight": pack_rows(keep_loc, weight)}


@lowering("retinanet_target_assign")
def _retinanet_target_assign(c, Anchor, GtBoxes, GtLabels, IsCrowd, ImInfo):
    a = Anchor.shape[0]
    boxes, real = per_image(GtBoxes)
    labels, _ = per_image(GtLabels)
    crowd, _ = per_image(IsCrowd)
    n = boxes.shape[0]

    def image(gt, ok, lab, cr, info):
        usable = ok & (cr.reshape(ok.shape[0], -1)[:, 0] == 0)
        gt = gt * info[2]
        fg, bg, arg = _labels(Anchor, jnp.ones(a, bool), gt, usable,
                              c["positive_overlap"], c["negative_overlap"])
        candidates = jnp.sum(fg)
        fg &= ~bg
        p = jnp.arange(a)
        loc = _in_order(fg, a)
        keep_loc = p < jnp.sum(fg)
        score = jnp.argsort(jnp.where(fg, 0, jnp.where(bg, 1, 2)), stable=True)
        keep_score = p < jnp.sum(fg) + jnp.sum(bg)
        gt_label = lab.reshape(ok.shape[0], -1)[:, 0].astype(jnp.int32)
        label = jnp.where(keep_loc, gt_label[arg[loc]], 0)
        weight = jnp.ones((a, 4), Anchor.dtype)
        return (loc, keep_loc, score, keep_score, label, weight,
                _gather_targets(Anchor, gt, arg, loc, keep_loc), candidates + 1)

    loc, keep_loc, score, keep_score, label, weight, target, count = jax.vmap(image)(
        boxes, real, labels, crowd, ImInfo)
    offset = (jnp.arange(n, dtype=jnp.int32) * a)[:, None]
    return {"LocationIndex": pack_rows(keep_loc, loc.astype(jnp.int32) + offset),
            "ScoreIndex": pack_rows(keep_score, score.astype(jnp.int32) + offset),
            "TargetBBox": pack_rows(keep_loc, target),
            "TargetLabel": pack_rows(keep_score, label[..., None]),
            "BBoxInsideWeight": pack_rows(keep_loc, weight),
            "ForegroundNumber": LoDArray(count.astype(jnp.int32)[:, None],
                                         (jnp.ones(n, jnp.int32),))}
