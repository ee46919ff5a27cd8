"""Lowering rules for Paddle 1.8's other optimizers (adagrad, decayed_adagrad, adamax,
adadelta, rmsprop, lamb, lars_momentum, ftrl), with its kernels' formulas.

A row-sparse gradient: adagrad and ftrl scatter into its (merged) rows, as Paddle's sparse
kernels do; rmsprop and lamb, whose sparse kernels update every row with g = 0 outside the
rows, and the rest, which Paddle 1.8 runs on dense gradients only, take the dense gradient
it stands for (docs/sparse.md).
"""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows
from ..coalesce.lowering import (
    _lr,  # the [1] learning rate as a scalar of the updated tensor's dtype
)


def _dense(grad, like):
    """The dense gradient a row-sparse one stands for (repeated rows summed)."""
    g = grad.to_dense() if isinstance(grad, SelectedRows) else grad
    return g.astype(like.dtype)


def _const(value, like):
    return jnp.asarray(value, like.dtype)


@lowering("adagrad")
def _adagrad(c, Param, Grad, Moment, LearningRate):
    lr, eps = _lr(LearningRate, Param), _const(c["epsilon"], Param)
    if isinstance(Grad, SelectedRows):  # only the merged rows change: m += 0 elsewhere
        g = Grad.merged().astype(Param.dtype)
        m_rows = g.gather_from(Moment) + g.values * g.values
        p_rows = g.gather_from(Param) - lr * g.values / (jnp.sqrt(m_rows) + eps)
        return {"ParamOut": Param.at[g.rows].set(p_rows, mode="drop"),
                "MomentOut": Moment.at[g.rows].set(m_rows, mode="drop")}
    g = Grad.astype(Param.dtype)
    m = Moment + g * g
    return {"ParamOut": Param - lr * g / (jnp.sqrt(m) + eps), "MomentOut": m}


@lowering("decayed_adagrad")
def _decayed_adagrad(c, Param, Grad, Moment, LearningRate):
    g = _dense(Grad, Param)
    decay = _const(c["decay"], Param)
    m = decay * Moment + (1 - decay) * g * g
    p = Param - _lr(LearningRate, Param) * g / (jnp.sqrt(m) + _const(c["epsilon"], Param))
    return {"ParamOut": p, "MomentOut": m}


@lowering("adamax")
def _adamax(c, Param, Grad, LearningRate, Moment, InfNorm, Beta1Pow):
    g = _dense(Grad, Param)
    b1, b2 = _const(c["beta1"], Param), _const(c["beta2"], Param)
    m = b1 * Moment + (1 - b1) * g
    u = jnp.maximum(b2 * InfNorm + _const(c["epsilon"], Param), jnp.abs(g))
    lr_t = _lr(LearningRate, Param) / (1 - Beta1Pow.reshape(()).astype(Param.dtype))
    return {"ParamOut": Param - lr_t * (m / u), "MomentOut": m, "InfNormOut": u}


@lowering("adadelta")
def _adadelta(c, Param, Grad, AvgSquaredGrad, AvgSquaredUpdate):
    g = _dense(Grad, Param)
    rho, eps = _const(c["rho"], Param), _const(c["epsilon"], Param)
    sq_grad = rho * AvgSquaredGrad + (1 - rho) * g * g
    update = -jnp.sqrt((AvgSquaredUpdate + eps) / (sq_grad + eps)) * g
    sq_update = rho * AvgSquaredUpdate + (1 - rho) * update * update
    return {"ParamOut": Param + update, "AvgSquaredGradOut": sq_grad,
            "AvgSquaredUpdateOut": sq_update}


@lowering("rmsprop")
def _rmsprop(c, Param, Grad, Moment, MeanSquare, MeanGrad, LearningRate):
    g = _dense(Grad, Param)
    rho, eps = _const(c["decay"], Param), _const(c["epsilon"], Param)
    lr, mu = _lr(LearningRate, Param), _const(c["momentum"], Param)
    ms = rho * MeanSquare + (1 - rho) * g * g
    if c["centered"]:
        mg = rho * MeanGrad + (1 - rho) * g
        v = mu * Moment + lr * g / jnp.sqrt(ms - mg * mg + eps)
    else:
        mg = MeanGrad
        v = mu * Moment + lr * g / jnp.sqrt(ms + eps)
    return {"ParamOut": Param - v, "MomentOut": v, "MeanSquareOut": ms, "MeanGradOut": mg}


def _norm(x):
    return jnp.sqrt(jnp.sum(x * x))


@lowering("lamb")
def _lamb(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow):
    g = _dense(Grad, Param)
    b1, b2 = _const(c["beta1"], Param), _const(c["beta2"], Param)
    m1 = b1 * Moment1 + (1 - b1) * g
    m2 = b2 * Moment2 + (1 - b2) * g * g
    r = m1 / (jnp.sqrt(m2) + _const(c["epsilon"], Param)) + _const(c["weight_decay"],
                                                                    Param) * Param
    p_norm, r_norm = _norm(Param), _norm(r)
    ratio = jnp.where((p_norm > 0) & (r_norm > 0), p_norm / jnp.where(r_norm > 0, r_norm, 1),
                      jnp.ones((), Param.dtype))
    return {"ParamOut": Param - _lr(LearningRate, Param) * ratio * r, "Moment1Out": m1,
            "Moment2Out": m2}


@lowering("lars_momentum")
def _lars_momentum(c, Param, Grad, Velocity, LearningRate):
    g = _dense(Grad, Param)
    lr = _lr(LearningRate, Param)
    coeff, decay = _const(c["lars_coeff"], Param), _const(c["lars_weight_decay"], Param)
    p_norm, g_norm = _norm(Param), _norm(g)
    both = (p_norm > 0) & (g_norm > 0)
    local_lr = jnp.where(both, lr * coeff * p_norm
                         / jnp.where(both, g_norm + decay * p_norm, 1), lr)
    v = _const(c["mu"], Param) * Velocity + local_lr * (g + decay * Param)
    return {"ParamOut": Param - v, "VelocityOut": v}


def _ftrl(c, p, sq, lin, g, lr):
    """Paddle's FTRL step on matching arrays (whole tensors, or the gradient's rows)."""
    l1 = _const(c["l1"] + 1e-10, p)
    l2 = _const(c["l2"] + 1e-10, p)
    power = c["lr_power"]
    new_sq = sq + g * g
    if power == -0.5:  # Paddle's special case, with sqrt for the power
        old_step, new_step = jnp.sqrt(sq), jnp.sqrt(new_sq)
    else:
        old_step, new_step = sq ** -power, new_sq ** -power
    lin = lin + g - (new_step - old_step) / lr * p
    x = l1 * jnp.sign(lin) - lin
    y = new_step / lr + 2 * l2
    p = jnp.where(jnp.abs(lin) > l1, x / y, jnp.zeros((), p.dtype))
    return p, new_sq, lin


@lowering("ftrl")
def _ftrl_rule(c, Param, SquaredAccumulator, LinearAccumulator, Grad, LearningRate):
    lr = _lr(LearningRate, Param)
    if isinstance(Grad, SelectedRows):  # Paddle's sparse kernel: the merged rows only
        g = Grad.merged().astype(Param.dtype)
        rows = [g.gather_from(t) for t in (Param, SquaredAccumulator, LinearAccumulator)]
        p, sq, lin = _ftrl(c, *rows, g.values, lr)
        return {"ParamOut": Param.at[g.rows].set(p, mode="drop"),
                "SquaredAccumOut": SquaredAccumulator.at[g.rows].set(sq, mode="drop"),
                "LinearAccumOut": LinearAccumulator.at[g.rows].set(lin, mode="drop")}
    p, sq, lin = _ftrl(c, Param, SquaredAccumulator, LinearAccumulator,
                       Grad.astype(Param.dtype), lr)
    return {"ParamOut": p, "SquaredAccumOut": sq, "LinearAccumOut": lin}
