"""StaticRNN (one ``recurrent`` op holding its step as a region) and Paddle 1.8's RNN-cell API
(RNNCell, GRUCell, LSTMCell, rnn): NumPy references on the jitted step and the interpreter,
gradients against the same RNN unrolled by hand, the text form, bad input, and training."""

from __future__ import annotations

import os
import re
from functools import partial

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.backends.jax.step import compile_step

THIS_FILE = os.path.basename(__file__)


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def run_both(main, startup, feed, fetch, scope=None):
    """(the jitted Executor's fetches, the interpreter's from the same parameters, state)."""
    scope = scope or graphc.Scope()
    exe = graphc.Executor()
    exe.run(startup, scope=scope)
    graph = graphc.lower(main)
    state = {v.var.name: np.asarray(scope[v.var.name]) for v in graph.inputs
             if v.var.kind in ("param", "persistable")}
    names = [f if isinstance(f, str) else f.name for f in fetch]
    jitted = exe.run(main, feed=feed, fetch_list=names, scope=scope)
    interp = run_graph(graph, state, feed, names)[1]
    return jitted, [np.asarray(v) for v in interp], state


# -- StaticRNN against NumPy ----------------------------------------------------------------------
T, N = 4, 3


def _two_memory_rnn():
    """h_t = tanh([x_t, h_{t-1}] W + b); c_t = 0.5 c_{t-1} + y_t V + s (s read from outside),
    c_0 = 0.25 everywhere (a memory made from shape and batch_ref)."""
    x = graphc.data("x", [T, N, 3], "float32")
    y = graphc.data("y", [T, N, 2], "float32")
    h0 = graphc.data("h0", [N, 4], "float32")
    s = graphc.data("s", [N, 4], "float32")
    rnn = layers.StaticRNN()
    with rnn.step():
        x_t, y_t = rnn.step_input(x), rnn.step_input(y)
        h_prev = rnn.memory(init=h0)
        c_prev = rnn.memory(shape=[-1, 4], batch_ref=x_t, init_value=0.25)
        h = layers.fc([x_t, h_prev], 4, act="tanh")
        c = layers.elementwise_add(
            layers.elementwise_add(layers.scale(c_prev, 0.5),
                                   layers.fc(y_t, 4, bias_attr=False)), s)
        rnn.update_memory(h_prev, h)
        rnn.update_memory(c_prev, c)
        rnn.step_output(h)
        rnn.output(c)
    return rnn()


def test_static_rnn_matches_numpy_on_both_backends():
    rng = np.random.default_rng(0)
    hs, cs = _two_memory_rnn()
    assert tuple(hs.shape) == (T, N, 4) and tuple(cs.shape) == (T, N, 4)
    main = graphc.default_main_program()
    recurrent = [op for op in main.global_block().ops if op.type == "recurrent"]
    assert len(recurrent) == 1  # the op names the user's `with rnn.step():` line
    assert os.path.basename(recurrent[0].source.rpartition(":")[0]) == THIS_FILE
    feed = {k: rng.standard_normal(s).astype("float32")
            for k, s in (("x", (T, N, 3)), ("y", (T, N, 2)), ("h0", (N, 4)), ("s", (N, 4)))}
    jitted, interp, p = run_both(main, graphc.default_startup_program(), feed, [hs, cs])
    h, c = feed["h0"].astype(np.float64), np.full((N, 4), 0.25)
    want_h, want_c = [], []
    for t in range(T):
        h = np.tanh(feed["x"][t] @ p["fc_0.w_0"] + h @ p["fc_0.w_1"] + p["fc_0.b_0"])
        c = 0.5 * c + feed["y"][t] @ p["fc_1.w_0"] + feed["s"]
        want_h.append(h)
        want_c.append(c)
    for got in (jitted, interp):
        np.testing.assert_allclose(got[0], np.stack(want_h), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], np.stack(want_c), rtol=1e-5, atol=1e-6)


# -- rnn() with GRUCell and LSTMCell against NumPy ---------------------------------------------
def gru_step(x, h, p, name):
    xh = np.concatenate([x, h], 1)
    r, u = np.split(sigmoid(xh @ p[f"{name}.w_0"] + p[f"{name}.b_0"]), 2, axis=1)
    c = np.tanh(np.concatenate([x, r * h], 1) @ p[f"{name}.w_1"] + p[f"{name}.b_1"])
    new = u * h + (1 - u) * c
    return new, new


def lstm_step(x, state, p, name, forget_bias=1.0):
    h, c = state
    i, f, j, o = np.split(np.concatenate([x, h], 1) @ p[f"{name}.w_0"] + p[f"{name}.b_0"], 4,
                          axis=1)
    c = c * sigmoid(f + forget_bias) + sigmoid(i) * np.tanh(j)
    h = np.tanh(c) * sigmoid(o)
    return h, (h, c)


def rnn_reference(step, xs, state, lengths=None, reverse=False):
    """Paddle 1.8's rnn() on time-major ``xs``: the whole padded sequence is reversed when
    ``reverse``; past its length a sequence keeps its state, its outputs are the cell's."""
    steps = xs.shape[0]
    mask = np.ones((steps, xs.shape[1])) if lengths is None else \
        (np.arange(steps)[:, None] < np.asarray(lengths)[None, :]).astype(np.float64)
    outs = [None] * steps
    for t in (reversed(range(steps)) if reverse else range(steps)):
        out, new = step(xs[t], state)
        m = mask[t][:, None]
        flat_new = new if isinstance(new, tuple) else (new,)
        flat_old = state if isinstance(state, tuple) else (state,)
        kept = tuple(m * a + (1 - m) * b for a, b in zip(flat_new, flat_old))
        state = kept if isinstance(new, tuple) else kept[0]
        outs[t] = out
    return np.stack(outs), state


RNN_VARIANTS = [  # (cell, time_major, with lengths, is_reverse)
    ("gru", False, False, False), ("gru", False, True, False), ("gru", False, True, True),
    ("lstm", True, False, True), ("lstm", False, True, False), ("lstm", True, True, True),
]


@pytest.mark.parametrize("kind, time_major, with_len, reverse", RNN_VARIANTS)
def test_rnn_with_cells_matches_numpy(kind, time_major, with_len, reverse):
    rng = np.random.default_rng(1)
    steps, batch, width, hidden = 5, 3, 4, 6
    shape = [steps, batch, width] if time_major else [batch, steps, width]
    x = graphc.data("x", shape, "float32")
    lengths = graphc.data("len", [batch], "int64") if with_len else None
    cell = layers.GRUCell(hidden) if kind == "gru" else layers.LSTMCell(hidden)
    out, final = layers.rnn(cell, x, sequence_length=lengths, time_major=time_major,
                            is_reverse=reverse)
    finals = final if kind == "lstm" else [final]
    assert tuple(out.shape) == (*shape[:2], hidden)
    assert all(tuple(f.shape) == (batch, hidden) for f in finals)
    feed = {"x": rng.standard_normal(shape).astype("float32")}
    lens = [5, 2, 0] if with_len else None
    if with_len:
        feed["len"] = np.array(lens, np.int64)
    main = graphc.default_main_program()
    jitted, interp, p = run_both(main, graphc.default_startup_program(), feed,
                                 [out, *finals])
    # Paddle's parameter names, so checkpoints map: GRUCell/BasicGRUUnit_0.w_0, ...
    name = "GRUCell/BasicGRUUnit_0" if kind == "gru" else "LSTMCell/BasicLSTMUnit_0"
    want_params = {f"{name}.w_0", f"{name}.b_0"} | (
        {f"{name}.w_1", f"{name}.b_1"} if kind == "gru" else set())
    assert {n for n in p if n.startswith(name)} == want_params
    xs = feed["x"].astype(np.float64)
    xs = xs if time_major else xs.transpose(1, 0, 2)
    zeros = np.zeros((batch, hidden))
    if kind == "gru":
        want, state = rnn_reference(lambda a, h: gru_step(a, h, p, name), xs, zeros, lens,
                                    reverse)
        want_final = [state]
    else:
        want, state = rnn_reference(lambda a, s: lstm_step(a, s, p, name), xs,
                                    (zeros, zeros), lens, reverse)
        want_final = list(state)
    want = want if time_major else want.transpose(1, 0, 2)
    for got in (jitted, interp):
        np.testing.assert_allclose(got[0], want, rtol=2e-5, atol=2e-6)
        for g, w in zip(got[1:], want_final):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def _gru_of(params, a, h):
    return gru_step(a, h, params, "GRUCell/BasicGRUUnit_0")


def test_rnn_with_lengths_over_a_time_dimension_known_only_when_run():
    """The book's inputs are [None, None]: the mask's width is the fed time dimension
    (sequence_mask with maxlen = layers.shape(x)[1]), one compile per fed length."""
    rng = np.random.default_rng(4)
    batch, width, hidden = 2, 3, 4
    x = graphc.data("x", [-1, -1, width], "float32")
    lengths = graphc.data("len", [-1], "int64")
    out, final = layers.rnn(layers.GRUCell(hidden), x, sequence_length=lengths)
    mask = layers.sequence_mask(lengths, maxlen=layers.shape(x)[1], dtype="float32")
    assert tuple(mask.shape) == (-1, -1)
    main = graphc.default_main_program()
    for steps in (3, 5):
        feed = {"x": rng.standard_normal((batch, steps, width)).astype("float32"),
                "len": np.array([steps, 1], np.int64)}
        jitted, interp, p = run_both(main, graphc.default_startup_program(), feed,
                                     [out, final, mask])
        want, state = rnn_reference(partial(_gru_of, p),
                                    feed["x"].astype(np.float64).transpose(1, 0, 2),
                                    np.zeros((batch, hidden)), [steps, 1], False)
        for got in (jitted, interp):
            np.testing.assert_allclose(got[0], want.transpose(1, 0, 2), rtol=2e-5, atol=2e-6)
            np.testing.assert_allclose(got[1], state, rtol=2e-5, atol=2e-6)
            np.testing.assert_array_equal(got[2], np.arange(steps)[None, :] <
                                          feed["len"][:, None])
    # a width computed from data is refused by name when the step is traced
    data_len = layers.reduce_max(lengths)
    bad = layers.sequence_mask(lengths, maxlen=data_len)
    with pytest.raises(graphc.ShapeError, match="maxlen must be known when the step"):
        graphc.Executor().run(main, feed={"x": np.zeros((2, 3, width), "float32"),
                                          "len": np.array([1, 2])}, fetch_list=[bad])


def test_cell_api_initial_states_and_nested_inputs():
    x = graphc.data("x", [2, 5, 3], "float32")
    z = graphc.data("z", [2, 5, 1], "float32")
    lstm = layers.LSTMCell(4, name="enc")
    h, c = lstm.get_initial_states(batch_ref=x, init_value=0.5)
    assert tuple(h.shape) == (2, 4) and h.dtype == "float32"
    (s1, (s2,)) = lstm.get_initial_states(x, shape=[[3], ([-1, 2],)], dtype="float64")
    assert tuple(s1.shape) == (2, 3) and tuple(s2.shape) == (2, 2) and s2.dtype == "float64"

    class PairCell(layers.RNNCell):
        """Outputs a dict, states a nested list; reads a kwarg at every step."""

        def call(self, inputs, states, scale_by=None):
            a, b = inputs
            (m,) = states
            new = layers.elementwise_add(layers.elementwise_mul(m, scale_by),
                                         layers.concat([a, b], 1))
            return {"sum": new, "a": a}, [new]

        @property
        def state_shape(self):
            return [[4]]

    k = graphc.data("k", [2, 4], "float32")
    outs, (final,) = layers.rnn(PairCell(), [x, z], scale_by=k)
    assert tuple(outs["sum"].shape) == (2, 5, 4) and tuple(outs["a"].shape) == (2, 5, 3)
    rng = np.random.default_rng(2)
    feed = {"x": rng.standard_normal((2, 5, 3)).astype("float32"),
            "z": rng.standard_normal((2, 5, 1)).astype("float32"),
            "k": rng.standard_normal((2, 4)).astype("float32")}
    jitted, interp, _ = run_both(graphc.default_main_program(),
                                 graphc.default_startup_program(), feed,
                                 [outs["sum"], outs["a"], final, h])
    m, want = np.zeros((2, 4)), []
    for t in range(5):
        m = m * feed["k"] + np.concatenate([feed["x"][:, t], feed["z"][:, t]], 1)
        want.append(m)
    for got in (jitted, interp):
        np.testing.assert_allclose(got[0], np.stack(want, 1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], feed["x"], rtol=1e-6)
        np.testing.assert_allclose(got[2], m, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[3], np.full((2, 4), 0.5))


# -- gradients: equal to the RNN unrolled by hand; the backward pass reuses the forward scan ----
def _tanh_rnn(unrolled: bool):
    """out_t = h_t = tanh(x_t Wx + h_{t-1} Wh + b) as a StaticRNN or unrolled by hand, with
    every operand a feed that takes a gradient (so both programs read the same values)."""
    x = graphc.data("x", [T, N, 3], "float32")
    h0 = graphc.data("h0", [N, 4], "float32")
    wx = graphc.data("wx", [3, 4], "float32")
    wh = graphc.data("wh", [4, 4], "float32")
    b = graphc.data("b", [4], "float32")
    for v in (x, h0, wx, wh, b):
        v.stop_gradient = False

    def cell(x_t, h):
        return layers.tanh(layers.elementwise_add(
            layers.elementwise_add(layers.matmul(x_t, wx), layers.matmul(h, wh)), b))

    if unrolled:
        h, outs = h0, []
        for t in range(T):
            h = cell(x[t], h)
            outs.append(h)
        out = layers.stack(outs, 0)
    else:
        rnn = layers.StaticRNN()
        with rnn.step():
            prev = rnn.memory(init=h0)
            h = cell(rnn.step_input(x), prev)
            rnn.update_memory(prev, h)
            rnn.step_output(h)
        out = rnn()
    wout = graphc.data("wout", [T, N, 4], "float32")
    loss = layers.reduce_sum(layers.elementwise_mul(out, wout))
    graphc.append_backward(loss)
    return loss, [f"{n}@GRAD" for n in ("x", "h0", "wx", "wh", "b")]


def _tanh_feed():
    rng = np.random.default_rng(3)
    shapes = {"x": (T, N, 3), "h0": (N, 4), "wx": (3, 4), "wh": (4, 4), "b": (4,),
              "wout": (T, N, 4)}
    return {k: (rng.standard_normal(s) * 0.7).astype("float32") for k, s in shapes.items()}


def test_gradients_equal_the_rnn_unrolled_by_hand():
    feed, results = _tanh_feed(), []
    for unrolled in (False, True):
        main, startup = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, startup), graphc.unique_name.guard():
            loss, grads = _tanh_rnn(unrolled)
        jitted, interp, _ = run_both(main, startup, feed, [loss, *grads])
        for a, b in zip(jitted, interp):  # interpreter == jitted step
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        results.append(jitted)
    for name, a, b in zip(["loss", "x", "h0", "wx", "wh", "b"], *results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


def test_backward_reuses_the_forward_scan():
    """One scan forward and one backward in the compiled step, as jax.grad of a hand-written
    lax.scan gives: the grad op runs the pullback the forward op left, not the loop again."""
    loss, grads = _tanh_rnn(False)
    graph = graphc.lower(graphc.default_main_program())
    text = compile_step(graph, [loss.name, *grads]).lowered_text()  # every feed shape known
    assert text.count("stablehlo.while") == 2, text.count("stablehlo.while")


# -- the text form ------------------------------------------------------------------------------
def test_programs_with_recurrent_ops_round_trip_through_text():
    """print -> parse -> structurally equal, for a recurrent op, its gradient, and a StaticRNN
    nested in another's step (a region inside a region)."""
    hs, cs = _two_memory_rnn()
    outer_x = graphc.data("seq", [3, N, 2, 4], "float32")
    outer_x.stop_gradient = False
    outer = layers.StaticRNN()
    with outer.step():
        inner_seq = layers.transpose(outer.step_input(outer_x), [1, 0, 2])  # [2, N, 4]
        inner = layers.StaticRNN()
        with inner.step():
            x_t = inner.step_input(inner_seq)
            prev = inner.memory(shape=[-1, 4], batch_ref=x_t)
            h = layers.elementwise_add(prev, x_t)
            inner.update_memory(prev, h)
            inner.step_output(h)
        outer.step_output(layers.reduce_sum(inner(), dim=0))
    nested = outer()
    assert tuple(nested.shape) == (3, N, 4)
    loss = layers.sums([layers.reduce_sum(v) for v in (hs, cs, nested)])
    graphc.append_backward(loss)
    g = graphc.lower(graphc.default_main_program())
    g.verify()
    text = g.to_text()
    # two recurrent ops at the top, one inside the outer's body (and its gradient's)
    assert text.count("= recurrent(") == 4 and text.count("= recurrent_grad(") == 2
    assert "\n    (outputs=" in text  # the inner op, indented in the outer body
    back = graphc.parse(text)
    assert back.structurally_equal(g) and back.to_text() == text
    # the nested loops compute: inner step k adds x_k to a zero memory, summed over k
    seq = np.random.default_rng(4).standard_normal((3, N, 2, 4)).astype("float32")
    shapes = {"x": (T, N, 3), "y": (T, N, 2), "h0": (N, 4), "s": (N, 4)}
    feed = {"seq": seq, **{k: np.zeros(s, "float32") for k, s in shapes.items()}}
    state = {v.var.name: np.zeros(v.type.shape, "float32") for v in g.inputs
             if v.var.kind == "param"}
    got, dseq = run_graph(g, state, feed, [nested.name, "seq@GRAD"])[1]
    np.testing.assert_allclose(got, 2 * seq[:, :, 0] + seq[:, :, 1], rtol=1e-6)
    np.testing.assert_allclose(dseq[:, :, 0], 2.0)
    np.testing.assert_allclose(dseq[:, :, 1], 1.0)



# -- bad input: graphc errors naming the layer and the user's line ------------------------------
def _bad_step_input_rank(rnn, x):
    rnn.step_input(graphc.data("flat", [T], "float32"))


def _bad_step_count(rnn, x):
    rnn.step_input(x)
    rnn.step_input(graphc.data("longer", [T + 1, N, 3], "float32"))


def _bad_update_of_a_non_memory(rnn, x):
    rnn.update_memory(rnn.step_input(x), rnn.step_input(x))


def _bad_update_that_changes_shape(rnn, x):
    prev = rnn.memory(init=graphc.data("h0", [N, 4], "float32"))
    rnn.update_memory(prev, layers.fc(rnn.step_input(x), 5))


def _bad_memory_never_updated(rnn, x):
    rnn.memory(init=graphc.data("h0", [N, 4], "float32"))
    rnn.step_output(rnn.step_input(x))


def _bad_write_of_an_outer_variable(rnn, x):
    outer = rnn._mark.block.var("outer")
    layers.assign(rnn.step_input(x), outer)
    rnn.step_output(outer)


@pytest.mark.parametrize("build, message", [
    (_bad_step_input_rank, r"StaticRNN.step_input at \S+:\d+: x \(flat\) has shape \(4,\); "
                           r"a step input is time-major"),
    (_bad_step_count, r"StaticRNN.step_input at \S+:\d+: x \(longer\) has 5 steps but an "
                      r"earlier step input has 4"),
    (_bad_update_of_a_non_memory, r"StaticRNN.update_memory at \S+:\d+: '\S+' is not a "
                                  r"memory of this StaticRNN"),
    (_bad_update_that_changes_shape, r"StaticRNN.update_memory at \S+:\d+: memory '\S+' is "
                                     r"f32\[3,4\] but is updated to '\S+', f32\[3,5\]"),
    (_bad_memory_never_updated, r"StaticRNN at \S+:\d+: memory '\S+' is never updated"),
    (_bad_write_of_an_outer_variable, r"StaticRNN at \S+:\d+: op assign at \S+:\d+ writes "
                                      r"'outer', defined before the step"),
])
def test_bad_input_names_the_layer_and_the_line(build, message):
    x = graphc.data("x", [T, N, 3], "float32")
    graphc.data("outer", [N, 3], "float32")
    rnn = layers.StaticRNN()
    with pytest.raises(graphc.ProgramError, match=message) as info:
        with rnn.step():
            build(rnn, x)
    # the line named is the user's: the call in the build function, or the `with` line
    where = re.search(r"at (\S+):(\d+)", str(info.value))
    assert os.path.basename(where.group(1)) == THIS_FILE
    ours = [e.lineno + 1 for e in info.traceback if e.path.name == THIS_FILE]
    assert int(where.group(2)) in ours


def test_step_methods_outside_the_step_block_are_refused():
    rnn = layers.StaticRNN()
    with pytest.raises(graphc.ProgramError, match="StaticRNN.step_input at .*inside"):
        rnn.step_input(graphc.data("x", [T, N, 3], "float32"))
    with pytest.raises(graphc.ProgramError, match="only after the step block"):
        rnn()


# -- training -----------------------------------------------------------------------------------
def static_rnn_lm(vocab: int, hidden: int, steps: int):
    """Paddle's StaticRNN language model: embedding -> StaticRNN with an fc cell -> fc softmax
    -> cross entropy. ``ids``/``label``: [steps, batch, 1] int64, time-major."""
    ids = graphc.data("ids", [steps, -1, 1], "int64")
    label = graphc.data("label", [steps, -1, 1], "int64")
    emb = layers.embedding(ids, [vocab, hidden])
    rnn = layers.StaticRNN()
    with rnn.step():
        word = rnn.step_input(emb)
        prev = rnn.memory(shape=[-1, hidden], batch_ref=word)
        h = layers.fc([word, prev], hidden, act="tanh")
        rnn.update_memory(prev, h)
        rnn.step_output(h)
    probs = layers.fc(rnn(), vocab, num_flatten_dims=2, act="softmax")
    return layers.mean(layers.cross_entropy(probs, label))


def test_static_rnn_language_model_trains():
    vocab, hidden, steps, batch = 30, 16, 6, 8
    loss = static_rnn_lm(vocab, hidden, steps)
    graphc.optimizer.SGD(1.0).minimize(loss)
    rng = np.random.default_rng(5)
    seq = (rng.integers(0, vocab, (1, batch)) + np.arange(steps + 1)[:, None]) % vocab
    feed = {"ids": seq[:-1, :, None].astype(np.int64), "label": seq[1:, :, None].astype(np.int64)}
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(graphc.default_startup_program(), scope=scope)
    main = graphc.default_main_program()
    params = [p.name for p in main.global_block().all_parameters()]
    # the fc inside the step made its parameters once: every step shares them
    assert sorted(params) == ["embedding_0.w_0", "fc_0.b_0", "fc_0.w_0", "fc_0.w_1",
                              "fc_1.b_0", "fc_1.w_0"]
    before = {n: np.asarray(scope[n]).copy() for n in params}
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(not np.allclose(before[n], np.asarray(scope[n])) for n in params)


# -- the machine-translation chapter's training (Paddle 1.8 book, 08), as graphc spells it --------
SRC_VOCAB, TRG_VOCAB, EMB, HID, SRC_LEN, TRG_LEN = 24, 20, 12, 16, 7, 6


class AttentionGRUCell(layers.RNNCell):
    """A decoder step: additive attention over the encoder's outputs (padding masked out),
    the context joined to the step's input, then a GRU."""

    def __init__(self, hidden_size):
        self.hidden_size = hidden_size
        self.gru = layers.GRUCell(hidden_size)

    def attend(self, query, enc_out, enc_proj, enc_mask):
        q = layers.unsqueeze(layers.fc(query, self.hidden_size, bias_attr=False), [1])
        energy = layers.tanh(layers.elementwise_add(enc_proj, q))  # q broadcast over time
        scores = layers.squeeze(layers.fc(energy, 1, num_flatten_dims=2, bias_attr=False), [2])
        weights = layers.softmax(layers.elementwise_add(scores, enc_mask))
        return layers.reduce_sum(layers.elementwise_mul(enc_out, weights, axis=0), dim=1)

    def call(self, step_input, hidden, encoder_output, encoder_output_proj,
             encoder_padding_mask=None):
        context = self.attend(hidden, encoder_output, encoder_output_proj,
                              encoder_padding_mask)
        return self.gru(layers.concat([step_input, context], axis=1), hidden)


def translation_model():
    src = fluid.data("src", [None, SRC_LEN], "int64")
    src_len = fluid.data("src_len", [None], "int64")
    trg = fluid.data("trg", [None, TRG_LEN], "int64")
    trg_len = fluid.data("trg_len", [None], "int64")
    label = fluid.data("label", [None, TRG_LEN], "int64")
    src_emb = fluid.embedding(src, [SRC_VOCAB, EMB], param_attr=fluid.ParamAttr(name="src_emb"))
    # a bidirectional GRU encoder: two rnn() runs, the second reversed, over the real tokens
    fwd_out, fwd_state = layers.rnn(layers.GRUCell(HID), src_emb, sequence_length=src_len)
    bwd_out, bwd_state = layers.rnn(layers.GRUCell(HID), src_emb, sequence_length=src_len,
                                    is_reverse=True)
    enc_out = layers.concat([fwd_out, bwd_out], axis=2)
    enc_state = layers.concat([fwd_state, bwd_state], axis=1)
    enc_proj = layers.fc(enc_out, HID, num_flatten_dims=2, bias_attr=False)
    src_mask = layers.sequence_mask(src_len, maxlen=SRC_LEN, dtype="float32")
    enc_mask = layers.scale(src_mask, scale=1e9, bias=-1e9)  # 0 on tokens, -1e9 on padding
    # the decoder, teacher-forced: the encoder's values reach every step as cell kwargs
    dec_init = layers.fc(enc_state, HID, act="tanh")
    trg_emb = fluid.embedding(trg, [TRG_VOCAB, EMB], param_attr=fluid.ParamAttr(name="trg_emb"))
    dec_out, _ = layers.rnn(AttentionGRUCell(HID), trg_emb, initial_states=dec_init,
                            encoder_output=enc_out, encoder_output_proj=enc_proj,
                            encoder_padding_mask=enc_mask)
    logits = layers.fc(dec_out, TRG_VOCAB, num_flatten_dims=2,
                       param_attr=fluid.ParamAttr(name="output_w"))
    loss = layers.cross_entropy(layers.softmax(logits), layers.unsqueeze(label, [2]))
    trg_mask = layers.sequence_mask(trg_len, maxlen=TRG_LEN, dtype="float32")
    return layers.elementwise_div(
        layers.reduce_sum(layers.elementwise_mul(layers.squeeze(loss, [2]), trg_mask)),
        layers.reduce_sum(trg_mask))


def translation_batch(rng, batch=8):
    """Synthetic pairs: the target is the source's real tokens reversed, shifted into the
    target vocabulary, after a start token 0; padding is 0."""
    src_len = rng.integers(3, SRC_LEN + 1, batch)
    src = np.zeros((batch, SRC_LEN), np.int64)
    trg = np.zeros((batch, TRG_LEN), np.int64)
    label = np.zeros((batch, TRG_LEN), np.int64)
    trg_len = np.minimum(src_len, TRG_LEN)
    for i, n in enumerate(src_len):
        src[i, :n] = rng.integers(2, SRC_VOCAB, n)
        out = (src[i, :n][::-1] % (TRG_VOCAB - 2)) + 2
        label[i, :trg_len[i]] = out[:trg_len[i]]
        trg[i, 1:trg_len[i]] = out[:trg_len[i] - 1]
    return {"src": src, "src_len": src_len, "trg": trg, "trg_len": trg_len, "label": label}


def test_machine_translation_training_loss_falls():
    loss = translation_model()
    fluid.optimizer.Adam(learning_rate=0.01, grad_clip=fluid.clip.GradientClipByGlobalNorm(
        clip_norm=5.0)).minimize(loss)
    main = fluid.default_main_program()
    ops = [op.type for op in main.global_block().ops]
    assert ops.count("recurrent") == 3 and ops.count("recurrent_grad") == 3
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(fluid.default_startup_program(), scope=scope)
    for name in ("GRUCell/BasicGRUUnit_0.w_0", "GRUCell/BasicGRUUnit_1.w_0",
                 "GRUCell/BasicGRUUnit_2.w_1", "src_emb", "trg_emb", "output_w"):
        assert scope.holds(name), name
    feed = translation_batch(np.random.default_rng(6))
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(25)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.6 * losses[0], losses


def test_dropout_in_the_step_draws_per_step_and_run_and_its_gradient_follows():
    x = graphc.data("x", [T, 8, 16], "float32")
    x.stop_gradient = False
    rnn = layers.StaticRNN()
    with rnn.step():
        rnn.step_output(layers.dropout(rnn.step_input(x), 0.5))
    out = rnn()
    w = graphc.data("w", [T, 8, 16], "float32")
    graphc.append_backward(layers.reduce_sum(layers.elementwise_mul(out, w)))
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    feed = {"x": np.ones((T, 8, 16), "float32"),
            "w": np.random.default_rng(7).standard_normal((T, 8, 16)).astype("float32")}
    first, dx = exe.run(feed=feed, fetch_list=[out, "x@GRAD"])
    second, _ = exe.run(feed=feed, fetch_list=[out, "x@GRAD"])
    kept = first != 0
    assert 0.3 < kept.mean() < 0.7
    assert not (kept[0] == kept[1]).all() and not (first == second).all()
    np.testing.assert_allclose(dx, feed["w"] * kept)  # the backward saw the forward's masks
    # clone(for_test) reaches the step's dropout: x * (1 - p) at inference, as in Paddle
    test_prog = graphc.default_main_program().clone(for_test=True)
    (inferred,) = exe.run(test_prog, feed=feed, fetch_list=[out])
    np.testing.assert_allclose(inferred, 0.5)
