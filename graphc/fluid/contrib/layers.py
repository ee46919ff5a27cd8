"""``fluid.contrib.layers``: Paddle 1.8's ``basic_lstm``/``basic_gru`` (and their units) and
``shuffle_batch``, graphc layers; any other contrib layer raises graphc's advice."""

from ...layers.basic_rnn import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm
from ...layers.reshuffle import shuffle_batch
from .._missing import missing

__all__ = ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm", "shuffle_batch"]


def __getattr__(name: str):
    raise missing(__name__, name)
