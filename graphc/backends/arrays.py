"""The run-time value of a tensor array (Paddle's LoDTensorArray): a buffer of ``capacity``
elements and how many are written, a JAX pytree like LoDArray (docs/control_flow.md)."""

from __future__ import annotations

import jax


@jax.tree_util.register_pytree_node_class
class TensorArray:
    """``data`` ``[capacity, *element]`` and an int32 scalar ``length`` (one past the highest
    index written). Elements past ``length`` are zeros. Arrays are jax arrays inside a step
    and numpy arrays on the host. ``ranked`` (static): an array of lod_tensor_to_array's LoD
    elements, whose level 0 (one entry per sequence in rank order) a fetch drops to give
    Paddle's elements (ops/lod_array/, docs/control_flow.md)."""

    __slots__ = ("data", "length", "ranked")

    def __init__(self, data, length, ranked: bool = False):
        # no checks: JAX rebuilds pytrees from tracers and placeholders
        self.data, self.length, self.ranked = data, length, ranked

    def tree_flatten(self):
        return (self.data, self.length), self.ranked

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, ranked=bool(aux))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def capacity(self) -> int:
        return int(self.data.shape[0])

    def __add__(self, other: TensorArray) -> TensorArray:
        """Elementwise sum (gradients of an array read twice add up)."""
        import jax.numpy as jnp
        if hasattr(self.data, "lengths"):  # stacked LoD values: one array's, so one LoD
            data = self.data.with_data(self.data.data + other.data.data)
        else:
            data = self.data + other.data
        return TensorArray(data, jnp.maximum(self.length, other.length),
                           self.ranked or other.ranked)

    def astype(self, dtype) -> TensorArray:
        return TensorArray(self.data.astype(dtype), self.length, self.ranked)

    def to_list(self) -> list:
        """The written elements as host arrays (what a fetch of an array gives, as Paddle's
        LoDTensorArray is a list of tensors)."""
        import numpy as np
        n = int(np.asarray(self.length))
        host = jax.tree.map(np.asarray, self.data)  # a stacked LoDArray: one per element
        return [jax.tree.map(lambda buf, i=i: buf[i], host) for i in range(n)]

    def __repr__(self) -> str:
        return f"TensorArray(capacity={self.capacity}, element={list(self.shape[1:])})"


def rows_as_sequences(x, level: int):
    """Dense rows ``[N, ...]`` as a LoD value of ``level`` levels holding N one-row
    sequences (each level N entries of 1): how an array of LoD values stores a dense write
    (docs/control_flow.md "Arrays that mix dense rows and LoD values")."""
    import jax.numpy as jnp

    from .lod import LENGTHS_DTYPE, LoDArray
    ones = jnp.ones((x.shape[0],), LENGTHS_DTYPE)
    return LoDArray(x, (ones,) * level)


def grow_stacked(stacked, x):
    """The stacked LoDArray of an array of LoD values with its token and sub-sequence
    buffers widened to hold ``x``'s (static sizes: a later element with bigger buffers, e.g.
    a beam search's ``N * beam_size`` rows after a boot state of ``N``). The number of
    sequences (level 0) is never changed."""
    import jax.numpy as jnp

    from .lod import LoDArray

    def wide(buf, size):
        if buf.shape[1] >= size:
            return buf
        pad = [(0, 0), (0, size - buf.shape[1])] + [(0, 0)] * (buf.ndim - 2)
        return jnp.pad(buf, pad)
    lengths = (stacked.lengths[0],) + tuple(
        wide(s, v.shape[0]) for s, v in zip(stacked.lengths[1:], x.lengths[1:]))
    return LoDArray(wide(stacked.data, x.data.shape[0]), lengths)
