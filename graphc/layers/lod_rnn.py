"""Recurrent layers over LoD sequences (Fluid's ``dynamic_lstm``, ``dynamic_lstmp``,
``dynamic_gru``) and the one-step units ``gru_unit`` and ``lstm_unit``, with Paddle 1.8's
signatures, defaults and parameter layouts (docs/lod.md, "Recurrent layers")."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ops.rnn.defs import ACTIVATIONS, UNIT_ACTIVATIONS
from .helper import LayerHelper, check_variable

_UNIT_CODES = {v: k for k, v in UNIT_ACTIVATIONS.items()}


def _check_size(layer: str, size, gates: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0 or size % gates:
        raise ProgramError(f"{layer}: size must be a positive multiple of {gates} "
                           f"({gates} * hidden size), got {size!r}")
    return size // gates


def _check_act(layer: str, **acts) -> None:
    for arg, act in acts.items():
        if act not in ACTIVATIONS:
            raise ProgramError(f"{layer}: {arg} must be one of {list(ACTIVATIONS)}, "
                               f"got {act!r}")


def _states(h_0, c_0, layer):
    ins = {}
    if (h_0 is None) != (c_0 is None):
        raise ProgramError(f"{layer}: give h_0 and c_0 together (or neither)")
    if h_0 is not None:
        ins = {"H0": check_variable(layer, "h_0", h_0), "C0": check_variable(layer, "c_0", c_0)}
    return ins


def dynamic_lstm(input, size, h_0=None, c_0=None, param_attr=None, bias_attr=None,
                 use_peepholes=True, is_reverse=False, gate_activation="sigmoid",
                 cell_activation="tanh", candidate_activation="tanh", dtype="float32",
                 name=None):
    """LSTM over each sequence of the LoD ``input`` [T, size] (size = 4 * hidden, the
    pre-activations of a preceding fc, gates ordered candidate, input, forget, output).
    Weight [hidden, 4 * hidden]; bias [1, 4 * hidden], or [1, 7 * hidden] with the peephole
    weights. Returns (hidden, cell), both [T, hidden] with the input's LoD."""
    check_variable("dynamic_lstm", "input", input)
    hidden = _check_size("dynamic_lstm", size, 4)
    _check_act("dynamic_lstm", gate_activation=gate_activation,
               cell_activation=cell_activation, candidate_activation=candidate_activation)
    helper = LayerHelper("lstm", name)
    weight = helper.create_parameter(param_attr, [hidden, size], dtype)
    bias = helper.create_parameter(bias_attr, [1, (7 if use_peepholes else 4) * hidden],
                                   dtype, is_bias=True)
    if bias is None:
        raise ProgramError("dynamic_lstm: bias_attr=False is not supported (the lstm op "
                           "needs its bias, as in Paddle)")
    out_h = helper.create_variable_for_type_inference(dtype)
    out_c = helper.create_variable_for_type_inference(dtype)
    helper.append_op("lstm", {"Input": input, "Weight": weight, "Bias": bias,
                              **_states(h_0, c_0, "dynamic_lstm")},
                     {"Hidden": out_h, "Cell": out_c},
                     {"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                      "gate_activation": gate_activation, "cell_activation": cell_activation,
                      "candidate_activation": candidate_activation})
    return out_h, out_c


def dynamic_lstmp(input, size, proj_size, param_attr=None, bias_attr=None,
                  use_peepholes=True, is_reverse=False, gate_activation="sigmoid",
                  cell_activation="tanh", candidate_activation="tanh",
                  proj_activation="tanh", dtype="float32", name=None, h_0=None, c_0=None,
                  cell_clip=None, proj_clip=None):
    """LSTM with a recurrent projection (LSTMP): r_t = proj_activation(h_t W_proj) is the
    recurrent state. Weight [proj_size, 4 * hidden], projection weight [hidden, proj_size];
    h_0 [N, proj_size] is the initial projection r_0, c_0 [N, hidden]. Returns (projection
    [T, proj_size], cell [T, hidden]), both with the input's LoD."""
    check_variable("dynamic_lstmp", "input", input)
    hidden = _check_size("dynamic_lstmp", size, 4)
    if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size <= 0:
        raise ProgramError(f"dynamic_lstmp: proj_size must be a positive int, got {proj_size!r}")
    _check_act("dynamic_lstmp", gate_activation=gate_activation,
               cell_activation=cell_activation, candidate_activation=candidate_activation,
               proj_activation=proj_activation)
    helper = LayerHelper("lstmp", name)
    weight = helper.create_parameter(param_attr, [proj_size, size], dtype)
    proj_weight = helper.create_parameter(param_attr, [hidden, proj_size], dtype)
    bias = helper.create_parameter(bias_attr, [1, (7 if use_peepholes else 4) * hidden],
                                   dtype, is_bias=True)
    if bias is None:
        raise ProgramError("dynamic_lstmp: bias_attr=False is not supported (the lstmp op "
                           "needs its bias, as in Paddle)")
    proj = helper.create_variable_for_type_inference(dtype)
    cell = helper.create_variable_for_type_inference(dtype)
    helper.append_op("lstmp", {"Input": input, "Weight": weight, "ProjWeight": proj_weight,
                               "Bias": bias, **_states(h_0, c_0, "dynamic_lstmp")},
                     {"Projection": proj, "Cell": cell},
                     {"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                      "gate_activation": gate_activation, "cell_activation": cell_activation,
                      "candidate_activation": candidate_activation,
                      "proj_activation": proj_activation,
                      "cell_clip": float(cell_clip or 0.0), "proj_clip": float(proj_clip or 0.0)})
    return proj, cell


def dynamic_gru(input, size, param_attr=None, bias_attr=None, is_reverse=False,
                gate_activation="sigmoid", candidate_activation="tanh", h_0=None,
                origin_mode=False):
    """GRU over each sequence of the LoD ``input`` [T, 3 * size] (update, reset, candidate
    pre-activations). Weight [size, 3 * size] in Paddle's layout (the [size, 2 * size] gate
    weights, then the [size, size] candidate weights); bias [1, 3 * size]. origin_mode=False:
    h = (1 - u) h_prev + u m; True: h = u h_prev + (1 - u) m. Returns hidden [T, size]."""
    check_variable("dynamic_gru", "input", input)
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ProgramError(f"dynamic_gru: size must be a positive int (the hidden size), "
                           f"got {size!r}")
    _check_act("dynamic_gru", gate_activation=gate_activation,
               candidate_activation=candidate_activation)
    helper = LayerHelper("gru")
    dtype = input.dtype
    weight = helper.create_parameter(param_attr, [size, 3 * size], dtype)
    bias = helper.create_parameter(bias_attr, [1, 3 * size], dtype, is_bias=True)
    ins = {"Input": input, "Weight": weight}
    if bias is not None:
        ins["Bias"] = bias
    if h_0 is not None:
        ins["H0"] = check_variable("dynamic_gru", "h_0", h_0)
    hidden = helper.create_variable_for_type_inference(dtype)
    helper.append_op("gru", ins, {"Hidden": hidden},
                     {"is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                      "activation": candidate_activation, "origin_mode": bool(origin_mode)})
    return hidden


def gru_unit(input, hidden, size, param_attr=None, bias_attr=None, activation="tanh",
             gate_activation="sigmoid", origin_mode=False):
    """One GRU step: ``input`` [N, size] pre-activations (size = 3 * D), ``hidden`` [N, D].
    Returns (updated hidden [N, D], reset hidden r * h_prev [N, D], gates [N, size])."""
    check_variable("gru_unit", "input", input)
    check_variable("gru_unit", "hidden", hidden)
    d = _check_size("gru_unit", size, 3)
    for arg, act in (("activation", activation), ("gate_activation", gate_activation)):
        if act not in _UNIT_CODES:
            raise ProgramError(f"gru_unit: {arg} must be one of {sorted(_UNIT_CODES)}, "
                               f"got {act!r}")
    helper = LayerHelper("gru_unit")
    dtype = input.dtype
    weight = helper.create_parameter(param_attr, [d, 3 * d], dtype)
    bias = helper.create_parameter(bias_attr, [1, 3 * d], dtype, is_bias=True)
    ins = {"Input": input, "HiddenPrev": hidden, "Weight": weight}
    if bias is not None:
        ins["Bias"] = bias
    gate = helper.create_variable_for_type_inference(dtype)
    reset = helper.create_variable_for_type_inference(dtype)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("gru_unit", ins, {"Gate": gate, "ResetHiddenPrev": reset, "Hidden": out},
                     {"activation": _UNIT_CODES[activation],
                      "gate_activation": _UNIT_CODES[gate_activation],
                      "origin_mode": bool(origin_mode)})
    return out, reset, gate


def lstm_unit(x_t, hidden_t_prev, cell_t_prev, forget_bias=0.0, param_attr=None,
              bias_attr=None, name=None):
    """One LSTM step: fc over [x_t, hidden_t_prev] to 4 * D pre-activations (i, f, o, g),
    then the lstm_unit op. Returns (hidden [N, D], cell [N, D])."""
    from .nn import fc
    from .tensor import concat
    for arg, v in (("x_t", x_t), ("hidden_t_prev", hidden_t_prev),
                   ("cell_t_prev", cell_t_prev)):
        check_variable("lstm_unit", arg, v)
        if len(v.shape) != 2:
            raise ProgramError(f"lstm_unit: {arg} ({v.name}) must be 2-D, got {list(v.shape)}")
    d = cell_t_prev.shape[1]
    if hidden_t_prev.shape[1] != d:
        raise ProgramError(f"lstm_unit: hidden_t_prev is {list(hidden_t_prev.shape)} but "
                           f"cell_t_prev is {list(cell_t_prev.shape)}: their widths differ")
    helper = LayerHelper("lstm_unit", name)
    pre = fc(concat([x_t, hidden_t_prev], axis=1), 4 * d, param_attr=param_attr,
             bias_attr=bias_attr)
    c = helper.create_variable_for_type_inference(x_t.dtype)
    h = helper.create_variable_for_type_inference(x_t.dtype)
    helper.append_op("lstm_unit", {"X": pre, "C_prev": cell_t_prev}, {"C": c, "H": h},
                     {"forget_bias": float(forget_bias)})
    return h, c


__all__ = ["dynamic_gru", "dynamic_lstm", "dynamic_lstmp", "gru_unit", "lstm_unit"]
