"""NumPy reference of Paddle's beam_search step over LoD candidates: a direct simulation of
its per-source top-beam list (insertion order and all), for the tests of ops/lod_beam."""

from __future__ import annotations

import numpy as np


def _worse(a, b) -> bool:
    """Paddle's item order: a lower score, or an equal score from an earlier row."""
    return a[2] < b[2] or (a[2] == b[2] and a[0] < b[0])


def _insert(top: list, item, beam: int) -> None:
    """Put ``item`` into the descending list ``top`` of at most ``beam`` items: after every
    item it is not better than; a full list drops its last item, unless ``item`` is worse."""
    if len(top) == beam:
        if _worse(item, top[-1]):
            return
        top.pop()
    k = len(top)
    while k > 0 and _worse(top[k - 1], item):
        k -= 1
    top.insert(k, item)


def source_rows(lod) -> list[int]:
    """Rows (prefixes) per source sentence of a level-1 or level-2 LoD (lengths)."""
    if len(lod) == 1:
        return [int(n) for n in lod[0]]
    ends = np.cumsum([0, *lod[0]])
    return [int(sum(lod[1][a:b])) for a, b in zip(ends[:-1], ends[1:])]


def beam_search_reference(pre_ids, pre_scores, ids, scores, lod, beam, end, accumulated=True):
    """(selected ids [M, 1], selected scores [M, 1], parent rows [M], the 2-level lengths)."""
    pre_ids, pre_scores = np.ravel(pre_ids), np.ravel(pre_scores)
    rows = source_rows(lod)
    starts = np.cumsum([0, *rows])
    picks = [[] for _ in range(int(starts[-1]))]
    for s in range(len(rows)):
        top: list = []
        for r in range(starts[s], starts[s + 1]):
            if pre_ids[r] == end:  # an ended prefix carries on as end_id with its score
                _insert(top, (r, end, float(pre_scores[r])), beam)
                continue
            for d in range(scores.shape[1]):
                token = d if ids is None else int(ids[r, d])
                score = scores[r, d] if accumulated else pre_scores[r] + np.log(scores[r, d])
                _insert(top, (r, token, float(score)), beam)
        if all(token == end and pre_ids[r] == end for r, token, _ in top):
            top = []  # nothing but ended prefixes: the source is finished
        for item in top:
            picks[item[0]].append(item)
    flat = [item for row in picks for item in row]
    return (np.array([t for _, t, _ in flat], np.int64).reshape(-1, 1),
            np.array([s for _, _, s in flat]).reshape(-1, 1),
            np.array([r for r, _, _ in flat], np.int32), [rows, [len(p) for p in picks]])


def beam_search_decode_reference(steps, beam, end):
    """Paddle's backtrace over ``steps``: a list of (ids [M], scores [M], 2-level lengths) of
    each step's picks. Returns (ids, scores, lengths) of the hypotheses, ``beam`` per source,
    best final score first (stable), hypotheses that never began (empty) last."""
    n = len(steps[0][2][0])
    words = [[[] for _ in range(beam)] for _ in range(n)]
    values = [[[] for _ in range(beam)] for _ in range(n)]
    cursors: list[list[int]] = [[] for _ in range(n)]
    for ids, scores, (l0, l1) in reversed(steps):
        ids, scores = np.ravel(ids), np.ravel(scores)
        entry_at = np.cumsum([0, *l0])
        pick_at = np.cumsum([0, *l1])
        parent = np.repeat(np.arange(len(l1)), l1)  # the entry (previous pick) of each pick
        for s in range(n):
            if not cursors[s]:  # the source's last step with picks: one hypothesis each
                for entry in range(entry_at[s], entry_at[s + 1]):
                    for pick in range(pick_at[entry], pick_at[entry + 1]):
                        k = len(cursors[s])
                        cursors[s].append(entry)
                        words[s][k].append(int(ids[pick]))
                        values[s][k].append(float(scores[pick]))
                continue
            for k, pick in enumerate(cursors[s]):
                if ids[pick] != end or not words[s][k]:  # repeated end_ids are dropped
                    words[s][k].append(int(ids[pick]))
                    values[s][k].append(float(scores[pick]))
                cursors[s][k] = int(parent[pick])
    out_ids, out_scores, inner = [], [], []
    for s in range(n):
        order = sorted(range(beam), key=lambda k: (not words[s][k],
                                                   -values[s][k][0] if words[s][k] else 0))
        for k in order:
            out_ids += words[s][k][::-1]
            out_scores += values[s][k][::-1]
            inner.append(len(words[s][k]))
    return np.array(out_ids, np.int64), np.array(out_scores), [[beam] * n, inner]
