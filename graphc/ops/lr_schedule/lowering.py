"""Lowering rules for the learning-rate schedule ops in defs.py beside this file.

Each rule rounds as Paddle 1.8's op chain does (``step / n`` is a float32 scale by 1/n, then
further scale ops): the same float32 roundings in the same order, so linear_lr_warmup is exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering

_F32, _F64 = jnp.float32, jnp.float64


def _scale(x, scale, bias=0.0):
    """Paddle's scale op: x * float32(scale) + float32(bias), each rounded to float32.

    XLA may keep float32 intermediates in higher precision (it fuses a multiply and an add
    into one FMA and drops float64->float32->float64 round trips), which changes last bits.
    So each operation runs in float64 and is rounded to float32 precision with integer ops
    that nothing simplifies away: the float64 product of two float32 values is exact, and a
    float64 sum or quotient rounded to float32 is the correctly rounded float32 result
    (53 >= 2 * 24 + 2 bits), i.e. what Paddle's separate float32 ops give."""
    if not _x64():  # without 64-bit types (graphc always runs rules with them): float32
        return x * _F32(scale) + _F32(bias)
    product = _round(_wide(x) * _F64(_F32(scale)))
    return _round(_wide(product) + _F64(_F32(bias)))


def _x64() -> bool:
    return jnp.zeros((), _F64).dtype == jnp.float64


def _wide(x):
    return jnp.asarray(x).astype(_F64)


_DROPPED = 52 - 23  # float64 mantissa bits that float32 lacks


def _round(x64):
    """Round float64 values to the nearest float32 (ties to even), as integer bit arithmetic.
    Exact for normal float32 magnitudes, which learning rates are."""
    bits = jax.lax.bitcast_convert_type(x64, jnp.int64)
    lsb = (bits >> _DROPPED) & 1
    half = (1 << (_DROPPED - 1)) - 1
    bits = (bits + half + lsb) & ~((1 << _DROPPED) - 1)
    return jax.lax.bitcast_convert_type(bits, _F64).astype(_F32)


def _div(a, b):
    """float32 a / b, correctly rounded (see _scale)."""
    if not _x64():
        return jnp.asarray(a) / jnp.asarray(b)
    return _round(_wide(a) / _wide(b))


def _step(Step):
    return Step.reshape(()).astype(_F32)


def _ratio(c, step):
    ratio = _scale(step, 1.0 / c["decay_steps"])
    return jnp.floor(ratio) if c["staircase"] else ratio


@lowering("exponential_decay")
def _exponential(c, Step):
    power = jnp.power(_F32(c["decay_rate"]), _ratio(c, _step(Step)))
    return {"Out": _scale(power, c["learning_rate"]).reshape(1)}


@lowering("natural_exp_decay")
def _natural_exp(c, Step):
    decayed = jnp.exp(_scale(_ratio(c, _step(Step)), -1 * c["decay_rate"]))
    return {"Out": _scale(decayed, c["learning_rate"]).reshape(1)}


@lowering("inverse_time_decay")
def _inverse_time(c, Step):
    denominator = _scale(_scale(_ratio(c, _step(Step)), c["decay_rate"]), 1.0, 1.0)
    return {"Out": _div(_F32(c["learning_rate"]), denominator).reshape(1)}


@lowering("polynomial_decay")
def _polynomial(c, Step):
    step, steps = _step(Step), c["decay_steps"]
    if c["cycle"]:
        # decay_steps * ceil(step / decay_steps), with one period at step 0
        periods = jnp.ceil(_scale(step, 1.0 / steps))
        periods = jnp.where(step == 0, _F32(1.0), periods)
        fraction = _div(step, _scale(periods, float(steps)))
    else:
        fraction = _scale(jnp.minimum(step, _F32(steps)), 1.0 / steps)
    base = _scale(fraction, -1.0, 1.0)
    decayed = jnp.power(base, _F32(c["power"]))
    lr, end = c["learning_rate"], c["end_learning_rate"]
    return {"Out": _scale(_scale(decayed, lr - end), 1.0, end).reshape(1)}


@lowering("noam_decay")
def _noam(c, Step):
    step = _step(Step)
    a = jnp.power(step, _F32(-0.5))
    b = _scale(step, c["warmup_steps"] ** -1.5)
    return {"Out": _scale(jnp.minimum(a, b), c["learning_rate"] * c["d_model"] ** -0.5)
            .reshape(1)}


@lowering("linear_lr_warmup")
def _linear_warmup(c, Step, LearningRate):
    step, steps = _step(Step), c["warmup_steps"]
    start, end = c["start_lr"], c["end_lr"]
    ramp = _scale(_scale(_scale(step, 1.0 / steps), end - start), 1.0, start)
    after = LearningRate.reshape(())
    out = jnp.where(step < _F32(steps), ramp.astype(after.dtype), after)
    return {"Out": out.reshape(1)}
