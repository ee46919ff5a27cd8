"""concat of LoD values along axis 0 (nlp24): whole batches one after the other, the second's
sequences after the first's (ELMo's ``concat([loss_fw, loss_bw])``); other axes stay row-wise.
"""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import lod_lowering
from ...ir.grad_defs import GRAD_SUFFIX


def _along_tokens(c, lod: LoDArray) -> bool:
    return c["axis"] % lod.data.ndim == 0


def _destinations(xs: list[LoDArray]):
    """For each packed array of a LoD value past its first lengths (the lower levels'
    lengths, then the tokens): where each input's entries go in the joined buffer (past the
    end: padding, dropped), and the joined buffer's size. Every input's valid entries come
    first in its own buffer, so each lands at the sum of the earlier inputs' counts."""
    plans = []
    counts = [x.lengths[0] for x in xs]  # the entries of the next array each level holds
    arrays = [[*x.lengths[1:], x.data] for x in xs]
    for depth in range(len(arrays[0])):
        sizes = [a[depth].shape[0] for a in arrays]
        total = sum(sizes)
        start = jnp.zeros((), jnp.int32)
        dests = []
        for cnt, size in zip(counts, sizes):
            used = jnp.sum(cnt).astype(jnp.int32)
            rows = jnp.arange(size, dtype=jnp.int32)
            dests.append(jnp.where(rows < used, start + rows, total))
            start = start + used
        plans.append((dests, total))
        counts = [a[depth] for a in arrays]
    return plans


def _join(parts, dests, total):
    out = jnp.zeros((total, *parts[0].shape[1:]), parts[0].dtype)
    for part, dest in zip(parts, dests):
        out = out.at[dest].set(part, mode="drop")
    return out


@lod_lowering("concat", when=_along_tokens)
def _concat_batches(c, X):
    first = jnp.concatenate([x.lengths[0] for x in X])
    plans = _destinations(X)
    joined = [_join([[*x.lengths[1:], x.data][d] for x in X], dests, total)
              for d, (dests, total) in enumerate(plans)]
    return {"Out": LoDArray(joined[-1], (first, *joined[:-1]))}


@lod_lowering("concat_grad", when=_along_tokens)
def _concat_batches_grad(c, **kw):
    xs, dout = kw["X"], unwrap(kw["Out" + GRAD_SUFFIX])
    dests, _ = _destinations(xs)[-1]
    rows = dout.shape[0]
    grads = [x.masked(jnp.take(dout, jnp.minimum(d, rows - 1), axis=0).astype(x.data.dtype))
             for x, d in zip(xs, dests)]
    return {"X" + GRAD_SUFFIX: grads}
