"""The ``dgc_momentum`` rule: both branches computed and one chosen by the step counter (a
``jnp.where``, so the step stays one traced program); k follows the sparsity schedule."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...backends.lowering import lowering


def period_sparsity(sparsity, step, rampup_begin_step: float, rampup_step: float):
    """Paddle's get_period_sparcity: sparsity[int((step - begin) * len / rampup_step)],
    the last entry past the end."""
    table = jnp.asarray(np.asarray(sparsity, np.float32))
    idx = jnp.floor((step - rampup_begin_step) * len(sparsity) / rampup_step).astype(jnp.int32)
    return table[jnp.clip(idx, 0, len(sparsity) - 1)]


def _top_k_mask(v, k):
    """True at the k entries of largest |v| (k traced; ties: the lower index first)."""
    flat = jnp.abs(v).reshape(-1)
    order = jnp.argsort(-flat, stable=True)
    rank = jnp.zeros(flat.shape, jnp.int32).at[order].set(jnp.arange(flat.size,
                                                                      dtype=jnp.int32))
    return (rank < k).reshape(v.shape)


@lowering("dgc_momentum")
def _dgc_momentum(c, Param, Grad, Velocity, V, LearningRate, CurrentStep):
    dt = Param.dtype
    mu = jnp.asarray(c["mu"], dt)
    lr = LearningRate.reshape(()).astype(dt)
    step = CurrentStep.reshape(()).astype(jnp.float32)
    begin = float(c["rampup_begin_step"])
    g = Grad.astype(dt)
    dgc_on = jnp.floor(step) >= int(begin)
    if c["clip_norm"] > 0:  # Paddle's dgc_clip_by_norm: from the ramp-up on only
        norm = jnp.sqrt(jnp.sum(jnp.square(g)))
        clipped = jnp.where(norm > c["clip_norm"], g * (c["clip_norm"] / norm), g)
        g = jnp.where(dgc_on, clipped, g)
    # then regularisation, inside the op as Paddle's dgc op does it
    if c["regular_type"] == 1:
        g = g + c["regular_coeff"] * jnp.sign(Param)
    elif c["regular_type"] == 2:
        g = g + c["regular_coeff"] * Param
    # before the ramp-up: Paddle's momentum op on U
    u_m = mu * Velocity + g
    p_m = Param - (g + mu * u_m) * lr if c["use_nesterov"] else Param - lr * u_m
    # from it on: momentum correction, then the top-k of v applied and cleared
    if c["use_nesterov"]:
        u = mu * (Velocity + g)
        v = u + V + g
    else:
        u = mu * Velocity + g
        v = u + V
    ratio = 1.0 - period_sparsity(c["sparsity"], step, begin, c["rampup_step"])
    k = jnp.floor(v.size * ratio).astype(jnp.int32)
    mask = _top_k_mask(v, k)
    sent = jnp.where(mask, v, jnp.zeros((), dt))
    p_d = Param - lr * sent
    u_d, v_d = jnp.where(mask, jnp.zeros((), dt), u), jnp.where(mask, jnp.zeros((), dt), v)
    return {"ParamOut": jnp.where(dgc_on, p_d, p_m),
            "VelocityOut": jnp.where(dgc_on, u_d, u_m),
            "VOut": jnp.where(dgc_on, v_d, V)}

