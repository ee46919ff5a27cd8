"""``fluid.reader``: DataLoader and PyReader, which graphc.io implements; other names are
looked up there when asked for."""

from ..dataio import io as _io
from ..dataio.io import DataLoader, PyReader
from ._missing import delegating_getattr

__all__ = ["DataLoader", "PyReader"]

__getattr__ = delegating_getattr(__name__, _io)
