"""Lowering rules of the sequence ops of defs.py beside this file over LoDArrays: static
buffers in, static buffers out, padding rows zero (docs/lod.md, "Output capacities").

Gradients come from the generic LoD gradient (a vjp of these rules over the tokens) except
sequence_concat's, whose X slot takes several values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.data_checks import report_invalid
from ...backends.lod import LENGTHS_DTYPE, LoDArray, token_segments
from ...backends.lowering import LoweringError, lowering
from ...ir.errors import ShapeError
from ...ir.grad_defs import GRAD_SUFFIX


def _positions(lengths, capacity: int):
    """(segment of each row, its position inside its segment, segment offsets); padding
    rows get segment ``len(lengths)`` (clip before indexing)."""
    lengths = lengths.astype(LENGTHS_DTYPE)
    seg = token_segments(lengths, capacity)
    offsets = jnp.cumsum(lengths) - lengths
    n = lengths.shape[0]
    start = jnp.take(offsets, jnp.clip(seg, 0, max(n - 1, 0)), axis=0) if n else seg * 0
    return seg, jnp.arange(capacity, dtype=LENGTHS_DTYPE) - start, offsets


def _rows(data, index):
    """``data[index]`` along dim 0 with out-of-range indices clipped (callers mask them)."""
    if data.shape[0] == 0:  # nothing to take (no rows): every row read is masked anyway
        return jnp.zeros(index.shape + data.shape[1:], data.dtype)
    return jnp.take(data, jnp.clip(index, 0, max(data.shape[0] - 1, 0)), axis=0)


def _bcast(mask, like):
    return mask.reshape(mask.shape + (1,) * (like.ndim - mask.ndim))


def _column(x):
    """A per-row int vector from [N], [N, 1] or [T, 1]."""
    return x.reshape(x.shape[0]) if x.ndim == 2 else x


# -- sequence_softmax ---------------------------------------------------------------------------

@lowering("sequence_softmax")
def _sequence_softmax(c, X: LoDArray):
    lengths = X.lengths[-1]
    n = lengths.shape[0]
    seg = X.segment_ids()
    data = X.data
    flat = data.reshape(X.capacity)
    peak = jax.ops.segment_max(flat, seg, num_segments=n + 1)
    peak = jax.lax.stop_gradient(jnp.where(jnp.isfinite(peak), peak, 0))  # empty: -inf
    e = jnp.where(X.valid(), jnp.exp(flat - peak[seg]), 0)
    total = jax.ops.segment_sum(e, seg, num_segments=n + 1)
    out = e / jnp.where(total > 0, total, 1)[seg]
    return {"Out": X.masked(out.reshape(data.shape))}


# -- sequence_conv ------------------------------------------------------------------------------

@lowering("sequence_conv")
def _sequence_conv(c, X: LoDArray, Filter, PaddingData=None):
    seg, _, _ = _positions(X.lengths[-1], X.capacity)
    rows = jnp.arange(X.capacity, dtype=LENGTHS_DTYPE)
    cols = []
    for j in range(c["contextLength"]):
        src = rows + (c["contextStart"] + j)
        inside = (src >= 0) & (src < X.capacity) & (_rows(seg, src) == seg)
        cols.append(jnp.where(_bcast(inside, X.data), _rows(X.data, src), 0))
    context = jnp.concatenate(cols, axis=1)  # [T_cap, contextLength * D]
    return {"Out": X.masked(context @ Filter)}


# -- sequence_expand / sequence_expand_as --------------------------------------------------------

def _expand(c, x, y: LoDArray, level: int, expected: str):
    """Row i of dense ``x`` repeated ``y.lengths[level][i]`` times, with y's LoD down to
    ``level``: the buffer is y's buffer at that level (no new capacity)."""
    repeats = y.lengths[level]
    capacity = y.capacity if level == y.lod_level - 1 else y.lengths[level + 1].shape[0]
    if isinstance(x, LoDArray):  # graphc's LoD form of rows (defs.py): a run-time count
        rows = x.token_count()
        report_invalid(c, "X", jnp.reshape(rows != repeats.shape[0] if level == 0 else
                                           rows != jnp.sum(y.lengths[level - 1]), (1,)),
                       jnp.reshape(rows, (1,)),
                       f"as many rows (tokens) in X as Y has entries at its ref_level; "
                       f"{expected}")
        x = x.data
    elif level == 0 and x.shape[0] != repeats.shape[0]:
        raise LoweringError(f"{c.where}: X has {x.shape[0]} rows but Y has "
                            f"{repeats.shape[0]} sequences; {expected}")
    elif level > 0:  # the number of sub-sequences is data: a run-time check
        count = jnp.sum(y.lengths[0])
        report_invalid(c, "X", jnp.reshape(count != x.shape[0], (1,)), jnp.reshape(count, (1,)),
                       f"as many sub-sequences in Y as X has rows ({x.shape[0]}); {expected}")
    seg = token_segments(repeats, capacity)
    out = LoDArray(_rows(x, seg), y.lengths[:level + 1])
    return out.masked()


@lowering("sequence_expand")
def _sequence_expand(c, X, Y: LoDArray):
    level = Y.lod_level - 1 if c["ref_level"] == -1 else c["ref_level"]
    return {"Out": _expand(c, X, Y, level, "one row of X per sequence of Y's ref_level")}


@lowering("sequence_expand_as")
def _sequence_expand_as(c, X, Y: LoDArray):
    return {"Out": _expand(c, X, Y, 0, "one row of X per sequence of Y")}


# -- sequence_concat ------------------------------------------------------------------------------

def _concat_destinations(xs: list[LoDArray]):
    """Where each row of each input goes in the concatenated buffer (past the end: padding)."""
    total_len = sum(x.lengths[0].astype(LENGTHS_DTYPE) for x in xs)
    out_offsets = jnp.cumsum(total_len) - total_len
    capacity = sum(x.capacity for x in xs)
    before = jnp.zeros_like(total_len)
    dests = []
    for x in xs:
        seg, pos, _ = _positions(x.lengths[0], x.capacity)
        n = total_len.shape[0]
        s = jnp.clip(seg, 0, n - 1)
        dest = out_offsets[s] + before[s] + pos
        dests.append(jnp.where(x.valid(), dest, capacity))
        before = before + x.lengths[0].astype(LENGTHS_DTYPE)
    return dests, (total_len,), capacity


@lowering("sequence_concat")
def _sequence_concat(c, X):
    n = {x.num_sequences for x in X}
    if len(n) != 1:
        raise LoweringError(f"{c.where}: the inputs hold {sorted(n)} sequences; "
                            "sequence_concat joins sequence i of each, so counts must agree")
    dests, lengths, capacity = _concat_destinations(X)
    out = jnp.zeros((capacity, *X[0].data.shape[1:]), X[0].data.dtype)
    for x, dest in zip(X, dests):
        out = out.at[dest].set(x.data, mode="drop")
    return {"Out": LoDArray(out, lengths)}


@lowering("sequence_concat_grad")
def _sequence_concat_grad(c, **kw):
    xs, dout = kw["X"], kw["Out" + GRAD_SUFFIX]
    dests, _, _ = _concat_destinations(xs)
    grads = [x.masked(_rows(dout.data, d).astype(x.data.dtype)) for x, d in zip(xs, dests)]
    return {"X" + GRAD_SUFFIX: grads}


# -- sequence_reshape ------------------------------------------------------------------------------

@lowering("sequence_reshape")
def _sequence_reshape(c, X: LoDArray):
    new = c["new_dim"]
    width = X.data.shape[1]
    values = X.lengths[0] * width
    report_invalid(c, "X", values % new != 0, X.lengths[0],
                   f"sequence lengths whose length * {width} values divide by new_dim {new}")
    capacity = -(-X.capacity * width // new)
    flat = jnp.pad(X.data.reshape(-1), (0, capacity * new - X.capacity * width))
    return {"Out": LoDArray(flat.reshape(capacity, new), (values // new,)).masked()}


# -- sequence_pad / sequence_unpad / sequence_mask -------------------------------------------------

@lowering("sequence_pad")
def _sequence_pad(c, X: LoDArray, PadValue):
    lengths = X.lengths[0]
    width = c["padded_length"] if c["padded_length"] != -1 else X.capacity
    if c["padded_length"] != -1:
        report_invalid(c, "X", lengths > width, lengths,
                       f"sequences no longer than padded_length {width}")
    offsets = jnp.cumsum(lengths) - lengths
    j = jnp.arange(width, dtype=LENGTHS_DTYPE)
    src = offsets[:, None] + j[None, :]  # [N, width]
    tokens = _rows(X.data, src.reshape(-1)).reshape(src.shape + X.data.shape[1:])
    pad = jnp.broadcast_to(PadValue.reshape(PadValue.shape if PadValue.shape == X.data.shape[1:]
                                            else (1,) * (X.data.ndim - 1)), tokens.shape)
    inside = _bcast(j[None, :] < lengths[:, None], tokens)
    return {"Out": jnp.where(inside, tokens, pad.astype(tokens.dtype)),
            "Length": lengths.astype(jnp.int64)}


@lowering("sequence_unpad")
def _sequence_unpad(c, X, Length):
    lengths = _column(Length)
    if isinstance(X, LoDArray):  # Paddle ignores X's LoD: its rows are the N sequences
        rows = lengths.shape[0]
        count = X.token_count()
        report_invalid(c, "X", jnp.reshape(count != rows, (1,)), jnp.reshape(count, (1,)),
                       f"{rows} rows in X (one per length in Length)")
        X = _rows(X.data, jnp.arange(rows))
    n, width = X.shape[0], X.shape[1]
    report_invalid(c, "Length", (lengths < 0) | (lengths > width), lengths,
                   f"lengths in [0, {width}] (X's second dimension)")
    lengths = jnp.clip(lengths, 0, width).astype(LENGTHS_DTYPE)
    capacity = max(n * width, 1)
    seg, pos, _ = _positions(lengths, capacity)
    flat = X.reshape((n * width, *X.shape[2:]))
    out = _rows(flat, jnp.clip(seg, 0, max(n - 1, 0)) * width + pos)
    if n * width == 0:
        out = jnp.zeros((capacity, *X.shape[2:]), X.dtype)
    if X.ndim == 2:  # Paddle's [T, 1]: one value per token
        out = out.reshape(capacity, 1)
    return {"Out": LoDArray(out, (lengths,)).masked()}


@lowering("sequence_mask")
def _sequence_mask(c, X, MaxLenTensor=None):
    maxlen = c["maxlen"]
    if MaxLenTensor is not None:
        if isinstance(MaxLenTensor, jax.core.Tracer):
            raise ShapeError(f"{c.where}: maxlen must be known when the step is traced (a "
                             "shape such as layers.shape(x)[1], not a value computed from "
                             "data): XLA needs the mask's width")
        maxlen = int(np.asarray(MaxLenTensor).reshape(-1)[0])
    mask = jnp.arange(maxlen) < X[..., None]
    return {"Y": mask.astype(c.out_dtype("Y"))}


# -- sequence_reverse / sequence_slice / sequence_enumerate / sequence_scatter ---------------------

@lowering("sequence_reverse")
def _sequence_reverse(c, X: LoDArray):
    lengths = X.lengths[-1].astype(LENGTHS_DTYPE)
    seg, pos, offsets = _positions(lengths, X.capacity)
    s = jnp.clip(seg, 0, max(lengths.shape[0] - 1, 0))
    return {"Y": X.masked(_rows(X.data, offsets[s] + lengths[s] - 1 - pos))}


@lowering("sequence_slice")
def _sequence_slice(c, X: LoDArray, Offset, Length):
    lengths = X.lengths[0].astype(LENGTHS_DTYPE)
    offset, length = _column(Offset).astype(LENGTHS_DTYPE), _column(Length).astype(LENGTHS_DTYPE)
    if offset.shape[0] != lengths.shape[0] or length.shape[0] != lengths.shape[0]:
        raise LoweringError(f"{c.where}: Offset and Length need one row per sequence of X "
                            f"({lengths.shape[0]}), got {offset.shape[0]} and {length.shape[0]}")
    report_invalid(c, "Offset", (offset < 0) | (offset > lengths), offset,
                   "offsets in [0, the sequence's length]")
    report_invalid(c, "Length", (length < 0) | (offset + length > lengths), length,
                   "lengths with Offset + Length <= the sequence's length")
    length = jnp.clip(length, 0, jnp.maximum(lengths - jnp.maximum(offset, 0), 0))
    seg, pos, _ = _positions(length, X.capacity)
    starts = jnp.cumsum(lengths) - lengths + jnp.clip(offset, 0, None)
    src = starts[jnp.clip(seg, 0, lengths.shape[0] - 1)] + pos
    return {"Out": LoDArray(_rows(X.data, src), (length,)).masked()}


@lowering("sequence_enumerate")
def _sequence_enumerate(c, X: LoDArray):
    lengths = X.lengths[0].astype(LENGTHS_DTYPE)
    seg, _, offsets = _positions(lengths, X.capacity)
    s = jnp.clip(seg, 0, max(lengths.shape[0] - 1, 0))
    end = offsets[s] + lengths[s]
    ids = _column(X.data)
    rows = jnp.arange(X.capacity, dtype=LENGTHS_DTYPE)
    cols = [jnp.where(rows + k < end, _rows(ids, rows + k), c["pad_value"]).astype(ids.dtype)
            for k in range(c["win_size"])]
    return {"Out": LoDArray(jnp.stack(cols, axis=1), X.lengths).masked()}


@lowering("sequence_scatter")
def _sequence_scatter(c, X, Ids: LoDArray, Updates: LoDArray):
    n, width = X.shape
    if Ids.num_sequences != n:
        raise LoweringError(f"{c.where}: X has {n} rows but Ids holds {Ids.num_sequences} "
                            "sequences; sequence i scatters into row i")
    ids = _column(Ids.data)
    valid = Ids.valid()
    report_invalid(c, "Ids", valid & ((ids < 0) | (ids >= width)), ids,
                   f"ids in [0, {width}) (X's second dimension)")
    seg = jnp.where(valid & (ids >= 0) & (ids < width), Ids.segment_ids(), n)
    upd = _column(Updates.data).astype(X.dtype)
    return {"Out": X.at[seg, jnp.clip(ids, 0, width - 1)].add(upd, mode="drop")}
