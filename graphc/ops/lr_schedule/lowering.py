"""Lowering rules for the learning-rate schedule ops in defs.py beside this file: each closed
form in float64 from the (integer) step, rounded once to float32."""

# Why once: Paddle's unit test (test_learning_rate_scheduler) checks every schedule against its
# float64 Python formula at 7 places. Under NumPy 2 (NEP 50) ``python_float - np.float32`` is a
# float32 difference, so only the float32 nearest the formula passes where an ulp is over 5e-8
# (values in [0.5, 1)); Paddle's own float32 op chains miss it by an ulp at some steps
# (exponential_decay step 3, inverse_time_decay, the warmup ramp at step 9). The correctly
# rounded value also passes NumPy 1.x's float64 difference (half an ulp < 5e-8 below 1).

from __future__ import annotations

import math as pymath

import jax.numpy as jnp

from ...backends.lowering import lowering

_F32, _F64 = jnp.float32, jnp.float64


def _x64() -> bool:
    return jnp.zeros((), _F64).dtype == jnp.float64


def _step(Step):
    """The step as the widest float there is (float64: graphc runs rules with 64-bit types;
    an integer count, exact in either)."""
    return Step.reshape(()).astype(_F64 if _x64() else _F32)


def _out(value, dtype=_F32):
    return jnp.asarray(value).astype(dtype).reshape(1)


def _ratio(c, step):
    ratio = step / c["decay_steps"]
    return jnp.floor(ratio) if c["staircase"] else ratio


def _c(x, like):
    """A Python float as a constant of ``like``'s dtype (float64 keeps the formula's)."""
    return jnp.asarray(x, like.dtype)


@lowering("exponential_decay")
def _exponential(c, Step):
    ratio = _ratio(c, _step(Step))
    return {"Out": _out(c["learning_rate"] * jnp.power(_c(c["decay_rate"], ratio), ratio))}


@lowering("natural_exp_decay")
def _natural_exp(c, Step):
    ratio = _ratio(c, _step(Step))
    return {"Out": _out(c["learning_rate"] * jnp.exp(-1 * c["decay_rate"] * ratio))}


@lowering("inverse_time_decay")
def _inverse_time(c, Step):
    ratio = _ratio(c, _step(Step))
    return {"Out": _out(c["learning_rate"] / (1 + c["decay_rate"] * ratio))}


@lowering("polynomial_decay")
def _polynomial(c, Step):
    step, steps = _step(Step), c["decay_steps"]
    if c["cycle"]:  # decay_steps * ceil(step / decay_steps), one period at step 0
        periods = jnp.ceil(step / steps)
        steps = steps * jnp.where(periods == 0, _c(1.0, step), periods)
    else:
        step = jnp.minimum(step, _c(steps, step))
    lr, end = c["learning_rate"], c["end_learning_rate"]
    decayed = jnp.power(1 - step / steps, _c(c["power"], step))
    return {"Out": _out((lr - end) * decayed + end)}


@lowering("noam_decay")
def _noam(c, Step):
    step = _step(Step)
    a = jnp.power(step, _c(-0.5, step))
    b = c["warmup_steps"] ** -1.5 * step
    return {"Out": _out(c["learning_rate"] * c["d_model"] ** -0.5 * jnp.minimum(a, b))}


@lowering("linear_lr_warmup")
def _linear_warmup(c, Step, LearningRate):
    step, steps = _step(Step), c["warmup_steps"]
    start, end = c["start_lr"], c["end_lr"]
    after = LearningRate.reshape(())
    ramp = (start + (end - start) * (step / steps)).astype(after.dtype)
    return {"Out": jnp.where(step < steps, ramp, after).reshape(1)}


@lowering("piecewise_decay")
def _piecewise(c, Step):
    step = _step(Step)
    values = jnp.asarray(c["values"], _F32)
    index = jnp.sum(step >= jnp.asarray(c["boundaries"], step.dtype))
    return {"Out": values[index].reshape(1)}


@lowering("cosine_decay")
def _cosine(c, Step):
    epoch = jnp.floor(_step(Step) / c["step_each_epoch"])
    lr = c["learning_rate"] * 0.5 * (jnp.cos(epoch * pymath.pi / c["epochs"]) + 1)
    return {"Out": _out(lr)}
