"""NumPy references of Paddle 1.8's semantics for tests/test_layers_losses_more.py (kept apart
so that module stays under 500 lines): losses, CTC, edit distance, samplers, grid sampling."""

from __future__ import annotations

import numpy as np


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def focal_ref(x, label, fg, gamma, alpha):
    out = np.zeros_like(x)
    p = _sigmoid(x)
    for i in range(x.shape[0]):
        for d in range(x.shape[1]):
            g = label[i, 0]
            if g == d + 1:
                out[i, d] = -alpha * (1 - p[i, d]) ** gamma * np.log(p[i, d]) / max(fg, 1)
            elif g != -1:
                out[i, d] = -(1 - alpha) * p[i, d] ** gamma * np.log(1 - p[i, d]) / max(fg, 1)
    return out


def teacher_student_ref(x, label):
    def ce(z):
        return max(x, 0) - x * z + np.log1p(np.exp(-abs(x)))
    if label < -1:
        return ce(0)
    if label < 0:
        return ce(1)
    if label < 1:
        return ce(0) + ce(label)
    return ce(1) + ce(label - 1)


def npair_ref(a, p, labels, l2_reg):
    same = (labels[:, None] == labels[None, :]).astype(float)
    target = same / same.sum(1, keepdims=True)
    logits = a @ p.T
    logits = logits - logits.max(1, keepdims=True)
    logsm = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    ce = -(target * logsm).sum(1)
    l2 = ((a ** 2).sum(1).mean() + (p ** 2).sum(1).mean()) * 0.25 * l2_reg
    return l2 + ce.mean()


def levenshtein(a, b):
    d = np.arange(len(b) + 1, dtype=float)
    for i, x in enumerate(a, 1):
        prev, d[0] = d.copy(), i
        for j, y in enumerate(b, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (x != y))
    return d[len(b)]


def ctc_ref(logits, label, blank):
    """-log p(label | softmax(logits)) by the forward algorithm in probability space."""
    e = np.exp(logits - logits.max(1, keepdims=True))
    prob = e / e.sum(1, keepdims=True)
    ext = [blank]
    for tok in label:
        ext += [tok, blank]
    alpha = np.zeros(len(ext))
    alpha[0] = prob[0, blank]
    if len(ext) > 1:
        alpha[1] = prob[0, ext[1]]
    for t in range(1, len(prob)):
        new = np.zeros_like(alpha)
        for s in range(len(ext)):
            v = alpha[s] + (alpha[s - 1] if s >= 1 else 0)
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                v += alpha[s - 2]
            new[s] = v * prob[t, ext[s]]
        alpha = new
    return -np.log(alpha[-1] + (alpha[-2] if len(ext) > 1 else 0))


def hsigmoid_ref(x, w, b, label, num_classes, table=None, code=None):
    out = np.zeros((len(x), 1))
    width = table.shape[1] if table is not None else max((num_classes - 1).bit_length(), 1)
    for i in range(len(x)):
        c = int(label[i]) + num_classes
        for j in range(width):
            if table is None:
                on, idx, bit = j < c.bit_length() - 1, (c >> (j + 1)) - 1, (c >> j) & 1
            else:
                on = bool(np.all(table[i, :j + 1] >= 0))
                idx, bit = table[i, j], code[i, j]
            pre = np.clip(w[idx] @ x[i] + b[idx, 0], -40, 40) if on else 0.0
            out[i, 0] += np.log1p(np.exp(pre)) - (bit * pre if on else 0)  # Paddle's log 2
    return out


def bilinear_ref(x, grid):
    n, c, h, w = x.shape
    out = np.zeros((n, c, *grid.shape[1:3]))
    for i in range(n):
        for p in range(grid.shape[1]):
            for q in range(grid.shape[2]):
                gx = (grid[i, p, q, 0] + 1) * (w - 1) / 2
                gy = (grid[i, p, q, 1] + 1) * (h - 1) / 2
                x0, y0 = int(np.floor(gx)), int(np.floor(gy))
                for xi, yi in ((x0, y0), (x0 + 1, y0), (x0, y0 + 1), (x0 + 1, y0 + 1)):
                    if 0 <= xi < w and 0 <= yi < h:
                        out[i, :, p, q] += x[i, :, yi, xi] * (1 - abs(gx - xi)) * (
                            1 - abs(gy - yi))
    return out


def focus_ref(x, axis, indexes):
    moved = np.moveaxis(x, axis, 1)
    mask = np.zeros((moved.shape[0], *moved.shape[2:]), bool)
    for n in range(moved.shape[0]):
        for i in indexes:
            m = moved[n, i]
            used_r, used_c = set(), set()
            for k in np.argsort(-m.reshape(-1), kind="stable"):
                r, c = divmod(int(k), m.shape[1])
                if r not in used_r and c not in used_c:
                    used_r.add(r)
                    used_c.add(c)
                    mask[n, r, c] = True
    return np.moveaxis(np.broadcast_to(mask[:, None], moved.shape), 1, axis).astype(x.dtype)


def sampled_ref(logits, samples, probs, num_true, remove):
    picked = np.take_along_axis(logits, samples, 1) - np.log(probs)
    for i in range(len(picked)):
        for j in range(num_true, samples.shape[1]):
            if remove and samples[i, j] in samples[i, :num_true]:
                picked[i, j] -= 1e20
    picked = picked - picked.max(1, keepdims=True)
    logp = picked - np.log(np.exp(picked).sum(1, keepdims=True))
    return -logp[:, :num_true].sum(1, keepdims=True) / num_true
