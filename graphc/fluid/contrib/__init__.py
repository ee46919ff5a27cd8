"""``fluid.contrib``: the parts of Paddle 1.8's experimental package real programs use
(``contrib.layers``' RNNs and shuffle_batch); every other name raises graphc's advice."""

from .._missing import missing
from . import layers  # noqa: F401


def __getattr__(name: str):
    raise missing(__name__, name)
