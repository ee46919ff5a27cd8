"""``fluid.io``: saving and loading (parameters, persistables, inference models) and the
input pipeline (DataLoader, PyReader) from graphc.io, plus Paddle's reader decorators
(``fluid.io.batch``, ``fluid.io.shuffle``, ...), all looked up when asked for."""

from ..dataio import io as _base
from . import paddle_io as _paddle_io  # issue 25: save/load in Paddle's formats come first
from . import reader_decorators as _decorators
from ._missing import missing


def __getattr__(name: str):
    if not name.startswith("__"):
        for owner in (_paddle_io, _base, _decorators):
            if owner is _paddle_io and name not in _paddle_io.__all__:
                continue
            if hasattr(owner, name):
                return getattr(owner, name)
    raise missing(__name__, name)
