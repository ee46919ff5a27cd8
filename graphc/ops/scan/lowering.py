"""Lowering of scan_layers (``lax.scan`` over its body graph, whose ops lower with their own
rules; an eager loop in the interpreter) and of reverse."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...backends.lowering import lowering
from .defs import body_graph


@lowering("reverse")
def _reverse(c, X):
    return {"Out": jnp.flip(X, axis=tuple(c["axis"]))}


@lowering("scan_layers")
def _scan_layers(c, Init, Xs, Consts):
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(c["body"])
    ops = body.ops()
    n_carry, k = len(Init), c["iterations"]
    carry_types = [jnp.dtype(v.type.dtype) for v in body.inputs[:n_carry]]

    def step(carry, xs):
        env = dict(zip(body.inputs, (*carry, *xs, *Consts)))
        evaluate(body, env, c.step, c.replicas, ops=ops)
        outs = [env[v] for v in body.outputs]
        # the carry keeps its exact type from one iteration to the next
        new = tuple(lax.convert_element_type(o, t) for o, t in zip(outs[:n_carry], carry_types))
        return new, tuple(outs[n_carry:])

    arrays = (*Init, *Xs, *Consts)
    if any(isinstance(a, jax.core.Tracer) for a in arrays):
        carry, ys = lax.scan(step, tuple(Init), tuple(Xs), length=k)
        return {"Out": list(carry), "Ys": list(ys)}
    # The interpreter runs the body k times, op by op, as it runs every graph.
    carry, stacked = tuple(Init), []
    for i in range(k):
        carry, ys = step(carry, tuple(x[i] for x in Xs))
        stacked.append(ys)
    n_ys = len(body.outputs) - n_carry
    return {"Out": list(carry),
            "Ys": [jnp.stack([ys[j] for ys in stacked]) for j in range(n_ys)]}
