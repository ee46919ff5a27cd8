"""LoD values crossing into and out of a step: fed LoDTensors packed into size-bucketed LoDArrays
(bucket settings), fetched ones unpacked (docs/lod.md); the host values live in lod_tensor.py."""

from __future__ import annotations

import os

import numpy as np

from ..backends.lod import LoDArray
from ..ir.types import TensorType, dims_compatible
from .feeds import FeedError, convert_feed

# the host values, importable from here as before the split
from .lod_tensor import (  # noqa: F401
    LoDError,
    LoDTensor,
    LoDTensorArray,
    create_lod_tensor,
    create_random_int_lodtensor,
    lengths_problem,
)

# process: a process-wide setting (the environment, or set_min_bucket).
# The smallest token bucket: a batch of T tokens is padded to max(MIN_BUCKET, 2**ceil(log2 T))
# rows, so batches of random lengths compile at most log2(max T / MIN_BUCKET) + 1 steps.
MIN_BUCKET = int(os.environ.get("GRAPHC_LOD_MIN_BUCKET", "16"))
# process: whether the LoD feeds of one step share their buckets (pack_feeds; default on,
# GRAPHC_LOD_SHARED_BUCKET=0 or set_shared_bucket(False) gives each feed its own).
SHARED_BUCKET = os.environ.get("GRAPHC_LOD_SHARED_BUCKET", "1") != "0"


def bucket(n: int, minimum: int | None = None) -> int:
    """The buffer size for ``n`` rows: the next power of two, at least ``minimum``."""
    minimum = MIN_BUCKET if minimum is None else minimum
    return max(int(minimum), 1 << max(int(n) - 1, 0).bit_length())


def set_min_bucket(n: int) -> None:
    """Set the smallest token bucket (default 16, or ``GRAPHC_LOD_MIN_BUCKET``)."""
    global MIN_BUCKET
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise LoDError(f"the minimum LoD bucket must be an int >= 1, got {n!r}")
    MIN_BUCKET = n


def set_shared_bucket(shared: bool) -> None:
    """Whether the LoD feeds of one step share one token bucket (default True): compiles
    are then bounded per program; False pads each feed to its own bucket (less padding for
    a feed far smaller than the others, but the step signature combines every feed's)."""
    global SHARED_BUCKET
    if not isinstance(shared, bool):
        raise LoDError(f"set_shared_bucket takes True or False, got {shared!r}")
    SHARED_BUCKET = shared


# -- the feed boundary ------------------------------------------------------------------------

class _Groups:
    """A checked LoD feed split into ``parts`` groups of whole sequences: each group's token
    and sub-sequence ranges, and the buckets they need (packing happens in ``_pack``)."""

    def __init__(self, name: str, value, want: TensorType, dtype, parts: int):
        if not isinstance(value, LoDTensor):
            raise FeedError(f"feed '{name}' is declared with lod_level={want.lod_level} "
                            f"({want}): give a LoDTensor (fluid.create_lod_tensor(data, "
                            "recursive_seq_lens, place)) or feed through a DataFeeder, not a "
                            f"{type(value).__name__}")
        data = value._value()
        if data.dtype != dtype:  # checked conversion (a fraction for an int feed is refused)
            data = convert_feed(name, data, dtype)
        lengths = value._lengths
        if len(lengths) != want.lod_level:
            raise FeedError(f"feed '{name}' has {len(lengths)} LoD level(s) "
                            f"({value.recursive_sequence_lengths()!r:.80}) but the program "
                            f"declares lod_level={want.lod_level}")
        problem = lengths_problem(lengths, data.shape[0] if data.ndim else 0)
        if problem:
            raise FeedError(f"feed '{name}': its sequence lengths do not describe its data of "
                            f"shape {list(data.shape)}: {problem}")
        if (data.ndim > len(want.shape) >= 1 and all(d == 1 for d in data.shape[len(want.shape):])
                and dims_compatible(data.shape[:len(want.shape)], want.shape)):
            # ids as [N, 1] where the program declares scalar tokens [-1] (fluid.data(shape=
            # [None], lod_level=1) fed by create_lod_tensor, which makes [N, 1]): the same
            # values per token, so they are read as declared, as Paddle's kernels read them
            data = data.reshape(data.shape[:len(want.shape)])
        if not dims_compatible(data.shape, want.shape):
            raise FeedError(f"feed '{name}' has shape {list(data.shape)} but the program "
                            f"declares {list(want.shape)} (tokens first; -1 matches any size)")
        outer = np.asarray(lengths[0], np.int64)
        n = outer.size
        if n == 0:
            raise FeedError(f"feed '{name}' holds no sequences: an empty batch; a step needs "
                            "at least one sample (skip empty batches)")
        if n % parts:
            raise FeedError(f"feed '{name}' has {n} sequences, which do not split evenly over "
                            f"{parts} devices; every device must get the same number of "
                            f"sequences (a multiple of {parts})")
        per = n // parts
        self.data, self.outer, self.parts = data, outer, parts
        self.levels = [np.asarray(level, np.int64) for level in lengths]
        # each device's entry range in every level (its whole sequences), then its tokens
        ranges = [[(p * per, (p + 1) * per) for p in range(parts)]]
        for level in self.levels:
            ends = np.concatenate([[0], np.cumsum(level)])
            ranges.append([(int(ends[a]), int(ends[b])) for a, b in ranges[-1]])
        self.groups_tok = ranges[-1]
        self.level_ranges = ranges[1:-1]  # levels 1.. (the sub-sequence levels)
        self.tokens = max(b - a for a, b in self.groups_tok)  # the largest device's
        # entries per device in each sub-sequence level: each gets its own bucket
        self.subs = [max(b - a for a, b in r) for r in self.level_ranges]

    def pack(self, t_cap: int, s_caps: list[int]) -> LoDArray:
        """One buffer, device blocks of ``t_cap`` rows side by side (and blocks of
        ``s_caps[i]`` lengths for sub-sequence level i + 1); padding stays zero."""
        data, parts = self.data, self.parts
        packed = np.zeros((parts * t_cap, *data.shape[1:]), data.dtype)
        lens = [self.outer.astype(np.int32)]
        lens += [np.zeros(parts * cap, np.int32) for cap in s_caps]
        for p, (a, b) in enumerate(self.groups_tok):
            packed[p * t_cap:p * t_cap + b - a] = data[a:b]
            for i, cap in enumerate(s_caps):
                sa, sb = self.level_ranges[i][p]
                lens[i + 1][p * cap:p * cap + sb - sa] = self.levels[i + 1][sa:sb]
        return LoDArray(packed, tuple(lens))


def pack_feed(name: str, value, want: TensorType, dtype, parts: int = 1) -> LoDArray:
    """A fed LoDTensor for a LoD feed as the step's LoDArray (numpy): its sequences split
    into ``parts`` equal groups (data-parallel devices), each group's tokens packed into the
    same bucket, groups concatenated (the device split of dim 0 gives each its own)."""
    return pack_feeds({name: (value, want, dtype)}, parts)[name]


def pack_stacked(name: str, values: list, want: TensorType, dtype, parts: int = 1) -> LoDArray:
    """K LoDTensors (the K iterations of one ``num_iteration_per_run`` call) packed into one
    common bucket (the largest batch's) and stacked on a new leading axis: data
    ``[K, parts * T_cap, ...]``, lengths ``[K, N]`` (every batch must have N sequences)."""
    return pack_feeds({name: (list(values), want, dtype)}, parts, len(values))[name]


def _stacked_groups(name: str, values: list, want: TensorType, dtype, parts: int) -> list:
    groups = []
    for k, value in enumerate(values):
        try:
            groups.append(_Groups(name, value, want, dtype, parts))
        except FeedError as exc:
            raise FeedError(f"iteration {k} of {len(values)}: {exc}") from None
    counts = [g.outer.size for g in groups]
    if len(set(counts)) != 1:
        raise FeedError(f"feed '{name}' has {counts} sequences in the {len(values)} "
                        "iterations of one call; they are stacked, so every iteration needs "
                        "the same number of sequences")
    tails = {g.data.shape[1:] for g in groups}
    if len(tails) != 1:
        raise FeedError(f"feed '{name}' has tokens of shapes {sorted(map(list, tails))} in the "
                        "iterations of one call; they are stacked, so they must agree")
    return groups


def pack_feeds(items: dict, parts: int = 1, iterations: int | None = None,
               tokens_at_least: int | None = None) -> dict:
    """The LoD feeds of one step, ``{name: (LoDTensor, want, dtype)}`` (with ``iterations``
    K: a list of K LoDTensors each), packed as ``pack_feed`` / ``pack_stacked`` pack one,
    but into buckets shared by all of them (``SHARED_BUCKET``): one token bucket, the
    largest feed's, and one bucket per sub-sequence level. So a step's signature holds one
    bucket whatever the number of LoD feeds, and a program compiles at most
    ``log2(T_max / MIN_BUCKET) + 1`` variants per batch size, not that to the power of its
    feeds (26 CTR slots, each near a boundary, would combine into new signatures).
    ``tokens_at_least``: a token bucket the caller shares with feeds packed elsewhere (the
    predictor's fast path packs feed by feed)."""
    groups = {name: ([_Groups(name, value, want, dtype, parts)] if iterations is None
                     else _stacked_groups(name, value, want, dtype, parts))
              for name, (value, want, dtype) in items.items()}
    every = [g for gs in groups.values() for g in gs]
    shared_t = bucket(max([g.tokens for g in every] + [tokens_at_least or 0]))
    depth = max((len(g.subs) for g in every), default=0)
    shared_s = [bucket(max(g.subs[i] for g in every if len(g.subs) > i)) for i in range(depth)]
    out = {}
    for name, gs in groups.items():
        if SHARED_BUCKET:
            t_cap, s_caps = shared_t, shared_s[:len(gs[0].subs)]
        else:  # each feed its own bucket (all K iterations of it share one)
            t_cap = bucket(max([g.tokens for g in gs] + [tokens_at_least or 0]))
            s_caps = [bucket(max(g.subs[i] for g in gs)) for i in range(len(gs[0].subs))]
        packed = [g.pack(t_cap, s_caps) for g in gs]
        out[name] = packed[0] if iterations is None else LoDArray(
            np.stack([p.data for p in packed]),
            tuple(np.stack(level) for level in zip(*(p.lengths for p in packed))))
    return out


def concat_lod(name: str, values: list) -> LoDTensor:
    """Per-device LoDTensors (Paddle's per-device feed list) as one LoDTensor, device ``i``'s
    sequences after device ``i - 1``'s; every device must hold the same number of them, so
    packing with ``parts = len(values)`` gives device ``i`` exactly its own. A loader's
    per-device PackedLoD (a list of feed dicts from ``loader()`` over several places) reads
    as the LoDTensor it packs."""
    values = [v._tensor() if isinstance(v, PackedLoD) else v for v in values]
    for i, v in enumerate(values):
        if not isinstance(v, LoDTensor):
            raise FeedError(f"feed dict of device {i}: feed '{name}' is a LoD feed: give a "
                            f"LoDTensor, not a {type(v).__name__}")
    counts = [len(v._lengths[0]) if v._lengths else 0 for v in values]
    if len(set(counts)) != 1:
        raise FeedError(f"feed '{name}': the devices' feed dicts hold {counts} sequences; "
                        "every device must get the same number of sequences")
    levels = {len(v._lengths) for v in values}
    if len(levels) != 1:
        raise FeedError(f"feed '{name}': the devices' LoDTensors have different LoD levels "
                        f"({sorted(levels)})")
    arrays = [v._value() for v in values]
    try:
        data = np.concatenate(arrays)
    except ValueError:
        raise FeedError(f"feed '{name}': the devices' tokens have shapes "
                        f"{[list(a.shape) for a in arrays]}, which do not stack") from None
    lengths = [np.concatenate([v._lengths[lvl] for v in values]) for lvl in range(levels.pop())]
    return LoDTensor(data, lengths)


class PackedLoD:
    """A LoD feed already packed (by a DataLoader's thread, ahead of the step) for ``parts``
    data-parallel devices, with ``iterations`` stacked batches (1: none); possibly on the
    device(s). ``Executor.run`` takes it as it is after checking it fits; ``source`` (the
    LoDTensor, or the list of K) is packed again for a step with other devices/iterations."""

    __slots__ = ("array", "parts", "iterations", "source")

    def __init__(self, array: LoDArray, parts: int = 1, iterations: int = 1, source=None):
        self.array, self.parts, self.iterations = array, parts, iterations
        self.source = source

    def check(self, name: str, want: TensorType, dtype, parts: int,
              iterations: int) -> LoDArray | None:
        """The array for the step, or None when ``source`` must be packed again for it."""
        arr = self.array
        if arr.lod_level != want.lod_level:
            raise FeedError(f"feed '{name}' was packed with lod_level={arr.lod_level} but the "
                            f"program declares lod_level={want.lod_level}")
        if (self.parts, self.iterations) != (parts, iterations):
            if self.source is not None:
                return None
            raise FeedError(f"feed '{name}' was packed for {self.parts} device(s) and "
                            f"{self.iterations} iteration(s) per run but the step runs on "
                            f"{parts} and {iterations}; build the DataLoader with the "
                            "CompiledProgram it feeds as its places")
        if arr.dtype != dtype:
            raise FeedError(f"feed '{name}' has dtype {arr.dtype} but the program declares "
                            f"{want.dtype}")
        token_shape = arr.shape[1:] if iterations == 1 else arr.shape[2:]
        if not dims_compatible((-1, *token_shape), want.shape):
            raise FeedError(f"feed '{name}' has tokens of shape {list(token_shape)} but the "
                            f"program declares {list(want.shape)}")
        return LoDArray(arr.data, arr.lengths)  # a new object: never a cached plan's key

    # -- port24: read as the LoDTensor it packs (Paddle's loaders yield LoDTensors, and
    # scripts read them: lexical_analysis checks data[0]['words'].lod() before a step)
    def _tensor(self) -> LoDTensor:
        if isinstance(self.source, LoDTensor):
            return self.source
        if self.iterations != 1:
            raise LoDError(f"this feed holds {self.iterations} stacked batches (a loader for "
                           "several iterations per run); read one batch's LoDTensor from "
                           "the loader built without iterations")
        return unpack(self.array, self.parts)

    def lod(self) -> list[list[int]]:
        return self._tensor().lod()

    def recursive_sequence_lengths(self) -> list[list[int]]:
        return self._tensor().recursive_sequence_lengths()

    def has_valid_recursive_sequence_lengths(self) -> bool:
        return self._tensor().has_valid_recursive_sequence_lengths()

    def shape(self) -> list[int]:
        return self._tensor().shape()

    def numpy(self) -> np.ndarray:
        return self._tensor().numpy()

    def _dtype(self):
        return self._tensor()._dtype()

    def __array__(self, dtype=None, copy=None):
        return self._tensor().__array__(dtype)


def feed_signature(arr) -> tuple:
    """What a compiled step depends on: the bucket and the number of sequences."""
    if isinstance(arr, LoDArray):
        return ("lod", tuple(arr.data.shape), *(tuple(x.shape) for x in arr.lengths))
    return tuple(arr.shape)


def unpack(arr: LoDArray, blocks: int = 1) -> LoDTensor:
    """A fetched LoDArray as a LoDTensor: the real tokens of each of ``blocks`` device
    blocks (one per data-parallel device, in order) and their lengths."""
    host = arr.numpy()
    data, lens = host.data, host.lengths
    t_cap = data.shape[0] // blocks
    caps = [x.shape[0] // blocks for x in lens]
    tokens, levels = [], [[] for _ in lens]
    for p in range(blocks):
        count = caps[0]  # the first level holds exactly the block's sequences
        for i, cap in enumerate(caps):
            got = lens[i][p * cap:p * cap + count].astype(np.int64)
            levels[i].extend(got.tolist())
            count = int(got.sum())
        tokens.append(data[p * t_cap:p * t_cap + count])
    return LoDTensor(np.concatenate(tokens), levels)


def unpack_fetch(arr: LoDArray, blocks: int, iterations: int, numpy: bool):
    """A fetched LoD value as the run returns it: a LoDTensor (its packed tokens as numpy
    when ``numpy``), or with ``iterations`` > 1 a list of one per iteration (their token
    counts differ, so they are not stacked)."""
    def one(a):
        t = unpack(a, blocks)
        return np.asarray(t) if numpy else t
    if iterations == 1:
        return one(arr)
    host = arr.numpy()
    return [one(LoDArray(host.data[k], tuple(x[k] for x in host.lengths)))
            for k in range(iterations)]
