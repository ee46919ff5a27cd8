"""Lowering of the recurrent ops (lstm, lstmp, gru over LoD sequences; gru_unit, lstm_unit):
a loop over time on the packed tokens, sequences as rows, finished sequences masked.

The loop (``recur``) runs ``max(lengths)`` steps, a count known only on device
(``lax.while_loop``), so the compiled step depends on the token bucket alone, and a batch of
short sequences never pays for the bucket's worst case. Step ``t`` gathers token ``t`` of
every sequence from the packed buffer (``offsets + t``; reversed: from the end), runs the cell
on the ``[N, ...]`` rows, keeps the old state of finished sequences and scatters the new one
back to its token's row, so padding rows stay zero and never feed a state. A while loop has
no reverse-mode derivative: ``recur`` is a ``jax.custom_vjp`` whose backward pass runs the
same steps backwards (back-propagation through time with the saved per-token states, the
vjp of one cell per step), so ``jax.vjp`` of these rules (the generic LoD gradient) works.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...backends.lod import LENGTHS_DTYPE, LoDArray, unwrap
from ...backends.lowering import lowering
from ...ir.grad_defs import GRAD_SUFFIX
from .defs import UNIT_ACTIVATIONS

ACTS = {"sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "relu": jax.nn.relu,
        "identity": lambda v: v}


def _rows(mask, like):
    return mask.reshape(mask.shape + (1,) * (like.ndim - 1))


def _positions(t, offsets, lengths, reverse: bool):
    """Row of token ``t`` of every sequence (from the end when reversed), and which
    sequences are that long."""
    pos = lengths - 1 - t if reverse else t
    return offsets + pos, t < lengths


def _take(data, idx):
    return jnp.take(data, jnp.clip(idx, 0, data.shape[0] - 1), axis=0)


def _prepare(xs, lengths):
    lengths = lengths.astype(LENGTHS_DTYPE)
    return xs[0].shape[0], jnp.cumsum(lengths) - lengths, lengths, \
        jnp.max(lengths, initial=0).astype(LENGTHS_DTYPE)


def _run(step, reverse, params, xs, lengths, init):
    cap, offsets, lengths, steps = _prepare(xs, lengths)
    states0 = tuple(jnp.zeros((cap, *s.shape[1:]), s.dtype) for s in init)

    def body(loop):
        t, carry, states = loop
        idx, active = _positions(t, offsets, lengths, reverse)
        new = step(params, tuple(_take(x, idx) for x in xs), carry, t)
        carry = tuple(jnp.where(_rows(active, c), n.astype(c.dtype), c)
                      for n, c in zip(new, carry))
        dest = jnp.where(active, idx, cap)  # finished sequences write nowhere
        states = tuple(s.at[dest].set(n.astype(s.dtype), mode="drop")
                       for s, n in zip(states, new))
        return t + 1, carry, states

    loop = (jnp.zeros((), LENGTHS_DTYPE), tuple(init), states0)
    _, carry, states = lax.while_loop(lambda lp: lp[0] < steps, body, loop)
    return states, carry


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def recur(step, reverse, params, xs, lengths, init):
    """Per-token states ``[T_cap, ...]`` (one per carry) of ``step(params, x_t, carry, t) ->
    new carry`` run over each sequence of the packed ``xs`` from the carry ``init``
    (``[N, ...]`` each). Differentiable in params, xs and init."""
    return _run(step, reverse, params, xs, lengths, init)[0]


def _recur_fwd(step, reverse, params, xs, lengths, init):
    states = _run(step, reverse, params, xs, lengths, init)[0]
    return states, (params, xs, lengths, init, states)


def _inexact(a) -> bool:
    return jnp.issubdtype(jnp.result_type(a), jnp.inexact)


def _fill(leaves, picks, values):
    out = list(leaves)
    for i, v in zip(picks, values):
        out[i] = v
    return out


def _recur_bwd(step, reverse, res, d_states):
    params, xs, lengths_in, init, states = res
    cap, offsets, lengths, steps = _prepare(xs, lengths_in)
    # integer leaves (ids, a LoD constant's lengths, back-pointers) get no gradient
    p_leaves, p_def = jax.tree.flatten(params)
    p_diff = [i for i, a in enumerate(p_leaves) if _inexact(a)]
    x_diff = [i for i, a in enumerate(xs) if _inexact(a)]
    c_diff = [i for i, a in enumerate(init) if _inexact(a)]

    def body(loop):
        t, dcarry, dparams, dxs = loop
        idx, active = _positions(t, offsets, lengths, reverse)
        prev_idx = idx + 1 if reverse else idx - 1
        x_t = [_take(x, idx) for x in xs]
        prev = [jnp.where(t == 0, c, _take(s, prev_idx)) for c, s in zip(init, states)]

        def one_step(pd, xd, cd):
            p = jax.tree.unflatten(p_def, _fill(p_leaves, p_diff, pd))
            new = step(p, tuple(_fill(x_t, x_diff, xd)), tuple(_fill(prev, c_diff, cd)), t)
            return tuple(new[i] for i in c_diff)

        cot = tuple(jnp.where(_rows(active, dc), dc + _take(d_states[i], idx), 0)
                    .astype(dc.dtype) for dc, i in zip(dcarry, c_diff))
        _, vjp = jax.vjp(one_step, [p_leaves[i] for i in p_diff], [x_t[i] for i in x_diff],
                         [prev[i] for i in c_diff])
        dp, dx, dprev = vjp(cot)
        dest = jnp.where(active, idx, cap)
        dxs = tuple(g.at[dest].add(d.astype(g.dtype), mode="drop") for g, d in zip(dxs, dx))
        dcarry = tuple(jnp.where(_rows(active, dc), d.astype(dc.dtype), dc)
                       for dc, d in zip(dcarry, dprev))
        dparams = tuple(a + b.astype(a.dtype) for a, b in zip(dparams, dp))
        return t - 1, dcarry, dparams, dxs

    loop = (steps - 1, tuple(jnp.zeros_like(init[i]) for i in c_diff),
            tuple(jnp.zeros_like(p_leaves[i]) for i in p_diff),
            tuple(jnp.zeros_like(xs[i]) for i in x_diff))
    _, dinit, dparams, dxs = lax.while_loop(lambda lp: lp[0] >= 0, body, loop)

    def none(a):
        return np.zeros(np.shape(a), jax.dtypes.float0)

    dparams = jax.tree.unflatten(p_def, _fill([none(a) for a in p_leaves], p_diff, dparams))
    dxs = tuple(_fill([none(a) for a in xs], x_diff, dxs))
    dinit = tuple(_fill([none(a) for a in init], c_diff, dinit))
    return dparams, dxs, none(lengths_in), dinit


recur.defvjp(_recur_fwd, _recur_bwd)


def _zeros_state(x: LoDArray, width: int):
    return jnp.zeros((x.num_sequences, width), x.dtype)


# -- cells --------------------------------------------------------------------------------------

def _lstm_acts(c):
    return ACTS[c["gate_activation"]], ACTS[c["cell_activation"]], \
        ACTS[c["candidate_activation"]]


def _peepholes(bias, hidden, use):
    return tuple(bias[:, k * hidden:(k + 1) * hidden] for k in (4, 5, 6)) if use else None


def _lstm_setup(c, Input, H0, C0, Weight, Bias, ProjWeight=None):
    """(step, params, initial-state inputs, init(params, h0, c0)) of lstm, or of lstmp
    when ``ProjWeight`` is given (its recurrent state is r = proj_activation(h ProjWeight),
    starting from h0 = r_0)."""
    hidden = Weight.shape[1] // 4
    gate, cell_act, cand = _lstm_acts(c)
    use_peep = c["use_peepholes"]
    proj = ProjWeight is not None
    proj_act = ACTS[c["proj_activation"]] if proj else None
    cell_clip, proj_clip = (c["cell_clip"], c["proj_clip"]) if proj else (0.0, 0.0)

    def step(p, x_t, carry, t):
        w, b = p[0], p[-1]
        h, cell = carry
        g_c, g_i, g_f, g_o = jnp.split(x_t[0] + h @ w + b[:, :4 * hidden], 4, axis=-1)
        peep = _peepholes(b, hidden, use_peep)
        if peep is not None:
            g_i, g_f = g_i + peep[0] * cell, g_f + peep[1] * cell
        new_c = gate(g_f) * cell + gate(g_i) * cand(g_c)
        if cell_clip > 0:
            new_c = jnp.clip(new_c, -cell_clip, cell_clip)
        if peep is not None:
            g_o = g_o + peep[2] * new_c
        new_h = gate(g_o) * cell_act(new_c)
        if proj:
            new_h = proj_act(new_h @ p[1])
            if proj_clip > 0:
                new_h = jnp.clip(new_h, -proj_clip, proj_clip)
        return new_h, new_c

    width = ProjWeight.shape[1] if proj else hidden

    def init(p, h0, c0):
        # lstmp's h0 is the initial projection r_0 ([N, P], as Paddle 1.8's layer asserts)
        r0 = _zeros_state(Input, width) if h0 is None else h0
        return r0, (c0 if c0 is not None else _zeros_state(Input, hidden))

    params = (Weight, ProjWeight, Bias) if proj else (Weight, Bias)
    return step, params, (H0, C0), init


def _gru_setup(c, Input, H0, Weight, Bias):
    hidden = Weight.shape[0]
    act, gate_act = ACTS[c["activation"]], ACTS[c["gate_activation"]]
    origin = c["origin_mode"]

    def step(p, x_t, carry, t):
        return (gru_cell(x_t[0], carry[0], p[0], p[1], act, gate_act, origin)[0],)

    def init(p, h0):
        return (h0 if h0 is not None else _zeros_state(Input, hidden),)

    return step, (Weight, Bias), (H0,), init


def _forward(c, x: LoDArray, setup):
    step, params, init_ins, init = setup
    return recur(step, c["is_reverse"], params, (x.data,), x.lengths[0],
                 tuple(init(params, *init_ins)))


def _backward(c, kw, setup, state_slots, param_slots, init_slots):
    """Gradients of a recurrent op from its saved per-token states (its outputs), by the
    backward loop of ``recur``: no second forward loop."""
    x = kw["Input"]
    step, params, init_ins, init = setup
    init_val, init_vjp = jax.vjp(lambda p, *ins: tuple(init(p, *ins)), params, *init_ins)
    states = tuple(kw[s].data for s in state_slots)
    d_states = tuple(jnp.zeros_like(st) if kw.get(s + GRAD_SUFFIX) is None
                     else unwrap(kw[s + GRAD_SUFFIX]).astype(st.dtype).reshape(st.shape)
                     for s, st in zip(state_slots, states))
    dparams, dxs, _, dinit = _recur_bwd(step, c["is_reverse"],
                                        (params, (x.data,), x.lengths[0], init_val, states),
                                        d_states)
    dp_init, *dins = init_vjp(tuple(dinit))
    dparams = jax.tree.map(jnp.add, dparams, dp_init)
    grads = {"Input": x.masked(dxs[0]), **dict(zip(param_slots, dparams)),
             **dict(zip(init_slots, dins))}
    return {s + GRAD_SUFFIX: g for s, g in grads.items() if s + GRAD_SUFFIX in c.out_types}


@lowering("lstm")
def _lstm(c, Input, H0, C0, Weight, Bias):
    h, cell = _forward(c, Input, _lstm_setup(c, Input, H0, C0, Weight, Bias))
    return {"Hidden": Input.with_data(h), "Cell": Input.with_data(cell)}


@lowering("lstm_grad")
def _lstm_grad(c, **kw):
    setup = _lstm_setup(c, kw["Input"], kw["H0"], kw["C0"], kw["Weight"], kw["Bias"])
    return _backward(c, kw, setup, ("Hidden", "Cell"), ("Weight", "Bias"), ("H0", "C0"))


@lowering("lstmp")
def _lstmp(c, Input, H0, C0, Weight, ProjWeight, Bias):
    r, cell = _forward(c, Input, _lstm_setup(c, Input, H0, C0, Weight, Bias, ProjWeight))
    return {"Projection": Input.with_data(r), "Cell": Input.with_data(cell)}


@lowering("lstmp_grad")
def _lstmp_grad(c, **kw):
    setup = _lstm_setup(c, kw["Input"], kw["H0"], kw["C0"], kw["Weight"], kw["Bias"],
                        kw["ProjWeight"])
    return _backward(c, kw, setup, ("Projection", "Cell"), ("Weight", "ProjWeight", "Bias"),
                     ("H0", "C0"))


def gru_weights(w):
    """Paddle's GRU weight buffer [H, 3H]: the [H, 2H] update/reset weights, then the
    [H, H] candidate weights, each contiguous (not column blocks of one matrix)."""
    h = w.shape[0]
    flat = w.reshape(-1)
    return flat[:2 * h * h].reshape(h, 2 * h), flat[2 * h * h:].reshape(h, h)


def gru_cell(x, h_prev, w, bias, act, gate_act, origin_mode):
    """One GRU step on pre-activations ``x`` [N, 3H] (update, reset, candidate); returns
    (hidden, r * h_prev, activated gates [u, r, m])."""
    hidden = w.shape[0]
    w_ur, w_c = gru_weights(w)
    if bias is not None:
        x = x + bias
    ur = gate_act(x[:, :2 * hidden] + h_prev @ w_ur)
    u, r = ur[:, :hidden], ur[:, hidden:]
    reset = r * h_prev
    m = act(x[:, 2 * hidden:] + reset @ w_c)
    h = u * h_prev + (1 - u) * m if origin_mode else (1 - u) * h_prev + u * m
    return h, reset, jnp.concatenate([ur, m], axis=-1)


def _state_rows(c, h0, x: LoDArray):
    """A LoD H0 as Paddle reads it: its token rows are the [N, H] initial states, one per
    sequence of ``x`` (a data check that it holds exactly N rows)."""
    if not isinstance(h0, LoDArray):
        return h0
    from ...backends.data_checks import report_invalid
    n = x.lengths[0].shape[0]
    count = h0.token_count()
    report_invalid(c, "H0", jnp.reshape(count != n, (1,)), jnp.reshape(count, (1,)),
                   f"{n} rows in H0 (one initial state per sequence of Input)")
    return jnp.take(h0.data, jnp.clip(jnp.arange(n), 0, max(h0.capacity - 1, 0)), axis=0)


@lowering("gru")
def _gru(c, Input, H0, Weight, Bias):
    h0 = _state_rows(c, H0, Input)
    (h,) = _forward(c, Input, _gru_setup(c, Input, h0, Weight, Bias))
    return {"Hidden": Input.with_data(h)}


@lowering("gru_grad")
def _gru_grad(c, **kw):
    h0 = kw["H0"]
    setup = _gru_setup(c, kw["Input"], _state_rows(c, h0, kw["Input"]), kw["Weight"],
                       kw["Bias"])
    grads = _backward(c, kw, setup, ("Hidden",), ("Weight", "Bias"), ("H0",))
    key = "H0" + GRAD_SUFFIX
    if isinstance(h0, LoDArray) and grads.get(key) is not None:  # back onto H0's token rows
        d = grads[key]
        rows = jnp.zeros((h0.capacity, *d.shape[1:]), d.dtype)
        grads[key] = h0.masked(rows.at[:min(d.shape[0], h0.capacity)].set(
            d[:h0.capacity]))
    return grads


@lowering("gru_unit")
def _gru_unit(c, Input, HiddenPrev, Weight, Bias):
    act = ACTS[UNIT_ACTIVATIONS[c["activation"]]]
    gate_act = ACTS[UNIT_ACTIVATIONS[c["gate_activation"]]]
    h, reset, gate = gru_cell(Input, HiddenPrev, Weight, Bias, act, gate_act,
                              c["origin_mode"])
    return {"Gate": gate, "ResetHiddenPrev": reset, "Hidden": h}


@lowering("lstm_unit")
def _lstm_unit(c, X, C_prev):
    i, f, o, g = jnp.split(X, 4, axis=-1)
    cell = jax.nn.sigmoid(f + c["forget_bias"]) * C_prev + jax.nn.sigmoid(i) * jnp.tanh(g)
    return {"C": cell, "H": jax.nn.sigmoid(o) * jnp.tanh(cell)}
