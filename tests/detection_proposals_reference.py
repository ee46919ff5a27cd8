"""NumPy references of Paddle 1.8's data-sized detection ops (from the kernels' documented
behaviour in paddle/fluid/operators/detection), written as plain loops."""

from __future__ import annotations

import math

import numpy as np
from detection_reference import _jaccard


def _nms(boxes, scores, order, thr, eta, normalized):
    """Greedy NMS over ``order`` (already score-sorted) with Paddle's adaptive threshold."""
    kept = []
    for i in order:
        if all(_jaccard(boxes[i], boxes[k], normalized) <= thr for k in kept):
            kept.append(i)
            if eta < 1 and thr > 0.5:
                thr *= eta
    return kept


def _stable_desc(idx, key):
    return sorted(idx, key=lambda i: -key[i])


def locality_aware_nms_ref(boxes, scores, score_threshold, nms_top_k, keep_top_k,
                           nms_threshold, normalized, eta, background):
    rows, counts = [], []
    for b0, s0 in zip(boxes, scores):
        b, s = b0.copy(), s0.copy()  # Paddle merges in place, shared by the classes
        picked = {}
        for cls in range(s.shape[0]):
            if cls == background:
                continue
            sc = s[cls]
            skip = [True] * len(b)
            last = -1
            for i in range(len(b)):
                if last > -1 and _jaccard(b[i], b[last], normalized) > nms_threshold:
                    b[last] = (b[i] * sc[i] + b[last] * sc[last]) / (sc[i] + sc[last])
                    sc[last] += sc[i]
                elif last > -1:
                    skip[last] = False
                    last = i
                else:
                    last = i
            if last > -1:
                skip[last] = False
            order = _stable_desc([i for i in range(len(b)) if sc[i] > score_threshold
                                  and not skip[i]], sc)
            if nms_top_k > -1:
                order = order[:nms_top_k]
            picked[cls] = _nms(b, sc, order, nms_threshold, eta, normalized)
        total = sum(len(v) for v in picked.values())
        if keep_top_k > -1 and total > keep_top_k:
            pairs = sorted(((s[cls, i], cls, i) for cls in sorted(picked) for i in picked[cls]),
                           key=lambda p: -p[0])[:keep_top_k]
            picked = {}
            for _, cls, i in pairs:
                picked.setdefault(cls, []).append(i)
        image = [[cls, s[cls, i], *b[i]] for cls in sorted(picked) for i in picked[cls]]
        rows += image
        counts.append(len(image))
    return np.array(rows).reshape(-1, 6), counts


def retinanet_ref(deltas, scores, anchors, info, score_threshold, nms_top_k, keep_top_k,
                  nms_threshold, eta):
    rows, counts = [], []
    levels = len(deltas)
    for n in range(deltas[0].shape[0]):
        h, w, scale = info[n]
        ih, iw = math.floor(h / scale + 0.5), math.floor(w / scale + 0.5)
        preds = {}
        for lvl in range(levels):
            flat = scores[lvl][n].reshape(-1)
            ncls = scores[lvl].shape[2]
            thr = score_threshold if lvl < levels - 1 else 0.0
            order = _stable_desc([i for i in range(len(flat)) if flat[i] > thr], flat)
            if nms_top_k > -1:
                order = order[:nms_top_k]
            for idx in order:
                a, cls = divmod(idx, ncls)
                an, d = anchors[lvl][a], deltas[lvl][n][a]
                aw, ah = an[2] - an[0] + 1, an[3] - an[1] + 1
                cx, cy = d[0] * aw + an[0] + aw / 2, d[1] * ah + an[1] + ah / 2
                bw, bh = math.exp(d[2]) * aw, math.exp(d[3]) * ah
                box = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2 - 1, cy + bh / 2 - 1])
                box /= scale
                box = np.maximum(np.minimum(box, [iw - 1, ih - 1, iw - 1, ih - 1]), 0)
                preds.setdefault(cls, []).append((*box, flat[idx]))
        pairs = []
        for cls in sorted(preds):
            dets = np.array(preds[cls])
            order = _stable_desc(range(len(dets)), dets[:, 4])
            for i in _nms(dets[:, :4], None, order, nms_threshold, eta, False):
                pairs.append((dets[i, 4], cls, dets[i]))
        pairs = sorted(pairs, key=lambda p: -p[0])[:keep_top_k]
        rows += [[cls + 1, sc, *det[:4]] for sc, cls, det in pairs]
        counts.append(len(pairs))
    return np.array(rows).reshape(-1, 6), counts


def generate_proposals_ref(scores, deltas, info, anchors, var, pre, post, nms_thresh,
                           min_size, eta):
    rois, probs, counts = [], [], []
    clip = math.log(1000.0 / 16.0)
    anchors, var = anchors.reshape(-1, 4), var.reshape(-1, 4)
    for n in range(scores.shape[0]):
        s = scores[n].transpose(1, 2, 0).reshape(-1)
        d = deltas[n].transpose(1, 2, 0).reshape(-1, 4)
        order = _stable_desc(range(len(s)), s)
        if 0 < pre < len(s):
            order = order[:pre]
        boxes = []
        for i in order:
            an, v, dd = anchors[i], var[i], d[i]
            aw, ah = an[2] - an[0] + 1, an[3] - an[1] + 1
            cx = v[0] * dd[0] * aw + an[0] + 0.5 * aw
            cy = v[1] * dd[1] * ah + an[1] + 0.5 * ah
            bw, bh = math.exp(min(v[2] * dd[2], clip)) * aw, math.exp(min(v[3] * dd[3], clip)) * ah
            box = [cx - bw / 2, cy - bh / 2, cx + bw / 2 - 1, cy + bh / 2 - 1]
            hi = [info[n][1] - 1, info[n][0] - 1] * 2
            boxes.append([max(min(x, m), 0) for x, m in zip(box, hi)])
        ms = max(min_size, 1.0)
        keep = []
        for j, b in enumerate(boxes):
            ws, hs = (b[2] - b[0]) / info[n][2] + 1, (b[3] - b[1]) / info[n][2] + 1
            xc, yc = b[0] + (b[2] - b[0] + 1) / 2, b[1] + (b[3] - b[1] + 1) / 2
            if ws >= ms and hs >= ms and xc <= info[n][1] and yc <= info[n][0]:
                keep.append(j)
        if not keep:
            rois.append([0.0] * 4)
            probs.append([0.0])
            counts.append(1)
            continue
        sel = [s[order[j]] for j in keep]
        if nms_thresh > 0:
            kb = [boxes[j] for j in keep]
            kept = _nms(kb, None, _stable_desc(range(len(kb)), sel), nms_thresh, eta, False)
            if 0 < post < len(kept):
                kept = kept[:post]
            keep = [keep[k] for k in kept]
            sel = [s[order[j]] for j in keep]
        rois += [boxes[j] for j in keep]
        probs += [[v] for v in sel]
        counts.append(len(keep))
    return np.array(rois), np.array(probs), counts


def distribute_ref(rois, lengths, lo, hi, refer_level, refer_scale):
    levels = []
    for b in rois:
        w, h = b[2] - b[0], b[3] - b[1]
        area = 0.0 if w < 0 or h < 0 else (w + 1) * (h + 1)
        lvl = lo if area == 0 else math.floor(math.log2(math.sqrt(area) / refer_scale)
                                               + refer_level)
        levels.append(min(hi, max(lvl, lo)))
    image = np.repeat(np.arange(len(lengths)), lengths)
    outs, order = [], []
    for lvl in range(lo, hi + 1):
        idx = [i for i in range(len(rois)) if levels[i] == lvl]
        order += idx
        outs.append((rois[idx].reshape(-1, 4),
                     [int(np.sum(image[idx] == n)) for n in range(len(lengths))]))
    restore = np.empty(len(rois), np.int64)
    restore[order] = np.arange(len(rois))
    return outs, restore[:, None]


def collect_ref(rois, scores, lengths, post):
    items = []
    for r, s, ln in zip(rois, scores, lengths):
        image = np.repeat(np.arange(len(ln)), ln)
        items += [(s[j, 0], image[j], r[j]) for j in range(len(r))]
    items = sorted(items, key=lambda t: -t[0])[:post]
    items = sorted(items, key=lambda t: t[1])
    n = len(lengths[0])
    return (np.array([t[2] for t in items]).reshape(-1, 4),
            [sum(1 for t in items if t[1] == i) for i in range(n)])


def _pixel_iou(a, b):
    aw, ah = a[2] - a[0] + 1, a[3] - a[1] + 1
    bw, bh = b[2] - b[0] + 1, b[3] - b[1] + 1
    iw = max(min(a[2], b[2]) - max(a[0], b[0]) + 1, 0)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]) + 1, 0)
    inter = iw * ih
    return 0.0 if inter == 0 else inter / (aw * ah + bw * bh - inter)


def proposal_labels_ref(rois, rlen, classes, crowd, gts, glen, info, batch, frac, fg_thr,
                        bg_hi, bg_lo, weights, ncls, agnostic, cascade):
    """generate_proposal_labels with use_random=False: (rois, labels, targets, weights,
    counts)."""
    out = [[], [], [], []]
    counts = []
    r0 = g0 = 0
    for n in range(len(rlen)):
        r = rois[r0:r0 + rlen[n]] / info[n][2]
        g, cls, cr = gts[g0:g0 + glen[n]], classes[g0:g0 + glen[n]], crowd[g0:g0 + glen[n]]
        r0, g0 = r0 + rlen[n], g0 + glen[n]
        if cascade:
            r = r[[(b[2] - b[0] + 1 > 0) and (b[3] - b[1] + 1 > 0) for b in r]]
        boxes = np.concatenate([g, r])
        fg, fg_gt, bg = [], [], []
        for i, b in enumerate(boxes):
            ious = [_pixel_iou(b, x) for x in g]
            best = max(ious)
            if i < len(g) and cr[i]:
                best = -1.0
            if best >= fg_thr:
                j = next(j for j, v in enumerate(ious) if abs(best - v) < 1e-5)
                fg.append(i)
                fg_gt.append(j)
            elif bg_lo <= best < bg_hi:
                bg.append(i)
        if not cascade:
            n_fg = min(int(batch * frac), len(fg))
            fg, fg_gt = fg[:n_fg], fg_gt[:n_fg]
            bg = bg[:min(batch - n_fg, len(bg))]
        for k, i in enumerate(fg + bg):
            b = boxes[i]
            label = int(cls[fg_gt[k]][0]) if k < len(fg) else 0
            t = np.zeros(4 * ncls)
            w = np.zeros(4 * ncls)
            if label > 0:
                gt = g[fg_gt[k]]
                ew, eh = b[2] - b[0] + 1, b[3] - b[1] + 1
                gw, gh = gt[2] - gt[0] + 1, gt[3] - gt[1] + 1
                d = np.array([(gt[0] + 0.5 * gw - b[0] - 0.5 * ew) / ew,
                              (gt[1] + 0.5 * gh - b[1] - 0.5 * eh) / eh,
                              math.log(gw / ew), math.log(gh / eh)]) / np.array(weights)
                col = 4 * (1 if agnostic else label)
                t[col:col + 4] = d
                w[col:col + 4] = 1
            out[0].append(b * info[n][2])
            out[1].append([label])
            out[2].append(t)
            out[3].append(w)
        counts.append(len(fg) + len(bg))
    return [np.array(v) for v in out] + [counts]
