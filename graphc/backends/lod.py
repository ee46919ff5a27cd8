"""LoD values at run time (docs/lod.md): tokens packed into a size-bucketed buffer plus the
sequence lengths, a JAX pytree; and the wrapper that runs row-wise rules on the tokens.

``LoDArray(data, lengths)``: ``data`` is ``[T_cap, ...]``, the tokens of every sequence in
order followed by padding rows, which hold zeros (every rule that makes a LoD value keeps
them zero, so sums over tokens need no mask). ``lengths`` is a tuple, one int32 array per
level: level 1 ``([N],)`` tokens per sequence; level 2 ``([N], [S_cap])`` sub-sequences per
sequence and tokens per sub-sequence, the latter padded with zeros; level 3 (ops that opt
in) ``([N], [S_cap], [U_cap])``, one more nesting the same way. Shapes are static, the
counts are data: ``T_cap`` and the ``S_cap``s are size buckets chosen at the feed boundary
(runtime/lod_feed.py), ``N`` is the batch dimension.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np

LENGTHS_DTYPE = jnp.int32


@jax.tree_util.register_pytree_node_class
class LoDArray:
    """Packed tokens ``data`` ``[T_cap, ...]`` and per-level ``lengths`` (see the module doc).
    Arrays are jax arrays inside a step and numpy arrays on the host."""

    __slots__ = ("data", "lengths")

    def __init__(self, data, lengths: tuple):
        # no checks: JAX rebuilds pytrees from tracers and placeholders
        self.data, self.lengths = data, tuple(lengths)

    def tree_flatten(self):
        return (self.data, *self.lengths), len(self.lengths)

    @classmethod
    def tree_unflatten(cls, levels, children):
        return cls(children[0], tuple(children[1:1 + levels]))

    # -- static facts ---------------------------------------------------------------------
    @property
    def lod_level(self) -> int:
        return len(self.lengths)

    @property
    def shape(self) -> tuple[int, ...]:
        """The packed buffer's shape ``[T_cap, ...]`` (what a row-wise rule sees)."""
        return tuple(self.data.shape)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def capacity(self) -> int:
        return int(self.data.shape[0])

    @property
    def num_sequences(self) -> int:
        return int(self.lengths[0].shape[0])

    def with_data(self, data) -> LoDArray:
        return LoDArray(data, self.lengths)

    def astype(self, dtype) -> LoDArray:
        return LoDArray(self.data.astype(dtype), self.lengths)

    # -- derived on device ----------------------------------------------------------------
    def token_count(self):
        """Real tokens (a traced scalar): the sum of the innermost lengths."""
        return jnp.sum(self.lengths[-1])

    def valid(self):
        """``[T_cap]`` bool: which rows are tokens (the rest is padding)."""
        segments = _given(self.lengths[-1], self.capacity)
        if segments is not None:  # padding rows, and only they, are one past the last
            return segments < self.lengths[-1].shape[0]
        return jnp.arange(self.capacity) < self.token_count()

    def masked(self, data=None):
        """``data`` (default: its own) with padding rows set to zero, as a LoDArray."""
        data = self.data if data is None else data
        keep = self.valid().reshape((-1,) + (1,) * (data.ndim - 1))
        return LoDArray(jnp.where(keep, data, jnp.zeros((), data.dtype)), self.lengths)

    def segment_ids(self):
        """``[T_cap]`` int32: the innermost (sub-)sequence of each token; padding rows get
        the number of innermost segments, one past the last (segment sums drop them)."""
        return token_segments(self.lengths[-1], self.capacity)

    def offsets(self):
        """Start of each innermost (sub-)sequence in ``data``."""
        lengths = self.lengths[-1]
        return jnp.cumsum(lengths) - lengths

    # -- host side --------------------------------------------------------------------------
    def numpy(self) -> LoDArray:
        return LoDArray(np.asarray(self.data), tuple(np.asarray(x) for x in self.lengths))

    def __repr__(self) -> str:
        return (f"LoDArray(level={self.lod_level}, data={getattr(self.data, 'shape', '?')} "
                f"{getattr(self.data, 'dtype', '')}, sequences={self.lengths[0].shape})")


# -- pred25: segment ids a caller computed on the host (the inference predictor has the
# offsets there), keyed by the identity of the lengths array they belong to; a step being
# traced inside ``given_segments`` uses them instead of deriving them on the device
_GIVEN_SEGMENTS: ContextVar[dict | None] = ContextVar("graphc_given_segments", default=None)


@contextmanager
def given_segments(known: dict):
    """``known``: ``{id(lengths): (lengths, segment ids [capacity] int32)}``; inside the
    block ``token_segments`` of exactly that ``lengths`` and capacity returns those ids."""
    token = _GIVEN_SEGMENTS.set(known)
    try:
        yield
    finally:
        _GIVEN_SEGMENTS.reset(token)


def _given(lengths, capacity: int):
    """The segment ids ``given_segments`` holds for ``lengths`` at ``capacity``, or None."""
    given = _GIVEN_SEGMENTS.get()
    if given:
        hit = given.get(id(lengths))
        if hit is not None and hit[0] is lengths and hit[1].shape == (capacity,):
            return hit[1]
    return None


def token_segments(lengths, capacity: int):
    """Segment id of each of ``capacity`` rows for segments of ``lengths`` packed in order;
    rows past the last segment get ``len(lengths)``."""
    given = _given(lengths, capacity)
    if given is not None:
        return given
    # row i's segment = how many segments end at or before i: a scatter-add of ones at the
    # ends and a running sum (searchsorted would be a while loop on XLA:CPU, ~10x slower)
    ends = jnp.cumsum(lengths.astype(LENGTHS_DTYPE))
    marks = jnp.zeros(capacity, LENGTHS_DTYPE).at[ends].add(1, mode="drop")
    return jnp.cumsum(marks, dtype=LENGTHS_DTYPE)


def segment_sum(data, lengths, capacity: int | None = None):
    """Per-segment sums of packed ``data`` (padding rows dropped): ``[len(lengths), ...]``."""
    n = lengths.shape[0]
    seg = token_segments(lengths, data.shape[0] if capacity is None else capacity)
    return jax.ops.segment_sum(data, seg, num_segments=n + 1)[:n]


def first_lod(values) -> LoDArray | None:
    for v in values:
        if isinstance(v, LoDArray):
            return v
        if isinstance(v, list):
            found = first_lod(v)
            if found is not None:
                return found
    return None


def unwrap(value):
    """A rule's input as the row-wise rule sees it: the packed tokens of a LoD value."""
    if isinstance(value, LoDArray):
        return value.data
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def wrap_outputs(result: dict, out_types: dict, ref: LoDArray) -> dict:
    """Outputs whose type is a LoD type become LoD values with ``ref``'s lengths (a row-wise
    op keeps the LoD), padding rows zeroed so every LoD value keeps zeros there."""
    out = dict(result)
    for slot, types in out_types.items():
        if slot not in out or not any(t.lod_level for t in types):
            continue
        vals = out[slot]
        many = isinstance(vals, list | tuple)
        vals = list(vals) if many else [vals]
        wrapped = [ref.masked(jnp.asarray(v)) if t.lod_level and not isinstance(v, LoDArray)
                   else v for v, t in zip(vals, types)]
        out[slot] = wrapped if many else wrapped[0]
    return out


def pool(x: LoDArray, pooltype: str, pad_value: float = 0.0):
    """``sequence_pool`` of the innermost level: dense ``[N, ...]`` for level 1, a level-1
    LoDArray of sub-sequences for level 2. Empty (sub-)sequences give ``pad_value``."""
    lengths = x.lengths[-1]
    n = lengths.shape[0]
    data = x.data
    seg = x.segment_ids()
    shape = (n,) + (1,) * (data.ndim - 1)
    count = lengths.reshape(shape).astype(data.dtype)
    empty = (lengths == 0).reshape(shape)
    if pooltype in ("SUM", "AVERAGE", "SQRT"):
        out = jax.ops.segment_sum(data, seg, num_segments=n + 1)[:n]
        if pooltype == "AVERAGE":
            out = out / jnp.maximum(count, 1)
        elif pooltype == "SQRT":
            out = out / jnp.sqrt(jnp.maximum(count, 1))
    elif pooltype == "MAX":
        out = jax.ops.segment_max(data, seg, num_segments=n + 1)[:n]
    elif pooltype in ("FIRST", "LAST"):
        starts = x.offsets()
        index = starts if pooltype == "FIRST" else starts + lengths - 1
        out = jnp.take(data, jnp.clip(index, 0, data.shape[0] - 1), axis=0)
    else:
        raise ValueError(f"unknown pooltype {pooltype!r}")
    out = jnp.where(empty, jnp.asarray(pad_value, data.dtype), out)
    if x.lod_level == 1:
        return out
    # level L > 1: the pooled sub-sequences are the tokens of a level L-1 value; rows past the
    # real sub-sequences are padding and must be zero
    outer = LoDArray(out, x.lengths[:-1])
    return outer.masked()


def split_sequences(x: LoDArray, parts: int) -> list[LoDArray]:
    """A host LoDArray cut into ``parts`` LoDArrays of whole sequences (equal counts), each
    in a buffer of the same capacity: what each data-parallel replica gets. Concatenating
    them gives the block layout a data-parallel fetch has (runtime/lod.py's ``unpack``)."""
    host = x.numpy()
    n = host.lengths[0].shape[0]
    if n % parts:
        raise ValueError(f"{n} sequences do not split into {parts} equal parts")
    per = n // parts
    out = []
    for p in range(parts):
        lengths, (a, b) = [], (p * per, (p + 1) * per)
        for level in host.lengths:  # each level's entries of these sequences, then tokens
            cut = np.zeros_like(level) if lengths else level[a:b]
            if lengths:
                cut[:b - a] = level[a:b]
            lengths.append(cut)
            ends = np.concatenate([[0], np.cumsum(level.astype(np.int64))])
            a, b = int(ends[a]), int(ends[b])
        data = np.zeros_like(host.data)
        data[:b - a] = host.data[a:b]
        out.append(LoDArray(data, tuple(lengths)))
    return out


def concat_blocks(parts: list) -> LoDArray:
    """Replicas' LoDArrays side by side (data, then each level's lengths, concatenated)."""
    hosts = [p.numpy() for p in parts]
    return LoDArray(np.concatenate([h.data for h in hosts]),
                    tuple(np.concatenate(level) for level in zip(*(h.lengths for h in hosts))))


def pair_dense_rows(ctx, lod_slots, kwargs: dict, ref: LoDArray, check: bool = True):
    """Dense operands of a row-wise op whose dim 0 runs beside the tokens of ``ref`` (same
    rank, more than one row: CTR-DNN's dense label beside a LoD prediction) are paired row
    for row, as Paddle does when their counts agree (``pad_to_tokens``). Returns the new
    kwargs and {slot: [rows, the LoD value, or None per value]} to cut their gradients back
    to (a LoD operand in another buffer is moved into ``ref``'s). ``check``
    False (a grad op: its forward op checked the same rows) makes no data check."""
    out, paired = dict(kwargs), {}
    for slot in lod_slots:
        vals = kwargs.get(slot)
        many = isinstance(vals, list)
        got = [pad_to_tokens(ctx, slot, v, ref, check) for v in (vals if many else [vals])]
        out[slot] = [g[0] for g in got] if many else got[0][0]
        if any(g[1] is not None for g in got):
            paired[slot] = [g[1] for g in got]
    return out, paired


def pad_to_tokens(ctx, slot: str, v, ref: LoDArray, check: bool = True):
    """A dense ``v`` of ``ref``'s rank with more than one row, padded (or cut) to ``ref``'s
    buffer so row i meets token i; its row count must equal the token count, a data check
    (Paddle's dims[0] equality). Returns (value, its own rows), or (v, None) when ``v``
    broadcasts over the tokens instead (one row, a lower rank) or is no dense array."""
    from .data_checks import report_invalid

    if isinstance(v, LoDArray) and v is not ref and v.capacity != ref.capacity:
        # another LoD value in a buffer of another size (tagspace's hinge: a pooled and a
        # reshaped sequence of one row each): its tokens, moved into ref's buffer, meet
        # ref's token for token, their counts equal as Paddle's dims[0] check
        if check:
            count, own = ref.token_count(), v.token_count()
            report_invalid(ctx, slot, jnp.reshape(count != own, (1,)), jnp.reshape(own, (1,)),
                           "as many tokens as the op's first LoD input, which it meets token "
                           "for token")
        return LoDArray(_to_rows(v.data, ref.capacity), ref.lengths), v
    if (v is None or isinstance(v, LoDArray) or not hasattr(v, "ndim")
            or v.ndim != ref.data.ndim or v.ndim == 0 or v.shape[0] == 1):
        return v, None
    rows, cap = int(v.shape[0]), ref.capacity
    if check:
        count = ref.token_count()
        report_invalid(ctx, slot, jnp.reshape(count != rows, (1,)), jnp.reshape(count, (1,)),
                       f"{rows} tokens: the dense input {slot} has {rows} rows, paired row "
                       "for row with the tokens of its LoD input (a per-sequence value "
                       "needs sequence_expand)")
    return _to_rows(jnp.asarray(v), cap), rows


def unpair_rows(result: dict, paired: dict, suffix: str) -> dict:
    """Gradients (``slot + suffix``) of paired dense operands back to their own rows."""
    out = dict(result)
    for slot, rows in paired.items():
        key = slot + suffix
        if key not in out or out[key] is None:
            continue
        vals = out[key]
        many = isinstance(vals, list | tuple)
        vals = list(vals) if many else [vals]
        cut = [_cut_back(v, r) for v, r in zip(vals, rows)]
        out[key] = cut if many else cut[0]
    return out


def _cut_back(grad, own):
    """A paired operand's gradient back in its own layout: its rows (``own`` an int), or its
    own LoD buffer (``own`` the LoD value it was)."""
    if own is None:
        return grad
    if isinstance(own, LoDArray):
        data = grad.data if isinstance(grad, LoDArray) else jnp.asarray(grad)
        return LoDArray(_to_rows(data, own.capacity), own.lengths)
    if isinstance(grad, LoDArray):
        return grad
    return _to_rows(jnp.asarray(grad), own)


def _to_rows(v, rows: int):
    if v.shape[0] >= rows:
        return v[:rows]
    return jnp.pad(v, [(0, rows - v.shape[0])] + [(0, 0)] * (v.ndim - 1))
