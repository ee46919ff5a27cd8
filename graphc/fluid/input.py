"""``fluid.embedding`` and ``fluid.one_hot`` (Paddle 1.8's ``fluid.input``): unlike
``layers.embedding`` / ``layers.one_hot`` they take ids of any shape and append a dimension."""

from __future__ import annotations

from .. import layers
from ..layers.helper import check_variable
from ..layers.manipulation import one_hot_v2

__all__ = ["embedding", "one_hot"]


def embedding(input, size, is_sparse: bool = False, is_distributed: bool = False,
              padding_idx=None, param_attr=None, dtype="float32"):
    """Rows of a [vocab, width] table for int64 ids of any shape: the result has shape
    ``ids.shape + [width]`` (``layers.embedding`` wants ids ending in a dimension of 1)."""
    check_variable("embedding", "input", input)
    # a trailing 1 makes layers.embedding's lookup give exactly ids.shape + [width]
    ids = layers.reshape(input, [0] * input.ndim + [1])
    return layers.embedding(ids, size, is_sparse=is_sparse, is_distributed=is_distributed,
                            padding_idx=padding_idx, param_attr=param_attr, dtype=dtype)


def one_hot(input, depth, allow_out_of_range: bool = False):
    """float32 one-hot vectors for int ids of any shape: ``ids.shape + [depth]``."""
    return one_hot_v2(input, depth, allow_out_of_range)
