"""Paddle 1.8's RNN-cell API: ``RNNCell`` (one step: ``call(inputs, states) -> (outputs,
new_states)``), ``GRUCell``, ``LSTMCell``, and ``rnn()``, which runs a cell over a sequence with
a StaticRNN (one ``recurrent`` op), as Paddle 1.8 does in static mode."""

from __future__ import annotations

import copy
from functools import partial

from ..build.param_attr import ParamAttr
from ..ir import unique_name
from ..ir.errors import ProgramError
from ..ir.program import Variable
from . import utils
from .helper import LayerHelper, check_variable
from .manipulation import fill_constant_batch_size_like
from .math import elementwise_add, elementwise_mul, matmul, scale, sigmoid, tanh
from .reshuffle import reverse
from .sequence import sequence_mask
from .static_rnn import StaticRNN
from .tensor import concat, split, transpose


def _is_shape(value) -> bool:
    """A list of ints is one shape (a leaf), not a nest of them."""
    return isinstance(value, list | tuple) and all(isinstance(d, int) for d in value)


def _shape_leaves(nest) -> list:
    if _is_shape(nest) or not utils.is_sequence(nest):
        return [nest]
    return [leaf for child in utils._children(nest) for leaf in _shape_leaves(child)]


def _pack_shapes(structure, leaves: list):
    it = iter(leaves)

    def rebuild(nest):
        if _is_shape(nest) or not utils.is_sequence(nest):
            return next(it)
        return utils._rebuild(nest, [rebuild(c) for c in utils._children(nest)])

    return rebuild(structure)


class RNNCell:
    """The base of RNN cells: ``call(inputs, states, **kwargs)`` computes one step and returns
    ``(outputs, new_states)``; ``state_shape``/``state_dtype`` describe the states (each
    shape without the batch dimension) for ``get_initial_states``."""

    def call(self, inputs, states, **kwargs):
        raise NotImplementedError("an RNNCell subclass implements call(inputs, states)")

    def __call__(self, inputs, states, **kwargs):
        return self.call(inputs, states, **kwargs)

    def get_initial_states(self, batch_ref, shape=None, dtype=None, init_value=0,
                           batch_dim_idx=0):
        """States filled with ``init_value``, of ``shape`` (default ``state_shape``; a nest of
        shapes, each without the batch dimension) and ``dtype`` (default ``state_dtype``,
        else float32), their batch size that of ``batch_ref`` (its first leaf) along
        ``batch_dim_idx``."""
        batch_ref = utils.flatten(batch_ref)[0]
        check_variable("RNNCell.get_initial_states", "batch_ref", batch_ref)
        shapes = self.state_shape if shape is None else shape
        leaves = [list(s) if s and s[0] == -1 else [-1, *s] for s in _shape_leaves(shapes)]
        try:
            dtypes = self.state_dtype if dtype is None else dtype
        except NotImplementedError:
            dtypes = "float32"
        flat_dtypes = _shape_leaves(dtypes)
        if len(flat_dtypes) == 1:
            flat_dtypes = flat_dtypes * len(leaves)
        if len(flat_dtypes) != len(leaves):
            raise ProgramError(f"RNNCell.get_initial_states: {len(leaves)} state shapes but "
                               f"{len(flat_dtypes)} dtypes")
        states = [fill_constant_batch_size_like(batch_ref, s, dt, init_value,
                                                input_dim_idx=batch_dim_idx)
                  for s, dt in zip(leaves, flat_dtypes)]
        return _pack_shapes(shapes, states)

    @property
    def state_shape(self):
        raise NotImplementedError("an RNNCell subclass defines state_shape (or pass shape=)")

    @property
    def state_dtype(self):
        raise NotImplementedError("an RNNCell subclass defines state_dtype")


def _suffixed(attr, suffix: str):
    """Paddle's per-parameter copy of a named ParamAttr (``<name><suffix>``)."""
    attr = ParamAttr.to_attr(attr)
    if attr is None or attr is False or getattr(attr, "name", None) is None:
        return attr
    attr = copy.deepcopy(attr)
    attr.name += suffix
    return attr


class _Unit:
    """What Paddle's BasicGRUUnit/BasicLSTMUnit share: parameters named
    ``<name>/<Unit>_<k>.w_<i>`` (``.b_<i>``), created at the first call, when the input's
    width is known, and reused by every later call."""

    kind = ""

    def __init__(self, name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                 activation, dtype):
        self.full_name = unique_name.generate(f"{name_scope}/{self.kind}")
        self.hidden_size = int(hidden_size)
        self.param_attr, self.bias_attr, self.dtype = param_attr, bias_attr, dtype
        self.gate_activation = gate_activation or sigmoid
        self.activation = activation or tanh
        self.built = False

    def _input_size(self, x) -> int:
        check_variable(self.kind, "input", x)
        size = x.shape[-1]
        if size <= 0:
            raise ProgramError(f"{self.kind}: the input's last dimension must be known, got "
                               f"{list(x.shape)}")
        return size

    def _param(self, attr, shape, is_bias=False):
        # the programs in effect at the first call (the cell may be made before them)
        helper = LayerHelper(self.kind, self.full_name)
        return helper.create_parameter(attr, shape, self.dtype, is_bias=is_bias)


class _GRUUnit(_Unit):
    kind = "BasicGRUUnit"

    def __call__(self, x, h):
        hs = self.hidden_size
        if not self.built:
            width = self._input_size(x) + hs
            self.gate_w = self._param(_suffixed(self.param_attr, "_gate"), [width, 2 * hs])
            self.cand_w = self._param(_suffixed(self.param_attr, "_candidate"), [width, hs])
            self.gate_b = self._param(_suffixed(self.bias_attr, "_gate"), [2 * hs], True)
            self.cand_b = self._param(_suffixed(self.bias_attr, "_candidate"), [hs], True)
            self.built = True
        gates = matmul(concat([x, h], 1), self.gate_w)
        if self.gate_b is not None:
            gates = elementwise_add(gates, self.gate_b)
        r, u = split(self.gate_activation(gates), 2, dim=1)  # reset gate first, then update
        cand = matmul(concat([x, elementwise_mul(r, h)], 1), self.cand_w)
        if self.cand_b is not None:
            cand = elementwise_add(cand, self.cand_b)
        c = self.activation(cand)
        # h' = u * h + (1 - u) * c
        return elementwise_add(elementwise_mul(u, h), elementwise_mul(scale(u, -1.0, 1.0), c))


class _LSTMUnit(_Unit):
    kind = "BasicLSTMUnit"

    def __init__(self, *args, forget_bias=1.0):
        super().__init__(*args)
        self.forget_bias = float(forget_bias)

    def __call__(self, x, h, c):
        hs = self.hidden_size
        if not self.built:
            width = self._input_size(x) + hs
            self.w = self._param(self.param_attr, [width, 4 * hs])
            self.b = self._param(self.bias_attr, [4 * hs], True)
            self.built = True
        gates = matmul(concat([x, h], 1), self.w)
        if self.b is not None:
            gates = elementwise_add(gates, self.b)
        i, f, j, o = split(gates, 4, dim=-1)  # Paddle's gate order: input, forget, cell, output
        # Paddle 1.8's BasicLSTMUnit applies sigmoid and tanh here whatever the activations
        # given (it stores them but does not use them); graphc keeps its numbers
        new_c = elementwise_add(elementwise_mul(c, sigmoid(scale(f, 1.0, self.forget_bias))),
                                elementwise_mul(sigmoid(i), tanh(j)))
        new_h = elementwise_mul(tanh(new_c), sigmoid(o))
        return new_h, new_c


class GRUCell(RNNCell):
    """A GRU step (Paddle's BasicGRUUnit): gates ``[r, u] = act_gate([x, h] W_g + b_g)``,
    candidate ``c = act([x, r * h] W_c + b_c)``, ``h' = u * h + (1 - u) * c``; the output is
    ``h'``. Parameters ``<name>/BasicGRUUnit_<k>.w_0`` (W_g), ``.w_1`` (W_c), ``.b_0``,
    ``.b_1``."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, dtype="float32", name="GRUCell"):
        self.hidden_size = hidden_size
        self.gru_unit = _GRUUnit(name, hidden_size, param_attr, bias_attr, gate_activation,
                                 activation, dtype)

    def call(self, inputs, states):
        new_hidden = self.gru_unit(inputs, states)
        return new_hidden, new_hidden

    @property
    def state_shape(self):
        return [self.hidden_size]


class LSTMCell(RNNCell):
    """An LSTM step (Paddle's BasicLSTMUnit): ``[i, f, j, o] = [x, h] W + b``,
    ``c' = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)``, ``h' = tanh(c') *
    sigmoid(o)``; states ``[h, c]``, output ``h'``. Parameters
    ``<name>/BasicLSTMUnit_<k>.w_0`` and ``.b_0``."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, forget_bias=1.0, dtype="float32", name="LSTMCell"):
        self.hidden_size = hidden_size
        self.lstm_unit = _LSTMUnit(name, hidden_size, param_attr, bias_attr, gate_activation,
                                   activation, dtype, forget_bias=forget_bias)

    def call(self, inputs, states):
        pre_hidden, pre_cell = states
        new_hidden, new_cell = self.lstm_unit(inputs, pre_hidden, pre_cell)
        return new_hidden, [new_hidden, new_cell]

    @property
    def state_shape(self):
        return [[self.hidden_size], [self.hidden_size]]


def _transpose_batch_time(x):
    return transpose(x, [1, 0, *range(2, len(x.shape))])


def _maybe_copy(state, new_state, step_mask):
    """The new state where the step is inside the sequence, else the old one."""
    kept = elementwise_mul(state, scale(step_mask, -1.0, 1.0), axis=0)
    return elementwise_add(elementwise_mul(new_state, step_mask, axis=0), kept)


def _check_inputs(cell, inputs, initial_states, sequence_length) -> None:
    if not callable(getattr(cell, "call", None)):
        raise ProgramError(f"rnn: cell must be an RNNCell, got {type(cell).__name__}")
    for i, x in enumerate(utils.flatten(inputs)):
        check_variable("rnn", f"inputs[{i}]", x)
        if len(x.shape) < 2:
            raise ProgramError(f"rnn: inputs[{i}] ({x.name}) has shape {list(x.shape)}; "
                               "inputs are [batch, time, ...] (time_major: [time, batch, ...])")
    if initial_states is not None:
        for i, s in enumerate(utils.flatten(initial_states)):
            check_variable("rnn", f"initial_states[{i}]", s)
    if sequence_length is not None and not isinstance(sequence_length, Variable):
        raise ProgramError("rnn: sequence_length must be a Variable of shape [batch], got "
                           f"{type(sequence_length).__name__}")


def rnn(cell, inputs, initial_states=None, sequence_length=None, time_major=False,
        is_reverse=False, **kwargs):
    """Run ``cell`` over the time steps of ``inputs`` (a Variable or a nest of them,
    ``[batch, time, ...]``, or ``[time, batch, ...]`` when ``time_major``); ``kwargs`` go to
    every ``cell.call``. With ``sequence_length`` (``[batch]`` ints), a sequence's states stop
    changing past its length (its outputs there are the cell's, as in Paddle). Returns
    ``(outputs, final_states)``, outputs in the layout of ``inputs``."""
    _check_inputs(cell, inputs, initial_states, sequence_length)
    if initial_states is None:
        initial_states = cell.get_initial_states(batch_ref=inputs,
                                                 batch_dim_idx=1 if time_major else 0)

    def _switch_grad(x, stop=False):
        x.stop_gradient = stop
        return x

    initial_states = utils.map_structure(_switch_grad, initial_states)
    if not time_major:
        inputs = utils.map_structure(_transpose_batch_time, inputs)
    mask = None
    if sequence_length is not None:
        first = utils.flatten(inputs)[0]
        steps = first.shape[0]
        if steps < 0:  # known when the step is traced: the inputs' time dimension
            from .manipulation import shape as shape_of
            from .manipulation import slice as slice_of
            steps = slice_of(shape_of(first), axes=[0], starts=[0], ends=[1])
        mask = sequence_mask(sequence_length, maxlen=steps,
                             dtype=utils.flatten(initial_states)[0].dtype)
        mask = transpose(mask, [1, 0])
    if is_reverse:
        inputs = utils.map_structure(lambda x: reverse(x, axis=[0]), inputs)
        mask = reverse(mask, axis=[0]) if mask is not None else None

    loop = StaticRNN()
    with loop.step():
        step_in = utils.map_structure(loop.step_input, inputs)
        states = utils.map_structure(loop.memory, initial_states)
        copy_states = utils.map_structure(lambda x: x, states)
        outputs, new_states = cell(step_in, copy_states, **kwargs)
        utils.assert_same_structure(states, new_states, check_types=False)
        if mask is not None:
            step_mask = loop.step_input(mask)
            new_states = utils.map_structure(partial(_maybe_copy, step_mask=step_mask),
                                             states, new_states)
        utils.map_structure(loop.update_memory, states, new_states)
        flat_outputs = utils.flatten(outputs)
        utils.map_structure(loop.step_output, outputs)
        utils.map_structure(loop.step_output, new_states)
    stacked = loop()
    stacked = stacked if isinstance(stacked, list) else [stacked]
    final_outputs = utils.pack_sequence_as(outputs, stacked[:len(flat_outputs)])
    final_states = utils.pack_sequence_as(new_states,
                                          [s[-1] for s in stacked[len(flat_outputs):]])
    if is_reverse:
        final_outputs = utils.map_structure(lambda x: reverse(x, axis=[0]), final_outputs)
    if not time_major:
        final_outputs = utils.map_structure(_transpose_batch_time, final_outputs)
    return final_outputs, final_states


__all__ = ["RNNCell", "GRUCell", "LSTMCell", "rnn"]
