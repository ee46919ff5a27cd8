"""Lowering of recurrent: ``lax.scan`` over the step graph, whose ops lower with their own rules
(an eager loop in the interpreter), and its gradient, the pullback of that scan.

Under a trace the forward rule takes ``jax.vjp`` of its scan and leaves the pullback for
recurrent_grad (``stash``), so the backward pass is one reverse scan over the residuals the
forward scan saved, as ``jax.grad`` of a hand-written scan is. Without it (the interpreter, a
pass that rebuilt the op's values) recurrent_grad differentiates the forward rule instead.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...backends.lod import LoDArray
from ...backends.lowering import LoweringError, lowering, stash, stashed
from ...ir.grad_defs import GRAD_SUFFIX
from ..scan.defs import body_graph

_SLOTS = ("initial_states", "inputs", "parameters")


def _step_fn(c, n_mem: int, steps: int):
    """``step(carry, x_t, params, t) -> (new carry, step outputs)`` running the body graph."""
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(c["body"])
    ops = body.ops()
    carry_types = [jnp.dtype(v.type.dtype) for v in body.inputs[:n_mem]]

    def step(carry, x_t, params, t):
        env = dict(zip(body.inputs, (*carry, *x_t, *params)))
        # a random op in the step draws anew at every step of every run, as Paddle's does
        counter = None if c.step is None else c.step * steps + t
        evaluate(body, env, counter, c.replicas, ops=ops)
        outs = [env[v] for v in body.outputs]
        new = []
        for i, (o, old, dtype) in enumerate(zip(outs[:n_mem], carry, carry_types)):
            if tuple(o.shape) != tuple(old.shape):
                raise LoweringError(f"{c.where}: memory {i} enters the step as "
                                    f"{list(old.shape)} but is updated to {list(o.shape)}")
            new.append(lax.convert_element_type(o, dtype))  # the carry keeps its exact type
        return tuple(new), tuple(outs[n_mem:])

    return step


def _carry(c, init) -> tuple:
    """The initial memories in the step's types (a loop carry keeps one exact type)."""
    body = body_graph(c["body"])
    return tuple(lax.convert_element_type(a, jnp.dtype(v.type.dtype))
                 for a, v in zip(init, body.inputs))


def _scan(c, init, xs, params) -> list:
    steps = xs[0].shape[0]
    step = _step_fn(c, len(init), steps)

    def scan_step(carry, x):
        t, x_t = x
        return step(carry, x_t, params, t)

    _, ys = lax.scan(scan_step, _carry(c, init), (jnp.arange(steps), tuple(xs)),
                     length=steps)
    return list(ys)


def _loop(c, init, xs, params) -> list:
    """The interpreter's loop: the step graph run op by op, once per step."""
    steps = xs[0].shape[0]
    step = _step_fn(c, len(init), steps)
    carry, stacked = _carry(c, init), []
    for t in range(steps):
        carry, ys = step(carry, tuple(x[t] for x in xs), params, t)
        stacked.append(ys)
    if not stacked:
        raise LoweringError(f"{c.where}: the step inputs have no time steps")
    return [jnp.stack(col) for col in zip(*stacked)]


def _inexact(a) -> bool:
    if isinstance(a, LoDArray):  # a LoD value the step reads: its tokens are the operand
        a = a.data
    return jnp.issubdtype(jnp.result_type(a), jnp.inexact)


def _pullback(c, groups):
    """(outputs, the scan's pullback over the float operands, which operands those are).
    A LoD operand is differentiated through its tokens, its lengths held fixed."""
    picks = [[i for i, a in enumerate(g) if _inexact(a)] for g in groups]

    def forward(*diff):
        full = [list(g) for g in groups]
        for g, idx, vals in zip(full, picks, diff):
            for i, v in zip(idx, vals):
                g[i] = g[i].with_data(v) if isinstance(g[i], LoDArray) else v
        outs = _scan(c, *full)
        return [o for o in outs if _inexact(o)], outs

    primals = [[g[i].data if isinstance(g[i], LoDArray) else g[i] for i in idx]
               for g, idx in zip(groups, picks)]
    _, pullback, outs = jax.vjp(forward, *primals, has_aux=True)
    return outs, pullback, picks


@lowering("recurrent")
def _recurrent(c, inputs, initial_states, parameters):
    groups = (list(initial_states or []), list(inputs), list(parameters or []))
    if not any(isinstance(a, jax.core.Tracer) for g in groups for a in g):
        return {"outputs": _loop(c, *groups)}
    outs, pullback, picks = _pullback(c, groups)
    stash(outs[0], (pullback, groups, picks))
    return {"outputs": outs}


def _grad_like(a, g):
    """The gradient of operand ``a``: zeros where it has none; a LoD operand's is a LoD value
    with its lengths (padding rows zero)."""
    if isinstance(a, LoDArray):
        return a.masked(jnp.zeros_like(a.data) if g is None else g)
    return jnp.zeros_like(a) if g is None else g


@lowering("recurrent_grad")
def _recurrent_grad(c, **kw):
    """The forward scan's pullback, as the forward rule left it for these very operands, or
    taken anew (the interpreter, or operands a pass has rebuilt since)."""
    outs = kw.get("outputs") or []
    groups = tuple(list(kw.get(s) or []) for s in _SLOTS)
    left = stashed(outs[0]) if outs else None
    if left is None or any(len(a) != len(b) or any(x is not y for x, y in zip(a, b))
                           for a, b in zip(left[1], groups)):
        outs, pullback, picks = _pullback(c, groups)
    else:
        pullback, _, picks = left
    douts = kw.get("outputs" + GRAD_SUFFIX) or [None] * len(outs)
    cot = [jnp.zeros_like(o) if d is None else d.astype(o.dtype).reshape(o.shape)
           for o, d in zip(outs, douts) if _inexact(o)]
    grads = pullback(cot)
    result = {}
    for slot, group, idx, gs in zip(_SLOTS, groups, picks, grads):
        if slot + GRAD_SUFFIX in c.out_types:
            by_index = dict(zip(idx, gs))
            result[slot + GRAD_SUFFIX] = [_grad_like(a, by_index.get(i))
                                          for i, a in enumerate(group)]
    return result
