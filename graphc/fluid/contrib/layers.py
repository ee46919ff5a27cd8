"""``fluid.contrib.layers``: Paddle 1.8's ``basic_lstm``/``basic_gru`` (and their units),
``shuffle_batch`` and TDM's ``tdm_child``/``tdm_sampler``/``index_sample``, graphc layers; any
other contrib layer raises graphc's advice."""

from ...layers.basic_rnn import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm
from ...layers.reshuffle import shuffle_batch
from ...layers.tdm import index_sample, tdm_child, tdm_sampler
from .._missing import missing

__all__ = ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm", "shuffle_batch",
           "index_sample", "tdm_child", "tdm_sampler"]


def __getattr__(name: str):
    raise missing(__name__, name)
