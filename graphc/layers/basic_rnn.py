"""Paddle 1.8's ``fluid.contrib.layers`` RNNs: ``BasicGRUUnit``, ``BasicLSTMUnit`` (one step)
and ``basic_gru``/``basic_lstm`` (stacked, optionally bidirectional, one StaticRNN per way)."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .helper import check_variable
from .manipulation import shape, slice
from .math import elementwise_add, elementwise_mul, scale
from .nn import dropout
from .reshuffle import reverse
from .rnn_cells import _GRUUnit, _LSTMUnit, _suffixed
from .sequence import sequence_mask
from .static_rnn import StaticRNN
from .tensor import concat, reshape, transpose


class BasicGRUUnit(_GRUUnit):
    """One GRU step, ``unit(input, pre_hidden) -> new_hidden``: ``[r, u] = act_gate([x, h]
    W_g + b_g)``, ``c = act([x, r * h] W_c + b_c)``, ``h' = u * h + (1 - u) * c``."""

    def __init__(self, name_scope, hidden_size, param_attr=None, bias_attr=None,
                 gate_activation=None, activation=None, dtype="float32"):
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                         activation, dtype)

    def forward(self, input, pre_hidden):
        return self(input, pre_hidden)


class BasicLSTMUnit(_LSTMUnit):
    """One LSTM step, ``unit(input, pre_hidden, pre_cell) -> (new_hidden, new_cell)``:
    ``[i, f, j, o] = [x, h] W + b``, ``c' = c sigmoid(f + forget_bias) + sigmoid(i) tanh(j)``,
    ``h' = tanh(c') sigmoid(o)``."""

    def __init__(self, name_scope, hidden_size, param_attr=None, bias_attr=None,
                 gate_activation=None, activation=None, forget_bias=1.0, dtype="float32"):
        super().__init__(name_scope, hidden_size, param_attr, bias_attr, gate_activation,
                         activation, dtype, forget_bias=forget_bias)

    def forward(self, input, pre_hidden, pre_cell):
        return self(input, pre_hidden, pre_cell)


def _check(layer, input, states, hidden_size, num_layers, sequence_length) -> None:
    check_variable(layer, "input", input)
    if len(input.shape) != 3:
        raise ProgramError(f"{layer}: input {input.name} has shape {list(input.shape)}; it "
                           "must be [batch, time, size] (batch_first) or [time, batch, size]")
    for arg, var in states.items():
        if var is not None:
            check_variable(layer, arg, var)
    if int(hidden_size) <= 0 or int(num_layers) <= 0:
        raise ProgramError(f"{layer}: hidden_size ({hidden_size}) and num_layers "
                           f"({num_layers}) must be positive")
    if sequence_length is not None and not isinstance(sequence_length, Variable):
        raise ProgramError(f"{layer}: sequence_length must be a Variable of shape [batch], "
                           f"got {type(sequence_length).__name__}")


def _units(make, name, num_layers, param_attr, bias_attr, way):
    """One unit per layer, its parameters ``<name>_<way>layers_<i>/<Unit>_0.w_0`` (a named
    ParamAttr gets ``_fw_w_<i>``/``_bw_b_<i>`` suffixes, as Paddle names them)."""
    tag = "fw" if not way else "bw"
    return [make(f"{name}_{way}layers_{i}", _suffixed(param_attr, f"_{tag}_w_{i}"),
                 _suffixed(bias_attr, f"_{tag}_b_{i}")) for i in range(num_layers)]


def _initial(state, num_layers, ways, hidden_size):
    """[num_layers * ways, batch, hidden] as [num_layers, ways, batch, hidden]."""
    return None if state is None else reshape(state, [num_layers, ways, -1, hidden_size])


def _pick(state, layer, way, hidden_size):
    part = slice(state, axes=[0, 1], starts=[layer, way], ends=[layer + 1, way + 1])
    return reshape(part, [-1, hidden_size])


def _last_step(seq, hidden_size):
    return reshape(slice(seq, axes=[0], starts=[-1], ends=[2 ** 31 - 1]), [-1, hidden_size])


def _keep_past_end(new, old, step_mask):
    """``new`` where the step is inside the sequence, else ``old`` (the state stops there)."""
    return elementwise_add(elementwise_mul(new, step_mask, axis=0),
                           elementwise_mul(old, scale(step_mask, -1.0, 1.0), axis=0))


def _run(x, mask, units, inits, way, hidden_size, dropout_prob, dropout_impl):
    """One direction over time-major ``x``: every layer inside one step, each layer's output
    (dropped out when ``dropout_prob``) the next one's input. Returns the last layer's output
    sequence and each state's last step, stacked over the layers."""
    rnn = StaticRNN()
    n_states = len(inits)
    # each layer's initial states, sliced before the step (a memory starts from outside it)
    boots = [[_pick(s, i, way, hidden_size) if s is not None else None for s in inits]
             for i in range(len(units))]
    with rnn.step():
        step_in = rnn.step_input(x)
        step_mask = rnn.step_input(mask) if mask is not None else None
        for i, unit in enumerate(units):
            pres = [rnn.memory(init=b) if b is not None else
                    rnn.memory(batch_ref=x, shape=[-1, hidden_size], ref_batch_dim_idx=1)
                    for b in boots[i]]
            news = unit(step_in, *pres)
            news = list(news) if isinstance(news, tuple) else [news]
            if step_mask is not None:
                news = [_keep_past_end(n, p, step_mask) for n, p in zip(news, pres)]
            for p, n in zip(pres, news):
                rnn.update_memory(p, n)
                rnn.step_output(n)
            step_in = news[0]
            if dropout_prob:
                step_in = dropout(step_in, dropout_prob=dropout_prob,
                                  dropout_implementation=dropout_impl)
        rnn.step_output(step_in)
    outs = rnn()
    lasts = [reshape(concat([_last_step(outs[i * n_states + k], hidden_size)
                             for i in range(len(units))], axis=0),
                     [len(units), -1, hidden_size]) for k in range(n_states)]
    return outs[-1], lasts


def _basic_rnn(layer, make, input, inits, hidden_size, num_layers, sequence_length,
               dropout_prob, bidirectional, batch_first, param_attr, bias_attr, name,
               dropout_impl):
    _check(layer, input, dict(zip(("init_hidden", "init_cell"), inits)), hidden_size,
           num_layers, sequence_length)
    hidden_size, num_layers, ways = int(hidden_size), int(num_layers), 2 if bidirectional else 1
    x = transpose(input, [1, 0, 2]) if batch_first else input
    mask = None
    if sequence_length is not None:
        steps = x.shape[0] if x.shape[0] > 0 else slice(shape(x), axes=[0], starts=[0],
                                                        ends=[1])
        mask = transpose(sequence_mask(sequence_length, maxlen=steps, dtype=x.dtype), [1, 0])
    inits = [_initial(s, num_layers, ways, hidden_size) for s in inits]
    out, lasts = _run(x, mask, _units(make, name, num_layers, param_attr, bias_attr, ""),
                      inits, 0, hidden_size, dropout_prob, dropout_impl)
    if bidirectional:
        back = [reverse(v, axis=[0]) if v is not None else None for v in (x, mask)]
        bw_out, bw_lasts = _run(back[0], back[1], _units(make, name, num_layers, param_attr,
                                                         bias_attr, "reverse_"),
                                inits, 1, hidden_size, dropout_prob, dropout_impl)
        out = concat([out, reverse(bw_out, axis=[0])], axis=2)
        # [layers, 2 * batch, hidden] -> [layers * 2, batch, hidden]: layer i's forward state
        # at 2i, its backward one at 2i + 1
        lasts = [reshape(concat([f, b], axis=1), [num_layers * 2, -1, hidden_size])
                 for f, b in zip(lasts, bw_lasts)]
    if batch_first:
        out = transpose(out, [1, 0, 2])
    return out, lasts


def basic_gru(input, init_hidden, hidden_size, num_layers=1, sequence_length=None,
              dropout_prob=0.0, bidirectional=False, batch_first=True, param_attr=None,
              bias_attr=None, gate_activation=None, activation=None, dtype="float32",
              name="basic_gru"):
    """A stacked (bidirectional: two-way) GRU of BasicGRUUnits over ``input`` ([batch, time,
    size], or [time, batch, size] unless ``batch_first``). ``init_hidden``: [layers * ways,
    batch, hidden] or None (zeros). Past a sequence's ``sequence_length`` its state stops
    changing. Returns ``(rnn_out, last_hidden)``: [.., hidden * ways] and [layers * ways,
    batch, hidden]."""
    def make(scope, w, b):
        return BasicGRUUnit(scope, hidden_size, w, b, gate_activation, activation, dtype)
    out, (last_h,) = _basic_rnn("basic_gru", make, input, [init_hidden], hidden_size,
                                num_layers, sequence_length, dropout_prob, bidirectional,
                                batch_first, param_attr, bias_attr, name,
                                "downgrade_in_infer")
    return out, last_h


def basic_lstm(input, init_hidden, init_cell, hidden_size, num_layers=1, sequence_length=None,
               dropout_prob=0.0, bidirectional=False, batch_first=True, param_attr=None,
               bias_attr=None, gate_activation=None, activation=None, forget_bias=1.0,
               dtype="float32", name="basic_lstm"):
    """basic_gru's LSTM (BasicLSTMUnits; dropout between layers scales in training). Returns
    ``(rnn_out, last_hidden, last_cell)``."""
    if (init_hidden is None) != (init_cell is None):
        raise ProgramError("basic_lstm: give both init_hidden and init_cell, or neither")

    def make(scope, w, b):
        return BasicLSTMUnit(scope, hidden_size, w, b, gate_activation, activation,
                             forget_bias, dtype)
    out, (last_h, last_c) = _basic_rnn("basic_lstm", make, input, [init_hidden, init_cell],
                                       hidden_size, num_layers, sequence_length, dropout_prob,
                                       bidirectional, batch_first, param_attr, bias_attr,
                                       name, "upscale_in_train")
    return out, last_h, last_c


__all__ = ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]
