"""generate_proposal_labels with static shapes: the sampling of each image over masks of the
packed LoD inputs, at most batch_size_per_im rows per image (all candidates for cascade)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from ..detection.nms_lowering import pack


def _pixel_iou(a, b):
    """[P, G] BboxOverlaps of bbox_util.h: pixel boxes (+1 sizes), 0 without intersection."""
    area = lambda x: (x[:, 2] - x[:, 0] + 1) * (x[:, 3] - x[:, 1] + 1)  # noqa: E731
    iw = jnp.maximum(jnp.minimum(a[:, None, 2], b[None, :, 2])
                     - jnp.maximum(a[:, None, 0], b[None, :, 0]) + 1, 0)
    ih = jnp.maximum(jnp.minimum(a[:, None, 3], b[None, :, 3])
                     - jnp.maximum(a[:, None, 1], b[None, :, 1]) + 1, 0)
    inter = iw * ih
    union = area(a)[:, None] + area(b)[None, :] - inter
    return jnp.where(inter == 0, 0.0, inter / jnp.where(inter == 0, 1.0, union))


def _box_to_delta(ex, gt, weights):
    """BoxToDelta of bbox_util.h (pixel sizes), divided by bbox_reg_weights."""
    ew, eh = ex[:, 2] - ex[:, 0] + 1, ex[:, 3] - ex[:, 1] + 1
    gw, gh = gt[:, 2] - gt[:, 0] + 1, gt[:, 3] - gt[:, 1] + 1
    d = jnp.stack([(gt[:, 0] + 0.5 * gw - ex[:, 0] - 0.5 * ew) / ew,
                   (gt[:, 1] + 0.5 * gh - ex[:, 1] - 0.5 * eh) / eh,
                   jnp.log(gw / ew), jnp.log(gh / eh)], axis=1)
    return d / jnp.asarray(weights, d.dtype)


def _take_first(mask, count, priority):
    """``mask`` narrowed to its ``count`` rows of least ``priority``."""
    key = jnp.where(mask, priority, jnp.inf)
    rank = jnp.argsort(jnp.argsort(key, stable=True), stable=True)
    return mask & (rank < count)


def _one_image(c, i, key, rois, rseg, classes, crowd, gt, gseg, info, bound):
    scale = info[i, 2]
    gvalid, rvalid = gseg == i, rseg == i
    r = rois / scale
    if c["is_cascade_rcnn"]:  # cascade stages drop degenerate rois first
        rvalid &= (r[:, 2] - r[:, 0] + 1 > 0) & (r[:, 3] - r[:, 1] + 1 > 0)
    boxes = jnp.concatenate([gt, r])
    valid = jnp.concatenate([gvalid, rvalid])
    iou = jnp.where(gvalid[None, :], _pixel_iou(boxes, gt), -jnp.inf)
    best = jnp.max(iou, axis=1)
    # a crowd gt box is never a sample itself (its max overlap counts as -1)
    is_crowd = jnp.concatenate([gvalid & (crowd != 0), jnp.zeros(r.shape[0], bool)])
    best = jnp.where(is_crowd, -1.0, best)
    gt_idx = jnp.argmax((jnp.abs(best[:, None] - iou) < 1e-5) & gvalid[None, :], axis=1)
    fg = valid & (best >= c["fg_thresh"]) & ~is_crowd
    bg = valid & ~fg & (best >= c["bg_thresh_lo"]) & (best < c["bg_thresh_hi"])
    p = boxes.shape[0]
    if not c["is_cascade_rcnn"]:
        n_fg = jnp.minimum(int(c["batch_size_per_im"] * c["fg_fraction"]), jnp.sum(fg))
        n_bg = jnp.minimum(c["batch_size_per_im"] - n_fg, jnp.sum(bg))
        if c["use_random"]:
            k1, k2 = jax.random.split(key)
            fg = _take_first(fg, n_fg, jax.random.uniform(k1, (p,)))
            bg = _take_first(bg, n_bg, jax.random.uniform(k2, (p,)))
        else:
            fg = _take_first(fg, n_fg, jnp.arange(p, dtype=jnp.float32))
            bg = _take_first(bg, n_bg, jnp.arange(p, dtype=jnp.float32))
    idx = jnp.arange(p)
    order = jnp.argsort(jnp.where(fg, idx, jnp.where(bg, p + idx, 2 * p)), stable=True)[:bound]
    real, is_fg = (fg | bg)[order], fg[order]
    box, g = boxes[order], gt_idx[order]
    label = jnp.where(is_fg, classes[g], 0)
    delta = _box_to_delta(box, gt[g], c["bbox_reg_weights"])
    ncls = c["class_nums"]
    block = jnp.where(c["is_cls_agnostic"], 1, label)
    hot = (label > 0)[:, None] & (jnp.arange(ncls)[None, :] == block[:, None])
    wide = jnp.where(hot[:, :, None], delta[:, None, :], 0).reshape(-1, 4 * ncls)
    weight = jnp.repeat(hot, 4, axis=1).astype(box.dtype)
    zero = lambda v: jnp.where(real.reshape((-1,) + (1,) * (v.ndim - 1)), v, 0)  # noqa: E731
    return (zero(box * scale), zero(label[:, None]), zero(wide), zero(weight),
            jnp.sum(real))


@lowering("generate_proposal_labels")
def _generate_proposal_labels(c, RpnRois, GtClasses, IsCrowd, GtBoxes, ImInfo):
    n = ImInfo.shape[0]
    p = RpnRois.capacity + GtBoxes.capacity
    bound = p if c["is_cascade_rcnn"] else min(c["batch_size_per_im"], p)
    keys = jax.random.split(c.rng(0), n)
    args = (RpnRois.data, RpnRois.segment_ids(), GtClasses.data[:, 0].astype(jnp.int32),
            IsCrowd.data[:, 0], GtBoxes.data, GtBoxes.segment_ids(), ImInfo, bound)
    rois, labels, targets, weights, counts = jax.vmap(
        lambda i, k: _one_image(c, i, k, *args))(jnp.arange(n), keys)
    return {"Rois": pack(rois, counts), "LabelsInt32": pack(labels, counts),
            "BboxTargets": pack(targets, counts), "BboxInsideWeights": pack(weights, counts),
            "BboxOutsideWeights": pack(weights, counts)}
