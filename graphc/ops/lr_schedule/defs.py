"""Learning-rate schedule ops (exponential, natural-exp, inverse-time, polynomial, noam, linear
warm-up): one op per schedule, reading the step counter, with Paddle 1.8's float32 formulas."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, register
from ...ir.types import FLOAT_DTYPES, TensorType


def _step(c):
    step = c.x("Step")
    c.check(step.shape in ((1,), ()), f"Step must be [1], got {list(step.shape)}")
    c.check(step.dtype in FLOAT_DTYPES, f"Step must be floating point, got {step.dtype}")


def _positive(c, attr):
    c.check(c[attr] > 0, f"{attr} must be > 0, got {c[attr]}")


def _decay(c):
    _step(c)
    _positive(c, "decay_steps")
    return {"Out": TensorType((1,), "float32")}


_DECAY_ATTRS = {"learning_rate": "float", "decay_steps": "int", "decay_rate": "float",
                "staircase": ("bool", False)}
register("exponential_decay", "Step", "Out", _DECAY_ATTRS, infer=_decay, traits=(NO_GRAD,),
         doc="lr * decay_rate ** (step / decay_steps) (floored when staircase)")
register("natural_exp_decay", "Step", "Out", _DECAY_ATTRS, infer=_decay, traits=(NO_GRAD,),
         doc="lr * exp(-decay_rate * step / decay_steps) (floored when staircase)")
register("inverse_time_decay", "Step", "Out", _DECAY_ATTRS, infer=_decay, traits=(NO_GRAD,),
         doc="lr / (1 + decay_rate * step / decay_steps) (floored when staircase)")
register("polynomial_decay", "Step", "Out", {
    "learning_rate": "float", "decay_steps": "int", "end_learning_rate": ("float", 0.0001),
    "power": ("float", 1.0), "cycle": ("bool", False),
}, infer=_decay, traits=(NO_GRAD,),
    doc="(lr - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end; with cycle "
        "decay_steps grows to the next multiple of itself at or above step")


def _noam(c):
    _step(c)
    _positive(c, "warmup_steps")
    _positive(c, "d_model")
    return {"Out": TensorType((1,), "float32")}


register("noam_decay", "Step", "Out", {"d_model": "float", "warmup_steps": "int",
                                       "learning_rate": ("float", 1.0)},
         infer=_noam, traits=(NO_GRAD,),
         doc="lr * d_model ** -0.5 * min(step ** -0.5, warmup_steps ** -1.5 * step), the "
             "step counting from 1")


def _warmup(c):
    _step(c)
    _positive(c, "warmup_steps")
    lr = c.x("LearningRate")
    c.check(lr.shape in ((1,), ()), f"LearningRate must be [1], got {list(lr.shape)}")
    return {"Out": TensorType((1,), lr.dtype)}


register("linear_lr_warmup", "Step LearningRate", "Out",
         {"warmup_steps": "int", "start_lr": "float", "end_lr": "float"}, infer=_warmup,
         traits=(NO_GRAD,),
         doc="start_lr + (end_lr - start_lr) * (step / warmup_steps) while step < warmup_steps, "
             "else LearningRate; float32 rounding exactly as Paddle's scale ops round it")
