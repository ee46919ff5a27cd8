"""Lowering rules for row-sparse values: the SelectedRows ops, and the optimizer updates from a
row-sparse gradient, which scatter its rows and never build the dense gradient.

SGD and Momentum follow Paddle's sparse kernels: they equal the dense update with a gradient
that is zero outside the rows (Momentum still decays every velocity row). Adam is the dense
update too, unless ``lazy_mode``: then only the gradient's rows (merged) move their moments
and parameters, while the beta powers advance every step (docs/sparse.md).
"""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import lowering
from ...backends.selected_rows import SelectedRows, add_to_dense
from ..coalesce.lowering import _lr


@lowering("merge_selected_rows")
def _merge(c, X):
    return {"Out": X.merged()}


@lowering("get_tensor_from_selected_rows")
def _to_dense(c, X):
    return {"Out": X.to_dense()}


@lowering("sparse_l2_decay")
def _l2_decay(c, Grad, Param):
    g = Grad.merged()
    decay = jnp.asarray(c["coeff"], Param.dtype) * g.gather_from(Param)
    return {"Out": g.with_values(g.values + decay.astype(g.values.dtype))}


@lowering("squared_l2_norm")
def _squared_l2_norm(c, X):
    # merged rows hold each dense row once and padding rows hold zeros
    values = X.merged().values if isinstance(X, SelectedRows) else X
    return {"Out": jnp.sum(jnp.square(values)).reshape(1)}


# -- optimizers (optim.py dispatches here when Grad is a SelectedRows) ---------------------
def sgd_rows(param, grad: SelectedRows, lr):
    step = _lr(lr, param) * grad.values.astype(param.dtype)
    return {"ParamOut": param.at[grad.rows].add(-step, mode="drop")}


def momentum_rows(c, param, grad: SelectedRows, velocity, lr):
    """Paddle's sparse momentum: v = mu*v + g over every row (g zero outside its rows)."""
    mu = jnp.asarray(c["mu"], param.dtype)
    lr = _lr(lr, param)
    g = grad.astype(param.dtype)
    v = add_to_dense(mu * velocity, g)
    if c["use_nesterov"]:  # p - (g + mu*v)*lr, the g part only on g's rows
        p = (param - (mu * v) * lr).at[g.rows].add(-(g.values * lr), mode="drop")
    else:
        p = param - lr * v
    return {"ParamOut": p, "VelocityOut": v}


def adam_rows(c, param, grad: SelectedRows, lr, m1, m2, b1pow, b2pow, decay=None):
    """Adam from a row-sparse gradient, its repeated rows merged first (g*g needs the sum).

    Not lazy: the dense formula with g = 0 outside the rows, so every moment decays and every
    parameter moves. Lazy: only the merged rows' moments and parameters are read and written.
    ``decay`` (AdamW's lr * coeff): ``param *= 1 - decay`` first, on the rows updated."""
    b1, b2 = jnp.asarray(c["beta1"], m1.dtype), jnp.asarray(c["beta2"], m1.dtype)
    g = grad.merged().astype(m1.dtype)
    b1p, b2p = b1pow.reshape(()), b2pow.reshape(())
    lr_t = _lr(lr, m1) * jnp.sqrt(1 - b2p) / (1 - b1p)
    eps = jnp.asarray(c["epsilon"], m1.dtype) * jnp.sqrt(1 - b2p)
    powers = {"Beta1PowOut": b1pow * b1, "Beta2PowOut": b2pow * b2}
    if c["lazy_mode"]:
        p_rows, m1_rows, m2_rows = (g.gather_from(t) for t in (param, m1, m2))
        if decay is not None:
            p_rows = p_rows * (1 - decay)
        m1_rows = b1 * m1_rows + (1 - b1) * g.values
        m2_rows = b2 * m2_rows + (1 - b2) * g.values * g.values
        p_rows = p_rows - (lr_t * (m1_rows / (jnp.sqrt(m2_rows) + eps))).astype(param.dtype)
        # merged rows are unique, so each is set once; padding rows are dropped
        return {"ParamOut": param.at[g.rows].set(p_rows, mode="drop"),
                "Moment1Out": m1.at[g.rows].set(m1_rows, mode="drop"),
                "Moment2Out": m2.at[g.rows].set(m2_rows, mode="drop"), **powers}
    if decay is not None:
        param = param * (1 - decay)
    m1 = (b1 * m1).at[g.rows].add((1 - b1) * g.values, mode="drop")
    m2 = (b2 * m2).at[g.rows].add((1 - b2) * g.values * g.values, mode="drop")
    param = param - (lr_t * (m1 / (jnp.sqrt(m2) + eps))).astype(param.dtype)
    return {"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2, **powers}
