"""Lowering rules of the sequence ops and the LoD-aware rules of existing ops (mean over real
tokens, lookup_table_grad dropping padding tokens): the run-time half of ir/ops/sequence_ops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.ops import GRAD_SUFFIX
from ..lod import LoDArray, pool, unwrap
from ..selected_rows import ROWS_DTYPE, SelectedRows
from .registry import get_rule, lod_lowering, lowering


def lod_vjp_grad(forward):
    """A grad rule for an aware op from its forward function ``forward(ctx, x: LoDArray)``:
    the vjp with respect to the tokens of X (lengths are integers: no gradient), returned as
    a LoD value with X's LoD. Padding rows get zero: the forward never reads them."""

    def rule(c, **kw):
        x = kw["X"]
        dout = kw["Out" + GRAD_SUFFIX]

        def f(data):
            return forward(c, x.with_data(data))

        out, vjp = jax.vjp(f, x.data)
        cot = jax.tree.map(lambda o, g: g.astype(o.dtype).reshape(o.shape), out, dout)
        (dx,) = vjp(cot)
        return {"X" + GRAD_SUFFIX: x.masked(dx)}

    return rule


# -- sequence_pool ------------------------------------------------------------------------------

def _pool(c, x: LoDArray):
    return pool(x, c["pooltype"], c["pad_value"])


@lowering("sequence_pool")
def _sequence_pool(c, X):
    return {"Out": _pool(c, X)}


lowering("sequence_pool_grad")(lod_vjp_grad(_pool))


# -- mean over the real tokens -------------------------------------------------------------------

def _lod_mean(c, x: LoDArray):
    # padding rows hold zeros, so the sum over the buffer is the sum over the tokens
    count = x.token_count() * (x.data.size // max(x.capacity, 1))
    return (jnp.sum(x.data) / jnp.maximum(count, 1).astype(x.data.dtype)).reshape(1)


@lod_lowering("mean")
def _mean(c, X):
    return {"Out": _lod_mean(c, X)}


lod_lowering("mean_grad")(lod_vjp_grad(_lod_mean))


# -- lookup_table_grad: padding tokens are no rows -------------------------------------------------

@lod_lowering("lookup_table_grad")
def _lookup_table_grad(c, **kw):
    """The dense rule on the tokens; a row-sparse gradient then marks the rows of padding
    tokens as padding rows (row = height), so an optimizer never sees them as looked up
    (lazy Adam, Adagrad would otherwise move row ``0``)."""
    ids = kw["Ids"]
    result = get_rule("lookup_table_grad")(c, **{k: unwrap(v) for k, v in kw.items()})
    grad = result.get("W" + GRAD_SUFFIX)
    if isinstance(grad, SelectedRows) and isinstance(ids, LoDArray):
        per_token = grad.rows.shape[0] // max(ids.capacity, 1)
        valid = jnp.repeat(ids.valid(), per_token)
        rows = jnp.where(valid, grad.rows, jnp.asarray(grad.height, ROWS_DTYPE))
        result["W" + GRAD_SUFFIX] = SelectedRows(rows, grad.values, grad.height)
    return result
