"""Recurrent layers over LoD sequences (issue 16): dynamic_lstm, dynamic_lstmp, dynamic_gru,
gru_unit and lstm_unit against step-by-step NumPy references on the ragged data (random LoDs
with empty and length-1 sequences), finite-difference gradients of the tokens, the initial
states and the parameters, interpreter == JAX, and a bounded compile count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import layers, unique_name
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.runtime import lod as rlod
from graphc.runtime.lod import create_lod_tensor
from graphc.testing.lod import as_feed, lod_grad_check, lod_lengths, split

ACT = {"sigmoid": lambda v: 1 / (1 + np.exp(-v)), "tanh": np.tanh,
       "relu": lambda v: np.maximum(v, 0), "identity": lambda v: v}


# -- NumPy references, sequence by sequence ------------------------------------------------------

def lstm_reference(tokens, lengths, w, b, h0=None, c0=None, peep=True, reverse=False,
                   acts=("sigmoid", "tanh", "tanh"), proj=None, proj_act="tanh"):
    """Paddle's LSTM (gates candidate, input, forget, output; peepholes in b[4H:7H]); with
    ``proj`` the LSTMP recurrence through r = proj_act(h proj). Returns (out, cell) tokens."""
    gate, cell_act, cand = (ACT[a] for a in acts)
    hidden = b.shape[1] // (7 if peep else 4)
    outs, cells = [], []
    for n, seq in enumerate(split(tokens, lengths)):
        width = proj.shape[1] if proj is not None else hidden
        h = np.zeros(width) if h0 is None else h0[n]  # lstmp: h0 is r_0, [N, P]
        c = np.zeros(hidden) if c0 is None else c0[n]
        o_seq, c_seq = [None] * len(seq), [None] * len(seq)
        for t in (reversed(range(len(seq))) if reverse else range(len(seq))):
            g = seq[t] + h @ w + b[0, :4 * hidden]
            gc, gi, gf, go = np.split(g, 4)
            if peep:
                gi = gi + b[0, 4 * hidden:5 * hidden] * c
                gf = gf + b[0, 5 * hidden:6 * hidden] * c
            c = gate(gf) * c + gate(gi) * cand(gc)
            if peep:
                go = go + b[0, 6 * hidden:] * c
            h = gate(go) * cell_act(c)
            if proj is not None:
                h = ACT[proj_act](h @ proj)
            o_seq[t], c_seq[t] = h, c
        outs += o_seq
        cells += c_seq
    width = proj.shape[1] if proj is not None else hidden
    return (np.array(outs).reshape(-1, width), np.array(cells).reshape(-1, hidden))


def gru_step(x, h, w, b, act="tanh", gate_act="sigmoid", origin=False):
    d = w.shape[0]
    w_ur = w.reshape(-1)[:2 * d * d].reshape(d, 2 * d)  # Paddle's buffer layout
    w_c = w.reshape(-1)[2 * d * d:].reshape(d, d)
    x = x + (b[0] if b is not None else 0)
    ur = ACT[gate_act](x[..., :2 * d] + h @ w_ur)
    u, r = ur[..., :d], ur[..., d:]
    m = ACT[act](x[..., 2 * d:] + (r * h) @ w_c)
    out = u * h + (1 - u) * m if origin else (1 - u) * h + u * m
    return out, r * h, np.concatenate([ur, m], -1)


def gru_reference(tokens, lengths, w, b, h0=None, reverse=False, origin=False):
    d = w.shape[0]
    outs = []
    for n, seq in enumerate(split(tokens, lengths)):
        h = np.zeros(d) if h0 is None else h0[n]
        o = [None] * len(seq)
        for t in (reversed(range(len(seq))) if reverse else range(len(seq))):
            h = gru_step(seq[t], h, w, b, origin=origin)[0]
            o[t] = h
        outs += o
    return np.array(outs).reshape(-1, d)


def params_of(graph, rng, scale=0.5):
    return {v.var.name: (rng.uniform(-1, 1, v.type.shape) * scale).astype(v.type.dtype)
            for v in graph.inputs if v.var.kind in ("param", "persistable")}


def lod(data, lengths):
    return create_lod_tensor(np.asarray(data), lengths)


# -- forward against the references ----------------------------------------------------------------

@settings(max_examples=6, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=4, max_length=5), reverse=st.booleans(),
       peep=st.booleans(), with_init=st.booleans(), origin=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_lstm_lstmp_gru_match_the_ragged_references(lengths, reverse, peep, with_init, origin,
                                                    seed):
    rng = np.random.default_rng(seed)
    (lens,) = lengths
    hidden, n = 3, len(lens)
    tokens = rng.standard_normal((sum(lens), 4 * hidden))
    with graphc.program_guard(graphc.Program(), graphc.Program()), unique_name.guard():
        x = graphc.data("x", [-1, 4 * hidden], "float64", lod_level=1)
        h0 = graphc.data("h0", [-1, hidden], "float64")
        c0 = graphc.data("c0", [-1, hidden], "float64")
        init = {"h_0": h0, "c_0": c0} if with_init else {}
        h, c = layers.dynamic_lstm(x, 4 * hidden, use_peepholes=peep, is_reverse=reverse,
                                   dtype="float64", **init)
        p0 = graphc.data("p0", [-1, 2], "float64")
        p, pc = layers.dynamic_lstmp(x, 4 * hidden, 2, use_peepholes=peep, is_reverse=reverse,
                                     dtype="float64", **({"h_0": p0, "c_0": c0}
                                                         if with_init else {}))
        gx = graphc.data("gx", [-1, 3 * hidden], "float64", lod_level=1)
        g = layers.dynamic_gru(gx, hidden, is_reverse=reverse, origin_mode=origin,
                               h_0=h0 if with_init else None)
        prog = graphc.default_main_program()
        graph = graphc.lower(prog)
    state = params_of(graph, rng)
    h0v, c0v = rng.standard_normal((n, hidden)), rng.standard_normal((n, hidden))
    gtokens = rng.standard_normal((sum(lens), 3 * hidden))
    p0v = rng.standard_normal((n, 2))
    feed = {"x": as_feed(prog, "x", lod(tokens, [lens])), "h0": h0v, "c0": c0v, "p0": p0v,
            "gx": as_feed(prog, "gx", lod(gtokens, [lens]))}
    fetch = [h.name, c.name, p.name, pc.name, g.name]
    got = [np.asarray(rlod.unpack(v)) for v in run_graph(graph, state, feed, fetch)[1]]
    w, b = state["lstm_0.w_0"], state["lstm_0.b_0"]
    inits = (h0v, c0v) if with_init else (None, None)
    want_h, want_c = lstm_reference(tokens, lens, w, b, *inits, peep=peep, reverse=reverse)
    np.testing.assert_allclose(got[0], want_h, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[1], want_c, rtol=1e-10, atol=1e-12)
    want_p, want_pc = lstm_reference(tokens, lens, state["lstmp_0.w_0"], state["lstmp_0.b_0"],
                                     *((p0v, c0v) if with_init else (None, None)),
                                     peep=peep, reverse=reverse, proj=state["lstmp_0.w_1"])
    np.testing.assert_allclose(got[2], want_p, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[3], want_pc, rtol=1e-10, atol=1e-12)
    want_g = gru_reference(gtokens, lens, state["gru_0.w_0"], state["gru_0.b_0"],
                           h0v if with_init else None, reverse, origin)
    np.testing.assert_allclose(got[4], want_g, rtol=1e-10, atol=1e-12)


def test_lstm_activations_and_lod_of_the_outputs():
    rng = np.random.default_rng(1)
    x = graphc.data("x", [-1, 8], "float64", lod_level=1)
    h, c = layers.dynamic_lstm(x, 8, gate_activation="sigmoid", cell_activation="relu",
                               candidate_activation="identity", use_peepholes=False,
                               dtype="float64")
    assert h.lod_level == 1 and tuple(h.shape) == (-1, 2)
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(graphc.default_startup_program(), scope=scope)
    tokens = rng.standard_normal((4, 8))
    got_h, = exe.run(feed={"x": lod(tokens, [[1, 0, 3]])}, fetch_list=[h], scope=scope,
                     return_numpy=False)
    assert got_h.recursive_sequence_lengths() == [[1, 0, 3]]
    w, b = (np.asarray(scope[n]) for n in ("lstm_0.w_0", "lstm_0.b_0"))
    want, _ = lstm_reference(tokens, [1, 0, 3], w, b, peep=False,
                             acts=("sigmoid", "relu", "identity"))
    np.testing.assert_allclose(np.array(got_h), want, rtol=1e-10)


def test_units_match_one_reference_step():
    rng = np.random.default_rng(2)
    d = 3
    xin = graphc.data("xin", [-1, 3 * d], "float64")
    hp = graphc.data("hp", [-1, d], "float64")
    out, reset, gate = layers.gru_unit(xin, hp, 3 * d, origin_mode=True)
    xt = graphc.data("xt", [-1, 5], "float64")
    cp = graphc.data("cp", [-1, d], "float64")
    h2, c2 = layers.lstm_unit(xt, hp, cp, forget_bias=0.5)
    prog = graphc.default_main_program()
    graph = graphc.lower(prog)
    state = params_of(graph, rng)
    feed = {"xin": rng.standard_normal((4, 3 * d)), "hp": rng.standard_normal((4, d)),
            "xt": rng.standard_normal((4, 5)), "cp": rng.standard_normal((4, d))}
    got = run_graph(graph, state, feed, [out.name, reset.name, gate.name, h2.name, c2.name])[1]
    want = gru_step(feed["xin"], feed["hp"], state["gru_unit_0.w_0"], state["gru_unit_0.b_0"],
                    origin=True)
    for g, w in zip(got[:3], want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    pre = np.concatenate([feed["xt"], feed["hp"]], 1) @ state["fc_0.w_0"] + state["fc_0.b_0"]
    i, f, o, gg = np.split(pre, 4, axis=1)
    sig = ACT["sigmoid"]
    cell = sig(f + 0.5) * feed["cp"] + sig(i) * np.tanh(gg)
    np.testing.assert_allclose(got[4], cell, rtol=1e-12)
    np.testing.assert_allclose(got[3], sig(o) * np.tanh(cell), rtol=1e-12)


# -- gradients -------------------------------------------------------------------------------------

def param_grad_check(graph_fwd, graph_full, state, feeds, loss, names, rng, eps=1e-6,
                     coords=4, rtol=1e-5, atol=1e-7):
    """Central differences of ``loss`` in a few coordinates of each parameter / dense feed."""
    fetched = run_graph(graph_full, state, feeds, [n + "@GRAD" for n in names])[1]
    for name, g in zip(names, fetched):
        src = state if name in state else feeds
        value = np.asarray(src[name], np.float64)
        for i in rng.choice(value.size, min(coords, value.size), replace=False):
            vals = []
            for sign in (1, -1):
                moved = value.copy().reshape(-1)
                moved[i] += sign * eps
                moved = moved.reshape(value.shape)
                st_, fd = (({**state, name: moved}, feeds) if src is state
                           else (state, {**feeds, name: moved}))
                vals.append(float(np.asarray(run_graph(graph_fwd, st_, fd, [loss])[1][0])
                                  .reshape(-1)[0]))
            np.testing.assert_allclose(np.asarray(g).reshape(-1)[i],
                                       (vals[0] - vals[1]) / (2 * eps), rtol=rtol, atol=atol,
                                       err_msg=f"d loss / d {name}[{i}]")


@pytest.mark.parametrize("kind", ["lstm", "lstmp", "gru"])
@pytest.mark.parametrize("reverse", [False, True])
def test_recurrent_gradients_by_finite_differences(kind, reverse):
    rng = np.random.default_rng(11 + reverse)
    lens = [3, 0, 1, 2]
    hidden, n = 2, len(lens)
    width = (3 if kind == "gru" else 4) * hidden
    x = graphc.data("x", [-1, width], "float64", lod_level=1)
    x.stop_gradient = False
    h0 = graphc.data("h0", [-1, 3 if kind == "lstmp" else hidden], "float64")
    h0.stop_gradient = False
    c0 = graphc.data("c0", [-1, hidden], "float64")
    c0.stop_gradient = False
    if kind == "gru":
        outs = [layers.dynamic_gru(x, hidden, is_reverse=reverse, h_0=h0)]
    elif kind == "lstm":
        outs = list(layers.dynamic_lstm(x, width, h_0=h0, c_0=c0, is_reverse=reverse,
                                        dtype="float64"))
    else:
        outs = list(layers.dynamic_lstmp(x, width, 3, h_0=h0, c_0=c0, is_reverse=reverse,
                                         dtype="float64", cell_clip=5.0, proj_clip=5.0))
    wts = [graphc.data(f"w{i}", [-1, o.shape[1]], "float64", lod_level=1)
           for i, o in enumerate(outs)]
    terms = [layers.reduce_sum(layers.elementwise_mul(o, w)) for o, w in zip(outs, wts)]
    loss = terms[0] if len(terms) == 1 else layers.sums(terms)
    prog = graphc.default_main_program()
    fwd = graphc.lower(prog)
    state = params_of(fwd, rng, scale=1.0)
    tokens = rng.standard_normal((sum(lens), width))
    feeds = {"x": lod(tokens, [lens]), "h0": rng.standard_normal((n, h0.shape[1])),
             "c0": rng.standard_normal((n, hidden))}
    feeds.update({f"w{i}": lod(rng.standard_normal((sum(lens), o.shape[1])), [lens])
                  for i, o in enumerate(outs)})
    # the tokens: central differences through the LoD feed
    lod_grad_check(prog, loss, feeds, ["x"], rng, state=state)
    full = graphc.lower(prog)
    packed = {k: as_feed(prog, k, v) for k, v in feeds.items()}
    names = sorted(state) + ["h0"] + ([] if kind == "gru" else ["c0"])
    param_grad_check(fwd, full, state, packed, loss.name, names, rng)


@pytest.mark.parametrize("origin", [False, True])
def test_unit_gradients(origin):
    rng = np.random.default_rng(5)
    d = 2
    xin = graphc.data("xin", [3, 3 * d], "float64")
    hp = graphc.data("hp", [3, d], "float64")
    cp = graphc.data("cp", [3, d], "float64")
    for v in (xin, hp, cp):
        v.stop_gradient = False
    out, reset, gate = layers.gru_unit(xin, hp, 3 * d, origin_mode=origin)
    h2, c2 = layers.lstm_unit(layers.scale(xin, 0.5), out, cp, forget_bias=1.0)
    loss = layers.sums([layers.reduce_sum(layers.elementwise_mul(v, v)) for v in
                        (out, reset, gate, h2, c2)])
    prog = graphc.default_main_program()
    fwd = graphc.lower(prog)
    state = params_of(fwd, rng, 1.0)
    graphc.append_backward(loss)
    full = graphc.lower(prog)
    feeds = {"xin": rng.standard_normal((3, 3 * d)), "hp": rng.standard_normal((3, d)),
             "cp": rng.standard_normal((3, d))}
    param_grad_check(fwd, full, state, feeds, loss.name, sorted(state) + list(feeds), rng)


# -- interpreter == JAX, compile counts, errors -------------------------------------------------

def test_training_step_interpreter_equals_jax_and_compiles_per_bucket():
    rng = np.random.default_rng(3)
    ids = layers.data("ids", [1], dtype="int64", lod_level=1)
    emb = layers.embedding(ids, [20, 4])
    h, _ = layers.dynamic_lstm(layers.fc(emb, 8), 8, is_reverse=True)
    g = layers.dynamic_gru(layers.fc(emb, 6), 2)
    pooled = layers.sequence_pool(layers.concat([h, g], axis=1), "max")
    loss = layers.mean(layers.fc(pooled, 1))
    graphc.optimizer.SGD(0.1).minimize(loss)
    main = graphc.default_main_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    graph = graphc.lower(main)
    names = [v.var.name for v in graph.inputs if v.var.kind in ("param", "persistable")]
    before = {n: np.asarray(scope[n]) for n in names}
    t = create_lod_tensor([[1, 4, 2], [7], [], [3, 3, 9, 1, 0]], [[3, 1, 0, 5]])
    (loss_j,) = exe.run(main, feed={"ids": t}, fetch_list=[loss], scope=scope)
    new_state, (loss_i,) = run_graph(graph, before, {"ids": as_feed(main, "ids", t)},
                                     [loss.name])
    np.testing.assert_allclose(loss_j, loss_i, rtol=1e-5)
    for n in names:
        np.testing.assert_allclose(np.asarray(scope[n]), new_state[n], rtol=1e-4,
                                   atol=1e-6, err_msg=n)
    most = 0
    for _ in range(24):  # random lengths compile one step per token bucket, not per batch
        lens = rng.integers(0, 30, 4).tolist()
        most = max(most, sum(lens))
        t = create_lod_tensor([list(rng.integers(0, 20, k)) for k in lens], [lens])
        exe.run(main, feed={"ids": t}, fetch_list=[loss], scope=scope)
    (prep,) = exe._prepared[main][1].values()
    assert len(prep.steps) <= math.ceil(math.log2(max(most, 16) / rlod.MIN_BUCKET)) + 1


def test_bad_inputs_name_the_layer_or_op():
    x = graphc.data("x", [-1, 8], lod_level=1)
    dense = graphc.data("d", [-1, 8])
    with pytest.raises(ProgramError, match="dynamic_lstm: size must be a positive multiple"):
        layers.dynamic_lstm(x, 6)
    with pytest.raises(ShapeError, match="Input must be a LoD value"):  # no feed (seqtype)
        layers.dynamic_lstm(layers.fill_constant([4, 8], "float32", 0.0), 8)
    with pytest.raises(ShapeError, match="Input's width 8 must be 3 \\* hidden = 12"):
        layers.dynamic_gru(x, 4)
    with pytest.raises(ProgramError, match="gate_activation must be one of"):
        layers.dynamic_gru(x, 4, gate_activation="softmax")
    with pytest.raises(ProgramError, match="give h_0 and c_0 together"):
        layers.dynamic_lstm(x, 8, h_0=dense)
    with pytest.raises(ProgramError, match="lstm_unit: hidden_t_prev is"):
        layers.lstm_unit(dense, graphc.data("h", [-1, 3]), graphc.data("c", [-1, 2]))


# -- DynamicRNN --------------------------------------------------------------------------------

def _drnn_program(hidden=2, width=3):
    """h_t = tanh(fc([x_t, h_{t-1}, pooled static])) from h_0; a counter memory doubling from
    1; outputs h_t and the counter's value before its update."""
    x = graphc.data("x", [-1, width], "float64", lod_level=1)
    x.stop_gradient = False
    h0 = graphc.data("h0", [-1, hidden], "float64")
    h0.stop_gradient = False
    enc = graphc.data("enc", [-1, 2], "float64", lod_level=1)
    drnn = layers.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(x)
        context = layers.sequence_pool(drnn.static_input(enc), "sum")
        prev = drnn.memory(init=h0)
        count = drnn.memory(shape=[1], value=1.0, dtype="float64")
        h = layers.fc([word, prev, context], hidden, act="tanh",
                      param_attr=["wx", "wh", "wc"], bias_attr="b")
        drnn.update_memory(prev, h)
        drnn.update_memory(count, layers.scale(count, 2.0))
        drnn.output(h, count)
    return drnn()


def drnn_reference(tokens, lengths, h0, enc, enc_lengths, p):
    pooled = [s.sum(0) for s in split(enc, enc_lengths)]
    outs, counts = [], []
    for n, seq in enumerate(split(tokens, lengths)):
        h, count = h0[n], 1.0
        for x in seq:
            h = np.tanh(x @ p["wx"] + h @ p["wh"] + pooled[n] @ p["wc"] + p["b"])
            outs.append(h)
            counts.append([count])
            count *= 2
    return np.array(outs).reshape(-1, h0.shape[1]), np.array(counts).reshape(-1, 1)


@settings(max_examples=6, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=4, max_length=5), seed=st.integers(0, 2 ** 16))
def test_dynamic_rnn_matches_the_step_by_step_reference(lengths, seed):
    rng = np.random.default_rng(seed)
    (lens,) = lengths
    n = len(lens)
    enc_lens = rng.integers(0, 3, n).tolist()
    with graphc.program_guard(graphc.Program(), graphc.Program()), unique_name.guard():
        out, count = _drnn_program()
        assert out.lod_level == 1 and tuple(out.shape) == (-1, 2)
        prog = graphc.default_main_program()
        graph = graphc.lower(prog)
    state = params_of(graph, rng, 1.0)
    tokens, h0 = rng.standard_normal((sum(lens), 3)), rng.standard_normal((n, 2))
    enc = rng.standard_normal((sum(enc_lens), 2))
    feed = {"x": as_feed(prog, "x", lod(tokens, [lens])), "h0": h0,
            "enc": as_feed(prog, "enc", lod(enc, [enc_lens]))}
    got = run_graph(graph, state, feed, [out.name, count.name])[1]
    want = drnn_reference(tokens, lens, h0, enc, enc_lens, state)
    for g, w in zip(got, want):
        assert rlod.unpack(g).recursive_sequence_lengths() == [lens]
        np.testing.assert_allclose(np.asarray(rlod.unpack(g)), w, rtol=1e-10, atol=1e-12)


def test_dynamic_rnn_gradients_by_finite_differences():
    rng = np.random.default_rng(8)
    lens = [3, 0, 1, 2]
    out, count = _drnn_program()
    w = graphc.data("w", [-1, 2], "float64", lod_level=1)
    loss = layers.elementwise_add(layers.reduce_sum(layers.elementwise_mul(out, w)),
                                  layers.reduce_sum(count))
    prog = graphc.default_main_program()
    fwd = graphc.lower(prog)
    state = params_of(fwd, rng, 1.0)
    feeds = {"x": lod(rng.standard_normal((6, 3)), [lens]), "h0": rng.standard_normal((4, 2)),
             "enc": lod(rng.standard_normal((3, 2)), [[1, 0, 2, 0]]),
             "w": lod(rng.standard_normal((6, 2)), [lens])}
    lod_grad_check(prog, loss, feeds, ["x"], rng, state=state)
    full = graphc.lower(prog)
    packed = {k: as_feed(prog, k, v) for k, v in feeds.items()}
    param_grad_check(fwd, full, state, packed, loss.name, ["wx", "wh", "wc", "b", "h0"], rng)


def test_dynamic_rnn_of_gru_units_equals_dynamic_gru_and_trains_like_the_interpreter():
    ids = layers.data("ids", [1], dtype="int64", lod_level=1)
    emb = layers.embedding(ids, [20, 4])
    gates = layers.fc(emb, 6, bias_attr=False, param_attr="proj")
    drnn = layers.DynamicRNN()
    with drnn.block():
        g_t = drnn.step_input(gates)
        prev = drnn.memory(shape=[2], value=0.0)
        h, _, _ = layers.gru_unit(g_t, prev, 6, param_attr="gru_w", bias_attr="gru_b")
        drnn.update_memory(prev, h)
        drnn.output(h)
    stepped = drnn()
    whole = layers.dynamic_gru(gates, 2, param_attr="gru_w", bias_attr="gru_b")
    loss = layers.mean(layers.sequence_pool(stepped, "last"))
    graphc.optimizer.SGD(0.5).minimize(loss)
    main = graphc.default_main_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    graph = graphc.lower(main)
    names = [v.var.name for v in graph.inputs if v.var.kind in ("param", "persistable")]
    before = {n: np.asarray(scope[n]) for n in names}
    t = create_lod_tensor([[1, 4, 2], [7], [], [3, 3, 9, 1, 0]], [[3, 1, 0, 5]])
    a, b, loss_j = exe.run(main, feed={"ids": t}, fetch_list=[stepped, whole, loss],
                           scope=scope)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    new_state, (loss_i,) = run_graph(graph, before, {"ids": as_feed(main, "ids", t)},
                                     [loss.name])
    np.testing.assert_allclose(loss_j, loss_i, rtol=1e-5)
    for n in names:
        np.testing.assert_allclose(np.asarray(scope[n]), new_state[n], rtol=1e-4, atol=1e-6,
                                   err_msg=n)
    for v in graph.inputs:  # every parameter trained, the step's too
        if v.var.kind == "param":
            assert not np.allclose(new_state[v.var.name], before[v.var.name]), v.var.name


def test_dynamic_rnn_misuse_is_refused():
    x = graphc.data("x", [-1, 3], lod_level=1)
    drnn = layers.DynamicRNN()
    with pytest.raises(ProgramError, match="step_input\\(\\) must be called inside block"):
        drnn.step_input(x)
    with pytest.raises(ProgramError, match="memory '.*' is never updated"):
        with drnn.block():
            drnn.step_input(x)
            m = drnn.memory(shape=[2])
            drnn.output(m)
    other = layers.DynamicRNN()
    not_fed = layers.fill_constant([4, 3], "float32", 0.0)  # a feed would be re-typed
    with pytest.raises(ProgramError, match="must be a LoD value of lod_level 1"):
        with other.block():
            other.step_input(not_fed)
