"""Lowering of ``while`` (``lax.while_loop`` over its body region; an eager loop in the
interpreter), of its gradient (a bounded masked scan, differentiated by ``jax.vjp``), and of
the tensor-array ops."""

from __future__ import annotations

from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...backends.arrays import TensorArray, grow_stacked, rows_as_sequences
from ...backends.data_checks import InnerChecks, ignored, report_invalid
from ...backends.lod import LoDArray
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
    level = c.out_types["Out"][0].element_lod
    if level and not isinstance(X, LoDArray):  # dense rows into an array of LoD values
        X = rows_as_sequences(X, level)
    if isinstance(X, LoDArray):
        return _write_lod(c, X, i, Array)
    if Array is None:
        cap = c.out_types["Out"][0].capacity
        data, length = jnp.zeros((cap, *X.shape), X.dtype), jnp.zeros((), jnp.int32)
    else:
        data, length = Array.data, Array.length
        cap = data.shape[0]
        if _unsized(Array):  # an empty array whose element shape its first write gives
            data = jnp.zeros((cap, *X.shape), data.dtype)
    report_invalid(c, "I", (i < 0) | (i >= cap), i,
                   f"an index in [0, {cap}): the array's capacity (create_array(capacity=) or "
                   "While(max_iterations=) raise it, docs/control_flow.md)")
    if tuple(X.shape) != tuple(data.shape[1:]):
        raise ShapeError(f"{c.where}: X has shape {list(X.shape)} but the array holds "
                         f"elements of {list(data.shape[1:])}")
    j = jnp.clip(i, 0, cap - 1)
    data = lax.dynamic_update_index_in_dim(data, X.astype(data.dtype), j, 0)
    return {"Out": TensorArray(data, jnp.maximum(length, i + 1).astype(jnp.int32))}


def _fit(x, size: int):
    """``x`` padded with zeros or cut to ``size`` rows."""
    if x.shape[0] >= size:
        return x[:size]
    return jnp.pad(x, [(0, size - x.shape[0])] + [(0, 0)] * (x.ndim - 1))


def _write_lod(c, X: LoDArray, i, Array):
    """An array of LoD values holds one stacked LoDArray (data ``[capacity, T_cap, ...]``,
    lengths ``[capacity, n]`` per level): every element in buffers of the first write's sizes
    (docs/control_flow.md); a later element must fit them."""
    if Array is None or _unsized(Array):  # arr2lod: an empty_array's first write sizes it
        cap = c.out_types["Out"][0].capacity
        stacked = LoDArray(jnp.zeros((cap, *X.data.shape), X.data.dtype),
                           tuple(jnp.zeros((cap, *v.shape), v.dtype) for v in X.lengths))
        length = jnp.zeros((), jnp.int32)
    else:
        stacked, length = Array.data, Array.length
        cap = stacked.data.shape[0]
    report_invalid(c, "I", (i < 0) | (i >= cap), i,
                   f"an index in [0, {cap}): the array's capacity (create_array(capacity=) or "
                   "While(max_iterations=) raise it, docs/control_flow.md)")
    if X.num_sequences != stacked.lengths[0].shape[1] or X.data.shape[1:] != \
            stacked.data.shape[2:]:
        raise ShapeError(f"{c.where}: X holds {X.num_sequences} sequences of rows "
                         f"{list(X.data.shape[1:])} but the array's elements hold "
                         f"{stacked.lengths[0].shape[1]} of {list(stacked.data.shape[2:])}")
    stacked = grow_stacked(stacked, X)
    rows = stacked.data.shape[1]
    report_invalid(c, "X", jnp.reshape(X.token_count() > rows, (1,)),
                   jnp.reshape(X.token_count(), (1,)),
                   f"at most {rows} tokens: the buffer of the array's first element (feed "
                   "that one in a bigger bucket: graphc.runtime.lod.set_min_bucket(n), e.g. "
                   "n = sources * beam_size for a beam search, docs/control_flow.md)")
    for level in range(1, X.lod_level):
        size, used = stacked.lengths[level].shape[1], jnp.sum(X.lengths[level - 1])
        report_invalid(c, "X", jnp.reshape(used > size, (1,)), jnp.reshape(used, (1,)),
                       f"at most {size} level-{level} entries: the array's first element's")
    element = LoDArray(_fit(X.data, rows).astype(stacked.data.dtype),
                       tuple(_fit(v, s.shape[1]).astype(s.dtype)
                             for v, s in zip(X.lengths, stacked.lengths)))
    j = jnp.clip(i, 0, cap - 1)
    stacked = jax.tree.map(lambda buf, e: lax.dynamic_update_index_in_dim(buf, e, j, 0),
                           stacked, element)
    ranked = Array is not None and Array.ranked  # a loop carries one pytree structure
    return {"Out": TensorArray(stacked, jnp.maximum(length, i + 1).astype(jnp.int32), ranked)}


@lowering("empty_array")
def _empty(c, Input=None):
    """Zeros; with Input, the elements' batch dimension is Input's (known when run); an
    element dimension still unknown (-1) is 0 until the first write sizes it (a loop sizes
    its carried arrays before it starts: ``_size_arrays``)."""
    t = c.out_types["Out"][0]
    shape = list(c["shape"])
    if Input is not None:
        shape[1] = Input.shape[c["input_dim_idx"]]
    shape = tuple(max(d, 0) for d in shape)
    length = jnp.zeros((), jnp.int32)
    if t.element_lod:  # arr2lod: no rows, no entries until the loop sizes it
        cap = shape[0]
        return {"Out": TensorArray(LoDArray(jnp.zeros((cap, 0, *shape[2:]), t.dtype), tuple(
            jnp.zeros((cap, 0), jnp.int32) for _ in range(t.element_lod))), length)}
    return {"Out": TensorArray(jnp.zeros(shape, t.dtype), length)}


def _unsized(v) -> bool:
    # an array of LoD values is sized by its first write; empty_array's has no rows yet
    if isinstance(v, TensorArray) and isinstance(v.data, LoDArray):
        return v.data.data.shape[1] == 0 and v.data.lengths[0].shape[1] == 0
    return isinstance(v, TensorArray) and v.data.size == 0 and v.data.shape[0] > 0


def _lod_array(v) -> bool:
    return isinstance(v, TensorArray) and isinstance(v.data, LoDArray)


def _size_arrays(step, state):
    """``state`` with each empty array whose element shape is unknown sized as one step of
    the body writes it, and each array of LoD values widened to the buffers the body's
    writes need (a boot state of N rows, then N * beam_size candidates): traced abstractly,
    checks dropped, until one step keeps every carried shape (a loop's carry cannot grow)."""
    state = tuple(state)
    if not any(_unsized(v) or _lod_array(v) for v in state):
        return state
    for _ in range(_SIZING_ROUNDS):
        token = _SIZING.set(True)
        try:
            with ignored():
                shapes = jax.eval_shape(step, state)
        finally:
            _SIZING.reset(token)
        new = tuple(TensorArray(jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), s.data),
                                v.length, v.ranked)
                    if _unsized(v) else _widened(v, s) for v, s in zip(state, shapes))
        if all(jax.tree.structure(a) == jax.tree.structure(b) and all(
                x.shape == y.shape for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
               for a, b in zip(new, state)):
            return new
        state = new
    return state


# True while _size_arrays traces a body: arrays of LoD values may widen then
_SIZING: ContextVar[bool] = ContextVar("graphc_sizing_arrays", default=False)
# widening rounds before a loop: each lets a value written from a carried array's element
# (a beam search's picks, then the state expanded by them) widen the next array
_SIZING_ROUNDS = 8


def _widened(v, s):
    """The carried array ``v`` padded to the buffers of ``s`` (its value after one step)
    where those are bigger; anything else unchanged."""
    if not (_lod_array(v) and isinstance(s, TensorArray) and isinstance(s.data, LoDArray)):
        return v

    def pad(buf, shape):
        if tuple(buf.shape) == tuple(shape.shape) or buf.ndim != len(shape.shape):
            return buf
        return jnp.pad(buf, [(0, max(t - b, 0)) for b, t in zip(buf.shape, shape.shape)])
    return TensorArray(jax.tree.map(pad, v.data, s.data), v.length, v.ranked)


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
    j = jnp.clip(i, 0, X.capacity - 1)
    return {"Out": jax.tree.map(lambda buf: lax.dynamic_index_in_dim(buf, j, 0, keepdims=False),
                                X.data)}  # a LoDArray for an array of LoD values


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
            if tuple(val.shape) != tuple(old.shape) and not _unsized(old) and not (
                    _SIZING.get() and _lod_array(old)):
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


def _counted(c, step, state):
    """(step, state) counting the iterations when the body draws random numbers: the count
    rides along as the last carried value, so each iteration draws its own numbers and a
    gradient's replay the same ones."""
    if not _draws(c):
        return step, tuple(state)

    def counting(s):
        return (*step(s[:-1], s[-1]), s[-1] + 1)
    return counting, (*state, jnp.zeros((), jnp.int32))


def _cond_of(c, n_carry):
    k = n_carry + c["cond_index"]
    return lambda state: jnp.reshape(state[k], ())


# True while a loop's gradient replays its body: a loop inside it must be differentiable too
_REPLAYING: ContextVar[bool] = ContextVar("graphc_replaying_loop", default=False)


def _masked_loop(state, step, cond, bound: int):
    """The loop as a scan of ``bound`` checkpointed steps that stop changing the state once
    the condition is false (reverse-differentiable, unlike ``lax.while_loop``). Returns the
    final state, whether the condition still held (the loop wanted more steps), and the
    summary of the bound checks of loops inside (``InnerChecks``; None when there are none):
    every other check was made by the forward loop already."""
    checks = InnerChecks(keep=lambda report: report.own)
    state = _size_arrays(step, state)
    acc = checks.initial(step, state)
    run = checks.checked(step)

    def one(carry, _):
        s, running, acc = carry
        go = running & cond(s)
        if acc is None:
            with ignored():
                new = lax.cond(go, step, lambda s: s, s)
            return (new, go, acc), None
        new, found = lax.cond(go, run, lambda s: (s, checks.zeros()), s)
        return (new, go, checks.merge(acc, found)), None

    (final, _, acc), _ = lax.scan(jax.checkpoint(one), (state, jnp.asarray(True), acc), None,
                                  length=bound)
    return final, cond(final), (checks, acc)


@lowering("while")
def _while(c, Carry=None, Aux=None, X=None, XAux=None):
    carry, aux = list(Carry or ()), list(Aux or ())
    consts = (*(X or ()), *(XAux or ()))
    step, cond = _body_step(c, consts), _cond_of(c, len(carry))
    state = _size_arrays(step, (*carry, *aux))
    step, state = _counted(c, step, state)
    if _REPLAYING.get():  # inside an outer loop's gradient: the differentiable form
        state, unfinished, (checks, acc) = _masked_loop(
            state, step, cond, c["max_iterations"] or DEFAULT_MAX_ITERATIONS)
        checks.report(acc)
        report_invalid(c, "Carry", unfinished, unfinished, _bound_message(c), own=True)
    elif not _traced((state, consts)):  # the interpreter: an eager loop
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
    # arrays are differentiated through their buffers; their lengths ride along
    carry_len, xs_len = [_length_of(v) for v in carry], [_length_of(v) for v in xs]

    def replay(carry_data, xs_data):
        carry_in, xs_in = _rebuild(carry_data, carry_len), _rebuild(xs_data, xs_len)
        step, state = _counted(c, _body_step(c, (*xs_in, *xaux)), (*carry_in, *aux))
        _refuse_widening(c, state[:len(carry)], _size_arrays(step, state)[:len(carry)])
        final, unfinished, (checks, acc) = _masked_loop(state, step, cond, bound)
        traced["checks"] = checks  # which checks acc summarises: known once traced
        return tuple(_data_of(v) for v in final[:len(carry)]), (unfinished, acc)

    traced = {}
    token = _REPLAYING.set(True)
    try:
        outs, vjp, (unfinished, acc) = jax.vjp(replay, tuple(_data_of(v) for v in carry),
                                               tuple(_data_of(v) for v in xs), has_aux=True)
    finally:
        _REPLAYING.reset(token)
    traced["checks"].report(acc)  # the bounds of loops inside, checked by the replay
    report_invalid(c, "Carry", unfinished, unfinished, _bound_message(c), own=True)
    cot = tuple(jnp.zeros_like(o) if g is None else
                jnp.reshape(_data_of(g), o.shape).astype(o.dtype) for o, g in zip(outs, douts))
    dcarry, dxs = vjp(cot)
    result = {}
    if "Carry" + GRAD_SUFFIX in c.out_types:
        result["Carry" + GRAD_SUFFIX] = _rebuild(dcarry, carry_len)
    if "X" + GRAD_SUFFIX in c.out_types:
        result["X" + GRAD_SUFFIX] = _rebuild(dxs, xs_len)
    return result


def _refuse_widening(c, carry, sized) -> None:
    """A carried array of LoD values whose buffers the body widens (a mixed array's dense
    rows, then a beam's candidates) has no replay that keeps its buffers: refused by name.
    Arrays that keep theirs (lod_tensor_to_array's steps, a DynamicRNN's memories) pass."""
    widened = [str(k) for k, (v, s) in enumerate(zip(carry, sized))
               if _lod_array(v) and not _unsized(v) and
               tuple(v.data.data.shape) != tuple(s.data.data.shape)]
    if widened:
        raise ShapeError(f"{c.where}: gradients through a loop that carries an array of LoD "
                         f"values whose buffers widen (Carry {', '.join(widened)}: "
                         f"{carry[int(widened[0])]}) are not supported; decoding loops run "
                         "without backward (docs/control_flow.md)")


def _bound_message(c) -> str:
    bound = c["max_iterations"] or DEFAULT_MAX_ITERATIONS
    return (f"a loop of at most {bound} iterations for its gradient (While(max_iterations=) "
            "raises the bound, docs/control_flow.md)")


def _length_of(v):
    if isinstance(v, TensorArray) and isinstance(v.data, LoDArray):
        # arr2lod: an array of LoD steps rides along with its elements' lengths too
        return v.length, v.data.lengths, v.ranked
    return v.length if isinstance(v, TensorArray) else None


def _data_of(v):
    if isinstance(v, TensorArray):
        return v.data.data if isinstance(v.data, LoDArray) else v.data
    return v


def _rebuild(datas, lengths) -> list:
    out = []
    for d, n in zip(datas, lengths):
        if isinstance(n, tuple):  # an array of LoD steps: its buffer back in its LoD
            out.append(TensorArray(LoDArray(d, n[1]), n[0], n[2]))
        else:
            out.append(d if n is None else TensorArray(d, n))
    return out


# -- gradients of the array ops ----------------------------------------------------------
@lowering("write_to_array_grad")
def _write_grad(c, X, I, Array=None, **kw):
    """The element written takes its gradient from the array's; the array before the write
    gets the rest (the write replaced element I)."""
    dout = kw["Out" + GRAD_SUFFIX]
    j = jnp.clip(_index(I), 0, dout.capacity - 1)
    if isinstance(dout.data, LoDArray):
        return _write_grad_lod(c, X, j, Array, dout)
    out = {}
    if "X" + GRAD_SUFFIX in c.out_types:
        elem = lax.dynamic_index_in_dim(dout.data, j, 0, keepdims=False)
        out["X" + GRAD_SUFFIX] = jnp.reshape(elem, X.shape).astype(X.dtype)
    if "Array" + GRAD_SUFFIX in c.out_types:
        zero = jnp.zeros(dout.data.shape[1:], dout.data.dtype)
        out["Array" + GRAD_SUFFIX] = TensorArray(
            lax.dynamic_update_index_in_dim(dout.data, zero, j, 0), Array.length)
    return out


def _write_grad_lod(c, X, j, Array, dout):
    """``_write_grad`` for an array of LoD values: the element's token rows go to X (a
    LoD value, or the dense rows a mixed array stored as one-row sequences)."""
    stacked, out = dout.data, {}
    if "X" + GRAD_SUFFIX in c.out_types:
        rows = lax.dynamic_index_in_dim(stacked.data, j, 0, keepdims=False)
        if isinstance(X, LoDArray):
            out["X" + GRAD_SUFFIX] = X.masked(_fit(rows, X.data.shape[0]).astype(X.dtype))
        else:
            out["X" + GRAD_SUFFIX] = _fit(rows, X.shape[0]).astype(X.dtype)
    if "Array" + GRAD_SUFFIX in c.out_types:
        zero = jnp.zeros(stacked.data.shape[1:], stacked.data.dtype)
        out["Array" + GRAD_SUFFIX] = TensorArray(
            stacked.with_data(lax.dynamic_update_index_in_dim(stacked.data, zero, j, 0)),
            Array.length, Array.ranked)
    return out


@lowering("read_from_array_grad")
def _read_grad(c, X, I, **kw):
    """An array of zeros but for element I, which takes the read value's gradient."""
    dout = kw["Out" + GRAD_SUFFIX]
    j = jnp.clip(_index(I), 0, X.capacity - 1)
    if isinstance(X.data, LoDArray):  # the element's token rows, in the array's buffer
        rows = _fit(dout.data if isinstance(dout, LoDArray) else dout, X.data.data.shape[1])
        data = lax.dynamic_update_index_in_dim(jnp.zeros_like(X.data.data),
                                               rows.astype(X.dtype), j, 0)
        return {"X" + GRAD_SUFFIX: TensorArray(X.data.with_data(data), X.length, X.ranked)}
    data = lax.dynamic_update_index_in_dim(jnp.zeros_like(X.data), dout.astype(X.dtype), j, 0)
    return {"X" + GRAD_SUFFIX: TensorArray(data, X.length)}


@lowering("tensor_array_to_tensor_grad")
def _to_tensor_grad(c, X, **kw):
    """Each element's slice of the output's gradient, back in the array's layout."""
    d, axis = kw["Out" + GRAD_SUFFIX], c["axis"]
    if c["use_stack"]:
        data = jnp.moveaxis(d, axis % d.ndim, 0)
    else:
        axis %= X.data.ndim - 1
        split = (*d.shape[:axis], X.capacity, X.data.shape[1 + axis], *d.shape[axis + 1:])
        data = jnp.moveaxis(jnp.reshape(d, split), axis, 0)
    return {"X" + GRAD_SUFFIX: TensorArray(data.astype(X.dtype), X.length)}
