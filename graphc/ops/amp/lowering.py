"""Lowering rules for the mixed-precision ops: unscale with an overflow flag, the dynamic
loss-scale schedule, and the select that discards a non-finite step's state updates."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows


@lowering("check_finite_and_unscale")
def _check_finite_and_unscale(c, X, Scale):
    # Unscale by a reciprocal computed once in float32, as Paddle's kernel does.
    inverse = 1.0 / Scale.reshape(()).astype(jnp.float32)
    found = jnp.zeros((), bool)
    outs = []
    for x in X:
        sparse = isinstance(x, SelectedRows)  # a row-sparse gradient: its values
        v = x.values if sparse else x
        found = found | ~jnp.all(jnp.isfinite(v))
        v = (v.astype(jnp.float32) * inverse).astype(v.dtype)
        outs.append(x.with_values(v) if sparse else v)
    return {"Out": outs, "FoundInfinite": found.reshape(1)}


@lowering("update_loss_scaling")
def _update_loss_scaling(c, FoundInfinite, PrevLossScaling, InGoodSteps, InBadSteps):
    found = FoundInfinite.reshape(())
    scale = PrevLossScaling.reshape(())
    good, bad = InGoodSteps.reshape(()), InBadSteps.reshape(())
    one = jnp.ones((), good.dtype)
    zero = jnp.zeros((), good.dtype)
    # a finite step
    good_next = good + one
    grow = good_next >= c["incr_every_n_steps"]
    grown = scale * jnp.asarray(c["incr_ratio"], scale.dtype)
    finite_scale = jnp.where(grow & jnp.isfinite(grown), grown, scale)
    finite_good = jnp.where(grow, zero, good_next)
    # a non-finite step
    bad_next = bad + one
    shrink = bad_next >= c["decr_every_n_nan_or_inf"]
    shrunk = jnp.maximum(scale * jnp.asarray(c["decr_ratio"], scale.dtype),
                         jnp.ones((), scale.dtype))
    bad_scale = jnp.where(shrink, shrunk, scale)
    bad_bad = jnp.where(shrink, zero, bad_next)
    return {"LossScaling": jnp.where(found, bad_scale, finite_scale).reshape(1),
            "OutGoodSteps": jnp.where(found, zero, finite_good).reshape(1),
            "OutBadSteps": jnp.where(found, bad_bad, zero).reshape(1)}


@lowering("skip_update")
def _skip_update(c, Skip, Old, New):
    return {"Out": jnp.where(Skip.reshape(()), Old, New)}
