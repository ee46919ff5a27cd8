"""Mask R-CNN mask targets on the host (NumPy; the op runs here as Paddle's CPU-only kernel
does): polygon rasterisation as Paddle's mask_util Poly2Mask and per-image sampling."""

from __future__ import annotations

import numpy as np

_SCALE = 5.0  # Poly2Mask walks the edges on a grid 5 times finer than the pixels
_FLT_MIN = np.float32(np.finfo(np.float32).tiny)  # numeric_limits<float>::min()


def poly_to_mask(xy, h: int, w: int) -> np.ndarray:
    """[h, w] uint8 mask of the polygon ``xy`` [k, 2] (float32 pixel coordinates): its edges
    walked on the 5x grid, one boundary point per crossed pixel column, filled by parity."""
    xy = np.asarray(xy, np.float32).reshape(-1, 2).astype(np.float64)
    x = np.trunc(_SCALE * xy[:, 0] + .5).astype(np.int64)
    y = np.trunc(_SCALE * xy[:, 1] + .5).astype(np.int64)
    xs, xe, ys, ye = x, np.roll(x, -1), y, np.roll(y, -1)
    dx, dy = np.abs(xe - xs), np.abs(ys - ye)
    along_x = dx >= dy
    flip = (along_x & (xs > xe)) | (~along_x & (ys > ye))
    xs, xe = np.where(flip, xe, xs), np.where(flip, xs, xe)
    ys, ye = np.where(flip, ye, ys), np.where(flip, ys, ye)
    span = np.maximum(dx, dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(along_x, (ye - ys) / dx, (xe - xs) / dy)
    # every edge's points, in walking order (first point to last)
    edge = np.repeat(np.arange(x.size), span + 1)
    d = np.arange(edge.size) - np.repeat(np.cumsum(span + 1) - (span + 1), span + 1)
    t = np.where(flip[edge], span[edge] - d, d)
    with np.errstate(invalid="ignore"):
        frac = np.nan_to_num(s[edge] * t)  # a repeated point (0/0) has one unused point
    ax = along_x[edge]
    u = np.where(ax, t + xs[edge], np.trunc(xs[edge] + frac + .5)).astype(np.int64)
    v = np.where(ax, np.trunc(ys[edge] + frac + .5), t + ys[edge]).astype(np.int64)
    # a boundary point where the walk crosses into another column at a pixel centre
    moved = np.flatnonzero(u[1:] != u[:-1]) + 1
    xd = np.minimum(u[moved], u[moved - 1]).astype(np.float64)
    xd = (xd + .5) / _SCALE - .5
    keep = (np.floor(xd) == xd) & (xd >= 0) & (xd <= w - 1)
    yd = np.minimum(v[moved], v[moved - 1]).astype(np.float64)
    yd = np.ceil(np.clip((yd + .5) / _SCALE - .5, 0, h))
    pos = (xd[keep] * h + yd[keep]).astype(np.int64)
    # the run-length decode of the sorted points: each point toggles the rest (column-major)
    toggles = np.bincount(pos[pos < h * w], minlength=h * w)
    flat = (np.cumsum(toggles) % 2).astype(np.uint8)
    return flat.reshape(w, h).T.copy()


def poly_boxes(gt_polys) -> np.ndarray:
    """[G, 4] float32 box around each gt's polygons (Paddle's Poly2Boxes, its FLT_MIN start
    for the maxima included)."""
    out = np.zeros((len(gt_polys), 4), np.float32)
    for i, polys in enumerate(gt_polys):
        pts = np.concatenate(polys) if polys else np.zeros((0, 2), np.float32)
        big = np.float32(np.finfo(np.float32).max)
        out[i] = [min(big, pts[:, 0].min(initial=big)), min(big, pts[:, 1].min(initial=big)),
                  max(_FLT_MIN, pts[:, 0].max(initial=_FLT_MIN)),
                  max(_FLT_MIN, pts[:, 1].max(initial=_FLT_MIN))]
    return out


def box_overlaps(a, b) -> np.ndarray:
    """[A, B] IoU with Paddle's +1 pixel widths (BboxOverlaps), float32."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    one = np.float32(1)
    area_a = (a[:, 2] - a[:, 0] + one) * (a[:, 3] - a[:, 1] + one)
    area_b = (b[:, 2] - b[:, 0] + one) * (b[:, 3] - b[:, 1] + one)
    iw = np.maximum(np.minimum(a[:, None, 2], b[None, :, 2])
                    - np.maximum(a[:, None, 0], b[None, :, 0]) + one, 0)
    ih = np.maximum(np.minimum(a[:, None, 3], b[None, :, 3])
                    - np.maximum(a[:, None, 1], b[None, :, 1]) + one, 0)
    inter = iw * ih
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (area_a[:, None] + area_b[None, :] - inter)
    return np.where(inter > 0, iou, 0).astype(np.float32)


def polys_to_mask_in_box(polys, box, m: int) -> np.ndarray:
    """[m, m] union of the polygons' masks in ``box`` scaled to m x m (Polys2MaskWrtBox)."""
    box = np.asarray(box, np.float32)
    w = max(box[2] - box[0], np.float32(1))
    h = max(box[3] - box[1], np.float32(1))
    mask = np.zeros((m, m), np.uint8)
    for poly in polys:
        poly = np.asarray(poly, np.float32)
        p = np.stack([(poly[:, 0] - box[0]) * np.float32(m) / w,
                      (poly[:, 1] - box[1]) * np.float32(m) / h], axis=1)
        mask |= poly_to_mask(p, m, m)
    return mask


def sample_image(im_info, classes, crowd, polys, rois, labels, num_classes: int, m: int):
    """One image's (mask rois [K, 4], roi indices [K], mask targets [K, num_classes * m^2])."""
    gt_polys = [polys[i] for i in range(len(classes)) if classes[i] > 0 and crowd[i] == 0]
    scale = np.float32(im_info[2])
    fg = np.flatnonzero(labels > 0)
    if fg.size:
        boxes = rois[fg].astype(np.float32) / scale
        cls = labels[fg]
        if gt_polys:
            iou = box_overlaps(boxes, poly_boxes(gt_polys))
            best = np.where(iou.max(axis=1) > _FLT_MIN, iou.argmax(axis=1), 0)
            masks = [polys_to_mask_in_box(gt_polys[g], b, m) for g, b in zip(best, boxes)]
        else:  # Paddle reads past its gt list here; graphc gives empty masks
            masks = [np.zeros((m, m), np.uint8) for _ in fg]
        has = fg
    else:
        # no foreground: the image's first roi as a background mask (all -1), indexed by
        # its first background roi (Paddle leaves the index unset when there is none: -1)
        boxes = rois[:1].astype(np.float32) / scale
        cls, masks = np.zeros(1, np.int64), [None]
        bg = np.flatnonzero(labels == 0)
        has = bg[:1] if bg.size else np.array([-1])
    size = m * m
    targets = np.full((len(cls), num_classes * size), -1, np.int32)
    for i, (k, mask) in enumerate(zip(cls, masks)):
        if 0 < k < num_classes:
            targets[i, k * size:(k + 1) * size] = mask.reshape(-1)
    return boxes * scale, has.astype(np.int32), targets


def _spans(lengths):
    ends = np.cumsum(np.asarray(lengths, np.int64))
    return np.stack([ends - lengths, ends], axis=1) if ends.size else np.zeros((0, 2), int)


def generate_mask_labels(num_classes: int, resolution: int, im_info, classes, class_lens,
                         crowd, crowd_lens, segms, gt_lens, poly_lens, point_lens, rois,
                         roi_lens, labels, label_lens):
    """The op on packed LoD buffers: outputs in buffers of the rois' capacity (every image
    gives at most one row per roi) and the rows per image."""
    cap, width = rois.shape[0], num_classes * resolution ** 2
    out_rois = np.zeros((cap, 4), rois.dtype)
    out_has = np.zeros((cap, 1), np.int32)
    out_masks = np.zeros((cap, width), np.int32)
    counts = np.zeros(len(roi_lens), np.int32)
    poly_spans, point_spans = _spans(poly_lens), _spans(point_lens)
    gt_spans = _spans(gt_lens)
    cls_spans, crowd_spans = _spans(class_lens), _spans(crowd_lens)
    roi_spans, label_spans = _spans(roi_lens), _spans(label_lens)
    row = 0
    for i in range(len(roi_lens)):
        ra, rb = roi_spans[i]
        if ra == rb:
            continue
        ga, gb = gt_spans[i]
        polys = [[segms[point_spans[p][0]:point_spans[p][1]]
                  for p in range(*poly_spans[g])] for g in range(ga, gb)]
        la, lb = label_spans[i]
        boxes, has, targets = sample_image(
            im_info[i], classes[slice(*cls_spans[i])].reshape(-1),
            crowd[slice(*crowd_spans[i])].reshape(-1), polys, rois[ra:rb],
            labels[la:lb].reshape(-1), num_classes, resolution)
        k = len(has)
        out_rois[row:row + k], out_has[row:row + k, 0], out_masks[row:row + k] = (
            boxes, has, targets)
        counts[i], row = k, row + k
    return out_rois, out_has, out_masks, counts
