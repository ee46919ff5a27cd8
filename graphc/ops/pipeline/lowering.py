"""Lowering of microbatch_loop: ``lax.scan`` over the microbatches of the fed batch (an eager
loop in the interpreter), the body's ops lowered with their own rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...backends.data_checks import InnerChecks
from ...backends.lowering import lowering
from ...ir.errors import ShapeError
from ..scan.defs import body_graph


def _microbatches(c, batch, names) -> int:
    """The microbatch size, after checking that every fed value splits into equal parts."""
    m = c["num_microbatches"]
    sizes = {int(np.shape(b)[0]) for b in batch}
    if len(sizes) > 1:
        given = ", ".join(f"'{n}' {int(np.shape(b)[0])}" for n, b in zip(names, batch))
        raise ShapeError(f"{c.where}: PipelineOptimizer splits the batch into microbatches, "
                         f"but the fed values have different numbers of rows ({given})")
    rows = sizes.pop() if sizes else m
    if rows % m:
        raise ShapeError(f"{c.where}: PipelineOptimizer(num_microbatches={m}): a batch of "
                         f"{rows} rows (feeds {', '.join(repr(n) for n in names)}) does not "
                         f"split into {m} equal microbatches; feed a multiple of {m} rows")
    return rows // m


@lowering("microbatch_loop")
def _microbatch_loop(c, Batch=None, State=None, Consts=None):
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(c["body"])
    ops = body.ops()
    batch, state, consts = list(Batch or ()), list(State or ()), list(Consts or ())
    m, n_grads, merges = c["num_microbatches"], c["num_grads"], c["merges"]
    n_state = len(state)
    names = [v.var.name for v in body.inputs[n_grads + n_state:n_grads + n_state + len(batch)]]
    size = _microbatches(c, batch, names)
    xs = tuple(jnp.reshape(b, (m, size, *np.shape(b)[1:])) for b in batch)
    zeros = [jnp.zeros(v.type.shape, v.type.dtype) for v in body.inputs[:n_grads]]
    carry0 = (*zeros, *state)
    carry_types = [jnp.result_type(a) for a in carry0]
    n_carry = len(carry0)

    def one(args):
        carry, (x, i) = args
        env = dict(zip(body.inputs, (*carry, *x, *consts)))
        # each microbatch draws its own random numbers (dropout masks), one stream per step
        step = None if c.step is None else c.step * m + i
        evaluate(body, env, step, c.replicas, ops=ops)
        outs = [env[v] for v in body.outputs]
        new = tuple(lax.convert_element_type(o, t) for o, t in zip(outs[:n_carry], carry_types))
        return new, tuple(outs[n_carry:])

    arrays = (*batch, *state, *consts)
    if any(isinstance(a, jax.core.Tracer) for a in arrays) or isinstance(c.step, jax.core.Tracer):
        first = (tuple(carry0), (tuple(x[0] for x in xs), jnp.asarray(0)))
        checks = InnerChecks()
        acc = checks.initial(one, first)
        if acc is None:
            carry, ys = lax.scan(lambda s, x: one((s, x)), tuple(carry0),
                                 (xs, jnp.arange(m)), length=m)
        else:
            run = checks.wrap(one)

            def scanned(s, x):
                (new, ys), acc = run((s[0], x), s[1])
                return (new, acc), ys

            (carry, acc), ys = lax.scan(scanned, (tuple(carry0), acc), (xs, jnp.arange(m)),
                                        length=m)
            checks.report(acc)
    else:  # the interpreter: the microbatches one after another, op by op
        carry, stacked = tuple(carry0), []
        for i in range(m):
            carry, out = one((carry, (tuple(x[i] for x in xs), i)))
            stacked.append(out)
        ys = tuple(jnp.stack([out[j] for out in stacked]) for j in range(len(merges)))
    merged = []
    for merge, y in zip(merges, ys):
        if merge == "rows":  # microbatch after microbatch: the batch's rows in their order
            merged.append(jnp.reshape(y, (m * y.shape[1], *y.shape[2:])))
        else:
            merged.append(jnp.mean(y, axis=0).astype(y.dtype))
    return {"GradSum": list(carry[:n_grads]), "StateOut": list(carry[n_grads:]), "Out": merged}
