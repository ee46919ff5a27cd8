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


# How XLA runs a scan_layers (measured on the BERT-style encoder, benchmarks/bench_encoder.py,
# issue 28). A carry-free body (the rolled optimizer updates of stacked parameters) is the
# same elementwise work for every layer, so it runs as one batched body (``vmap``) over the
# stack: no loop, one fusion per update instead of a while loop that slices and writes back
# each layer. A body with carries (the layers' forward and backward passes) is a while loop,
# which XLA cannot fuse across and runs one kernel at a time: on the 4-layer encoder that
# loop cost 6-10% of the step against the same layers unrolled. It saves compile time only
# where the unrolled layers would be many ops, so a scan of at most UNROLL_BUDGET body ops
# in all (k layers x ops per layer) is unrolled into straight-line code (``unroll=True``)
# and a longer one (the 1,250-layer stack) stays one loop. The pass still rolls both: the
# graph stays small and the parameters stacked; this only picks what XLA is given.
UNROLL_BUDGET = 512


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
        if not n_carry and Xs:  # independent layers (optimizer updates): one batch
            ys = jax.vmap(lambda *xs: step((), xs)[1])(*Xs)
            return {"Out": [], "Ys": list(ys)}
        carry, ys = lax.scan(step, tuple(Init), tuple(Xs), length=k,
                             unroll=k * len(ops) <= UNROLL_BUDGET)
        return {"Out": list(carry), "Ys": list(ys)}
    # The interpreter runs the body k times, op by op, as it runs every graph.
    carry, stacked = tuple(Init), []
    for i in range(k):
        carry, ys = step(carry, tuple(x[i] for x in Xs))
        stacked.append(ys)
    n_ys = len(body.outputs) - n_carry
    return {"Out": list(carry),
            "Ys": [jnp.stack([ys[j] for ys in stacked]) for j in range(n_ys)]}
