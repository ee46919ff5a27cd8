"""Recurrent ops over LoD sequences (Paddle's lstm, lstmp, gru) and their one-step units
(gru_unit, lstm_unit): definitions and shape inference, with Paddle 1.8's slots and layouts."""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import FLOAT_DTYPES, TensorType

ACTIVATIONS = ("sigmoid", "tanh", "relu", "identity")
# gru_unit takes its activations as Paddle's integer codes
UNIT_ACTIVATIONS = {0: "identity", 1: "sigmoid", 2: "tanh", 3: "relu"}


def _float(c: InferContext, slot: str, t: TensorType) -> None:
    c.check(t.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {t}")


def _sequences(c: InferContext, gates: int, lod_states: tuple = ()) -> tuple[TensorType, int]:
    """Input: a level-1 LoD value [T, gates * H]; returns it and H from Weight [?, gates*H]."""
    x, w = c.x("Input"), c.x("Weight")
    c.check(x.lod_level == 1, f"Input must be a LoD value of level 1 (variable-length "
                              f"sequences of {gates} * hidden pre-activations), got {x}")
    c.check(x.rank == 2, f"Input must be [tokens, {gates} * hidden], got {x}")
    _float(c, "Input", x)
    c.check(w.rank == 2 and w.shape[1] % gates == 0,
            f"Weight must be [*, {gates} * hidden], got {w}")
    hidden = w.shape[1] // gates
    c.check(x.shape[1] in (-1, gates * hidden),
            f"Input's width {x.shape[1]} must be {gates} * hidden = {gates * hidden} "
            f"(Weight is {w})")
    for slot in ("Weight", "ProjWeight", "Bias", "H0", "C0"):
        for t in c.xs(slot):
            c.check(t.lod_level == 0 or slot in lod_states,
                    f"{slot} must be a dense tensor, got {t}")
            c.check(t.dtype == x.dtype, f"{slot} is {t.dtype} but Input is {x.dtype}")
    return x, hidden


def _check_activations(c: InferContext, *names: str) -> None:
    for name in names:
        c.check(c[name] in ACTIVATIONS, f"{name} must be one of {list(ACTIVATIONS)}, "
                                        f"got {c[name]!r}")


def _check_state(c: InferContext, slot: str, width: int) -> None:
    for t in c.xs(slot):
        c.check(t.rank == 2 and t.shape[1] == width,
                f"{slot} must be [sequences, {width}], got {t}")


def _lstm(c: InferContext):
    x, hidden = _sequences(c, 4)
    w, b = c.x("Weight"), c.x("Bias")
    c.check(w.shape[0] == hidden, f"Weight must be [hidden, 4 * hidden] = "
                                  f"[{hidden}, {4 * hidden}], got {w}")
    width = (7 if c["use_peepholes"] else 4) * hidden
    c.check(b.shape == (1, width), f"Bias must be [1, {width}] (use_peepholes="
                                   f"{c['use_peepholes']}), got {b}")
    _check_state(c, "H0", hidden)
    _check_state(c, "C0", hidden)
    c.check(c.has("H0") == c.has("C0"), "H0 and C0 must be given together")
    _check_activations(c, "gate_activation", "cell_activation", "candidate_activation")
    out = TensorType((x.shape[0], hidden), x.dtype, False, 1)
    return {"Hidden": out, "Cell": out}


# The grad ops of lstm, lstmp and gru read the per-token states the forward op produced (its
# outputs are its carries, ``grad_reads``): back-propagation through time then needs no
# second forward loop.
_LSTM_ATTRS = {"use_peepholes": ("bool", True), "is_reverse": ("bool", False),
               "gate_activation": ("str", "sigmoid"), "cell_activation": ("str", "tanh"),
               "candidate_activation": ("str", "tanh")}

register("lstm", "Input H0? C0? Weight Bias", "Hidden Cell", _LSTM_ATTRS, infer=_lstm,
         lod_inputs=("Input",), lod="aware",
         grad_reads=("Input", "H0", "C0", "Weight", "Bias", "Hidden", "Cell"),
         doc="LSTM over each sequence of Input ([T, 4H] pre-activations, gates ordered "
             "candidate, input, forget, output); Bias [1, 4H] or [1, 7H] with the peephole "
             "weights W_ic, W_fc, W_oc; Hidden and Cell [T, H] keep Input's LoD")


def _lstmp(c: InferContext):
    x, hidden = _sequences(c, 4)
    w, pw, b = c.x("Weight"), c.x("ProjWeight"), c.x("Bias")
    c.check(pw.rank == 2 and pw.shape[0] == hidden,
            f"ProjWeight must be [hidden, proj_size] with hidden = {hidden}, got {pw}")
    proj = pw.shape[1]
    c.check(w.shape[0] == proj, f"Weight must be [proj_size, 4 * hidden] = "
                                f"[{proj}, {4 * hidden}], got {w}")
    width = (7 if c["use_peepholes"] else 4) * hidden
    c.check(b.shape == (1, width), f"Bias must be [1, {width}] (use_peepholes="
                                   f"{c['use_peepholes']}), got {b}")
    _check_state(c, "H0", proj)  # Paddle 1.8: the initial projection r_0, [N, P]
    _check_state(c, "C0", hidden)
    c.check(c.has("H0") == c.has("C0"), "H0 and C0 must be given together")
    _check_activations(c, "gate_activation", "cell_activation", "candidate_activation",
                       "proj_activation")
    return {"Projection": TensorType((x.shape[0], proj), x.dtype, False, 1),
            "Cell": TensorType((x.shape[0], hidden), x.dtype, False, 1)}


register("lstmp", "Input H0? C0? Weight ProjWeight Bias", "Projection Cell",
         {**_LSTM_ATTRS, "proj_activation": ("str", "tanh"), "cell_clip": ("float", 0.0),
          "proj_clip": ("float", 0.0)},
         infer=_lstmp, lod_inputs=("Input",), lod="aware",
         grad_reads=("Input", "H0", "C0", "Weight", "ProjWeight", "Bias", "Projection",
                     "Cell"),
         doc="LSTM with a recurrent projection: r_t = proj_activation(h_t ProjWeight) feeds "
             "the next step through Weight [P, 4H]; H0 [N, P] is r_0, C0 [N, H]; clips "
             "apply when > 0")


def _gru(c: InferContext):
    x, hidden = _sequences(c, 3, lod_states=("H0",))
    w = c.x("Weight")
    c.check(w.shape[0] == hidden, f"Weight must be [hidden, 3 * hidden] = "
                                  f"[{hidden}, {3 * hidden}], got {w}")
    for b in c.xs("Bias"):
        c.check(b.shape == (1, 3 * hidden), f"Bias must be [1, {3 * hidden}], got {b}")
    _check_state(c, "H0", hidden)
    _check_activations(c, "activation", "gate_activation")
    return {"Hidden": TensorType((x.shape[0], hidden), x.dtype, False, 1)}


register("gru", "Input H0? Weight Bias?", "Hidden",
         {"activation": ("str", "tanh"), "gate_activation": ("str", "sigmoid"),
          "is_reverse": ("bool", False), "origin_mode": ("bool", False)},
         # H0 may come as a LoD value of one row per sequence (an fc over a lod_level=1
         # slot): Paddle reads it as the dense [N, H] it holds and ignores its LoD
         infer=_gru, lod_inputs=("Input", "H0"), lod="aware",
         grad_reads=("Input", "H0", "Weight", "Bias", "Hidden"),
         doc="GRU over each sequence of Input ([T, 3H]: update, reset, candidate); Weight "
             "[H, 3H] holds Paddle's buffer: [H, 2H] gate weights then [H, H] candidate "
             "weights; Hidden [T, H] keeps Input's LoD")


def _gru_unit(c: InferContext):
    x, h, w = c.x("Input"), c.x("HiddenPrev"), c.x("Weight")
    _float(c, "Input", x)
    c.check(w.rank == 2 and w.shape[1] == 3 * w.shape[0],
            f"Weight must be [hidden, 3 * hidden], got {w}")
    d = w.shape[0]
    c.check(x.rank == 2 and x.shape[1] == 3 * d, f"Input must be [batch, {3 * d}], got {x}")
    c.check(h.rank == 2 and h.shape[1] == d, f"HiddenPrev must be [batch, {d}], got {h}")
    for b in c.xs("Bias"):
        c.check(b.shape == (1, 3 * d), f"Bias must be [1, {3 * d}], got {b}")
    for name in ("activation", "gate_activation"):
        c.check(c[name] in UNIT_ACTIVATIONS, f"{name} must be one of "
                                             f"{UNIT_ACTIVATIONS} (Paddle's codes), got {c[name]}")
    n = x.shape[0]
    return {"Gate": TensorType((n, 3 * d), x.dtype), "ResetHiddenPrev":
            TensorType((n, d), x.dtype), "Hidden": TensorType((n, d), x.dtype)}


register("gru_unit", "Input HiddenPrev Weight Bias?", "Gate ResetHiddenPrev Hidden",
         {"activation": ("int", 2), "gate_activation": ("int", 1),
          "origin_mode": ("bool", False)},
         infer=_gru_unit,
         # row by row, so a LoD batch (a beam search's live candidates) steps token by token;
         # the outputs keep the LoD, graphc's form of Paddle's rows (its outputs drop it)
         lod_inputs=("Input", "HiddenPrev"),
         doc="one GRU step: Gate = [u, r, m] activated, ResetHiddenPrev = r * h_prev, Hidden")


def _lstm_unit(c: InferContext):
    x, cp = c.x("X"), c.x("C_prev")
    _float(c, "X", x)
    c.check(cp.rank == 2 and x.rank == 2 and x.shape[1] == 4 * cp.shape[1],
            f"X must be [batch, 4 * D] for C_prev [batch, D], got X {x} and C_prev {cp}")
    return {"C": cp, "H": cp}


register("lstm_unit", "X C_prev", "C H", {"forget_bias": ("float", 0.0)}, infer=_lstm_unit,
         doc="one LSTM step of pre-activations X [N, 4D] ordered i, f, o, g: C = sigmoid(f + "
             "forget_bias) C_prev + sigmoid(i) tanh(g), H = sigmoid(o) tanh(C)")


