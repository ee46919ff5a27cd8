"""Lowering rules for optimizer and learning-rate ops, with Paddle's update formulas.

Adam's bias correction folds into the step size and scales epsilon, as Paddle's kernel does.
A row-sparse gradient (SelectedRows) goes to its update in sparse.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows
from ..coalesce.lowering import (
    _lr,  # the [1] learning rate as a scalar of the updated tensor's dtype
)
from ..sparse.lowering import adam_rows, momentum_rows, sgd_rows


@lowering("sgd")
def _sgd(c, Param, Grad, LearningRate):
    if isinstance(Grad, SelectedRows):
        return sgd_rows(Param, Grad, LearningRate)
    return {"ParamOut": Param - _lr(LearningRate, Param) * Grad.astype(Param.dtype)}


@lowering("momentum")
def _momentum(c, Param, Grad, Velocity, LearningRate):
    if isinstance(Grad, SelectedRows):
        return momentum_rows(c, Param, Grad, Velocity, LearningRate)
    mu = jnp.asarray(c["mu"], Param.dtype)
    g = Grad.astype(Param.dtype)
    v = mu * Velocity + g
    lr = _lr(LearningRate, Param)
    p = Param - (g + mu * v) * lr if c["use_nesterov"] else Param - lr * v
    return {"ParamOut": p, "VelocityOut": v}


def adam_update(c, param, grad, lr, m1, m2, b1pow, b2pow):
    if isinstance(grad, SelectedRows):
        return adam_rows(c, param, grad, lr, m1, m2, b1pow, b2pow)
    b1, b2 = jnp.asarray(c["beta1"], m1.dtype), jnp.asarray(c["beta2"], m1.dtype)
    g = grad.astype(m1.dtype)
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    b1p, b2p = b1pow.reshape(()), b2pow.reshape(())
    lr_t = _lr(lr, m1) * jnp.sqrt(1 - b2p) / (1 - b1p)
    eps = jnp.asarray(c["epsilon"], m1.dtype)
    param = param - (lr_t * (m1 / (jnp.sqrt(m2) + eps * jnp.sqrt(1 - b2p)))).astype(param.dtype)
    return {"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2,
            "Beta1PowOut": b1pow * b1, "Beta2PowOut": b2pow * b2}


@lowering("adam")
def _adam(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow):
    return adam_update(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow)


@lowering("adamw")
def _adamw(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow):
    if c["with_decay"]:
        decay = _lr(LearningRate, Param) * jnp.asarray(c["lr_ratio"] * c["coeff"], Param.dtype)
        if isinstance(Grad, SelectedRows):  # lazy mode decays only the rows it updates
            return adam_rows(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow,
                             Beta2Pow, decay)
        Param = Param * (1 - decay)
    return adam_update(c, Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow)


@lowering("increment")
def _increment(c, X):
    return {"Out": X + jnp.asarray(c["step"], X.dtype)}


# piecewise_decay and cosine_decay: ops/lr_schedule/lowering.py, with the other schedules


@lowering("linear_warmup")
def _warmup(c, Step, LearningRate):
    step = Step.reshape(()).astype(jnp.float32)
    warm = c["start_lr"] + (c["end_lr"] - c["start_lr"]) * step / c["warmup_steps"]
    out = jnp.where(step < c["warmup_steps"], warm.astype(LearningRate.dtype),
                    LearningRate.reshape(()))
    return {"Out": out.reshape(1)}


# -- issue 24: optimizers (dpsgd; lookahead's slow/fast weight exchange)
@lowering("dpsgd")
def _dpsgd(c, Param, Grad, LearningRate):
    g = Grad.astype(jnp.float32)
    norm = jnp.sqrt(jnp.sum(g * g))
    clip = jnp.float32(c["clip"])
    scale = jnp.where(norm > clip, norm / clip, jnp.float32(1.0))
    # one draw per op and step, shared by every element, as Paddle's kernel draws once
    noise = jax.random.normal(c.rng(c["seed"]), (), jnp.float32) * jnp.float32(c["sigma"])
    step = g / scale + noise / jnp.float32(c["batch_size"])
    lr = _lr(LearningRate, step)
    return {"ParamOut": (Param.astype(jnp.float32) - lr * step).astype(Param.dtype)}


@lowering("lookahead")
def _lookahead(c, Param, SlowParam, Step):
    t = Step.reshape(()).astype(jnp.int64)
    first = t == 1
    sync = jnp.logical_and(jnp.logical_not(first), t % c["k"] == 0)
    alpha = jnp.asarray(c["alpha"], Param.dtype)
    mixed = alpha * Param + (1 - alpha) * SlowParam
    slow = jnp.where(first, Param, jnp.where(sync, mixed, SlowParam))
    return {"ParamOut": jnp.where(sync, mixed, Param), "SlowParamOut": slow}
