"""beam_search over LoDArrays: every (prefix row, candidate) of a source is ranked by one
sort (source, score descending, later row first, smaller candidate first: the order of
Paddle's insertion into its top-beam list), the first ``beam_size`` of each source are
picked, and the picks are laid out row by row in a buffer of static size.

Paddle's insertion has one more quirk, kept here: when candidates of one row tie in score
across the ``beam_size`` boundary, the last slot goes to the row's last tied candidate if it
arrived after every better candidate of its source (``_paddle_tie``).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from ...backends.data_checks import report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import lowering


def _rows(value, capacity: int):
    """A per-row input (LoD or dense, [R] or [R, 1]) as a vector of ``capacity`` entries."""
    data = value.data if isinstance(value, LoDArray) else value
    data = jnp.reshape(data, (data.shape[0], -1))[:, 0] if data.ndim > 1 else data
    if data.shape[0] >= capacity:
        return data[:capacity]
    return jnp.pad(data, (0, capacity - data.shape[0]))


def _source_rows(scores: LoDArray):
    """Rows (prefixes) of each source sentence: level 1 counts them; at level 2 a source's
    entries count theirs."""
    if scores.lod_level == 1:
        return scores.lengths[0].astype(LENGTHS_DTYPE)
    n = scores.num_sequences
    entries = scores.lengths[1].astype(LENGTHS_DTYPE)
    owner = token_segments(scores.lengths[0].astype(LENGTHS_DTYPE), entries.shape[0])
    return jax.ops.segment_sum(entries, owner, num_segments=n + 1)[:n]


def _segment(values, segments, n, op, fill):
    """Per-segment reduction over ``n`` segments (segment ``n`` collects the padding)."""
    return op(values, segments, num_segments=n + 1)[:n] if n else jnp.full((0,), fill)


def _paddle_tie(s, starts, n, beam, size):
    """The positions (in sorted order) to unselect and select instead, per source, for
    Paddle's last-slot rule: a group of equal (score, row) candidates straddling the boundary
    keeps its last candidate in the last slot when it arrived after every better one."""
    pos = jnp.arange(size)
    pe = jnp.clip(starts + beam - 1, 0, size - 1)
    pf = jnp.clip(starts + beam, 0, size - 1)
    same = (s["valid"][pf] & s["valid"][pe] & (s["src"][pf] == jnp.arange(n))
            & (s["score"][pf] == s["score"][pe]) & (s["row"][pf] == s["row"][pe])
            & (starts + beam < size))
    src = jnp.clip(s["src"], 0, n - 1)
    group = (s["valid"] & (s["src"] < n) & same[src] & (s["score"] == s["score"][pe][src])
             & (s["row"] == s["row"][pe][src]))
    first = _segment(jnp.where(group, pos, size), s["src"], n, jax.ops.segment_min, size)
    last = _segment(jnp.where(group, pos, -1), s["src"], n, jax.ops.segment_max, -1)
    better = s["valid"] & (s["src"] < n) & (pos < first[src])
    latest = _segment(jnp.where(better, s["arrival"], -1), s["src"], n, jax.ops.segment_max,
                      -1)
    swap = same & (s["arrival"][jnp.clip(last, 0, size - 1)] > latest)
    return jnp.where(swap, pe, -1), jnp.where(swap, last, -1)


@lowering("beam_search")
def _beam_search(c, pre_ids, pre_scores, scores: LoDArray, ids=None):
    cap = scores.capacity
    src_rows = _source_rows(scores)
    rows_total = jnp.sum(src_rows)
    for slot, v in (("pre_ids", pre_ids), ("pre_scores", pre_scores)):
        count = v.token_count() if isinstance(v, LoDArray) else jnp.asarray(v.shape[0])
        report_invalid(c, slot, jnp.reshape(count != rows_total, (1,)),
                       jnp.reshape(count, (1,)), "one row per row (prefix) of scores")
    cand = None if ids is None else _fit(ids.data if isinstance(ids, LoDArray) else ids, cap)
    sel_ids, sel_scores, parents, per_row = _select(
        src_rows, _rows(pre_ids, cap).astype(jnp.int64),
        _rows(pre_scores, cap).astype(scores.data.dtype), scores.data, cand,
        beam=c["beam_size"], end=c["end_id"], accumulated=c["is_accumulated"])
    lengths = (src_rows, per_row)
    out = {"selected_ids": LoDArray(sel_ids, lengths),
           "selected_scores": LoDArray(sel_scores.astype(c.out_dtype("selected_scores")),
                                       lengths)}
    if "parent_idx" in c.out_types:
        out["parent_idx"] = parents
    return out


# one compiled computation: the interpreter runs rules eagerly, op by op, and this rule has
# many small ops (inside a traced step the jit is inlined)
@partial(jax.jit, static_argnames=("beam", "end", "accumulated"))
def _select(src_rows, prev_id, prev_score, scores, ids, *, beam, end, accumulated):
    """The picks laid out row by row: (ids [cap, 1], scores [cap, 1], parent rows [cap],
    picks per candidate row)."""
    cap, width = scores.shape
    n = src_rows.shape[0]
    row_src = token_segments(src_rows, cap)
    row_ok = row_src < n
    ended = row_ok & (prev_id == end)
    d = jnp.arange(width)
    score = scores if accumulated else prev_score[:, None] + jnp.log(scores)
    score = jnp.where(ended[:, None], prev_score[:, None], score)
    cand = (jnp.broadcast_to(d[None, :], (cap, width)) if ids is None else
            jnp.reshape(ids, (cap, width)))
    cand = jnp.where(ended[:, None], end, cand.astype(jnp.int64))
    valid = row_ok[:, None] & (~ended[:, None] | (d[None, :] == 0))
    row = jnp.broadcast_to(jnp.arange(cap)[:, None], (cap, width))
    flat = {"src": jnp.broadcast_to(row_src[:, None], (cap, width)).reshape(-1),
            "valid": valid.reshape(-1), "score": score.reshape(-1), "id": cand.reshape(-1),
            "row": row.reshape(-1), "arrival": jnp.arange(cap * width)}
    size = cap * width
    order = jnp.lexsort((flat["arrival"], -flat["row"], -flat["score"], ~flat["valid"],
                         flat["src"]))
    s = {k: v[order] for k, v in flat.items()}
    starts = jnp.cumsum(src_rows * width) - src_rows * width
    src = jnp.clip(s["src"], 0, max(n - 1, 0))
    pos = jnp.arange(size)
    rank = pos - starts[src] if n else pos
    picked = s["valid"] & (s["src"] < n) & (rank < beam)
    if n:
        drop, take = _paddle_tie(s, starts, n, beam, size)
        picked = (picked & (pos != drop[src])) | (pos == take[src]) & (s["src"] < n)
        rank = jnp.where(pos == take[src], beam - 1, rank)
        # a source whose every pick continues an ended prefix is finished: Paddle drops it
        live = _segment((picked & ~ended[s["row"]]).astype(jnp.int32), s["src"], n,
                        jax.ops.segment_sum, 0)
        picked = picked & (live[src] > 0)
    out_cap = max(cap, n * beam)
    key = jnp.where(picked, s["row"] * beam + rank, size * beam + 1)
    chosen = jnp.argsort(key, stable=True)[:out_cap]
    if chosen.shape[0] < out_cap:
        chosen = jnp.pad(chosen, (0, out_cap - chosen.shape[0]))
    per_row = jax.ops.segment_sum(picked.astype(LENGTHS_DTYPE), s["row"], num_segments=cap)
    filled = jnp.arange(out_cap) < jnp.sum(per_row)
    return (jnp.where(filled, s["id"][chosen], 0).reshape(out_cap, 1),
            jnp.where(filled, s["score"][chosen], 0).reshape(out_cap, 1),
            jnp.where(filled, s["row"][chosen], 0).astype(jnp.int32), per_row)


def _fit(data, capacity: int):
    if data.shape[0] >= capacity:
        return data[:capacity]
    return jnp.pad(data, [(0, capacity - data.shape[0])] + [(0, 0)] * (data.ndim - 1))


# -- beam_search_decode ----------------------------------------------------------------------

@lowering("beam_search_decode")
def _beam_search_decode(c, Ids, Scores):
    ids, scores = Ids.data, Scores.data  # stacked LoDArrays: one element per step
    tokens, values, lengths = _decode(
        ids.data.reshape(ids.data.shape[:2]), scores.data.reshape(scores.data.shape[:2]),
        ids.lengths[0], ids.lengths[1], Ids.length, beam=c["beam_size"], end=c["end_id"])
    return {"SentenceIds": LoDArray(tokens.astype(jnp.int64), lengths),
            "SentenceScores": LoDArray(values.astype(c.out_dtype("SentenceScores")), lengths)}


@partial(jax.jit, static_argnames=("beam", "end"))
def _decode(ids, scores, entries, picks, steps, *, beam, end):
    """Paddle's backtrace over ``C`` steps of picks (``ids``/``scores`` ``[C, T]``, level-0
    lengths ``entries`` ``[C, N]``, level-1 ``picks`` ``[C, S]``; ``steps`` written)."""
    cap, rows = ids.shape
    n = entries.shape[1]
    live = jnp.arange(cap) < steps

    def per_step(l0, l1):
        owner = token_segments(l0.astype(LENGTHS_DTYPE), l1.shape[0])
        count = jax.ops.segment_sum(l1.astype(LENGTHS_DTYPE), owner, num_segments=n + 1)[:n]
        return count, jnp.cumsum(count) - count, token_segments(l1.astype(LENGTHS_DTYPE), rows)

    count, start, parent = jax.vmap(per_step)(entries, picks)  # [C, N], [C, N], [C, T]
    count = jnp.where(live[:, None], count, 0)
    # each source's hypotheses start at its last step with picks, one per pick
    last = jnp.max(jnp.where(count > 0, jnp.arange(cap)[:, None], -1), axis=0)  # [N]
    h = jnp.arange(beam)

    def back(carry, s):
        cursor, active = carry
        begin = (s == last)[:, None] & (h[None, :] < count[s][:, None])
        cursor = jnp.where(begin, start[s][:, None] + h[None, :], cursor)
        active = active | begin
        at = jnp.clip(cursor, 0, rows - 1)
        token, score = ids[s][at], scores[s][at]
        emit = active & (begin | (token != end))  # repeated end_ids are dropped
        return (parent[s][at], active), (token, score, emit)

    init = (jnp.zeros((n, beam), jnp.int32), jnp.zeros((n, beam), bool))
    _, (token, score, emit) = jax.lax.scan(back, init, jnp.arange(cap), reverse=True)
    # best final score first (ties keep pick order), hypotheses that never began last
    exists = h[None, :] < count[jnp.clip(last, 0, cap - 1), jnp.arange(n)][:, None]
    exists = exists & (last >= 0)[:, None]
    final = score[jnp.clip(last, 0, cap - 1)[:, None], jnp.arange(n)[:, None], h[None, :]]
    order = jnp.argsort(jnp.where(exists, -final, jnp.inf), axis=1, stable=True)  # [N, B]

    def sort(x):  # [C, N, B] -> [N, B, C] in each source's hypothesis order
        x = jnp.transpose(x, (1, 2, 0))
        return jnp.take_along_axis(x, order[:, :, None], axis=1)

    token, score, emit = sort(token), sort(score), sort(emit)
    size = n * beam * cap
    dest = jnp.where(emit.reshape(-1), jnp.cumsum(emit.reshape(-1)) - 1, size)
    tokens = jnp.zeros(size, ids.dtype).at[dest].set(token.reshape(-1), mode="drop")
    values = jnp.zeros(size, scores.dtype).at[dest].set(score.reshape(-1), mode="drop")
    lengths = (jnp.full((n,), beam, LENGTHS_DTYPE),
               jnp.sum(emit, axis=2).reshape(-1).astype(LENGTHS_DTYPE))
    return tokens, values, lengths
