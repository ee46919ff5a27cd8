"""LoD rules of math's reductions over tokens (mean, reduce_mean/max/min: statistics of the
real tokens only, docs/lod.md; reduce_sum needs none) and of matmul (token by token).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import lod_lowering
from ...ir.grad_defs import GRAD_SUFFIX
from .lowering import _matmul

_REDUCERS = {"reduce_mean": jnp.mean, "reduce_max": jnp.max, "reduce_min": jnp.min}


def _token_grad(forward):
    """The grad rule of ``forward(ctx, x: LoDArray)``: the vjp with respect to X's tokens,
    a LoD value with X's LoD whose padding rows get zero (the forward never reads them)."""

    def grad(c, **kw):
        x = kw["X"]
        dout = unwrap(kw["Out" + GRAD_SUFFIX])
        out, vjp = jax.vjp(lambda d: unwrap(forward(c, x.with_data(d))), x.data)
        (dx,) = vjp(dout.astype(out.dtype).reshape(out.shape))
        return {"X" + GRAD_SUFFIX: x.masked(dx)}

    return grad


def _reduced_dims(c, rank: int) -> tuple[int, ...]:
    return tuple(range(rank)) if c["reduce_all"] else tuple(sorted({d % rank for d in c["dim"]}))


def _lod_reduce(c, op: str, x: LoDArray):
    """The reduction over real tokens; a LoDArray when the token dim is kept."""
    data = x.data
    dims = _reduced_dims(c, data.ndim)
    if 0 not in dims:  # per token: padding rows stay zero
        out = _REDUCERS[op](data, axis=dims, keepdims=c["keep_dim"])
        return x.masked(out)
    keep = x.valid().reshape((-1,) + (1,) * (data.ndim - 1))
    if op == "reduce_mean":  # padding holds zeros: scale the buffer mean to the token count
        out = jnp.mean(data, axis=dims, keepdims=c["keep_dim"])
        out = out * (x.capacity / jnp.maximum(x.token_count(), 1)).astype(data.dtype)
    else:
        fill = -jnp.inf if op == "reduce_max" else jnp.inf
        out = _REDUCERS[op](jnp.where(keep, data, jnp.asarray(fill, data.dtype)), axis=dims,
                            keepdims=c["keep_dim"])
    return out.reshape(out.shape or (1,))


def _reduce_rule(op):
    def forward(c, x):
        return _lod_reduce(c, op, x)

    lod_lowering(op)(lambda c, X: {"Out": forward(c, X)})
    lod_lowering(op + "_grad")(_token_grad(forward))


for _op in _REDUCERS:
    _reduce_rule(_op)


# -- mean over the real tokens -------------------------------------------------------------------

def _lod_mean(c, x: LoDArray):
    # padding rows hold zeros, so the sum over the buffer is the sum over the tokens
    count = x.token_count() * (x.data.size // max(x.capacity, 1))
    return (jnp.sum(x.data) / jnp.maximum(count, 1).astype(x.data.dtype)).reshape(1)


@lod_lowering("mean")
def _mean(c, X):
    return {"Out": _lod_mean(c, X)}


lod_lowering("mean_grad")(_token_grad(_lod_mean))


# -- cvport: matmul of a LoD X by a dense Y or by a LoD Y of the same LoD --------------------
# Its own rules so that a dense Y is never paired row for row with the tokens (it is the
# matrix every token meets), and a LoD Y meets X token for token (NeXtVLAD's per-frame
# [clusters, groups] @ [groups, D]).
def _rows(v, n: int):
    """``v`` cut or zero-padded to ``n`` rows (a LoD operand in a buffer of another size)."""
    if v.shape[0] >= n:
        return v[:n]
    return jnp.pad(v, [(0, n - v.shape[0])] + [(0, 0)] * (v.ndim - 1))


def _matmul_operands(X, Y):
    x = unwrap(X)
    return x, (_rows(Y.data, x.shape[0]) if isinstance(Y, LoDArray) else Y)


@lod_lowering("matmul")
def _matmul_lod(c, X, Y):
    x, y = _matmul_operands(X, Y)
    return {"Out": X.masked(_matmul(c, x, y)["Out"])}


@lod_lowering("matmul_grad")
def _matmul_lod_grad(c, **kw):
    X, Y = kw["X"], kw["Y"]
    x, y = _matmul_operands(X, Y)
    out, vjp = jax.vjp(lambda a, b: _matmul(c, a, b)["Out"], x, y)
    dx, dy = vjp(unwrap(kw["Out" + GRAD_SUFFIX]).astype(out.dtype).reshape(out.shape))
    if isinstance(Y, LoDArray):
        dy = Y.masked(_rows(dy, Y.capacity))
    return {"X" + GRAD_SUFFIX: X.masked(dx), "Y" + GRAD_SUFFIX: dy}
