"""Per-variable batch conversion shared by fluid.DataFeeder and the DataLoader: a minibatch of
samples becomes one array (or, for a LoD variable, one LoDTensor) of the declared dtype/shape."""

from __future__ import annotations

import math

import numpy as np

from ..ir.program import Variable
from .feeds import FeedError
from .lod import LoDTensor

__all__ = ["Column", "LoDColumn", "column_for", "numbers_from_strings"]


def numbers_from_strings(arr: np.ndarray, dtype: np.dtype, where: str) -> np.ndarray:
    """Text values parsed as ``dtype`` numbers, as Paddle's feeders do with ``np.array(data,
    dtype)`` (a reader yielding '123' for an int64 slot); FeedError naming the first value
    that is no number of that kind (and its sample, along dim 0, when ``where`` has none)."""
    if dtype.kind not in "iuf":
        raise FeedError(f"{where}: cannot convert text values ({arr.dtype}) to {dtype}")
    try:
        return arr.astype(dtype)
    except (ValueError, OverflowError):
        pass
    flat = arr.reshape(-1)
    for i, item in enumerate(flat):
        try:
            np.asarray(item).astype(dtype)
        except (ValueError, OverflowError):
            sample = f", sample {np.unravel_index(i, arr.shape)[0]}" if arr.ndim > 0 and \
                "sample" not in where else ""
            raise FeedError(f"{where}{sample}: cannot convert {item.item()!r} to the "
                            f"declared {dtype}: it is not a number of that kind") from None
    raise FeedError(f"{where}: cannot convert the text values to {dtype}")  # not reached


class Column:
    """Converts one feed variable's values, sample by sample, like Paddle's converter."""

    def __init__(self, var: Variable):
        import jax.numpy as jnp
        self.var, self.name = var, var.name
        self.dtype = np.dtype(jnp.dtype(var.dtype))
        shape = list(var.shape or ())
        # Paddle checks and reshapes only when at most one dimension is unknown (the batch).
        self.shape = shape if sum(d < 0 for d in shape) <= 1 else None

    def convert(self, value, index: int) -> np.ndarray:
        where = f"DataFeeder: feed '{self.name}', sample {index}"
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # ragged nested lists
            raise FeedError(f"{where}: the value is not a rectangular array ({exc}); ragged "
                            "(LoD) samples are not supported yet") from None
        kind, want = arr.dtype.kind, self.dtype.kind
        if kind in "US":  # numeric strings, parsed as Paddle's np.array(data, dtype) does
            return numbers_from_strings(arr, self.dtype, where)
        if kind not in "biuf":
            raise FeedError(f"{where}: cannot convert a {arr.dtype} value to {self.dtype} "
                            f"(got {value!r:.60})")
        out = arr.astype(self.dtype)
        if want in "biu" and kind in "biuf" and arr.size and not np.array_equal(out, arr):
            bad = arr.reshape(-1)[np.flatnonzero(out.reshape(-1) != arr.reshape(-1))[0]]
            raise FeedError(f"{where}: converting {bad.item()!r} to the declared {self.dtype} "
                            "would lose information (a fraction or an out-of-range value)")
        return out

    def batch(self, values: list) -> np.ndarray:
        arrays = [self.convert(v, i) for i, v in enumerate(values)]
        first = arrays[0].shape
        for i, a in enumerate(arrays):
            if a.shape != first:
                raise FeedError(f"DataFeeder: feed '{self.name}': sample {i} has shape "
                                f"{list(a.shape)} but sample 0 has {list(first)}; samples "
                                "of one minibatch must agree (ragged/LoD feeds are not "
                                "supported yet)")
        arr = np.stack(arrays)
        if self.shape is None:
            return arr
        if arr.ndim != len(self.shape):
            per_sample = math.prod(d for d in self.shape if d >= 0)
            if per_sample == 0 or arr.size % per_sample:
                raise FeedError(f"DataFeeder: feed '{self.name}' is declared with shape "
                                f"{self.shape} but its samples have shape {list(first)} "
                                f"({math.prod(first)} values each), which cannot be reshaped "
                                "to it")
            return arr.reshape(self.shape)
        for d_want, d_got in zip(self.shape, arr.shape):
            if d_want >= 0 and d_want != d_got:
                raise FeedError(f"DataFeeder: feed '{self.name}' is declared with shape "
                                f"{self.shape} but the minibatch has shape {list(arr.shape)} "
                                f"(samples of shape {list(first)})")
        return arr


class LoDColumn(Column):
    """A LoD feed variable: each sample is a sequence (lod_level 1) or a sequence of
    sub-sequences (2) of tokens; the minibatch becomes one LoDTensor with their lengths."""

    def __init__(self, var: Variable):
        super().__init__(var)
        self.level = var.lod_level
        self.token_shape = [d for d in (var.shape or (-1,))[1:]]

    def batch(self, values: list) -> LoDTensor:
        lengths: list[list[int]] = [[] for _ in range(self.level)]
        tokens: list = []

        def walk(value, depth: int, index: int) -> None:
            if depth == self.level:
                tokens.append(value)
                return
            if isinstance(value, str | bytes) or not hasattr(value, "__len__"):
                raise FeedError(f"DataFeeder: feed '{self.name}', sample {index}: lod_level="
                                f"{self.level} expects nested sequences {self.level} deep, "
                                f"found {value!r:.60} at depth {depth}")
            lengths[depth].append(len(value))
            for item in value:
                walk(item, depth + 1, index)

        owner: list[int] = []  # the sample of each token, for errors
        for i, value in enumerate(values):
            walk(value, 0, i)
            owner.extend([i] * (len(tokens) - len(owner)))
        if tokens:
            try:
                arr = self.convert(tokens, 0)
            except FeedError:
                for i in sorted(set(owner)):  # the error again, naming the sample at fault
                    self.convert([t for t, o in zip(tokens, owner) if o == i], i)
                raise
        else:
            arr = np.zeros((0,), self.dtype)
        per_token = math.prod(d for d in self.token_shape if d >= 0)
        known = all(d >= 0 for d in self.token_shape)
        if known and arr.size != len(tokens) * per_token:
            raise FeedError(f"DataFeeder: feed '{self.name}': its tokens have shape "
                            f"{list(arr.shape[1:])} but the program declares "
                            f"{self.token_shape} per token (shape {self.shape})")
        arr = arr.reshape(len(tokens), *self.token_shape) if known else arr
        return LoDTensor(arr, lengths)


def column_for(var: Variable) -> Column:
    """The converter for ``var``: a LoDColumn for a LoD variable, else a Column."""
    return LoDColumn(var) if var.lod_level else Column(var)
