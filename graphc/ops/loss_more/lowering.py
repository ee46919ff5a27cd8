"""Lowering rules for the losses and metrics in defs.py beside this file (Paddle 1.8's formulas).

The losses' gradients are JAX's derivatives of these rules (the generic grad), checked by
finite differences in tests/test_gradients.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import lowering


def _softplus_neg_abs(x):
    return jnp.log1p(jnp.exp(-jnp.abs(x)))


@lowering("sigmoid_focal_loss")
def _focal(c, X, Label, FgNum):
    classes = jnp.arange(1, X.shape[1] + 1, dtype=Label.dtype)
    lab = Label.reshape(-1, 1)
    pos = (lab == classes).astype(X.dtype)
    neg = ((lab != -1) & (lab != classes)).astype(X.dtype)
    fg = jnp.maximum(FgNum.reshape(()), 1).astype(X.dtype)
    gamma, alpha = c["gamma"], c["alpha"]
    p = jax.nn.sigmoid(X)
    # log p and log(1 - p) from the logit: finite for large |X|
    log_p = -jax.nn.softplus(-X)
    log_1mp = -jax.nn.softplus(X)
    term_pos = (1 - p) ** gamma * log_p
    term_neg = p ** gamma * log_1mp
    out = -pos * term_pos * (alpha / fg) - neg * term_neg * ((1 - alpha) / fg)
    return {"Out": out}


@lowering("teacher_student_sigmoid_loss")
def _teacher_student(c, X, Label):
    base = jnp.maximum(X, 0) + _softplus_neg_abs(X)  # sigmoid CE with target 0
    click = jnp.where(Label < -1, base, base - X)
    teacher = jnp.where(Label < 1, base - X * Label, base - X * (Label - 1))
    y = jnp.where(Label < 0, click, jnp.where(Label < 1, base, base - X) + teacher)
    return {"Y": y}


@lowering("center_loss")
def _center(c, X, Label, Centers, CenterUpdateRate):
    lab = Label.reshape(-1).astype(jnp.int32)
    diff = X - Centers[lab]
    loss = 0.5 * jnp.sum(diff * diff, axis=1, keepdims=True)
    centers = Centers
    if c["need_update"]:
        k = Centers.shape[0]
        acc = jnp.zeros_like(Centers).at[lab].add(lax.stop_gradient(diff))
        count = jnp.zeros((k,), X.dtype).at[lab].add(1)
        rate = CenterUpdateRate.reshape(()).astype(X.dtype)
        centers = Centers + rate * acc / (1 + count)[:, None]
    return {"SampleCenterDiff": diff, "Loss": loss, "CentersOut": centers}


@lowering("npair_loss")
def _npair(c, Anchor, Positive, Labels):
    lab = Labels.reshape(-1)
    same = (lab[:, None] == lab[None, :]).astype(Anchor.dtype)
    target = same / jnp.sum(same, axis=1, keepdims=True)
    l2 = (jnp.mean(jnp.sum(Anchor * Anchor, 1)) + jnp.mean(jnp.sum(Positive * Positive, 1)))
    l2 = l2 * 0.25 * c["l2_reg"]
    logits = Anchor @ Positive.T
    ce = -jnp.sum(target * jax.nn.log_softmax(logits, axis=1), axis=1, keepdims=True)
    # Paddle sums labels * ce over rows, then averages: the mean of ce (rows sum to 1)
    celoss = jnp.mean(jnp.sum(target * ce, axis=0))
    return {"Out": (l2 + celoss).reshape(1)}


@lowering("mean_iou")
def _mean_iou(c, Predictions, Labels, InWrongs, InCorrects, InMeanIou):
    n = c["num_classes"]
    pred = Predictions.reshape(-1).astype(jnp.int32)
    lab = Labels.reshape(-1).astype(jnp.int32)
    hit = pred == lab
    one = jnp.ones_like(pred)
    correct = jnp.zeros((n,), jnp.int32).at[pred].add(jnp.where(hit, one, 0), mode="drop")
    wrong = (jnp.zeros((n,), jnp.int32).at[pred].add(jnp.where(hit, 0, one), mode="drop")
             .at[lab].add(jnp.where(hit, 0, one), mode="drop"))
    for w in InWrongs or []:
        wrong = wrong + w.astype(jnp.int32)
    for k in InCorrects or []:
        correct = correct + k.astype(jnp.int32)
    denom = wrong + correct
    seen = denom > 0
    iou = jnp.where(seen, correct / jnp.maximum(denom, 1), 0.0).astype(jnp.float32)
    mean = jnp.sum(iou) / jnp.maximum(jnp.sum(seen), 1).astype(jnp.float32)
    for m in InMeanIou or []:
        mean = mean + m.reshape(()).astype(jnp.float32)
    return {"OutMeanIou": mean.reshape(1), "OutWrong": wrong, "OutCorrect": correct}


def _compact(seq, length, ignored):
    """The kept tokens of a padded row moved to its front, and how many there are."""
    keep = jnp.arange(seq.shape[0]) < length
    for tok in ignored:
        keep = keep & (seq != tok)
    order = jnp.argsort(~keep, stable=True)
    return seq[order], jnp.sum(keep)


def _levenshtein(h, hn, r, rn):
    cols = jnp.arange(r.shape[0] + 1)
    first = cols.astype(jnp.float32)

    def row(prev, i_tok):
        i, tok = i_tok
        cost = (r != tok).astype(jnp.float32)
        # substitution and deletion need only the previous row; insertion runs along it
        diag = jnp.minimum(prev[:-1] + cost, prev[1:] + 1)
        start = (i + 1).astype(jnp.float32)

        def step(left, d):
            v = jnp.minimum(d, left + 1)
            return v, v

        _, rest = lax.scan(step, start, diag)
        new = jnp.concatenate([start[None], rest])
        new = jnp.where(i < hn, new, prev)  # past the hypothesis: keep its last row
        return new, None

    last, _ = lax.scan(row, first, (jnp.arange(h.shape[0]), h))
    return last[rn]


@lowering("edit_distance")
def _edit_distance(c, Hyps, Refs, HypsLength, RefsLength):
    ignored = tuple(c["ignored_tokens"] or ())

    def one(h, hl, r, rl):
        h, hn = _compact(h, hl, ignored)
        r, rn = _compact(r, rl, ignored)
        d = _levenshtein(h, hn, r, rn)
        if c["normalized"]:
            d = d / rn.astype(jnp.float32)  # Paddle refuses an empty reference here
        return d

    out = jax.vmap(one)(Hyps, HypsLength.reshape(-1), Refs, RefsLength.reshape(-1))
    return {"Out": out.reshape(-1, 1).astype(jnp.float32),
            "SequenceNum": jnp.asarray([Hyps.shape[0]], jnp.int64)}


_NEG = -1e30  # log(0) kept finite: -inf would give nan gradients through logaddexp


def _ctc_nll(logp, label, t_len, l_len, blank):
    """-log p(label | logp) for one sequence: logp [T, C], label [L] (the first l_len real)."""
    width = 2 * label.shape[0] + 1
    ext = jnp.full((width,), blank, label.dtype).at[1::2].set(label)
    pos = jnp.arange(width)
    # a label may follow the one two back unless it repeats it (a blank must come between)
    skip = (pos % 2 == 1) & (pos >= 2) & (ext != jnp.roll(ext, 2))
    neg = jnp.asarray(_NEG, logp.dtype)
    alpha = jnp.where(pos < 2, logp[0, ext], neg)
    alpha = jnp.where(pos <= 2 * l_len, alpha, neg)

    def step(a, t_lp):
        t, lp = t_lp
        a1 = jnp.concatenate([jnp.full((1,), neg), a[:-1]])
        a2 = jnp.where(skip, jnp.concatenate([jnp.full((2,), neg), a[:-2]]), neg)
        new = jnp.logaddexp(jnp.logaddexp(a, a1), a2) + lp[ext]
        return jnp.where(t < t_len, new, a), None  # past the sequence's end: keep alpha

    alpha, _ = lax.scan(step, alpha, (jnp.arange(1, logp.shape[0]), logp[1:]))
    end = 2 * l_len
    last = jnp.logaddexp(alpha[end], jnp.where(l_len > 0, alpha[end - 1], neg))
    return -last


@lowering("warpctc")
def _warpctc(c, Logits, Label, LogitsLength, LabelLength):
    logp = jax.nn.log_softmax(Logits, axis=-1).transpose(1, 0, 2)  # [N, T, C]
    t_len = LogitsLength.reshape(-1).astype(jnp.int32)
    l_len = LabelLength.reshape(-1).astype(jnp.int32)
    loss = jax.vmap(_ctc_nll, (0, 0, 0, 0, None))(logp, Label.astype(jnp.int32), t_len, l_len,
                                                   c["blank"])
    if c["norm_by_times"]:
        # the same value, with its gradient divided by the sequence's length (Paddle's rule)
        frozen = lax.stop_gradient(loss)
        loss = frozen + (loss - frozen) / jnp.maximum(t_len, 1).astype(loss.dtype)
    return {"Loss": loss.reshape(-1, 1)}


@lowering("ctc_align")
def _ctc_align(c, Input, InputLength):
    if isinstance(Input, LoDArray):
        return {"Output": _ctc_align_lod(Input, c["blank"], c["merge_repeated"])}
    blank, pad = c["blank"], c["padding_value"]
    steps = jnp.arange(Input.shape[1])
    prev = jnp.concatenate([jnp.full_like(Input[:, :1], -1), Input[:, :-1]], axis=1)
    keep = (steps < InputLength.reshape(-1, 1)) & (Input != blank)
    if c["merge_repeated"]:
        keep = keep & (Input != prev)
    order = jnp.argsort(~keep, axis=1, stable=True)
    moved = jnp.take_along_axis(Input, order, axis=1)
    count = jnp.sum(keep, axis=1, keepdims=True)
    out = jnp.where(steps < count, moved, jnp.asarray(pad, Input.dtype))
    return {"Output": out, "OutputLength": count.astype(InputLength.dtype)}


def _ctc_align_lod(x: LoDArray, blank: int, merge_repeated: bool) -> LoDArray:
    """The kept ids of each sequence packed in order into the input's buffer (kept tokens
    never outnumber the input's, so the capacity cannot overflow); lengths their counts."""
    lengths = x.lengths[0].astype(LENGTHS_DTYPE)
    if x.lod_level == 2:  # the outer sequences' tokens: their sub-sequences' lengths summed
        inner = x.lengths[1].astype(LENGTHS_DTYPE)
        owner = token_segments(lengths, inner.shape[0])
        lengths = jnp.zeros((lengths.shape[0] + 1,), LENGTHS_DTYPE).at[owner].add(inner)[:-1]
    n, cap = lengths.shape[0], x.capacity
    ids = x.data.reshape(cap)
    seg = token_segments(lengths, cap)
    rows = jnp.arange(cap, dtype=LENGTHS_DTYPE)
    starts = jnp.cumsum(lengths) - lengths
    first = rows == jnp.take(starts, jnp.clip(seg, 0, max(n - 1, 0))) if n else rows < 0
    prev = jnp.concatenate([jnp.full((1,), -1, ids.dtype), ids[:-1]])
    keep = (seg < n) & (ids != blank)
    if merge_repeated:
        # a sequence's first token has no predecessor (Paddle's prev_token starts at -1)
        keep = keep & (first | (ids != prev))
    dest = jnp.where(keep, jnp.cumsum(keep, dtype=LENGTHS_DTYPE) - 1, cap)
    data = jnp.zeros((cap,), ids.dtype).at[dest].set(ids, mode="drop")
    counts = jnp.zeros((n + 1,), LENGTHS_DTYPE).at[seg].add(keep.astype(LENGTHS_DTYPE))[:n]
    return LoDArray(data.reshape(x.data.shape), (counts,))


def _log_uniform_unique(key, k, count):
    """Paddle's unique log-uniform draw: classes drawn until `count` distinct ones, and how
    many draws that took."""
    log_range = jnp.log(k + 1.0)

    def cond(st):
        return st[2] < count

    def body(st):
        key, seen, n, tries, out = st
        key, sub = jax.random.split(key)
        v = jnp.clip(jnp.exp(jax.random.uniform(sub, (), jnp.float64) * log_range)
                     .astype(jnp.int64) - 1, 0, k - 1)
        new = ~seen[v]
        out = jnp.where(new, out.at[n].set(v), out)
        return key, seen.at[v].set(True), n + new, tries + 1, out

    init = (key, jnp.zeros((k,), bool), jnp.int32(0), jnp.int64(0),
            jnp.zeros((count,), jnp.int64))
    _, _, _, tries, out = lax.while_loop(cond, body, init)
    return out, tries


def _sampled_loss(Logits, samples, probs, num_true, remove_hits):
    picked = jnp.take_along_axis(Logits, samples, axis=1) - jnp.log(probs)
    if remove_hits:
        hit = jnp.any(samples[:, None, num_true:] == samples[:, :num_true, None], axis=1)
        picked = picked.at[:, num_true:].add(jnp.where(hit, -1e20, 0).astype(Logits.dtype))
    logp = jax.nn.log_softmax(picked, axis=1)
    return -jnp.sum(logp[:, :num_true], axis=1, keepdims=True) / num_true


@lowering("sampled_softmax_with_cross_entropy")
def _sampled_softmax(c, Logits, Labels, CustomizedSamples, CustomizedProbabilities):
    n, k = Logits.shape
    num_true = Labels.shape[1]
    if c["use_customized_samples"]:
        samples = CustomizedSamples.astype(jnp.int64)
        probs = CustomizedProbabilities.astype(Logits.dtype)
    else:
        drawn, tries = _log_uniform_unique(c.rng(c["seed"]), k, c["num_samples"])
        samples = jnp.concatenate([Labels.astype(jnp.int64),
                                   jnp.broadcast_to(drawn, (n, drawn.shape[0]))], axis=1)
        y = samples.astype(jnp.float64)
        p = jnp.log((y + 2) / (y + 1)) / jnp.log(k + 1.0)
        # the chance a class is among `tries` draws: Paddle's Q for unique sampling
        probs = (-jnp.expm1(tries * jnp.log1p(-p))).astype(Logits.dtype)
    loss = _sampled_loss(Logits, samples, probs, num_true, c["remove_accidental_hits"])
    return {"Loss": loss, "Samples": samples, "Probabilities": probs}


@lowering("sampled_softmax_with_cross_entropy_grad")
def _sampled_softmax_grad(c, **kw):
    """The vjp at the forward's own samples (a fresh draw would differ)."""
    samples, probs, num_true = kw["Samples"], kw["Probabilities"], kw["Labels"].shape[1]
    _, vjp = jax.vjp(lambda x: _sampled_loss(x, samples, probs, num_true,
                                             c["remove_accidental_hits"]), kw["Logits"])
    return {"Logits@GRAD": vjp(kw["Loss@GRAD"])[0]}
