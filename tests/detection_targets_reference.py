"""Loop-by-loop NumPy references of Paddle 1.8's yolov3_loss, mine_hard_examples and the
SSD loss pipeline, for tests/test_layers_detection_targets.py."""

from __future__ import annotations

import math

import numpy as np


def _sce(x, label):
    return max(x, 0.0) - x * label + math.log(1.0 + math.exp(-abs(x)))


def _sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def _iou(a, b):
    def overlap(c1, w1, c2, w2):
        return min(c1 + w1 / 2, c2 + w2 / 2) - max(c1 - w1 / 2, c2 - w2 / 2)
    w = overlap(a[0], a[2], b[0], b[2])
    h = overlap(a[1], a[3], b[1], b[3])
    inter = 0.0 if w < 0 or h < 0 else w * h
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def yolov3_loss_ref(x, gt_box, gt_label, anchors, mask, classes, ignore, ds, gt_score=None,
                    smooth=True, scale=1.0):
    n, _, h, w = x.shape
    b = gt_box.shape[1]
    m = len(mask)
    size = ds * h
    bias = -0.5 * (scale - 1)
    pos, neg = 1.0, 0.0
    if smooth:
        s = min(1.0 / classes, 1.0 / 40)
        pos, neg = 1.0 - s, s
    xs = x.reshape(n, m, 5 + classes, h, w).astype(np.float64)
    score = np.ones((n, b)) if gt_score is None else gt_score
    loss = np.zeros(n)
    obj = np.zeros((n, m, h, w))
    match = np.zeros((n, b), np.int32)
    for i in range(n):
        valid = [gt_box[i, t, 2] >= 1e-6 and gt_box[i, t, 3] >= 1e-6 for t in range(b)]
        for j in range(m):
            aw, ah = anchors[2 * mask[j]], anchors[2 * mask[j] + 1]
            for k in range(h):
                for l_ in range(w):
                    p = xs[i, j, :, k, l_]
                    pred = ((l_ + _sigmoid(p[0]) * scale + bias) / h,
                            (k + _sigmoid(p[1]) * scale + bias) / h,
                            math.exp(p[2]) * aw / size, math.exp(p[3]) * ah / size)
                    best = 0.0
                    for t in range(b):
                        if valid[t]:
                            best = max(best, _iou(pred, gt_box[i, t]))
                    if best > ignore:
                        obj[i, j, k, l_] = -1
        for t in range(b):
            if not valid[t]:
                match[i, t] = -1
                continue
            gx, gy, gw, gh = gt_box[i, t]
            gi, gj = int(gx * w), int(gy * h)
            best, best_n = 0.0, 0
            for a in range(len(anchors) // 2):
                iou = _iou((0, 0, anchors[2 * a] / size, anchors[2 * a + 1] / size),
                           (0, 0, gw, gh))
                if iou > best:
                    best, best_n = iou, a
            mi = mask.index(best_n) if best_n in mask else -1
            match[i, t] = mi
            if mi < 0:
                continue
            sc = score[i, t]
            p = xs[i, mi, :, gj, gi]
            wt = (2 - gw * gh) * sc
            loss[i] += (_sce(p[0], gx * h - gi) + _sce(p[1], gy * h - gj)
                        + abs(math.log(gw * size / anchors[2 * best_n]) - p[2])
                        + abs(math.log(gh * size / anchors[2 * best_n + 1]) - p[3])) * wt
            obj[i, mi, gj, gi] = sc
            for cl in range(classes):
                loss[i] += _sce(p[5 + cl], pos if cl == gt_label[i, t] else neg) * sc
        for j in range(m):
            for k in range(h):
                for l_ in range(w):
                    o, p = obj[i, j, k, l_], xs[i, j, 4, k, l_]
                    if o > 1e-5:
                        loss[i] += _sce(p, 1.0) * o
                    elif o > -0.5:
                        loss[i] += _sce(p, 0.0)
    return loss, obj, match


def mine_ref(cls_loss, loc_loss, match, dist, ratio, thresh, kind, sample_size):
    """(negative indices per image, updated match indices)."""
    n, p = match.shape
    updated = match.copy()
    negs = []
    for i in range(n):
        cand = []
        for j in range(p):
            ok = (match[i, j] == -1 and dist[i, j] < thresh) if kind == "max_negative" else True
            if ok:
                loss = cls_loss[i, j] + (loc_loss[i, j] if kind == "hard_example"
                                         and loc_loss is not None else 0.0)
                cand.append((loss, j))
        if kind == "max_negative":
            k = min(int(np.float32(np.sum(match[i] != -1)) * np.float32(ratio)), len(cand))
        else:
            k = min(sample_size, len(cand))
        cand.sort(key=lambda e: -e[0])
        sel = sorted(j for _, j in cand[:k])
        if kind == "hard_example":
            for j in range(p):
                if match[i, j] > -1 and j not in sel:
                    updated[i, j] = -1
            sel = [j for j in sel if match[i, j] == -1]
        negs.append(sel)
    return negs, updated


def iou_corner(x, y):
    out = np.zeros((len(x), len(y)))
    for i, a in enumerate(x):
        for j, b in enumerate(y):
            iw = max(min(a[2], b[2]) - max(a[0], b[0]), 0)
            ih = max(min(a[3], b[3]) - max(a[1], b[1]), 0)
            inter = iw * ih
            out[i, j] = inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1])
                                 - inter)
    return out


def match(d, per_prediction, threshold):
    """Greedy bipartite matching of columns (priors) to rows (boxes), then per_prediction."""
    r, m = d.shape
    idx, val = -np.ones(m, np.int32), np.zeros(m)
    rows, cols = set(range(r)), set(range(m))
    while rows and cols:
        best = max(((d[i, j], j, i) for j in sorted(cols) for i in sorted(rows)
                    if d[i, j] >= 1e-6), default=None, key=lambda e: e[0])
        if best is None:
            break
        _, j, i = best
        idx[j], val[j] = i, d[i, j]
        rows.discard(i)
        cols.discard(j)
    if per_prediction:
        for j in range(m):
            if idx[j] < 0:
                i = int(np.argmax(d[:, j]))
                if d[i, j] >= threshold and d[i, j] >= 1e-6:
                    idx[j], val[j] = i, d[i, j]
    return idx, val


def encode(prior, var, box):
    pw, ph = prior[2] - prior[0], prior[3] - prior[1]
    pcx, pcy = prior[0] + pw / 2, prior[1] + ph / 2
    tw, th = box[2] - box[0], box[3] - box[1]
    tcx, tcy = box[0] + tw / 2, box[1] + th / 2
    return np.array([(tcx - pcx) / pw, (tcy - pcy) / ph, math.log(tw / pw),
                     math.log(th / ph)]) / var


def _smooth_l1(d):
    return np.where(np.abs(d) < 1, 0.5 * d * d, np.abs(d) - 0.5)


def ssd_loss_ref(loc, conf, boxes, labels, prior, var, background=0, overlap=0.5, ratio=3.0,
                 neg_overlap=0.5, loc_w=1.0, conf_w=1.0, match_type="per_prediction",
                 normalize=True):
    """``boxes``/``labels``: one array per image."""
    n, p, _ = conf.shape
    logp = conf - conf.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    idx, dist = np.zeros((n, p), np.int32), np.zeros((n, p))
    for i in range(n):
        idx[i], dist[i] = match(iou_corner(boxes[i], prior), match_type == "per_prediction",
                                overlap)
    target = np.array([[labels[i][idx[i, j]] if idx[i, j] >= 0 else background
                        for j in range(p)] for i in range(n)])
    cls_loss = -np.take_along_axis(logp, target[..., None], -1)[..., 0]
    negs, _ = mine_ref(cls_loss, None, idx, dist, ratio, neg_overlap, "max_negative", 0)
    loss = np.zeros(n)
    for i in range(n):
        for j in range(p):
            if idx[i, j] >= 0:
                t = encode(prior[j], var[j], boxes[i][idx[i, j]])
                loss[i] += conf_w * cls_loss[i, j] + loc_w * _smooth_l1(loc[i, j] - t).sum()
            elif j in negs[i]:
                loss[i] += conf_w * -logp[i, j, background]
    if normalize:
        loss /= np.sum(idx >= 0)
    return loss[:, None]


def _pixel_iou(a, b):
    iw = max(min(a[2], b[2]) - max(a[0], b[0]) + 1, 0)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]) + 1, 0)
    inter = iw * ih
    area = (a[2] - a[0] + 1) * (a[3] - a[1] + 1) + (b[2] - b[0] + 1) * (b[3] - b[1] + 1)
    return inter / (area - inter)


def _delta(ex, gt):
    ew, eh = ex[2] - ex[0] + 1, ex[3] - ex[1] + 1
    gw, gh = gt[2] - gt[0] + 1, gt[3] - gt[1] + 1
    return [(gt[0] + 0.5 * gw - ex[0] - 0.5 * ew) / ew, (gt[1] + 0.5 * gh - ex[1] - 0.5 * eh) / eh,
            math.log(gw / ew), math.log(gh / eh)]


def _assign(anchors, inside, gts, pos, neg):
    """(fg candidates, bg candidates, argmax box) over the inside anchors, in index order."""
    ov = np.array([[_pixel_iou(anchors[i], g) for g in gts] for i in inside]).reshape(
        len(inside), len(gts))
    amax = ov.max(1) if len(gts) else np.full(len(inside), -np.inf)
    arg = ov.argmax(1) if len(gts) else np.zeros(len(inside), int)
    gmax = ov.max(0) if len(inside) else np.zeros(len(gts))
    fg = [k for k in range(len(inside))
          if any(abs(ov[k, j] - gmax[j]) < 1e-5 for j in range(len(gts))) or amax[k] >= pos]
    bg = [k for k in range(len(inside)) if amax[k] < neg]
    return fg, bg, arg


def rpn_ref(anchors, gts, crowd, info, batch, straddle, fg_frac, pos, neg):
    """use_random=False: per image (loc, score, label, delta, weight) lists."""
    out = []
    a = len(anchors)
    for i, (g, cr, inf) in enumerate(zip(gts, crowd, info)):
        if straddle >= 0:
            inside = [k for k in range(a) if anchors[k, 0] >= -straddle
                      and anchors[k, 1] >= -straddle and anchors[k, 2] < inf[1] + straddle
                      and anchors[k, 3] < inf[0] + straddle]
        else:
            inside = list(range(a))
        g = g[np.asarray(cr).reshape(-1) == 0] * inf[2]
        fg, bg, arg = _assign(anchors, inside, g, pos, neg)
        fg = fg[:int(fg_frac * batch)]
        label = {k: 1 for k in fg}
        bg = bg[:batch - len(fg)]
        fake = []
        for k in bg:
            if label.get(k) == 1:
                fake.append(fg[0])
            label[k] = 0
        fg_final = [k for k in range(len(inside)) if label.get(k) == 1]
        bg_final = [k for k in range(len(inside)) if label.get(k) == 0]
        loc = fake + fg_final
        out.append(([inside[k] + i * a for k in loc],
                    [inside[k] + i * a for k in fg_final + bg_final],
                    [1] * len(fg_final) + [0] * len(bg_final),
                    [_delta(anchors[inside[k]], g[arg[k]]) for k in loc],
                    [[0.0] * 4] * len(fake) + [[1.0] * 4] * len(fg_final)))
    return out


def retinanet_ref(anchors, gts, labels, crowd, info, pos, neg):
    out = []
    a = len(anchors)
    for i, (g, lab, cr, inf) in enumerate(zip(gts, labels, crowd, info)):
        keep = np.asarray(cr).reshape(-1) == 0
        g, lab = g[keep] * inf[2], np.asarray(lab).reshape(-1)[keep]
        fg, bg, arg = _assign(anchors, list(range(a)), g, pos, neg)
        fg_final = [k for k in fg if k not in bg]
        out.append((fg_final, fg_final + bg, [lab[arg[k]] for k in fg_final] + [0] * len(bg),
                    [_delta(anchors[k], g[arg[k]]) for k in fg_final], len(fg) + 1, i * a))
    return out


def rpn_candidates(anchors, gts, crowd, info, pos, neg):
    """Per image (fg candidates, bg candidates) as global anchor indices (straddle 0)."""
    out = []
    a = len(anchors)
    for i, (g, cr, inf) in enumerate(zip(gts, crowd, info)):
        inside = [k for k in range(a) if anchors[k, 0] >= 0 and anchors[k, 1] >= 0
                  and anchors[k, 2] < inf[1] and anchors[k, 3] < inf[0]]
        fg, bg, _ = _assign(anchors, inside, g[np.asarray(cr).reshape(-1) == 0] * inf[2], pos,
                            neg)
        out.append(({inside[k] + i * a for k in fg}, {inside[k] + i * a for k in bg}))
    return out
