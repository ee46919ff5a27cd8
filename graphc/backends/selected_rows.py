"""Row-sparse values at run time (Paddle's SelectedRows): int32 row indices, their values and
the height of the dense tensor they stand for. A JAX pytree, so steps pass them through jit.

Rows may repeat (their values add up, as a dense gradient would sum them); a row equal to the
height is padding, whose values are zero and which every consumer ignores. ``merged()`` sums
repeated rows without leaving static shapes: the result keeps the same number of rows, unique
ones first in ascending order and padding after them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..ir import types
from .precision import with_graphc_x64

ROWS_DTYPE = jnp.dtype(types.ROWS_DTYPE)  # int32


@jax.tree_util.register_pytree_node_class
class SelectedRows:
    """``rows`` (int32 ``[n]``) of a dense ``[height, *values.shape[1:]]`` tensor and their
    ``values`` (``[n, ...]``). Arrays are jax arrays inside a step and numpy arrays once
    fetched; ``np.asarray(sr)`` and ``to_dense()`` give the dense tensor."""

    __slots__ = ("rows", "values", "height")

    def __init__(self, rows, values, height: int):
        # no checks: JAX rebuilds pytrees from tracers and placeholders
        self.rows, self.values, self.height = rows, values, height

    # -- pytree ------------------------------------------------------------------------
    def tree_flatten(self):
        return (self.rows, self.values), self.height

    @classmethod
    def tree_unflatten(cls, height, children):
        return cls(children[0], children[1], height)

    # -- what it stands for -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The dense tensor's shape."""
        return (self.height, *self.values.shape[1:])

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def num_rows(self) -> int:
        """Rows held, repeats and padding included."""
        return int(self.rows.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held (rows and values): what exchanging it costs, unlike the dense shape."""
        return int(self.rows.size * self.rows.dtype.itemsize
                   + self.values.size * self.values.dtype.itemsize)

    def astype(self, dtype) -> SelectedRows:
        return SelectedRows(self.rows, self.values.astype(dtype), self.height)

    def with_values(self, values) -> SelectedRows:
        return SelectedRows(self.rows, values, self.height)

    @with_graphc_x64  # int64 rows, float64 values kept when called outside a step too
    def to_dense(self):
        """The dense tensor: repeated rows summed, padding dropped (jax or numpy alike)."""
        if isinstance(self.values, np.ndarray):
            out = np.zeros(self.shape, self.values.dtype)
            keep = self.rows < self.height
            np.add.at(out, self.rows[keep], self.values[keep])
            return out
        zeros = jnp.zeros(self.shape, self.values.dtype)
        return zeros.at[self.rows].add(self.values, mode="drop")

    @with_graphc_x64
    def merged(self) -> SelectedRows:
        """Repeated rows summed into one: unique rows ascending, then padding (row = height,
        zero values), the same number of rows in all (static shapes under jit)."""
        n = self.rows.shape[0]
        if n == 0:
            return self
        unique, inverse = jnp.unique(self.rows, size=n, fill_value=self.height,
                                     return_inverse=True)
        values = jax.ops.segment_sum(self.values, inverse.reshape(-1), num_segments=n)
        return SelectedRows(unique.astype(ROWS_DTYPE), values.astype(self.values.dtype),
                            self.height)

    def gather_from(self, table, fill=0):
        """``table[rows]`` for dense ``table`` of the same height; padding rows read ``fill``."""
        return table.at[self.rows].get(mode="fill", fill_value=fill)

    # -- host side ------------------------------------------------------------------------
    def numpy(self) -> SelectedRows:
        """The same value with numpy arrays (what ``Executor.run`` returns)."""
        return SelectedRows(np.asarray(self.rows), np.asarray(self.values), self.height)

    def __array__(self, dtype=None, copy=None):
        dense = self.numpy().to_dense()  # on the host: no JAX dtype rules (x64 or not)
        return dense if dtype is None else dense.astype(dtype)

    def __repr__(self) -> str:
        return (f"SelectedRows(height={self.height}, rows={self.rows!r}, "
                f"values={getattr(self.values, 'shape', '?')} {getattr(self.values, 'dtype', '')})")


def to_host(x):
    """A fetched value on the host: numpy arrays, a SelectedRows keeping its layout."""
    return x.numpy() if isinstance(x, SelectedRows) else np.asarray(x)


def concat_rows(parts: list[SelectedRows]) -> SelectedRows:
    """The rows of every part, in order: their sum as a row-sparse value."""
    if len(parts) == 1:
        return parts[0]
    xp = np if all(isinstance(p.rows, np.ndarray) for p in parts) else jnp
    return SelectedRows(xp.concatenate([p.rows for p in parts]),
                        xp.concatenate([p.values for p in parts]), parts[0].height)


def add_to_dense(dense, sr: SelectedRows):
    """``dense + sr`` without densifying ``sr``: a scatter-add of its rows (padding dropped)."""
    return dense.at[sr.rows].add(sr.values.astype(dense.dtype), mode="drop")


@with_graphc_x64
def replica_block(sr: SelectedRows, replica, nranks: int) -> SelectedRows:
    """Replica ``replica``'s row-sparse fetch as its block of the concatenation over replicas:
    a dense fetch comes back as every replica's tensor stacked along dim 0 ([nranks * H, ...]),
    so a sparse one stands for the same: height nranks * H, replica r's rows moved to
    r * H + row, padding to the new height. (Concatenating the rows as they are would add
    the replicas' copies of an all-gathered gradient up, nranks times the one applied.)"""
    height = sr.height
    # int32 rows hold heights below 2**31 - 1; the concatenation may need more
    dtype = sr.rows.dtype if nranks * height <= types.MAX_SPARSE_HEIGHT else jnp.int64
    rows = sr.rows.astype(dtype)
    rows = jnp.where(rows < height, rows + replica * height, nranks * height)
    return SelectedRows(rows.astype(dtype), sr.values, nranks * height)
