"""Paddle 1.8's decoding API (``Decoder``, ``BeamSearchDecoder``, ``dynamic_decode``): the decoding
loop is one ``while`` op writing each step's outputs to tensor arrays (docs/control_flow.md)."""

from __future__ import annotations

import collections

import numpy as np

from ..ir.errors import ProgramError
from ..ir.program import Variable
from ..ir.source import user_source
from ..ops.control_flow.arrays import DEFAULT_ARRAY_CAPACITY
from . import logic as _logic
from . import manipulation as _m
from . import math as _math
from . import tensor as _t
from .control_flow import While, array_length, array_write, create_array
from .helper import LayerHelper, check_variable
from .utils import flatten, map_structure

# the score of a token a beam may not take (Paddle's BeamSearchDecoder.kinf)
_KINF = 1e9


def _at() -> str:
    return f" (at {user_source()})"


class Decoder:
    """The base of every decoder ``dynamic_decode`` drives: ``initialize(inits) -> (inputs,
    states, finished)`` once, ``step(time, inputs, states, **kwargs) -> (outputs, next_states,
    next_inputs, finished)`` per decoding step, and ``finalize(outputs, final_states,
    sequence_lengths) -> (final_outputs, final_states)`` once after the loop (optional)."""

    def initialize(self, inits):
        raise NotImplementedError

    def step(self, time, inputs, states, **kwargs):
        raise NotImplementedError

    def finalize(self, outputs, final_states, sequence_lengths):
        raise NotImplementedError

    @property
    def tracks_own_finished(self) -> bool:
        """Whether ``step``'s ``finished`` already covers the entries finished before
        (True when the decoder reorders its batch entries, as beam search does); if False,
        dynamic_decode ORs it with the finished state it keeps."""
        return False


class BeamSearchDecoder(Decoder):
    """Beam search over a cell's outputs: each step scores every (beam, token) pair of a batch
    entry by its accumulated log-probability (finished beams keep ``end_token`` at no cost),
    keeps the ``beam_size`` best and reorders the cell states to follow them; ``finalize``
    backtraces the kept ids with ``gather_tree``. The cell sees ``[batch * beam_size, ...]``
    inputs and states; other ``[batch, ...]`` tensors it reads must be tiled first
    (``tile_beam_merge_with_batch``)."""

    class OutputWrapper(collections.namedtuple("OutputWrapper",
                                               ("scores", "predicted_ids", "parent_ids"))):
        """What ``step`` returns as ``outputs``: scores, predicted_ids, parent_ids."""

    class StateWrapper(collections.namedtuple(
            "StateWrapper", ("cell_states", "log_probs", "finished", "lengths"))):
        """What ``step`` takes and returns as ``states``."""

    def __init__(self, cell, start_token, end_token, beam_size, embedding_fn=None,
                 output_fn=None):
        if not callable(cell):
            raise ProgramError(f"BeamSearchDecoder: cell must be callable (an RNNCell or an "
                               f"object with __call__(inputs, states)), got "
                               f"{type(cell).__name__}{_at()}")
        for arg, v in (("start_token", start_token), ("end_token", end_token)):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                raise ProgramError(f"BeamSearchDecoder: {arg} must be a token id (an int >= "
                                   f"0), got {v!r}{_at()}")
        if isinstance(beam_size, bool) or not isinstance(beam_size, int | np.integer) or \
                beam_size < 1:
            raise ProgramError(f"BeamSearchDecoder: beam_size must be an int >= 1, got "
                               f"{beam_size!r}{_at()}")
        for arg, fn in (("embedding_fn", embedding_fn), ("output_fn", output_fn)):
            if fn is not None and not callable(fn):
                raise ProgramError(f"BeamSearchDecoder: {arg} must be callable or None, got "
                                   f"{type(fn).__name__}{_at()}")
        self.cell, self.embedding_fn, self.output_fn = cell, embedding_fn, output_fn
        self.start_token, self.end_token = int(start_token), int(end_token)
        self.beam_size = int(beam_size)

    # -- Paddle's static helpers ---------------------------------------------------------
    @staticmethod
    def tile_beam_merge_with_batch(x, beam_size):
        """``[batch, ...]`` -> ``[batch * beam_size, ...]``, each entry repeated beam_size
        times in a row (the layout the cell sees)."""
        check_variable("BeamSearchDecoder.tile_beam_merge_with_batch", "x", x)
        tiled = _tile_beams(x, beam_size)
        rest = list(x.shape[1:])
        if all(d is not None and d >= 0 for d in rest):
            return _t.reshape(tiled, [-1, *rest])
        # a second unknown dimension (an encoder output's [batch, -1, hidden]) cannot be
        # spelled in one reshape: move batch and beam last, merge them there (0 keeps each
        # other dimension as it is at run time), and bring the merged axis back to the front
        n = len(tiled.shape)
        moved = _t.transpose(tiled, list(range(2, n)) + [0, 1])
        merged = _t.reshape(moved, [0] * (n - 2) + [-1])
        return _t.transpose(merged, [n - 2] + list(range(n - 2)))

    def _split_batch_beams(self, x):
        """``[batch * beam, ...]`` -> ``[batch, beam, ...]``."""
        check_variable("BeamSearchDecoder._split_batch_beams", "x", x)
        return _t.reshape(x, [-1, self.beam_size, *x.shape[1:]])

    def _merge_batch_beams(self, x):
        """``[batch, beam, ...]`` -> ``[batch * beam, ...]``."""
        check_variable("BeamSearchDecoder._merge_batch_beams", "x", x)
        return _t.reshape(x, [-1, *x.shape[2:]])

    def _expand_to_beam_size(self, x):
        """``[batch, ...]`` -> ``[batch, beam, ...]``, each entry repeated per beam."""
        check_variable("BeamSearchDecoder._expand_to_beam_size", "x", x)
        return _tile_beams(x, self.beam_size)

    def _mask_probs(self, probs, finished):
        """Log-probabilities ``[batch, beam, vocab]`` with every finished beam's row replaced
        by one that puts all its mass on ``end_token`` (0 there, -kinf elsewhere)."""
        check_variable("BeamSearchDecoder._mask_probs", "probs", probs)
        check_variable("BeamSearchDecoder._mask_probs", "finished", finished)
        vocab = probs.shape[-1]
        noend = np.full([vocab], -_KINF, probs.dtype)
        noend[self.end_token] = 0.0
        done = _t.cast(finished, probs.dtype)
        # finished * noend + (1 - finished) * probs, broadcast over the vocabulary
        tiled = _m.expand(_m.unsqueeze(done, [2]), [1, 1, vocab])
        masked = _math.elementwise_mul(tiled, _t.assign(noend))
        keep = _math.elementwise_mul(probs, _math.scale(done, -1.0, 1.0), axis=0)
        return _math.elementwise_add(masked, keep)

    def _gather(self, x, indices, batch_size):
        """``x[b, indices[b, k], ...]`` for ``x`` ``[batch, beam, ...]`` and int64
        ``indices`` ``[batch, beam]``."""
        check_variable("BeamSearchDecoder._gather", "x", x)
        check_variable("BeamSearchDecoder._gather", "indices", indices)
        check_variable("BeamSearchDecoder._gather", "batch_size", batch_size)
        # the batch coordinate of each index: a running count down the batch, which keeps
        # every shape static (Paddle's arange(batch_size) would depend on data)
        rows = _math_cumsum(_m.ones_like(indices), axis=0, exclusive=True)
        coords = _m.stack([rows, indices], axis=2)
        coords.stop_gradient = True
        return _m.gather_nd(x, coords)

    # -- the decoder ----------------------------------------------------------------------
    def initialize(self, initial_cell_states):
        """(start-token inputs ``[batch, beam]`` (embedded when embedding_fn is given),
        StateWrapper(cell states tiled to ``[batch, beam, ...]``, log_probs ``[0, -kinf,
        ...]`` per entry, finished all False, lengths 0), finished)."""
        leaves = flatten(initial_cell_states)
        if not leaves or not all(isinstance(v, Variable) for v in leaves):
            raise ProgramError("BeamSearchDecoder.initialize: initial_cell_states must be a "
                               f"Variable or a nest of Variables, got {initial_cell_states!r}"
                               f"{_at()}")
        self.kinf = _KINF
        state = leaves[0]
        self.batch_size = _m.slice(_m.shape(state), axes=[0], starts=[0], ends=[1])
        self.start_token_tensor = _t.fill_constant([1], "int64", self.start_token)
        self.end_token_tensor = _t.fill_constant([1], "int64", self.end_token)
        cell_states = map_structure(self._expand_to_beam_size, initial_cell_states)
        beam = self.beam_size
        init_inputs = _m.fill_constant_batch_size_like(state, [-1, beam], "int64",
                                                       self.start_token)
        first = np.array([0.0] + [-self.kinf] * (beam - 1), "float32")
        log_probs = _math.elementwise_add(
            _m.fill_constant_batch_size_like(state, [-1, beam], "float32", 0.0),
            _t.assign(first))
        finished = _m.fill_constant_batch_size_like(state, [-1, beam], "bool", 0)
        lengths = _m.zeros_like(init_inputs)
        if self.embedding_fn is not None:
            init_inputs = self.embedding_fn(init_inputs)
        return (init_inputs, self.StateWrapper(cell_states, log_probs, finished, lengths),
                finished)

    def _beam_search_step(self, time, logits, next_cell_states, beam_state):
        """(OutputWrapper(scores, predicted_ids, parent_ids), StateWrapper) of one step from
        the logits ``[batch, beam, vocab]``."""
        check_variable("BeamSearchDecoder", "logits", logits)
        vocab = logits.shape[-1] if logits.shape else -1
        if len(logits.shape) != 3 or vocab < 1:
            raise ProgramError(f"BeamSearchDecoder: the cell's (or output_fn's) output must "
                               f"be logits [batch * beam, vocab] with a known vocab, got "
                               f"{list(logits.shape)} after splitting beams{_at()}")
        for arg, tok in (("start_token", self.start_token), ("end_token", self.end_token)):
            if tok >= vocab:
                raise ProgramError(f"BeamSearchDecoder: {arg} {tok} is outside the vocabulary "
                                   f"[0, {vocab}) of the logits {list(logits.shape)}{_at()}")
        self.vocab_size = vocab
        self.vocab_size_tensor = _t.fill_constant([1], "int64", vocab)
        beam = self.beam_size
        if beam > vocab:
            raise ProgramError(f"BeamSearchDecoder: beam_size {beam} exceeds the vocabulary "
                               f"size {vocab}{_at()}")
        step_log_probs = _math.log(_math.softmax(logits))
        step_log_probs = self._mask_probs(step_log_probs, beam_state.finished)
        log_probs = _math.elementwise_add(step_log_probs, beam_state.log_probs, axis=0)
        flat = _t.reshape(log_probs, [-1, beam * vocab])
        topk_scores, topk_indices = _topk(flat, beam)
        beam_indices = _math.elementwise_floordiv(topk_indices, self.vocab_size_tensor)
        token_indices = _math.elementwise_mod(topk_indices, self.vocab_size_tensor)
        next_log_probs = self._gather(flat, topk_indices, self.batch_size)
        next_cell_states = map_structure(
            lambda x: self._gather(x, beam_indices, self.batch_size), next_cell_states)
        next_finished = self._gather(beam_state.finished, beam_indices, self.batch_size)
        next_lengths = self._gather(beam_state.lengths, beam_indices, self.batch_size)
        next_lengths = _math.elementwise_add(
            next_lengths, _t.cast(_logic.logical_not(next_finished), beam_state.lengths.dtype))
        next_finished = _logic.logical_or(
            next_finished, _logic.equal(token_indices, self.end_token_tensor))
        return (self.OutputWrapper(topk_scores, token_indices, beam_indices),
                self.StateWrapper(next_cell_states, next_log_probs, next_finished,
                                  next_lengths))

    def step(self, time, inputs, states, **kwargs):
        """One beam-search step: the cell on the merged beams, output_fn, the beam selection;
        returns (OutputWrapper, StateWrapper, next inputs (the selected ids, embedded when
        embedding_fn is given), finished)."""
        if not isinstance(states, BeamSearchDecoder.StateWrapper):
            raise ProgramError(f"BeamSearchDecoder.step: states must be the StateWrapper "
                               f"initialize returns, got {type(states).__name__}{_at()}")
        merged_inputs = map_structure(self._merge_batch_beams, inputs)
        cell_states = map_structure(self._merge_batch_beams, states.cell_states)
        cell_outputs, next_cell_states = self.cell(merged_inputs, cell_states, **kwargs)
        cell_outputs = map_structure(self._split_batch_beams, cell_outputs)
        next_cell_states = map_structure(self._split_batch_beams, next_cell_states)
        if self.output_fn is not None:
            cell_outputs = self.output_fn(cell_outputs)
        output, state = self._beam_search_step(time, cell_outputs, next_cell_states, states)
        ids = output.predicted_ids
        ids.stop_gradient = True
        next_inputs = self.embedding_fn(ids) if self.embedding_fn is not None else ids
        return output, state, next_inputs, state.finished

    def finalize(self, outputs, final_states, sequence_lengths):
        """(the full id sequences ``[time, batch, beam]`` backtraced with gather_tree,
        final_states)."""
        return _gather_tree(outputs.predicted_ids, outputs.parent_ids), final_states

    @property
    def tracks_own_finished(self) -> bool:
        return True

    def _pad_outputs(self, outputs, final_states, written):
        """graphc's: the stacked step outputs ``[capacity, batch, beam]`` with the steps the
        loop did not run (``written`` 0) filled as further steps of finished beams would
        fill them: id end_token, parent its own beam, score unchanged (docs/control_flow.md)."""
        beams = _t.assign(np.arange(self.beam_size, dtype="int64"))
        return self.OutputWrapper(
            _pad_steps(outputs.scores, written, final_states.log_probs),
            _pad_steps(outputs.predicted_ids, written, self.end_token_tensor),
            _pad_steps(outputs.parent_ids, written, beams))


def _tile_beams(x, beam_size):
    if isinstance(beam_size, bool) or not isinstance(beam_size, int | np.integer) or \
            beam_size < 1:
        raise ProgramError(f"BeamSearchDecoder: beam_size must be an int >= 1, got "
                           f"{beam_size!r}{_at()}")
    x = _m.unsqueeze(x, [1])
    return _m.expand(x, [1, int(beam_size)] + [1] * (len(x.shape) - 2))


def _math_cumsum(x, axis, exclusive):
    from .math_activation import cumsum
    return cumsum(x, axis=axis, exclusive=exclusive)


def _topk(x, k):
    from .loss import topk
    return topk(x, k)


def _gather_tree(ids, parents):
    from .beam import gather_tree
    return gather_tree(ids, parents)


def _pad_steps(stacked, written, pad):
    """``stacked`` ``[capacity, ...]`` where ``written`` ([capacity] of 1/0) is 1, else
    ``pad`` broadcast over the trailing dimensions (the unwritten steps hold zeros)."""
    unwritten = _t.cast(_math.scale(written, -1.0, 1.0), stacked.dtype)
    filler = _math.elementwise_add(_m.zeros_like(stacked), _t.cast(pad, stacked.dtype))
    return _math.elementwise_add(stacked, _math.elementwise_mul(filler, unwritten, axis=0))


# -- dynamic_decode -------------------------------------------------------------------------
def _check_decoder(decoder) -> None:
    for method in ("initialize", "step"):
        if not callable(getattr(decoder, method, None)):
            raise ProgramError(f"dynamic_decode: decoder must be a Decoder (with initialize "
                               f"and step), got {type(decoder).__name__}{_at()}")


def _maybe_copy(state, new_state, finished):
    """new_state where an entry is unfinished, state where it is finished."""
    dtype = state.dtype
    as_float = "float32" if dtype in ("bool", "int32", "int64") else dtype
    done = _t.cast(finished, as_float)
    done.stop_gradient = True
    old = _t.cast(state, as_float) if as_float != dtype else state
    new = _t.cast(new_state, as_float) if as_float != dtype else new_state
    out = _math.elementwise_add(_math.elementwise_mul(old, done, axis=0),
                                _math.elementwise_mul(new, _math.scale(done, -1.0, 1.0),
                                                      axis=0))
    return _t.cast(out, dtype) if as_float != dtype else out


def _assign_into(src, dst) -> None:
    if src.name != dst.name:
        _t.assign(src, dst)


def _written_steps(array, capacity):
    """int64 [capacity]: 1 for the steps the loop ran (below the array's length), else 0."""
    steps = _m.range(0, capacity, 1, "int64")
    length = _m.expand(array_length(array), [capacity])
    return _t.cast(_logic.less_than(steps, length), "int64")


def dynamic_decode(decoder, inits=None, max_step_num=None, output_time_major=False,
                   impute_finished=False, is_test=False, return_length=False, **kwargs):
    """Paddle 1.8's ``dynamic_decode``: ``decoder.step`` repeated (kwargs passed to it) until
    every entry is finished or ``max_step_num + 1`` steps ran, as one ``while`` op; each
    step's outputs stacked along time, then ``decoder.finalize``. Returns (final_outputs,
    final_states) and, with ``return_length``, the sequence lengths.

    XLA needs static shapes: the outputs always hold ``max_step_num + 1`` steps (128 without
    ``max_step_num``; a longer decode is refused when run, a DataError); the steps after the
    loop ended are padded (zeros, or what the decoder says: end_token for beam search), see
    docs/control_flow.md."""
    _check_decoder(decoder)
    if max_step_num is not None and (isinstance(max_step_num, bool) or not isinstance(
            max_step_num, int | np.integer) or max_step_num < 0):
        raise ProgramError(f"dynamic_decode: max_step_num must be an int >= 0 or None, got "
                           f"{max_step_num!r}{_at()}")
    capacity = DEFAULT_ARRAY_CAPACITY if max_step_num is None else int(max_step_num) + 1
    initial_inputs, initial_states, initial_finished = decoder.initialize(inits)
    check_variable("dynamic_decode", "finished (from decoder.initialize)", initial_finished)
    if initial_finished.dtype != "bool":
        raise ProgramError(f"dynamic_decode: the decoder's finished ({initial_finished.name}) "
                           f"must be bool, got {initial_finished.dtype}{_at()}")
    inputs, states, finished = initial_inputs, initial_states, initial_finished
    finished.stop_gradient = True
    step_idx = _t.fill_constant([1], "int64", 0)
    cond = _logic.logical_not(_math.reduce_all(finished))
    # without max_step_num the loop may run one step past the arrays' capacity: that step's
    # write is refused when run (a DataError), so a decode that does not end within the
    # capacity is never silently cut short
    limit = _t.fill_constant([1], "int64", capacity - 1 if max_step_num is not None
                             else capacity)
    lengths = _t.cast(_m.zeros_like(finished), "int64")
    lengths.stop_gradient = True
    loop = While(cond, is_test=is_test, max_iterations=capacity)
    with loop.block() as body:
        outputs, next_states, next_inputs, next_finished = decoder.step(
            step_idx, inputs, states, **kwargs)
        if not decoder.tracks_own_finished:
            next_finished = _logic.logical_or(next_finished, finished)
            next_lengths = _math.elementwise_add(
                lengths, _t.cast(_logic.logical_not(finished), lengths.dtype))
            if impute_finished:
                next_states = map_structure(lambda x, y: _maybe_copy(x, y, finished),
                                            states, next_states)
        else:
            next_lengths = getattr(next_states, "lengths", lengths)
        arrays = map_structure(lambda x: _output_array(x, capacity, finished), outputs)
        body.declare_outer(*flatten(arrays))
        map_structure(lambda x, a: array_write(x, step_idx, a), outputs, arrays)
        _m.increment(step_idx)
        # finished first: the decoder's states may hold the same variable
        _assign_into(next_finished, finished)
        _assign_into(next_lengths, lengths)
        map_structure(_assign_into, next_inputs, inputs)
        map_structure(_assign_into, next_states, states)
        going = _logic.logical_not(_math.reduce_all(finished))
        _logic.logical_and(going, _logic.less_equal(step_idx, limit), out=cond)
    final_outputs = map_structure(
        lambda a: tensor_array_to_tensor(a, axis=0, use_stack=True)[0], arrays)
    pad = getattr(decoder, "_pad_outputs", None)
    if pad is not None:
        written = _written_steps(flatten(arrays)[0], capacity)
        final_outputs = pad(final_outputs, states, written)
    final_states = states
    try:
        final_outputs, final_states = decoder.finalize(final_outputs, final_states, lengths)
    except NotImplementedError:
        pass
    if not output_time_major:
        final_outputs = map_structure(
            lambda x: _t.transpose(x, [1, 0, *range(2, len(x.shape))]), final_outputs)
    if return_length:
        return final_outputs, final_states, lengths
    return final_outputs, final_states


def _output_array(x, capacity, finished):
    check_variable("dynamic_decode", "decoder.step output", x)
    array = create_array(x.dtype, capacity=capacity)
    # a step output's batch size (its first dimension) is the finished state's
    array._batch_like = finished
    return array


def tensor_array_to_tensor(input, axis=1, name=None, use_stack=False):
    """(the array's elements concatenated along ``axis`` (stacked when ``use_stack``), the
    int32 size of each along it). XLA's static shapes: all ``capacity`` elements are
    there, those past the array's length zeros with size 0 (docs/control_flow.md)."""
    if not isinstance(input, Variable) or not input.is_array:
        raise ProgramError(f"tensor_array_to_tensor: input must be a tensor array (from "
                           f"create_array/array_write), got {getattr(input, 'name', input)!r}"
                           f"{_at()}")
    if input.shape is None:
        raise ProgramError(f"tensor_array_to_tensor: array ({input.name}) has no element "
                           f"written yet{_at()}")
    helper = LayerHelper("tensor_array_to_tensor", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", {"X": input}, {"Out": out, "OutIndex": index},
                     {"axis": int(axis), "use_stack": bool(use_stack)})
    return out, index


__all__ = ["Decoder", "BeamSearchDecoder", "dynamic_decode", "tensor_array_to_tensor"]
