"""Lowering of gather_tree: a reverse lax.scan over the steps carrying each beam's current
ancestor index, gathering that ancestor's id and then its parent."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ...backends.lowering import lowering


@lowering("gather_tree")
def _gather_tree(c, Ids, Parents):
    if Ids.shape[0] == 0:
        return {"Out": Ids}
    beams = Ids.shape[2]
    # the beam whose path ends in slot k starts at k itself on the last step
    start = jnp.broadcast_to(jnp.arange(beams, dtype=Parents.dtype), Ids.shape[1:])

    def step(parent, xs):
        ids_t, parents_t = xs
        out = jnp.take_along_axis(ids_t, parent.astype(jnp.int32), axis=1)
        return jnp.take_along_axis(parents_t, parent.astype(jnp.int32), axis=1), out

    _, out = lax.scan(step, start, (Ids, Parents), reverse=True)
    return {"Out": out.astype(Ids.dtype)}
