"""The builder random programs are drawn with: a pool of variables, hypothesis draws, and
the bounds (dims, dtypes, sizes) that keep drawn programs valid and fast to run."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import strategies as st

from .. import layers
from ..ir.program import Variable
from ..ir.types import FLOAT_DTYPES

DEFAULT_DTYPES = ("float32", "float64")  # float16 would need looser tolerances
MAX_DIM = 6  # dims of feeds, filters and fc sizes: small so later tests can execute fast
# Results past these bounds (concat of concats, big reshapes) are fetched, never reused.
POOL_MAX_DIM = 64
POOL_MAX_NUMEL = 2048



def _poolable(var: Variable) -> bool:
    """Later steps reuse only float tensors whose sole unknown dim is the leading batch."""
    shape = var.shape
    if var.dtype not in FLOAT_DTYPES or not shape:
        return False
    known = shape[1:] if shape[0] == -1 else shape
    return (all(1 <= d <= POOL_MAX_DIM for d in known)
            and math.prod(known) <= POOL_MAX_NUMEL)


class _Builder:
    """State of one draw: the reusable variables, feeds, and which results were consumed."""

    def __init__(self, draw, cast_dtypes: Sequence[str]):
        self.draw = draw
        self.cast_dtypes = tuple(cast_dtypes)
        self.pool: list[Variable] = []
        self.produced: list[Variable] = []
        self.consumed: set[str] = set()
        self.feeds: dict[str, tuple[tuple[int, ...], str]] = {}
        self.int_feed_high: dict[str, int] = {}
        self._feed_ids: dict[str, int] = {}

    # -- helpers shared by the steps ---------------------------------------------------
    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def dim(self, lo: int = 1, hi: int = MAX_DIM) -> int:
        return self.draw(st.integers(lo, hi))

    def feed(self, prefix: str, shape, dtype: str = "float32", high: int | None = None):
        n = self._feed_ids.get(prefix, 0)
        self._feed_ids[prefix] = n + 1
        var = layers.data(f"{prefix}{n}", list(shape), append_batch_size=False, dtype=dtype)
        self.feeds[var.name] = (tuple(var.shape), var.dtype)
        if high is not None:
            self.int_feed_high[var.name] = high
        return var

    def use(self, *vars: Variable) -> None:
        self.consumed.update(v.name for v in vars)

    def add(self, *vars: Variable, reusable: bool = True) -> None:
        for v in vars:
            self.produced.append(v)
            if reusable and _poolable(v):
                self.pool.append(v)

    def operand(self, shape: tuple[int, ...], dtype: str) -> Variable:
        """A second operand of exactly ``shape``: a pool variable, a constant or a new feed."""
        same = [v for v in self.pool if tuple(v.shape) == shape and v.dtype == dtype]
        known = all(d > 0 for d in shape)
        kinds = (["pool"] if same else []) + (["const"] if known else []) + ["feed"]
        kind = self.pick(kinds)
        if kind == "pool":
            return self.pick(same)
        if kind == "const":
            # Non-zero so that a division by it stays finite.
            value = self.pick([1.0, 2.0, -0.5])
            c = layers.fill_constant(list(shape), dtype, value)
            self.add(c)
            return c
        return self.feed("y", shape, dtype)

    def float_feed(self, rank: int | None = None, lo: int = 1) -> Variable:
        rank = rank or self.draw(st.integers(2, 4))
        dtype = self.pick(_dtypes(self, prefer="float32"))
        return self.feed("x", (-1,) + tuple(self.dim(lo) for _ in range(rank - 1)), dtype)


def _dtypes(b: _Builder, prefer: str | None = None, avoid: str | None = None) -> list[str]:
    """The allowed float dtypes, ``prefer`` first or ``avoid`` last (hypothesis shrinks
    towards the first)."""
    return sorted(set(b.cast_dtypes) | {"float32"}, key=lambda d: (d != prefer, d == avoid, d))


def _act(b: _Builder):
    return b.pick([None, "relu", "tanh", "sigmoid"])


def _nonbatch_axes(x: Variable) -> list[int]:
    return [i for i, d in enumerate(x.shape) if d > 0]

