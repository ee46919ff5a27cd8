"""Lowering of linear_chain_crf (forward algorithm in log space over the packed tokens, with
ops/rnn/lowering.py's time loop, so its gradient is the same BPTT), crf_decoding (Viterbi and a
backtracking loop) and chunk_eval (chunk boundaries found token-parallel)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...backends.lod import LENGTHS_DTYPE, LoDArray, segment_sum
from ...backends.lowering import lowering
from ..rnn.lowering import _positions, _prepare, _run, _take, recur
from .defs import CHUNK_SCHEMES


def _split(trans):
    return trans[0], trans[1], trans[2:]


def _last_rows(states, x: LoDArray):
    lengths = x.lengths[0]
    return _take(states, x.offsets() + lengths - 1)


@lowering("linear_chain_crf")
def _linear_chain_crf(c, Emission, Transition, Label):
    x, lengths = Emission, Emission.lengths[0]
    start, end, tt = _split(Transition)

    def step(p, e_t, carry, t):
        s, _, pair = _split(p)
        prev = jax.nn.logsumexp(carry[0][:, :, None] + pair[None], axis=1)
        return (jnp.where(t == 0, s + e_t[0], prev + e_t[0]),)

    init = (jnp.zeros((x.num_sequences, x.data.shape[1]), x.dtype),)
    (log_alpha,) = recur(step, False, Transition, (x.data,), lengths, init)
    nonempty = lengths > 0
    log_z = jax.nn.logsumexp(_last_rows(log_alpha, x) + end, axis=1)
    # the score of the label path: emissions, transitions inside each sequence, start, end
    tags = Label.data[:, 0].astype(LENGTHS_DTYPE)
    valid = x.valid()
    emit = jnp.take_along_axis(x.data, tags[:, None], axis=1)[:, 0]
    first = jnp.zeros_like(valid).at[x.offsets()].set(True, mode="drop")
    prev_tags = jnp.roll(tags, 1)
    pairs = jnp.where(valid & ~first, tt[prev_tags, tags], 0)
    score = segment_sum(jnp.where(valid, emit, 0) + pairs, lengths, x.capacity)
    score = score + start[_take(tags, x.offsets())] + end[_take(tags, x.offsets() + lengths - 1)]
    nll = jnp.where(nonempty, log_z - score, 0).reshape(-1, 1)
    alpha = jnp.exp(log_alpha - jax.nn.logsumexp(log_alpha, axis=1, keepdims=True))
    shifted = x.data - jnp.max(x.data, axis=1, keepdims=True)
    return {"Alpha": x.masked(alpha), "EmissionExps": x.masked(jnp.exp(shifted)),
            "TransitionExps": jnp.exp(Transition), "LogLikelihood": nll}


@lowering("crf_decoding")
def _crf_decoding(c, Emission, Transition, Label):
    x = Emission
    start, end, _ = _split(Transition)
    n, d = x.num_sequences, x.data.shape[1]

    def step(p, e_t, carry, t):
        s, _, pair = _split(p)
        cand = carry[0][:, :, None] + pair[None]
        best = jnp.max(cand, axis=1)
        back = jnp.argmax(cand, axis=1).astype(LENGTHS_DTYPE)
        return jnp.where(t == 0, s + e_t[0], best + e_t[0]), back

    init = (jnp.zeros((n, d), x.dtype), jnp.zeros((n, d), LENGTHS_DTYPE))
    (scores, back), _ = _run(step, False, Transition, (x.data,), x.lengths[0], init)
    cap, offsets, lengths, steps = _prepare((x.data,), x.lengths[0])
    last = jnp.argmax(_last_rows(scores, x) + end, axis=1).astype(LENGTHS_DTYPE)

    def body(loop):
        t, nxt, path = loop
        idx, active = _positions(t, offsets, lengths, False)
        follow = jnp.take_along_axis(_take(back, idx + 1), nxt[:, None], axis=1)[:, 0]
        tag = jnp.where(t == lengths - 1, last, follow)
        path = path.at[jnp.where(active, idx, cap)].set(tag, mode="drop")
        return t - 1, jnp.where(active, tag, nxt), path

    loop = (steps - 1, jnp.zeros(n, LENGTHS_DTYPE), jnp.zeros(cap, LENGTHS_DTYPE))
    _, _, path = lax.while_loop(lambda lp: lp[0] >= 0, body, loop)
    path = path.astype(jnp.int64)[:, None]
    if Label is not None:
        path = (path == Label.data.astype(jnp.int64)).astype(jnp.int64)
    return {"ViterbiPath": x.masked(path)}


def _chunk_flags(tags, types, prev_tags, prev_types, other, scheme):
    """Paddle's chunk begin / end tests between each token and the one before it."""
    _, b, i, e, s = scheme
    same = types == prev_types
    prev_open = (prev_tags == e) | (prev_tags == s)
    begin = jnp.where(prev_types == other, types != other,
                      (types != other) & (~same | (tags == b) | (tags == s)
                                          | (((tags == i) | (tags == e)) & prev_open)))
    end = jnp.where(prev_types == other, False,
                    (types == other) | ~same | prev_open
                    | (((prev_tags == b) | (prev_tags == i)) & ((tags == b) | (tags == s))))
    return begin, end


def _chunks(labels: LoDArray, num_types, scheme, excluded):
    """(start flag, end row, type) per token: a chunk starts where ``start``."""
    n_tags = scheme[0]
    other = num_types
    data = labels.data[:, 0].astype(LENGTHS_DTYPE)
    tags, types = data % n_tags, jnp.minimum(data // n_tags, other)
    valid = labels.valid()
    cap = labels.capacity
    first = jnp.zeros_like(valid).at[labels.offsets()].set(True, mode="drop")
    prev_tags = jnp.where(first, -1, jnp.roll(tags, 1))
    prev_types = jnp.where(first, other, jnp.roll(types, 1))
    begin, end = _chunk_flags(tags, types, prev_tags, prev_types, other, scheme)
    begin = begin & valid
    # a chunk open before row j closes at j - 1 when j ends it, starts a sequence or is padding
    stop = end | first | ~valid
    rows = jnp.arange(cap, dtype=LENGTHS_DTYPE)
    next_stop = lax.cummin(jnp.where(stop, rows, cap), axis=0, reverse=True)
    close = jnp.concatenate([next_stop[1:], jnp.full((1,), cap, LENGTHS_DTYPE)]) - 1
    keep = begin
    for t in excluded:
        keep = keep & (types != t)
    return keep, close, types


@lowering("chunk_eval")
def _chunk_eval(c, Inference, Label):
    scheme = CHUNK_SCHEMES[c["chunk_scheme"]]
    num, excluded = c["num_chunk_types"], tuple(c["excluded_chunk_types"])
    inf_start, inf_end, inf_type = _chunks(Inference, num, scheme, excluded)
    lab_start, lab_end, lab_type = _chunks(Label, num, scheme, excluded)
    correct = inf_start & lab_start & (inf_end == lab_end) & (inf_type == lab_type)
    n_inf, n_lab, n_ok = (jnp.sum(v).astype(jnp.int64) for v in (inf_start, lab_start, correct))
    f32 = jnp.float32
    precision = jnp.where(n_inf > 0, n_ok / jnp.maximum(n_inf, 1), 0).astype(f32)
    recall = jnp.where(n_lab > 0, n_ok / jnp.maximum(n_lab, 1), 0).astype(f32)
    f1 = jnp.where(n_ok > 0, 2 * precision * recall / jnp.maximum(precision + recall, 1e-30),
                   0).astype(f32)
    return {"Precision": precision.reshape(1), "Recall": recall.reshape(1),
            "F1Score": f1.reshape(1), "NumInferChunks": n_inf.reshape(1),
            "NumLabelChunks": n_lab.reshape(1), "NumCorrectChunks": n_ok.reshape(1)}
