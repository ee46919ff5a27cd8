"""Lowering of dynamic_rnn: its body graph (ops lowered by their own rules) as the cell of
ops/rnn/lowering.py's time loop; the gradient is that loop's backward pass (BPTT), by jax.vjp."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...backends.lod import LoDArray, unwrap
from ...backends.lowering import lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ..rnn.lowering import recur
from ..scan.defs import body_graph


def _run(c, init_list, xs, consts):
    """Out's per-token data ([T_cap, ...] each) for the given inputs."""
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(c["body"])
    ops = body.ops()
    sources, values = c["init_from"], c["init_values"]
    n_mem, ref = len(sources), xs[0]
    n = ref.num_sequences
    memories = []
    for i, (src, val) in enumerate(zip(sources, values)):
        t = body.inputs[i].type
        memories.append(init_list[src] if src >= 0 else
                        jnp.full((n, *t.shape[1:]), val, jnp.dtype(t.dtype)))
    # the step outputs ride along as carries the step never reads: recur stores every
    # carry per token, which is Out
    outs = [jnp.zeros((n, *v.type.shape[1:]), jnp.dtype(v.type.dtype))
            for v in body.outputs[n_mem:]]

    def step(p, x_t, carry, t):
        env = dict(zip(body.inputs, (*carry[:n_mem], *x_t, *p)))
        evaluate(body, env, c.step, c.replicas, ops=ops)
        new = [env[v] for v in body.outputs]
        return tuple(jnp.asarray(unwrap(v)).astype(old.dtype).reshape(old.shape)
                     for v, old in zip(new, carry))

    states = recur(step, False, tuple(consts), tuple(x.data for x in xs), ref.lengths[0],
                   tuple(memories) + tuple(outs))
    return states[n_mem:]


@lowering("dynamic_rnn")
def _dynamic_rnn(c, Init, Xs, Consts):
    ref = Xs[0]
    return {"Out": [ref.with_data(o) for o in _run(c, Init, Xs, Consts)]}


@lowering("dynamic_rnn_grad")
def _dynamic_rnn_grad(c, **kw):
    """jax.vjp of the forward rule over the float tokens of Xs, Init and Consts."""
    init, xs, consts = kw.get("Init") or [], kw["Xs"], kw.get("Consts") or []
    douts = kw.get("Out" + GRAD_SUFFIX) or []

    def data(v):
        return v.data if isinstance(v, LoDArray) else v

    def rebuild(orig, new):
        return [o.with_data(d) if isinstance(o, LoDArray) else d for o, d in zip(orig, new)]

    def f(i_d, x_d, c_d):
        return _run(c, rebuild(init, i_d), rebuild(xs, x_d), rebuild(consts, c_d))

    primals = ([data(v) for v in init], [data(v) for v in xs], [data(v) for v in consts])
    # integer values (ids) take no gradient: differentiate the float ones only
    picks = [[i for i, a in enumerate(group) if jnp.issubdtype(a.dtype, jnp.inexact)]
             for group in primals]

    def g(*diff):
        full = [list(group) for group in primals]
        for group, idx, vals in zip(full, picks, diff):
            for i, v in zip(idx, vals):
                group[i] = v
        return f(*full)

    outs, vjp = jax.vjp(g, *([group[i] for i in idx] for group, idx in zip(primals, picks)))
    cot = tuple(jnp.zeros_like(o) if d is None else unwrap(d).astype(o.dtype).reshape(o.shape)
                for o, d in zip(outs, douts))
    grads = vjp(cot)
    result = {}
    for slot, orig, idx, gs in zip(("Init", "Xs", "Consts"), (init, xs, consts), picks, grads):
        if slot + GRAD_SUFFIX not in c.out_types:
            continue
        by_index = dict(zip(idx, gs))
        result[slot + GRAD_SUFFIX] = [
            (o.masked(by_index[i]) if isinstance(o, LoDArray) else by_index[i])
            if i in by_index else jnp.zeros_like(data(o)) for i, o in enumerate(orig)]
    return result
