"""``fluid.contrib``: the parts of Paddle 1.8's experimental package real programs use
(``contrib.layers``' RNNs and shuffle_batch, ``memory_usage``); other names raise advice."""

from .._missing import missing
from . import layers  # noqa: F401
from .memory_usage_calc import memory_usage  # noqa: F401


def __getattr__(name: str):
    raise missing(__name__, name)
