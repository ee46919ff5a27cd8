"""generate_proposals, distribute_fpn_proposals and collect_fpn_proposals with static shapes:
each output holds its bound of rows, the LoD says how many are real per image."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray
from ...backends.lowering import lowering
from ..detection.nms_lowering import greedy_keep, overlap, pack

_BBOX_CLIP = math.log(1000.0 / 16.0)  # Paddle's bound on the decoded log-size deltas


def _compact(mask, values, k):
    """The rows of ``values`` where ``mask``, in order, in a [k, ...] buffer (zeros after),
    and how many (at most k)."""
    pos = jnp.cumsum(mask) - 1
    target = jnp.where(mask & (pos < k), pos, k)
    out = jnp.zeros((k + 1,) + values.shape[1:], values.dtype).at[target].set(values)
    return out[:k], jnp.minimum(jnp.sum(mask), k)


def _decode(anchor, delta, var):
    """Paddle's BoxCoder of bbox_util.h (pixel boxes, +1 sizes, clipped log-size deltas)."""
    aw, ah = anchor[:, 2] - anchor[:, 0] + 1, anchor[:, 3] - anchor[:, 1] + 1
    acx, acy = anchor[:, 0] + 0.5 * aw, anchor[:, 1] + 0.5 * ah
    cx, cy = var[:, 0] * delta[:, 0] * aw + acx, var[:, 1] * delta[:, 1] * ah + acy
    w = jnp.exp(jnp.minimum(var[:, 2] * delta[:, 2], _BBOX_CLIP)) * aw
    h = jnp.exp(jnp.minimum(var[:, 3] * delta[:, 3], _BBOX_CLIP)) * ah
    return jnp.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], axis=1)


def _proposal_bound(c, total):
    pre = c["pre_nms_topN"]
    pre = pre if 0 < pre < total else total
    post = c["post_nms_topN"]
    if c["nms_thresh"] > 0 and 0 < post < pre:
        return pre, post
    return pre, pre


def _one_image(c, scores, deltas, info, anchors, var):
    a, h, w = scores.shape
    s = scores.transpose(1, 2, 0).reshape(-1)
    d = deltas.transpose(1, 2, 0).reshape(-1, 4)
    pre, bound = _proposal_bound(c, a * h * w)
    order = jnp.argsort(-s, stable=True)[:pre]
    s, box = s[order], _decode(anchors[order], d[order], var[order])
    box = jnp.maximum(jnp.minimum(box, jnp.stack([info[1], info[0]] * 2) - 1), 0)
    # FilterBoxes: sizes at the original scale, centres inside the image
    min_size = max(c["min_size"], 1.0)
    ws = (box[:, 2] - box[:, 0]) / info[2] + 1
    hs = (box[:, 3] - box[:, 1]) / info[2] + 1
    xc = box[:, 0] + (box[:, 2] - box[:, 0] + 1) / 2
    yc = box[:, 1] + (box[:, 3] - box[:, 1] + 1) / 2
    keep = (ws >= min_size) & (hs >= min_size) & (xc <= info[1]) & (yc <= info[0])
    if c["nms_thresh"] > 0:
        keep = greedy_keep(overlap(box, False), keep, c["nms_thresh"], c["eta"])
    rows = jnp.concatenate([box, s[:, None]], axis=1)
    rows, count = _compact(keep, rows, bound)
    # Paddle answers an image without proposals with one zero box of score 0
    return rows, jnp.maximum(count, 1)


@lowering("generate_proposals")
def _generate_proposals(c, Scores, BboxDeltas, ImInfo, Anchors, Variances):
    anchors, var = Anchors.reshape(-1, 4), Variances.reshape(-1, 4)
    rows, counts = jax.vmap(lambda s, d, i: _one_image(c, s, d, i, anchors, var))(
        Scores, BboxDeltas, ImInfo)
    out = pack(rows, counts)
    return {"RpnRois": out.with_data(out.data[:, :4]),
            "RpnRoiProbs": out.with_data(out.data[:, 4:])}


@lowering("distribute_fpn_proposals")
def _distribute_fpn_proposals(c, FpnRois):
    rois, valid, seg = FpnRois.data, FpnRois.valid(), FpnRois.segment_ids()
    n, t = FpnRois.num_sequences, FpnRois.capacity
    lo, hi = c["min_level"], c["max_level"]
    w, h = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
    area = jnp.where((w < 0) | (h < 0), 0.0, (w + 1) * (h + 1))
    scale = jnp.sqrt(area)
    raw = jnp.floor(jnp.log2(jnp.where(area > 0, scale, 1.0) / c["refer_scale"])
                    + c["refer_level"])
    lvl = jnp.clip(jnp.where(area > 0, raw, lo), lo, hi).astype(jnp.int32) - lo
    onehot = (lvl[:, None] == jnp.arange(hi - lo + 1)[None, :]) & valid[:, None]
    rank = jnp.cumsum(onehot, axis=0) - 1  # place of each roi within its level
    outs = []
    for j in range(hi - lo + 1):
        target = jnp.where(onehot[:, j], rank[:, j], t)
        data = jnp.zeros((t + 1, 4), rois.dtype).at[target].set(rois)[:t]
        counts = jax.ops.segment_sum(onehot[:, j].astype(jnp.int32), seg, num_segments=n + 1)
        outs.append(LoDArray(data, (counts[:n],)))
    total = jnp.sum(onehot, axis=0)
    before = jnp.cumsum(total) - total
    restore = before[lvl] + jnp.take_along_axis(rank, lvl[:, None], axis=1)[:, 0]
    restore = jnp.where(valid, restore, 0).astype(jnp.int32)[:, None]
    return {"MultiFpnRois": outs, "RestoreIndex": FpnRois.with_data(restore)}


@lowering("collect_fpn_proposals")
def _collect_fpn_proposals(c, MultiLevelRois, MultiLevelScores):
    n = MultiLevelRois[0].num_sequences
    rois = jnp.concatenate([r.data for r in MultiLevelRois])
    score = jnp.concatenate([s.data[:, 0] for s in MultiLevelScores])
    valid = jnp.concatenate([r.valid() for r in MultiLevelRois])
    image = jnp.concatenate([r.segment_ids() for r in MultiLevelRois])
    k = min(c["post_nms_topN"], rois.shape[0])
    # the best k of all levels and images (stable by score), then stable by image
    best = jnp.argsort(jnp.where(valid, -score, jnp.inf), stable=True)[:k]
    real = valid[best]
    key = jnp.where(real, image[best], n)
    best, real, key = (v[jnp.argsort(key, stable=True)] for v in (best, real, key))
    counts = jax.ops.segment_sum(real.astype(jnp.int32), key, num_segments=n + 1)[:n]
    data = jnp.where(real[:, None], rois[best], 0)
    return {"FpnRois": LoDArray(data, (counts,))}
