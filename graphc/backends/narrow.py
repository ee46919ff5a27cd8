"""32-bit indices inside a compiled step for 64-bit ids and labels (issue 28): feeds keep
Paddle's int64, the gathers, compares and bookkeeping that read them run on int32."""

# Why: under x64 an int64 id makes every index computation s64 (jnp's negative-index wrap,
# the gather's indices, the data checks' counts and positions); a table or a class axis is
# far below 2**31 rows, so int32 indexes it as well. Exactness comes first: ``index32`` maps
# each int64 value to an int32 one that every *indexing* of an axis of ``size`` and every
# equality with the ``kept`` values (a padding index, an ``ignore_index``) treats alike, so
# an id beyond the int32 range still reads out of range (a NaN fill, as any bad id) and is
# still refused by the data checks, which keep reading the wide values.

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

_INT32 = np.iinfo(np.int32)


def index32(values, size: int, kept: tuple[int, ...] = (), *, checked: bool = False):
    """``values`` (an integer array) as int32 for indexing an axis of ``size``: unchanged
    for ``[-size, size)`` (jnp's wrap of negatives included) and for the ``kept`` values,
    any other value becomes one outside both (so out of range and equal to none of them,
    as it was). Values that already are 32 bits or narrower, and sizes or kept values the
    int32 range cannot hold with room for that stand-in, are returned as they are.

    ``checked``: the caller's data check refuses the step for every value outside
    ``[0, size)`` and ``kept`` (a collected check, ``data_checks.checks_collected``), so no
    result of such a value is ever seen: a plain conversion is then exact for every value
    that counts, and costs XLA no range compare in each fusion that reads the ids."""
    dtype = jnp.dtype(values.dtype)
    if dtype.kind not in "iu" or dtype.itemsize <= 4:
        return values
    kept = tuple(int(k) for k in kept)
    lo = min((-size, *kept))
    hi = max((size, *(k + 1 for k in kept)))
    if lo < _INT32.min or hi > _INT32.max:  # hi is the stand-in: it must fit too
        return values
    if checked:
        return values.astype(jnp.int32)
    if dtype.kind == "u":
        inside = values < hi
    else:
        inside = (values >= lo) & (values < hi)
    return jnp.where(inside, values.astype(jnp.int32), jnp.int32(hi))
