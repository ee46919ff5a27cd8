"""Ops behind ModelAverage and ExponentialMovingAverage (Paddle's average_accumulates, and
the moving-average update, decay schedule and bias-corrected read of graphc's EMA)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, STATEFUL, register
from ...ir.types import FLOAT_DTYPES, TensorType

_SUMS = ("sum_1", "sum_2", "sum_3")
_COUNTS = ("num_accumulates", "old_num_accumulates", "num_updates")


def _average_accumulates(c):
    p = c.x("param")
    c.check(p.dtype in FLOAT_DTYPES, f"param must be floating point, got {p.dtype}")
    for s in _SUMS:
        c.check(c.x(f"in_{s}").shape == p.shape, f"in_{s} must match param {list(p.shape)}")
    for n in _COUNTS:
        t = c.x(f"in_{n}")
        c.check(t.shape in ((1,), ()) and t.dtype in ("int64", "int32"),
                f"in_{n} must be an integer [1], got {t.dtype}{list(t.shape)}")
    c.check(c["min_average_window"] <= c["max_average_window"],
            f"min_average_window {c['min_average_window']} > max_average_window "
            f"{c['max_average_window']}")
    return {f"out_{n}": c.x(f"in_{n}") for n in _SUMS + _COUNTS}


register("average_accumulates", " ".join(["param", *(f"in_{n}" for n in _SUMS + _COUNTS)]),
         " ".join(f"out_{n}" for n in _SUMS + _COUNTS),
         {"average_window": "float", "max_average_window": ("int", 10000),
          "min_average_window": ("int", 10000)},
         infer=_average_accumulates, traits=(STATEFUL, NO_GRAD),
         inplace={f"out_{n}": f"in_{n}" for n in _SUMS + _COUNTS},
         doc="ModelAverage's running sums, as Paddle's kernel: sum_1 += param; every 16384 "
             "updates sum_1 moves into sum_2; once num_accumulates >= min_average_window and "
             ">= min(max_average_window, int(num_updates * average_window)), sum_3 = sum_1 + "
             "sum_2, both restart and old_num_accumulates takes num_accumulates")


def _average_apply(c):
    s = c.x("Sum1")
    for slot in ("Sum2", "Sum3"):
        c.check(c.x(slot).shape == s.shape, f"{slot} must match Sum1 {list(s.shape)}")
    return {"Out": s}


register("model_average_apply", "Sum1 Sum2 Sum3 NumAccumulates OldNumAccumulates", "Out",
         infer=_average_apply, traits=(NO_GRAD,),
         doc="Out = (Sum1 + Sum2 + Sum3) / float32(NumAccumulates + OldNumAccumulates)")


def _ema_update(c):
    p, ema = c.x("Param"), c.x("Ema")
    c.check(p.shape == ema.shape, f"Ema {list(ema.shape)} must match Param {list(p.shape)}")
    c.check(c.x("Decay").shape in ((1,), ()), "Decay must be [1]")
    return {"EmaOut": ema}


register("ema_update", "Param Ema Decay", "EmaOut", infer=_ema_update,
         traits=(STATEFUL, NO_GRAD), inplace={"EmaOut": "Ema"},
         doc="EmaOut = Ema * Decay + Param * (1 - Decay)")


def _ema_decay(c):
    c.check(c.x("ThresSteps").shape in ((1,), ()), "ThresSteps must be [1]")
    return {"Out": TensorType((1,), "float32")}


register("ema_decay", "ThresSteps", "Out", {"decay": "float"}, infer=_ema_decay,
         traits=(NO_GRAD,), doc="Out = min(decay, (ThresSteps + 1) / (ThresSteps + 10))")


def _ema_apply(c):
    c.check(c.x("Decay").shape in ((1,), ()) and c.x("Step").shape in ((1,), ()),
            "Decay and Step must be [1]")
    return {"Out": c.x("Ema")}


register("ema_bias_corrected", "Ema Decay Step", "Out", infer=_ema_apply, traits=(NO_GRAD,),
         doc="Out = Ema / (1 - Decay^Step) once Step > 0, else Ema")
