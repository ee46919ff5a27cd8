"""``fluid.io``: saving and loading (parameters, persistables, inference models) and the
input pipeline (DataLoader, PyReader) from graphc.io, plus Paddle's reader decorators
(``fluid.io.batch``, ``fluid.io.shuffle``, ...), all looked up when asked for."""

from ..dataio import io as _base
from . import reader_decorators as _decorators
from ._missing import missing


def __getattr__(name: str):
    if not name.startswith("__"):
        for owner in (_base, _decorators):
            if hasattr(owner, name):
                return getattr(owner, name)
    raise missing(__name__, name)
