"""yolov3_loss as whole-array JAX: predicted boxes against every ground-truth box for the
ignore mask, each box's best anchor by shape IoU, and the terms gathered at its cell."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering


def _sce(x, label):
    """Sigmoid cross entropy with logits, Paddle's stable form."""
    return jnp.maximum(x, 0) - x * label + jnp.log1p(jnp.exp(-jnp.abs(x)))


def _iou_center(a, b):
    """IoU of center-form boxes (x, y, w, h) broadcast over leading dims, as Paddle's
    CalcBoxIoU (no clamp of the union; disjoint boxes give 0)."""
    def overlap(c1, w1, c2, w2):
        return (jnp.minimum(c1 + w1 / 2, c2 + w2 / 2) - jnp.maximum(c1 - w1 / 2, c2 - w2 / 2))
    w = overlap(a[..., 0], a[..., 2], b[..., 0], b[..., 2])
    h = overlap(a[..., 1], a[..., 3], b[..., 1], b[..., 3])
    inter = jnp.where((w < 0) | (h < 0), 0.0, w * h)
    return inter / (a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter)


@lowering("yolov3_loss")
def _yolov3_loss(c, X, GTBox, GTLabel, GTScore):
    n, _, h, w = X.shape
    anchors = jnp.asarray(c["anchors"], X.dtype).reshape(-1, 2)
    mask = list(c["anchor_mask"])
    m, classes, b = len(mask), c["class_num"], GTBox.shape[1]
    size = c["downsample_ratio"] * h  # Paddle's input_size (the grid is taken as square)
    scale = c["scale_x_y"]
    bias = -0.5 * (scale - 1.0)
    pos, neg = 1.0, 0.0
    if c["use_label_smooth"]:
        smooth = min(1.0 / classes, 1.0 / 40)
        pos, neg = 1.0 - smooth, smooth
    x = X.reshape(n, m, 5 + classes, h, w)
    gt = jax.lax.stop_gradient(GTBox)  # Paddle's grad has no GTBox / GTScore gradient
    score = (jnp.ones((n, b), X.dtype) if GTScore is None
             else jax.lax.stop_gradient(GTScore).astype(X.dtype))
    valid = (gt[..., 2] >= 1e-6) & (gt[..., 3] >= 1e-6)

    # ignore mask: each prediction's best IoU with a valid box (the grid size is H for x too)
    an = anchors[jnp.asarray(mask)]
    col = jnp.arange(w, dtype=X.dtype)[None, None, None, :]
    row = jnp.arange(h, dtype=X.dtype)[None, None, :, None]
    pred = jnp.stack([(col + jax.nn.sigmoid(x[:, :, 0]) * scale + bias) / h,
                      (row + jax.nn.sigmoid(x[:, :, 1]) * scale + bias) / h,
                      jnp.exp(x[:, :, 2]) * an[None, :, 0, None, None] / size,
                      jnp.exp(x[:, :, 3]) * an[None, :, 1, None, None] / size], axis=-1)
    iou = _iou_center(pred[:, :, :, :, None, :], gt[:, None, None, None, :, :])
    best = jnp.max(jnp.where(valid[:, None, None, None, :], iou, 0.0), axis=-1,
                   initial=0.0)
    obj = jnp.where(jax.lax.stop_gradient(best) > c["ignore_thresh"], -1.0, 0.0).astype(
        X.dtype)

    # each valid box's best anchor by shape alone (first maximum; 0 when none overlaps)
    shape_iou = _iou_center(
        jnp.concatenate([jnp.zeros((n, b, 1, 2), X.dtype), gt[:, :, None, 2:]], -1),
        jnp.concatenate([jnp.zeros_like(anchors), anchors / size], -1)[None, None])
    best_n = jnp.argmax(shape_iou, axis=-1)
    table = jnp.full(anchors.shape[0], -1, jnp.int32).at[jnp.asarray(mask)].set(
        jnp.arange(m, dtype=jnp.int32))
    match = jnp.where(valid, table[best_n], -1)
    hit = match >= 0
    gi = jnp.clip((gt[..., 0] * w).astype(jnp.int32), 0, w - 1)
    gj = jnp.clip((gt[..., 1] * h).astype(jnp.int32), 0, h - 1)
    mi = jnp.maximum(match, 0)
    cell = x[jnp.arange(n)[:, None], mi, :, gj, gi]  # [N, B, 5 + C]
    tx = gt[..., 0] * h - gi
    ty = gt[..., 1] * h - gj
    ab = anchors[best_n]
    tw = jnp.log(jnp.where(hit, gt[..., 2] * size / ab[..., 0], 1.0))
    th = jnp.log(jnp.where(hit, gt[..., 3] * size / ab[..., 1], 1.0))
    weight = (2.0 - gt[..., 2] * gt[..., 3]) * score
    loc = (_sce(cell[..., 0], tx) + _sce(cell[..., 1], ty) + jnp.abs(tw - cell[..., 2])
           + jnp.abs(th - cell[..., 3])) * weight
    onehot = jnp.arange(classes)[None, None, :] == GTLabel[..., None]
    cls = jnp.sum(_sce(cell[..., 5:], jnp.where(onehot, pos, neg)), -1) * score
    box_loss = jnp.sum(jnp.where(hit, loc + cls, 0.0), axis=1)

    # the objectness target of a cell is the score of the last box landing there (Paddle
    # writes them in box order); boxes overwritten by a later one are dropped from the scatter
    flat = jnp.where(hit, (mi * h + gj) * w + gi, -1)
    later = jnp.triu(jnp.ones((b, b), bool), 1)
    shadowed = jnp.any((flat[:, :, None] == flat[:, None, :]) & later[None], axis=-1)
    target = jnp.where(hit & ~shadowed, flat, m * h * w)
    obj = obj.reshape(n, -1).at[jnp.arange(n)[:, None], target].set(score, mode="drop")
    obj = obj.reshape(n, m, h, w)
    logit = x[:, :, 4]
    obj_loss = jnp.where(obj > 1e-5, _sce(logit, 1.0) * obj,
                         jnp.where(obj > -0.5, _sce(logit, 0.0), 0.0))
    loss = box_loss + jnp.sum(obj_loss, axis=(1, 2, 3))
    return {"Loss": loss, "ObjectnessMask": obj, "GTMatchMask": match.astype(jnp.int32)}
