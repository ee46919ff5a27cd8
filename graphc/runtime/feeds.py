"""Feed values that are not arrays (Python lists, scalars) converted to a feed variable's
declared dtype, refusing any conversion that would change a value; FeedError names the feed.
"""

from __future__ import annotations

import numpy as np

from ..ir.errors import GraphcError


class FeedError(GraphcError):
    """A feed is missing, unknown, empty, of the wrong shape or dtype, or not convertible to
    its declared dtype without changing a value. Raised before the step runs: the scope is
    untouched and nothing is compiled for the refused feeds."""


def convert_feed(name: str, value, dtype) -> np.ndarray:
    """``value`` (lists, tuples, scalars) as an array of ``dtype``, or FeedError when it is
    ragged, not numeric, or would lose information: a fraction or an out-of-range number
    converted to an integer type, a bool or a string where numbers are declared, a number
    where bools are declared. Integers given for a float feed convert as numpy does."""
    dtype = np.dtype(dtype)
    if _is_scalar(value):  # Paddle feeds a scalar as a tensor of shape [1]
        value = [value]
    try:
        raw = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged nested lists, odd objects
        raise FeedError(f"feed '{name}' is not a rectangular array of numbers ({exc}); give "
                        f"a numpy array or equal-length nested lists of {dtype}") from None
    kind, want = raw.dtype.kind, dtype.kind
    if kind not in "biuf" or (kind == "b") != (want == "b"):
        got = "strings" if kind in "SU" else "bools" if kind == "b" else \
            "numbers" if kind in "iuf" else f"{raw.dtype} values"
        raise FeedError(f"feed '{name}' holds {got} (e.g. {_first(raw)!r}) but the program "
                        f"declares {dtype}")
    if want in "iu" and raw.size:
        if kind == "f" and not np.all(np.isfinite(raw)):
            raise FeedError(f"feed '{name}' holds {_first(raw[~np.isfinite(raw)])!r}, which "
                            f"is not a {dtype}")
        info = np.iinfo(dtype)
        out_of_range = (raw < info.min) | (raw > info.max)
        if kind == "f":
            out_of_range |= raw != np.floor(raw)
        if out_of_range.any():
            bad = _first(raw[out_of_range])
            raise FeedError(f"feed '{name}' holds {bad!r}, which converting to the declared "
                            f"{dtype} would change (a fraction or out of range)")
    return raw.astype(dtype)


def _is_scalar(value) -> bool:
    """A Python or numpy number (not a string): Paddle's executor feeds it as shape [1]."""
    return np.isscalar(value) and not isinstance(value, str | bytes)


def _first(arr: np.ndarray):
    flat = arr.reshape(-1)
    return flat[0].item() if flat.size else None
