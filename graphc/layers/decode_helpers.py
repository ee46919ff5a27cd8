"""Paddle 1.8's decode helpers and ``BasicDecoder``: how a decoding step samples its ids and
makes the next inputs (teacher forcing, greedy, sampling), driven by ``dynamic_decode``."""

from __future__ import annotations

import collections

import numpy as np

from ..ir.errors import ProgramError
from ..ir.program import Variable
from . import logic as _logic
from . import manipulation as _m
from . import math as _math
from . import tensor as _t
from .decode import Decoder, _at, _pad_steps
from .helper import check_variable
from .reshuffle import pad as _pad
from .utils import map_structure


class DecodeHelper:
    """The sampling half of a BasicDecoder step: ``initialize() -> (initial_inputs,
    initial_finished)``, ``sample(time, outputs, states) -> sample_ids`` and
    ``next_inputs(time, outputs, states, sample_ids) -> (finished, next_inputs,
    next_states)``."""

    def initialize(self):
        pass

    def sample(self, time, outputs, states):
        pass

    def next_inputs(self, time, outputs, states, sample_ids):
        pass


def _check_ids(layer: str, arg: str, v) -> None:
    check_variable(layer, arg, v)
    if v.dtype not in ("int32", "int64"):
        raise ProgramError(f"{layer}: {arg} ({v.name}) must be int32 or int64, got {v.dtype}"
                           f"{_at()}")


class TrainingHelper(DecodeHelper):
    """Teacher forcing: step t's inputs are the given sequences' step t (``inputs``
    ``[batch, time, ...]``, or ``[time, batch, ...]`` when ``time_major``); an entry is
    finished once ``sequence_length`` steps ran; ``sample`` is the argmax."""

    def __init__(self, inputs, sequence_length, time_major=False):
        map_structure(lambda x: check_variable("TrainingHelper", "inputs", x), inputs)
        _check_ids("TrainingHelper", "sequence_length", sequence_length)
        self.inputs, self.sequence_length, self.time_major = inputs, sequence_length, \
            bool(time_major)

        def time_first_padded(x):
            # one step of zeros past the end: reading step t + 1 after the last stays in range
            x = x if self.time_major else _t.transpose(x, [1, 0, *range(2, len(x.shape))])
            return _pad(x, [0, 1] + [0, 0] * (len(x.shape) - 1))
        self.inputs_ = map_structure(time_first_padded, inputs)

    def initialize(self):
        zero = _t.fill_constant([1], self.sequence_length.dtype, 0)
        init_finished = _logic.equal(self.sequence_length, zero)
        init_inputs = map_structure(lambda x: _step_of(x, _t.fill_constant([1], "int64", 0)),
                                    self.inputs_)
        return init_inputs, init_finished

    def sample(self, time, outputs, states):
        return _m.argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        next_time = _math.scale(_t.cast(time, "int64"), 1.0, 1.0)
        lengths = _t.cast(self.sequence_length, "int64")
        finished = _logic.less_equal(lengths, _like(lengths, next_time))
        next_inputs = map_structure(lambda x: _step_of(x, next_time), self.inputs_)
        return finished, next_inputs, states


def _like(v, scalar):
    """``scalar`` ([1]) broadcast to ``v``'s shape (a batch size known only when run)."""
    return _math.elementwise_add(_m.zeros_like(v), scalar)


def _step_of(x, t):
    """Step ``t`` ([1] int64) of the time-major ``x``: ``x[t]``."""
    return _m.squeeze(_m.gather(x, t), [0])


class GreedyEmbeddingHelper(DecodeHelper):
    """Greedy decoding: the argmax of each step's logits, embedded by ``embedding_fn``, is
    the next input; an entry is finished when it emits ``end_token``."""

    def __init__(self, embedding_fn, start_tokens, end_token):
        if not callable(embedding_fn):
            raise ProgramError(f"{type(self).__name__}: embedding_fn must be callable{_at()}")
        _check_ids(type(self).__name__, "start_tokens", start_tokens)
        if isinstance(end_token, bool) or not isinstance(end_token, int | np.integer):
            raise ProgramError(f"{type(self).__name__}: end_token must be an int, got "
                               f"{end_token!r}{_at()}")
        self.embedding_fn, self.start_tokens = embedding_fn, start_tokens
        self._end_token = int(end_token)
        self.end_token = _t.fill_constant([1], "int64", int(end_token))

    def initialize(self):
        init_finished = _m.fill_constant_batch_size_like(self.start_tokens, [-1], "bool", 0)
        return self.embedding_fn(self.start_tokens), init_finished

    def sample(self, time, outputs, states):
        return _m.argmax(outputs, axis=-1)

    def next_inputs(self, time, outputs, states, sample_ids):
        finished = _logic.equal(sample_ids, _like(sample_ids, self.end_token))
        return finished, self.embedding_fn(sample_ids), states


class SampleEmbeddingHelper(GreedyEmbeddingHelper):
    """As GreedyEmbeddingHelper, but the ids are drawn from ``softmax(logits /
    softmax_temperature)`` (sampling_id, with ``seed``)."""

    def __init__(self, embedding_fn, start_tokens, end_token, softmax_temperature=None,
                 seed=None):
        super().__init__(embedding_fn, start_tokens, end_token)
        if softmax_temperature is not None and not float(softmax_temperature) > 0:
            raise ProgramError(f"SampleEmbeddingHelper: softmax_temperature must be > 0, got "
                               f"{softmax_temperature!r}{_at()}")
        self.softmax_temperature = None if softmax_temperature is None else \
            _t.fill_constant([1], "float32", float(softmax_temperature))
        self.seed = seed

    def sample(self, time, outputs, states):
        logits = outputs if self.softmax_temperature is None else \
            _math.elementwise_div(outputs, self.softmax_temperature)
        probs = _math.softmax(logits)
        probs.stop_gradient = True
        from .creation import sampling_id
        ids = sampling_id(probs, seed=self.seed or 0, dtype=self.start_tokens.dtype)
        return ids


class BasicDecoder(Decoder):
    """A cell plus a DecodeHelper: each step runs the cell (then ``output_fn``), samples ids
    with the helper and takes the next inputs and finished state from it."""

    class OutputWrapper(collections.namedtuple("OutputWrapper", ("cell_outputs",
                                                                 "sample_ids"))):
        """What ``step`` returns as ``outputs``: cell_outputs, sample_ids."""

    def __init__(self, cell, helper, output_fn=None):
        if not callable(cell):
            raise ProgramError(f"BasicDecoder: cell must be callable, got "
                               f"{type(cell).__name__}{_at()}")
        if not all(callable(getattr(helper, m, None))
                   for m in ("initialize", "sample", "next_inputs")):
            raise ProgramError(f"BasicDecoder: helper must be a DecodeHelper, got "
                               f"{type(helper).__name__}{_at()}")
        self.cell, self.helper, self.output_fn = cell, helper, output_fn

    def initialize(self, initial_cell_states):
        initial_inputs, initial_finished = self.helper.initialize()
        return initial_inputs, initial_cell_states, initial_finished

    def step(self, time, inputs, states, **kwargs):
        cell_outputs, cell_states = self.cell(inputs, states, **kwargs)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        sample_ids = self.helper.sample(time=time, outputs=cell_outputs, states=cell_states)
        if not isinstance(sample_ids, Variable):
            raise ProgramError(f"BasicDecoder: the helper's sample must return a Variable, "
                               f"got {type(sample_ids).__name__}{_at()}")
        sample_ids.stop_gradient = True
        finished, next_inputs, next_states = self.helper.next_inputs(
            time=time, outputs=cell_outputs, states=cell_states, sample_ids=sample_ids)
        return self.OutputWrapper(cell_outputs, sample_ids), next_states, next_inputs, finished

    def _pad_outputs(self, outputs, final_states, written):
        """graphc's: past the loop's end, cell_outputs are zeros and sample_ids the helper's
        end_token (zeros when it has none) (docs/control_flow.md)."""
        end = getattr(self.helper, "_end_token", None)
        if end is None:
            return outputs
        token = _t.fill_constant([1], outputs.sample_ids.dtype, end)
        return self.OutputWrapper(outputs.cell_outputs,
                                  _pad_steps(outputs.sample_ids, written, token))


__all__ = ["DecodeHelper", "TrainingHelper", "GreedyEmbeddingHelper", "SampleEmbeddingHelper",
           "BasicDecoder"]
