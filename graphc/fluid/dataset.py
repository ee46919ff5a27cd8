"""``fluid.dataset``: Paddle's Dataset API (DatasetFactory, InMemoryDataset, QueueDataset),
graphc.dataset's, looked up when asked for."""

from ..dataio import dataset as _base
from ._missing import delegating_getattr

__getattr__ = delegating_getattr(__name__, _base)
