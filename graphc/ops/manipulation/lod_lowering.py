"""gather_grad with a LoD Index: the padding rows of the index (zeros) are not real picks, so
they must not write row 0 of the gradient (with overwrite they could clobber a real one)."""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import lod_lowering


@lod_lowering("gather_grad")
def _gather_grad_lod(c, **kw):
    x, index = unwrap(kw["X"]), kw["Index"]
    dout = unwrap(kw["Out@GRAD"]).astype(x.dtype)
    ids = unwrap(index).reshape(-1)
    if isinstance(index, LoDArray):
        ids = jnp.where(index.valid(), ids, x.shape[0])  # out of range: dropped
    zeros = jnp.zeros_like(x)
    if c["overwrite"]:
        return {"X@GRAD": zeros.at[ids].set(dout, mode="drop")}
    return {"X@GRAD": zeros.at[ids].add(dout, mode="drop")}
