"""Lowering of ``while`` (``lax.while_loop`` over its body region; an eager loop in the
interpreter), of its gradient (a bounded masked scan, differentiated by ``jax.vjp``), and of
the tensor-array ops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...backends.arrays import TensorArray
from ...backends.data_checks import InnerChecks, ignored, report_invalid
from ...backends.lowering import lowering
from ...ir.errors import ShapeError
from ...ir.grad_defs import GRAD_SUFFIX
from ..scan.defs import body_graph
from .defs import DEFAULT_MAX_ITERATIONS


# -- tensor arrays ---------------------------------------------------------------------
def _index(i):
    return jnp.reshape(i, ()).astype(jnp.int32)


@lowering("write_to_array")
def _write(c, X, I, Array=None):
    i = _index(I)
    if Array is None:
        cap = c.out_types["Out"][0].capacity
        data, length = jnp.zeros((cap, *X.shape), X.dtype), jnp.zeros((), jnp.int32)
    else:
        data, length = Array.data, Array.length
        cap = data.shape[0]
    report_invalid(c, "I", (i < 0) | (i >= cap), i,
                   f"an index in [0, {cap}): the array's capacity (create_array(capacity=) or "
                   "While(max_iterations=) raise it, docs/control_flow.md)")
    if tuple(X.shape) != tuple(data.shape[1:]):
        raise ShapeError(f"{c.where}: X has shape {list(X.shape)} but the array holds "
                         f"elements of {list(data.shape[1:])}")
    j = jnp.clip(i, 0, cap - 1)
    data = lax.dynamic_update_index_in_dim(data, X.astype(data.dtype), j, 0)
    return {"Out": TensorArray(data, jnp.maximum(length, i + 1).astype(jnp.int32))}


@lowering("empty_array")
def _empty(c, Input=None):
    t = c.out_types["Out"][0]
    shape = list(c["shape"])
    if Input is not None:  # the elements' batch dimension is Input's, known when run
        shape[1] = Input.shape[c["input_dim_idx"]]
    return {"Out": TensorArray(jnp.zeros(shape, t.dtype), jnp.zeros((), jnp.int32))}


@lowering("tensor_array_to_tensor")
def _to_tensor(c, X):
    data, axis = X.data, c["axis"]
    written = jnp.arange(X.capacity) < X.length
    if c["use_stack"]:
        out = jnp.moveaxis(data, 0, axis % (data.ndim))
        sizes = written.astype(jnp.int32)
    else:
        axis %= data.ndim - 1
        moved = jnp.moveaxis(data, 0, axis)  # [..., cap, d_axis, ...] -> merged
        shape = list(data.shape[1:])
        shape[axis] *= X.capacity
        out = jnp.reshape(moved, shape)
        sizes = written.astype(jnp.int32) * data.shape[1 + axis]
    return {"Out": out, "OutIndex": sizes}


@lowering("read_from_array")
def _read(c, X, I):
    i = _index(I)
    report_invalid(c, "I", (i < 0) | (i >= X.length), i,
                   "an index below the array's length (an element written before)")
    return {"Out": lax.dynamic_index_in_dim(X.data, jnp.clip(i, 0, X.capacity - 1), 0,
                                            keepdims=False)}


@lowering("lod_array_length")
def _length(c, X):
    return {"Out": jnp.reshape(X.length, (1,)).astype(jnp.int64)}


# -- while -----------------------------------------------------------------------------
def _traced(values) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(values))


def _body_step(c, consts):
    """state -> the body's next state (each carried value keeps its type and shape)."""
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(c["body"])
    ops = body.ops()

    def step(state, it=None):
        env = dict(zip(body.inputs, (*state, *consts)))
        evaluate(body, env, _iteration_counter(c, it), c.replicas, ops=ops)
        new = []
        for v, old in zip(body.outputs, state):
            val = env[v]
            if tuple(val.shape) != tuple(old.shape):
                raise ShapeError(f"{c.where}: the loop body changes carried value "
                                 f"'{body.inputs[len(new)].name}' from shape "
                                 f"{list(old.shape)} to {list(val.shape)}; a loop must keep "
                                 "each carried value's shape")
            new.append(val if val.dtype == old.dtype else val.astype(old.dtype))
        return tuple(new)
    return step


def _iteration_counter(c, it):
    """The run counter the body's random ops draw with at iteration ``it`` (None: the run's
    own): each iteration draws its own numbers, and while_grad's replay the same ones."""
    if it is None or c.step is None:
        return c.step
    return (jnp.asarray(c.step, jnp.uint32) * jnp.uint32(0x9E3779B1) +
            jnp.asarray(it, jnp.uint32))


def _draws(c) -> bool:
    """Whether the body holds a random op (then the loop counts its iterations)."""
    from ...backends.jax.step import _is_random
    return c.step is not None and any(_is_random(op) for op in body_graph(c["body"]).ops())


def _cond_of(c, n_carry):
    k = n_carry + c["cond_index"]
    return lambda state: jnp.reshape(state[k], ())


@lowering("while")
def _while(c, Carry=None, Aux=None, X=None, XAux=None):
    carry, aux = list(Carry or ()), list(Aux or ())
    consts = (*(X or ()), *(XAux or ()))
    step, cond = _body_step(c, consts), _cond_of(c, len(carry))
    state = (*carry, *aux)
    counted = _draws(c)
    if counted:  # the iteration number rides along as the last carried value
        body_step = step
        state = (*state, jnp.zeros((), jnp.int32))

        def step(s):
            return (*body_step(s[:-1], s[-1]), s[-1] + 1)
    if not _traced((state, consts)):  # the interpreter: an eager loop
        while bool(np.asarray(cond(state))):
            state = step(state)
    else:
        checks = InnerChecks()
        acc = checks.initial(step, state)
        if acc is None:
            state = lax.while_loop(cond, step, state)
        else:
            run = checks.wrap(step)
            state, acc = lax.while_loop(lambda s: cond(s[0]), lambda s: run(*s), (state, acc))
            checks.report(acc)
    n = len(carry) + len(aux)
    return {"Out": list(state[:len(carry)]), "AuxOut": list(state[len(carry):n])}


@lowering("while_grad")
def _while_grad(c, Carry=None, Aux=None, X=None, XAux=None, Out=None, AuxOut=None, **kw):
    """The loop's gradient: the loop replayed as a scan of ``max_iterations`` steps that stop
    changing the state once the condition is false, differentiated by ``jax.vjp`` (exact: the
    same body, the same trip count). A loop that ran longer than the bound is refused."""
    carry, aux, xs, xaux = (list(v or ()) for v in (Carry, Aux, X, XAux))
    bound = c["max_iterations"] or DEFAULT_MAX_ITERATIONS
    douts = kw.get("Out" + GRAD_SUFFIX) or [None] * len(carry)
    cond = _cond_of(c, len(carry))
    counted = _draws(c)

    def replay(carry_in, xs_in):
        step = _body_step(c, (*xs_in, *xaux))

        def one(state, it):
            s, running = state
            go = running & cond(s)
            with ignored():  # the forward loop checked these values already
                new = lax.cond(go, lambda s: step(s, it if counted else None), lambda s: s, s)
            return (new, go), None

        init = ((*carry_in, *aux), jnp.asarray(True))
        (final, _), _ = lax.scan(jax.checkpoint(one), init, jnp.arange(bound, dtype=jnp.int32))
        return tuple(final[:len(carry)]), cond(final)

    outs, vjp, unfinished = jax.vjp(replay, tuple(carry), tuple(xs), has_aux=True)
    report_invalid(c, "Carry", unfinished, unfinished,
                   f"a loop of at most {bound} iterations for its gradient (While("
                   "max_iterations=) raises the bound, docs/control_flow.md)", own=True)
    cot = tuple(jnp.zeros_like(o) if g is None else jnp.reshape(g, o.shape).astype(o.dtype)
                for o, g in zip(outs, douts))
    dcarry, dxs = vjp(cot)
    result = {}
    if "Carry" + GRAD_SUFFIX in c.out_types:
        result["Carry" + GRAD_SUFFIX] = list(dcarry)
    if "X" + GRAD_SUFFIX in c.out_types:
        result["X" + GRAD_SUFFIX] = list(dxs)
    return result
