"""Mixed-precision ops made by the ``amp`` pass: gradient unscaling with an overflow flag,
Paddle's dynamic loss-scale update, and the select that leaves state alone on a bad step.

The names of the state the pass keeps (the scale and its two step counters) and of the flag
it computes live here too, so the front end and the runtime can name them without a pass.
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType

# Persistable state of dynamic loss scaling, and the per-step flag (all fetchable by name).
LOSS_SCALING = "loss_scaling"  # float32 [1]: the scale applied to the loss gradient
GOOD_STEPS = "num_good_steps"  # int32 [1]: consecutive finite steps since the last change
BAD_STEPS = "num_bad_steps"  # int32 [1]: consecutive non-finite steps since the last change
FOUND_INFINITE = "found_infinite"  # bool [1]: this step's gradients were not all finite
STATE_TYPES = {LOSS_SCALING: TensorType((1,), "float32"),
               GOOD_STEPS: TensorType((1,), "int32"), BAD_STEPS: TensorType((1,), "int32")}
FLAG_TYPE = TensorType((1,), "bool")


def _scalar(c: InferContext, slot: str, dtypes, what: str) -> TensorType:
    t = c.x(slot)
    c.check(t.shape in ((1,), ()), f"{slot} must be [1], got {list(t.shape)}")
    c.check(t.dtype in dtypes, f"{slot} must be {what}, got {t.dtype}")
    return t


def _check_finite_and_unscale(c: InferContext):
    _scalar(c, "Scale", FLOAT_DTYPES, "floating point")
    xs = c.xs("X")
    for i, t in enumerate(xs):
        c.check(t.dtype in FLOAT_DTYPES, f"X[{i}] must be floating point, got {t.dtype}")
    return {"Out": list(xs), "FoundInfinite": FLAG_TYPE}


register("check_finite_and_unscale", "X* Scale", "Out* FoundInfinite",
         infer=_check_finite_and_unscale, traits=(NO_GRAD,), inplace={"Out": "X"},
         sparse_inputs=("X",),
         doc="Out[i] = X[i] / Scale; FoundInfinite = whether any X holds an inf or nan "
             "(row-sparse X: its values)")


def _update_loss_scaling(c: InferContext):
    _scalar(c, "FoundInfinite", ("bool",), "bool")
    scale = _scalar(c, "PrevLossScaling", FLOAT_DTYPES, "floating point")
    good = _scalar(c, "InGoodSteps", INT_DTYPES, "integer")
    bad = _scalar(c, "InBadSteps", INT_DTYPES, "integer")
    c.check(c["incr_every_n_steps"] >= 1, f"incr_every_n_steps {c['incr_every_n_steps']} < 1")
    c.check(c["decr_every_n_nan_or_inf"] >= 1,
            f"decr_every_n_nan_or_inf {c['decr_every_n_nan_or_inf']} < 1")
    c.check(c["incr_ratio"] > 1.0, f"incr_ratio {c['incr_ratio']} must be > 1")
    c.check(0.0 < c["decr_ratio"] < 1.0, f"decr_ratio {c['decr_ratio']} must be in (0, 1)")
    return {"LossScaling": scale, "OutGoodSteps": good, "OutBadSteps": bad}


register("update_loss_scaling", "FoundInfinite PrevLossScaling InGoodSteps InBadSteps",
         "LossScaling OutGoodSteps OutBadSteps",
         {"incr_every_n_steps": ("int", 1000), "decr_every_n_nan_or_inf": ("int", 2),
          "incr_ratio": ("float", 2.0), "decr_ratio": ("float", 0.8)},
         infer=_update_loss_scaling, traits=(NO_GRAD,),
         inplace={"LossScaling": "PrevLossScaling", "OutGoodSteps": "InGoodSteps",
                  "OutBadSteps": "InBadSteps"},
         doc="Paddle's schedule: a finite step counts good (bad := 0) and after "
             "incr_every_n_steps of them scale *= incr_ratio (kept if that overflows); a "
             "non-finite step counts bad (good := 0) and after decr_every_n_nan_or_inf "
             "consecutive ones scale *= decr_ratio (at least 1); the counter that fires "
             "restarts from 0")


def _skip_update(c: InferContext):
    _scalar(c, "Skip", ("bool",), "bool")
    old, new = c.x("Old"), c.x("New")
    c.check(old == new, f"Old is {old} but New is {new}")
    return {"Out": new}


register("skip_update", "Skip Old New", "Out", infer=_skip_update, traits=(NO_GRAD,),
         inplace={"Out": "New"},
         doc="Out = Old if Skip else New: a state update that a non-finite step discards")
