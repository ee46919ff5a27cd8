"""``fluid.reader``: DataLoader and PyReader, which graphc.io implements; other names are
looked up there when asked for."""

import numpy as np

from ..dataio import io as _io
from ..dataio.io import DataLoader, PyReader
from ._missing import delegating_getattr

__all__ = ["DataLoader", "GeneratorLoader", "PyReader"]

# -- issue 25: Paddle's base of its loaders (isinstance checks); graphc's loaders are one class
DataLoaderBase = DataLoader


class GeneratorLoader(DataLoader):
    """Paddle's class of ``DataLoader.from_generator`` loaders (graphc's DataLoader is one
    class; this name keeps Paddle's static check of a batch's arrays)."""

    @staticmethod
    def _check_input_array(item) -> np.ndarray:
        """``item`` as one regular array; nested sequences of different lengths are a
        TypeError (they are sequences: feed a LoDTensor)."""
        return regular_array(item, "the batch is not a regular array (its samples differ in "
                                   "shape)")


def regular_array(item, what: str) -> np.ndarray:
    """``item`` as one regular numpy array; nested sequences of different lengths are a
    TypeError starting with ``what`` (they are sequences: feed a LoDTensor)."""
    try:
        arr = np.asarray(item)
    except ValueError:  # numpy refuses ragged nesting
        arr = np.asarray(item, dtype=object)
    if arr.dtype == object:
        raise TypeError(f"{what}; feed sequences as a LoDTensor (fluid.create_lod_tensor)")
    return arr


__getattr__ = delegating_getattr(__name__, _io)
