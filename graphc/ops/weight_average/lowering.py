"""Lowering rules for ModelAverage's and ExponentialMovingAverage's ops, with Paddle's
arithmetic (float32 window products and decay powers, int64 counters)."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering

# Paddle moves sum_1 into sum_2 every this many updates, against float precision loss.
MAX_NUM_ACCUMULATES = 16384


@lowering("average_accumulates")
def _average_accumulates(c, param, in_sum_1, in_sum_2, in_sum_3, in_num_accumulates,
                         in_old_num_accumulates, in_num_updates):
    # Paddle updates the sums in place, one statement after the other: each step below
    # reads what the previous one wrote.
    updates = in_num_updates + 1
    accumulates = in_num_accumulates + 1
    old = in_old_num_accumulates
    s1, s2, s3 = in_sum_1 + param.astype(in_sum_1.dtype), in_sum_2, in_sum_3
    zero = jnp.zeros((), s1.dtype)
    roll = (updates % MAX_NUM_ACCUMULATES == 0).reshape(())
    s2 = jnp.where(roll, s2 + s1, s2)
    s1 = jnp.where(roll, zero, s1)
    # int64 * float in C++ is a float32 product, truncated back to int64 by std::min<int64_t>
    window = (updates.astype(jnp.float32) * jnp.float32(c["average_window"])).astype(
        updates.dtype)
    window = jnp.minimum(window, c["max_average_window"])
    restart = ((accumulates >= c["min_average_window"]) & (accumulates >= window)).reshape(())
    s3 = jnp.where(restart, s1 + s2, s3)
    s1 = jnp.where(restart, zero, s1)
    s2 = jnp.where(restart, zero, s2)
    old = jnp.where(restart, accumulates, old)
    accumulates = jnp.where(restart, jnp.zeros_like(accumulates), accumulates)
    return {"out_sum_1": s1, "out_sum_2": s2, "out_sum_3": s3,
            "out_num_accumulates": accumulates, "out_old_num_accumulates": old,
            "out_num_updates": updates}


@lowering("model_average_apply")
def _model_average_apply(c, Sum1, Sum2, Sum3, NumAccumulates, OldNumAccumulates):
    count = (NumAccumulates + OldNumAccumulates).reshape(()).astype(jnp.float32)
    total = (Sum1 + Sum2 + Sum3).astype(jnp.float32)
    return {"Out": (total / count).astype(Sum1.dtype)}


@lowering("ema_update")
def _ema_update(c, Param, Ema, Decay):
    decay = Decay.reshape(()).astype(Ema.dtype)
    return {"EmaOut": Ema * decay + Param.astype(Ema.dtype) * (1 - decay)}


@lowering("ema_decay")
def _ema_decay(c, ThresSteps):
    t = ThresSteps.reshape(()).astype(jnp.float32)
    scheduled = (t + 1) / (t + 10)
    decay = jnp.float32(c["decay"])
    return {"Out": jnp.where(scheduled < decay, scheduled, decay).reshape(1)}


@lowering("ema_bias_corrected")
def _ema_bias_corrected(c, Ema, Decay, Step):
    step = Step.reshape(()).astype(jnp.float32)
    power = Decay.reshape(()).astype(jnp.float32) ** step
    corrected = Ema / (1 - power).astype(Ema.dtype)
    return {"Out": jnp.where(step > 0, corrected, Ema)}
