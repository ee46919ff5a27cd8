"""``fluid.io``: saving and loading (parameters, persistables, inference models) and the
input pipeline (DataLoader, PyReader), all graphc.io's, looked up when asked for."""

from .. import io as _base
from ._missing import delegating_getattr

__getattr__ = delegating_getattr(__name__, _base)
