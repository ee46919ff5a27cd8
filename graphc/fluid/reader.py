"""``fluid.reader``: DataLoader and PyReader, which graphc.io implements; other names are
looked up there when asked for."""

from ..dataio import io as _io
from ..dataio.io import DataLoader, PyReader
from ._missing import delegating_getattr

__all__ = ["DataLoader", "PyReader"]

# -- issue 25: Paddle's base of its loaders (isinstance checks); graphc's loaders are one class
DataLoaderBase = DataLoader

__getattr__ = delegating_getattr(__name__, _io)
