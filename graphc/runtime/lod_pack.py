"""Packing many LoD feeds of one step in one vectorised pass: the common case of a CTR-style
batch (dozens of lod_level-1 slots, one device, one iteration) without a Python walk per slot.

``pack_level1`` gives exactly what ``lod.pack_feeds`` gives for the same feeds (one shared
token bucket, padding zero, int32 lengths), or None when a feed falls outside the case it
handles (another LoD level, a dtype to convert, a reshape, lengths that do not describe the
data): the caller then packs through ``pack_feeds``, whose checks name the feed at fault.
"""

from __future__ import annotations

import numpy as np

from ..backends.lod import LoDArray
from . import lod
from .lod import LoDTensor, bucket

__all__ = ["PackedFeeds", "pack_level1"]


class PackedFeeds(dict):
    """{name: LoDArray} (or a whole run's checked feeds) whose LoD feeds are rows of one
    buffer: ``stack`` = (their names in row order, the tokens ``[feeds, bucket, ...]``, the
    int32 lengths ``[feeds, sequences]``), so a step can take them as two host arrays
    (CompiledStep.call_lod_rows) instead of two per feed."""

    __slots__ = ("stack",)

    def __init__(self, items, stack: tuple):
        super().__init__(items)
        self.stack = stack


def pack_level1(items: dict) -> dict | None:
    """``{name: (LoDTensor, want TensorType, dtype)}`` packed as ``pack_feeds(items)`` would
    pack them on one device, or None (see the module doc). All feeds' tokens share one
    bucket; feeds of one dtype and token shape share one zero-filled buffer (one allocation,
    one copy per feed). With one such buffer the result is a ``PackedFeeds``."""
    if not lod.SHARED_BUCKET or not items:
        return None
    names, datas, levels, groups = [], [], [], {}
    for name, (value, want, dtype) in items.items():
        if type(value) is not LoDTensor or want.lod_level != 1 or len(value._lengths) != 1:
            return None
        data = value._value()
        shape, decl = data.shape, want.shape
        if data.dtype != dtype or len(shape) != len(decl) or not shape:
            return None
        for d, w in zip(shape[1:], decl[1:]):
            if w >= 0 and d != w:
                return None
        names.append(name)
        datas.append(data)
        levels.append(value._lengths[0])
        # (by the dtype object's id: numpy hashes a dtype anew each time; equal dtypes that
        # are distinct objects only make two buffers)
        groups.setdefault((id(data.dtype), shape[1:]), []).append(len(names) - 1)
    n = levels[0].size
    if n == 0 or any(level.size != n for level in levels):
        return None  # (different sequence counts: packed one by one)
    lengths = np.concatenate(levels).reshape(len(levels), n)  # [feeds, sequences] int64
    if lengths.min() < 0:
        return None
    tokens = lengths.sum(axis=1).tolist()
    if tokens != [d.shape[0] for d in datas]:
        return None
    cap = bucket(max(tokens))
    short = lengths.astype(np.int32)  # as pack_feeds packs them
    out = {}
    for (_, tail), members in groups.items():
        buffer = np.zeros((len(members), cap, *tail), datas[members[0]].dtype)
        for row, i in enumerate(members):
            buffer[row, :tokens[i]] = datas[i]
            out[names[i]] = LoDArray(buffer[row], (short[i],))
    ordered = {name: out[name] for name in names}
    if len(groups) != 1:
        return ordered
    return PackedFeeds(ordered, (tuple(names), buffer, short))
