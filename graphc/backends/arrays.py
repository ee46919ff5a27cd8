"""The run-time value of a tensor array (Paddle's LoDTensorArray): a buffer of ``capacity``
elements and how many are written, a JAX pytree like LoDArray (docs/control_flow.md)."""

from __future__ import annotations

import jax


@jax.tree_util.register_pytree_node_class
class TensorArray:
    """``data`` ``[capacity, *element]`` and an int32 scalar ``length`` (one past the highest
    index written). Elements past ``length`` are zeros. Arrays are jax arrays inside a step
    and numpy arrays on the host."""

    __slots__ = ("data", "length")

    def __init__(self, data, length):
        # no checks: JAX rebuilds pytrees from tracers and placeholders
        self.data, self.length = data, length

    def tree_flatten(self):
        return (self.data, self.length), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

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
        return TensorArray(self.data + other.data, jnp.maximum(self.length, other.length))

    def astype(self, dtype) -> TensorArray:
        return TensorArray(self.data.astype(dtype), self.length)

    def to_list(self) -> list:
        """The written elements as host arrays (what a fetch of an array gives, as Paddle's
        LoDTensorArray is a list of tensors)."""
        import numpy as np
        n = int(np.asarray(self.length))
        host = jax.tree.map(np.asarray, self.data)  # a stacked LoDArray: one per element
        return [jax.tree.map(lambda buf, i=i: buf[i], host) for i in range(n)]

    def __repr__(self) -> str:
        return f"TensorArray(capacity={self.capacity}, element={list(self.shape[1:])})"
