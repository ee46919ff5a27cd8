"""A distributed table's shard on one server: the rows asked for so far, drawn on first touch
from the table's row-keyed initializer, updated by SGD on the row gradients trainers push.

Only touched rows take memory, so a table's declared height is bounded by the id type, not by
what one process can hold (Paddle's auto-growing SelectedRows table). Rows are drawn exactly
as a local run's startup draws them (``ops.tensor.lowering.draw_rows``), so a job equals
local training bit for bit at the start.
"""

from __future__ import annotations

import numpy as np

from .protocol import PServerError, sum_rows

_MIN_BUCKET = 64  # ids drawn per compiled draw: powers of two from here (few compiles)


class RowTable:
    """``spec``: ``name, height, width, dtype, init`` (``{"type", "attrs", "seed"}``) and
    ``lr`` (the learning-rate variable's name)."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.name, self.width = spec["name"], int(spec["width"])
        self.dtype = np.dtype(spec["dtype"])
        self.index: dict[int, int] = {}  # id -> slot in self.values
        self.values = np.empty((_MIN_BUCKET, self.width), self.dtype)
        self._draws: dict = {}

    def __len__(self) -> int:
        return len(self.index)

    # -- rows ------------------------------------------------------------------------
    def rows(self, ids: np.ndarray) -> np.ndarray:
        """The current rows of ``ids`` (drawn first if new)."""
        slots = self._slots(ids)  # first: drawing may grow (replace) self.values
        return self.values[slots]

    def sgd(self, ids: np.ndarray, grads: np.ndarray, lr: float) -> None:
        """``w[id] -= lr * (sum of the gradient rows of id)`` for each distinct id."""
        if not len(ids):
            return
        uniq, total = sum_rows(ids, grads.astype(self.dtype, copy=False))
        slots = self._slots(uniq)
        self.values[slots] -= self.dtype.type(lr) * total

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        index = self.index
        slots = np.fromiter((index.get(i, -1) for i in ids.tolist()), np.int64, len(ids))
        missing = slots < 0
        if missing.any():
            new = np.unique(ids[missing])
            start = len(index)
            self._grow(start + len(new))
            self.values[start:start + len(new)] = self._draw(new)
            index.update(zip(new.tolist(), range(start, start + len(new))))
            slots[missing] = [index[i] for i in ids[missing].tolist()]
        return slots

    def _grow(self, size: int) -> None:
        if size > len(self.values):
            capacity = max(size, 2 * len(self.values))
            grown = np.empty((capacity, self.width), self.dtype)
            grown[:len(self.index)] = self.values[:len(self.index)]
            self.values = grown

    def _draw(self, ids: np.ndarray) -> np.ndarray:
        init = self.spec["init"]
        if init["type"] == "fill_constant":
            return np.full((len(ids), self.width), init["attrs"]["value"], self.dtype)
        n = len(ids)
        bucket = max(_MIN_BUCKET, 1 << (n - 1).bit_length())
        fn = self._draws.get(bucket)
        if fn is None:
            fn = self._draws[bucket] = _compile_draw(init)
        padded = np.zeros(bucket, np.int64)
        padded[:n] = ids
        return np.asarray(fn(padded))[:n]

    # -- checkpoints ------------------------------------------------------------------
    def state(self) -> dict[str, np.ndarray]:
        ids = np.fromiter(self.index, np.int64, len(self.index))
        return {f"{self.name}@IDS": ids, f"{self.name}@ROWS": self.values[:len(ids)].copy()}

    def load(self, arrays: dict, where: str) -> None:
        try:
            ids, rows = arrays[f"{self.name}@IDS"], arrays[f"{self.name}@ROWS"]
        except KeyError:
            raise PServerError(f"{where}: lacks the rows of distributed table '{self.name}'"
                               ) from None
        if rows.shape != (len(ids), self.width):
            raise PServerError(f"{where}: table '{self.name}' has rows of shape "
                               f"{list(rows.shape)} for {len(ids)} ids of width {self.width}")
        index = dict(zip(ids.tolist(), range(len(ids))))
        if len(index) != len(ids):  # two slots for one id: one of them would be read stale
            raise PServerError(f"{where}: table '{self.name}' lists an id twice")
        self.index = index
        self.values = np.array(rows, self.dtype)
        self._grow(max(len(ids), _MIN_BUCKET))


def _compile_draw(init: dict):
    import jax

    from ...backends.lowering import random_key
    from ...backends.precision import with_graphc_x64
    from ...ops.tensor.lowering import draw_rows
    kind, attrs, seed = init["type"], dict(init["attrs"]), int(init["seed"])
    draw = jax.jit(lambda ids: draw_rows(kind, attrs, random_key(seed, 0), ids))
    return with_graphc_x64(draw)
