"""NumPy references for the detection evaluation tests: Paddle 1.8's detection_map kernel
(greedy match by score per image and class, accumulated per-class records, AP)."""

from __future__ import annotations

import numpy as np


def _iou(a, b):
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _ap_integral(tp, fp, npos):
    ap, prev, ctp, cfp = 0.0, 0.0, 0, 0
    for t, f in zip(tp, fp):
        ctp, cfp = ctp + t, cfp + f
        prec, rec = np.float32(ctp) / np.float32(ctp + cfp), np.float32(ctp) / np.float32(npos)
        if abs(rec - prev) > 1e-6:
            ap += prec * abs(rec - prev)
        prev = rec
    return ap


def _ap_11point(tp, fp, npos):
    """VOC2007 11-point AP with Paddle's loop literally (including its early stop)."""
    ctp = np.cumsum(tp)
    cfp = np.cumsum(fp)
    prec = (ctp / (ctp + cfp)).astype(np.float32)
    rec = (ctp.astype(np.float32) / np.float32(npos)).astype(np.float32)
    best = [0.0] * 11
    start = len(tp) - 1
    for j in range(10, -1, -1):
        for i in range(start, -1, -1):
            if float(rec[i]) < j / 10.0:
                start = i
                if j > 0:
                    best[j - 1] = best[j]
                break
            best[j] = max(best[j], float(prec[i]))
    return sum(b / 11 for b in best)


class DetectionMAPReference:
    """The accumulating evaluator: ``run(det, det_lens, label, label_lens, has_state)``
    returns the mAP after adding the batch (to the state when has_state)."""

    def __init__(self, class_num, overlap_threshold=0.5, evaluate_difficult=True,
                 ap_type="integral", background_label=0):
        self.class_num, self.thr = class_num, overlap_threshold
        self.difficult, self.ap_type, self.bg = evaluate_difficult, ap_type, background_label
        self.pos, self.records = {}, {}

    def run(self, det, det_lens, label, label_lens, has_state=True):
        if not has_state:
            self.pos, self.records = {}, {}
        d_off = np.concatenate([[0], np.cumsum(det_lens)])
        l_off = np.concatenate([[0], np.cumsum(label_lens)])
        for n in range(len(det_lens)):
            gts = {}
            for row in label[l_off[n]:l_off[n + 1]]:
                hard = len(row) == 6 and abs(row[1]) >= 1e-6
                gts.setdefault(int(row[0]), []).append((row[-4:], hard))
            for cls, boxes in gts.items():
                count = sum(1 for _, hard in boxes if self.difficult or not hard)
                if count:
                    self.pos[cls] = self.pos.get(cls, 0) + count
            dets = {}
            for row in det[d_off[n]:d_off[n + 1]]:
                dets.setdefault(int(row[0]), []).append((float(row[1]), row[2:6]))
            for cls in sorted(dets):
                recs = self.records.setdefault(cls, [])
                preds = sorted(dets[cls], key=lambda p: -p[0])  # scores are distinct
                if cls not in gts:
                    recs.extend((s, 0) for s, _ in preds)
                    continue
                seen = [False] * len(gts[cls])
                for s, box in preds:
                    box = np.clip(box, 0.0, 1.0)
                    ious = [_iou(box, g) for g, _ in gts[cls]]
                    j = int(np.argmax(ious))
                    if ious[j] > self.thr:
                        if self.difficult or not gts[cls][j][1]:
                            recs.append((s, 0 if seen[j] else 1))
                            seen[j] = True
                    else:
                        recs.append((s, 0))
        return self.value()

    def value(self):
        total, count = 0.0, 0
        for cls, npos in sorted(self.pos.items()):
            if not (0 <= cls < self.class_num) or npos == self.bg or npos == 0:
                continue
            recs = sorted(self.records.get(cls, []), key=lambda r: -r[0])
            tp = [r[1] for r in recs]
            fp = [1 - r[1] for r in recs]
            count += 1
            if recs:
                fn = _ap_integral if self.ap_type == "integral" else _ap_11point
                total += fn(tp, fp, npos)
        return total / count if count else 0.0
