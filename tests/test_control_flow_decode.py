"""Paddle 1.8's decoding API (issue 26): BeamSearchDecoder + dynamic_decode against a NumPy beam
search over the same weights, greedy decoding against argmax unrolled by hand, the interpreter
against the jitted step, one compile per shape, tensor_array_to_tensor, bad input by name."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError

B, V, H, E, T = 2, 7, 8, 5, 6  # batch, vocab, hidden, embedding width, max_step_num
START, END = 0, 1
PA = fluid.ParamAttr


class GruLikeCell:
    """A duck-typed cell (Paddle's decoders only call it): h' = z * h + (1 - z) * c with
    z = sigmoid([x, h] Wz + bz), c = tanh([x, h] Wc + bc); its output is h'."""

    def __call__(self, inputs, states, context=None, **kwargs):
        xh = layers.concat([inputs, states], axis=1)
        z = layers.fc(xh, H, act="sigmoid", param_attr=PA(name="z_w"), bias_attr=PA(name="z_b"))
        c = layers.fc(xh, H, param_attr=PA(name="c_w"), bias_attr=PA(name="c_b"))
        if context is not None:  # dynamic_decode's kwargs reach the cell through step
            c = c + context
        h = z * states + (1.0 - z) * layers.tanh(c)
        return h, h


def _embed(ids):
    return fluid.embedding(ids, size=[V, E], param_attr=PA(name="emb"))


def _logits(h):
    return layers.fc(h, V, num_flatten_dims=len(h.shape) - 1, param_attr=PA(name="out_w"),
                     bias_attr=PA(name="out_b"))


def _beam_program(beam, batch=B, max_step_num=T, context=False):
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [batch, H], "float32")
        h0 = layers.fc(enc, H, act="tanh", param_attr=PA(name="init_w"), bias_attr=False)
        dec = layers.BeamSearchDecoder(GruLikeCell(), START, END, beam, embedding_fn=_embed,
                                       output_fn=_logits)
        kwargs = {}
        if context:  # a [batch, H] tensor the cell reads, tiled to the beams first
            ctx = layers.fc(enc, H, param_attr=PA(name="ctx_w"), bias_attr=False)
            kwargs["context"] = layers.BeamSearchDecoder.tile_beam_merge_with_batch(ctx, beam)
        ids, states, lengths = layers.dynamic_decode(dec, inits=h0, max_step_num=max_step_num,
                                                     return_length=True, **kwargs)
    return main, startup, [ids, states.log_probs, lengths]


def _weights():
    """Weights (searched once) under which every entry ends before max_step_num + 1 steps and
    the beams of an entry end at different steps, for both test inputs."""
    rng = np.random.default_rng(0)
    shapes = {"init_w": (H, H), "z_w": (E + H, H), "z_b": (H,), "c_w": (E + H, H),
              "c_b": (H,), "emb": (V, E), "out_w": (H, V), "out_b": (V,), "ctx_w": (H, H)}
    w = {k: (rng.standard_normal(s) * 0.8).astype("float32") for k, s in shapes.items()}
    w["out_b"][END] = 1.0
    return w


def _used(main, w):
    """The weights ``main`` has parameters for."""
    names = {p.name for p in main.all_parameters()}
    return {k: v for k, v in w.items() if k in names}


def _set_weights(main, w):
    scope = graphc.global_scope()
    for k, v in _used(main, w).items():
        scope.find_var(k).get_tensor().set(v, graphc.CPUPlace())


# -- the NumPy reference: Paddle's documented beam search ---------------------------------
def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_cell(w, x, h, context=0.0):
    xh = np.concatenate([x, h], axis=1)
    z = _sigmoid(xh @ w["z_w"] + w["z_b"])
    c = np.tanh(xh @ w["c_w"] + w["c_b"] + context)
    return z * h + (1.0 - z) * c


def _np_log_softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return np.log(e / e.sum(-1, keepdims=True))


def _np_gather_tree(ids, parents):
    out = np.empty_like(ids)
    steps, batch, beam = ids.shape
    for b in range(batch):
        for k in range(beam):
            parent = k
            for t in range(steps - 1, -1, -1):
                out[t, b, k] = ids[t, b, parent]
                parent = parents[t, b, parent]
    return out


def np_beam_search(w, enc, beam, max_step_num=T, context=False):
    """Log-softmax scores accumulated per beam; a finished beam offers only END at no cost;
    the top `beam` of beam * vocab per entry; states, finished and lengths follow the parent
    beam; at most max_step_num + 1 steps; ids backtraced with gather_tree and padded with END
    to max_step_num + 1 steps. Returns (ids [batch, time, beam], log_probs, lengths)."""
    batch = enc.shape[0]
    h = np.repeat(np.tanh(enc @ w["init_w"])[:, None], beam, axis=1)
    log_probs = np.tile(np.array([0.0] + [-1e9] * (beam - 1)), (batch, 1))
    finished = np.zeros((batch, beam), bool)
    lengths = np.zeros((batch, beam), np.int64)
    tokens = np.full((batch, beam), START)
    rows = np.arange(batch)[:, None]
    noend = np.full(V, -1e9)
    noend[END] = 0.0
    # each entry's context, one copy per beam (beams of an entry share it)
    ctx = np.repeat(enc @ w["ctx_w"], beam, axis=0) if context else 0.0
    ids, parents = [], []
    for _ in range(max_step_num + 1):
        x = w["emb"][tokens].reshape(batch * beam, E)
        h_new = _np_cell(w, x, h.reshape(batch * beam, H), ctx).reshape(batch, beam, H)
        step = _np_log_softmax(h_new @ w["out_w"] + w["out_b"])
        step = np.where(finished[..., None], noend, step)
        flat = (step + log_probs[..., None]).reshape(batch, beam * V)
        top = np.argsort(-flat, axis=1, kind="stable")[:, :beam]
        parent, tokens = top // V, top % V
        log_probs = np.take_along_axis(flat, top, axis=1)
        h = h_new[rows, parent]
        was = finished[rows, parent]
        lengths = lengths[rows, parent] + ~was
        finished = was | (tokens == END)
        ids.append(tokens)
        parents.append(parent)
        if finished.all():
            break
    full = _np_gather_tree(np.stack(ids), np.stack(parents))
    pad = np.full((max_step_num + 1 - len(ids), batch, beam), END)
    return np.concatenate([full, pad]).transpose(1, 0, 2), log_probs, lengths


def _run(main, startup, fetch, feed, weights):
    exe = graphc.Executor()
    exe.run(startup)
    _set_weights(main, weights)
    return exe, exe.run(main, feed=feed, fetch_list=fetch)


def _interpret(main, feed, fetch, weights):
    _, got = run_graph(graphc.lower(main), _used(main, weights), feed,
                       [f.name for f in fetch])
    return got


@pytest.mark.parametrize("beam, context", [(3, False), (1, False), (3, True)])
def test_beam_search_equals_numpy_and_the_interpreter(beam, context):
    main, startup, fetch = _beam_program(beam, context=context)
    w = _weights()
    enc = np.random.default_rng(3).standard_normal((B, H)).astype("float32")
    _, got = _run(main, startup, fetch, {"enc": enc}, w)
    ids, scores, lengths = np_beam_search({k: v.astype(np.float64) for k, v in w.items()},
                                          enc.astype(np.float64), beam, context=context)
    assert got[0].shape == (B, T + 1, beam)
    np.testing.assert_array_equal(got[0], ids)
    np.testing.assert_allclose(got[1], scores, rtol=1e-5)
    np.testing.assert_array_equal(got[2], lengths)
    # every entry stopped early, its beams at different steps: the padding is exercised
    assert lengths.max() < T + 1 and len(set(lengths.ravel())) > 1
    for a, b in zip(got, _interpret(main, {"enc": enc}, fetch, w)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)


def _np_greedy(w, enc, max_step_num=T):
    """argmax decoding unrolled by hand: a finished entry keeps END."""
    h = np.tanh(enc @ w["init_w"])
    tokens = np.full(enc.shape[0], START)
    finished = np.zeros(enc.shape[0], bool)
    out = []
    for _ in range(max_step_num + 1):
        h = _np_cell(w, w["emb"][tokens], h)
        tokens = np.where(finished, END, np.argmax(h @ w["out_w"] + w["out_b"], axis=1))
        finished |= tokens == END
        out.append(tokens)
        if finished.all():
            break
    out += [np.full(enc.shape[0], END)] * (max_step_num + 1 - len(out))
    return np.stack(out, axis=1)


def test_greedy_beam_of_one_equals_argmax_unrolled_by_hand():
    main, startup, fetch = _beam_program(1)
    w = _weights()
    enc = np.random.default_rng(5).standard_normal((B, H)).astype("float32")
    _, got = _run(main, startup, fetch, {"enc": enc}, w)
    ref = _np_greedy({k: v.astype(np.float64) for k, v in w.items()}, enc.astype(np.float64))
    np.testing.assert_array_equal(got[0][:, :, 0], ref)


def test_one_compile_for_batches_of_one_shape_and_the_text_form():
    main, startup, fetch = _beam_program(3)
    exe, _ = _run(main, startup, fetch, {"enc": np.zeros((B, H), "float32")}, _weights())
    rng = np.random.default_rng(0)
    for _ in range(3):
        exe.run(main, feed={"enc": rng.standard_normal((B, H)).astype("float32")},
                fetch_list=fetch)
    prepared = exe._prepared[main][1]
    sizes = [s.traces for prep in prepared.values() for s in prep.steps.values()]
    assert sizes == [1]
    g = graphc.lower(main)
    whiles = [op for op in g.ops() if op.type == "while"]
    assert len(whiles) == 1  # the whole decode is one loop
    assert graphc.ir.text.parse(g.to_text()).structurally_equal(g)


def test_a_batch_of_unknown_size_decodes():
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [None, H], "float32")
        h0 = layers.fc(enc, H, act="tanh", param_attr=PA(name="init_w"), bias_attr=False)
        dec = layers.BeamSearchDecoder(GruLikeCell(), START, END, 3, embedding_fn=_embed,
                                       output_fn=_logits)
        ids, states = layers.dynamic_decode(dec, inits=h0, max_step_num=T,
                                            output_time_major=True)
    w = _weights()
    enc_v = np.random.default_rng(3).standard_normal((4, H)).astype("float32")
    _, got = _run(main, startup, [ids, states.log_probs], {"enc": enc_v}, w)
    ref, scores, _ = np_beam_search({k: v.astype(np.float64) for k, v in w.items()},
                                    enc_v.astype(np.float64), 3)
    np.testing.assert_array_equal(got[0], ref.transpose(1, 0, 2))
    np.testing.assert_allclose(got[1], scores, rtol=1e-5)


def test_static_helpers_and_tensor_array_to_tensor():
    x = fluid.data("x", [2, 3], "float32")
    dec = layers.BeamSearchDecoder(GruLikeCell(), START, END, 2)
    tiled = layers.BeamSearchDecoder.tile_beam_merge_with_batch(x, 2)
    expanded = dec._expand_to_beam_size(x)
    merged = dec._merge_batch_beams(expanded)
    split = dec._split_batch_beams(merged)
    idx = fluid.data("idx", [2, 2], "int64")
    gathered = dec._gather(expanded * layers.fill_constant([1], "float32", 1.0) +
                           layers.unsqueeze(layers.cast(layers.range(0, 2, 1, "int64"),
                                                        "float32"), [1]),
                           idx, layers.fill_constant([1], "int64", 2))
    arr = layers.create_array("float32", capacity=4)
    for k in range(3):
        layers.array_write(x * float(k + 1), layers.fill_constant([1], "int64", k), arr)
    stacked, sizes = layers.tensor_array_to_tensor(arr, axis=0, use_stack=True)
    concat, csizes = layers.tensor_array_to_tensor(arr, axis=1)
    xv = np.arange(6, dtype="float32").reshape(2, 3)
    iv = np.array([[1, 0], [0, 0]])
    got = graphc.Executor().run(feed={"x": xv, "idx": iv},
                                fetch_list=[tiled, merged, split, gathered, stacked, sizes,
                                            concat, csizes])
    np.testing.assert_array_equal(got[0], np.repeat(xv, 2, axis=0))
    np.testing.assert_array_equal(got[1], np.repeat(xv, 2, axis=0))
    np.testing.assert_array_equal(got[2], np.repeat(xv[:, None], 2, axis=1))
    beams = np.repeat(xv[:, None], 2, axis=1) + np.arange(2)[None, :, None]
    np.testing.assert_array_equal(got[3], beams[np.arange(2)[:, None], iv])
    elements = [xv * (k + 1) for k in range(3)] + [np.zeros_like(xv)]
    np.testing.assert_array_equal(got[4], np.stack(elements))
    np.testing.assert_array_equal(got[5], [1, 1, 1, 0])
    np.testing.assert_array_equal(got[6], np.concatenate(elements, axis=1))
    np.testing.assert_array_equal(got[7], [3, 3, 3, 0])


def test_bad_input_is_refused_by_name():
    with pytest.raises(ProgramError, match="BeamSearchDecoder: beam_size must be an int >= 1"):
        layers.BeamSearchDecoder(GruLikeCell(), START, END, 0)
    with pytest.raises(ProgramError, match="BeamSearchDecoder: start_token"):
        layers.BeamSearchDecoder(GruLikeCell(), -1, END, 2)
    enc = fluid.data("enc", [B, H], "float32")
    dec = layers.BeamSearchDecoder(GruLikeCell(), 9, END, 2, embedding_fn=_embed,
                                   output_fn=_logits)
    with pytest.raises(ProgramError, match=r"BeamSearchDecoder: start_token 9 is outside the "
                                           r"vocabulary \[0, 7\).*test_control_flow_decode"):
        layers.dynamic_decode(dec, inits=enc, max_step_num=3)
    with pytest.raises(ProgramError, match="dynamic_decode: max_step_num"):
        layers.dynamic_decode(dec, inits=enc, max_step_num=-2)
    with pytest.raises(ProgramError, match="dynamic_decode: decoder must be a Decoder"):
        layers.dynamic_decode(object(), inits=enc)


def test_a_decode_longer_than_its_bound_is_refused_when_run():
    """Without max_step_num the outputs hold 128 steps; a cell that never emits END would
    run past them: refused with a DataError, never a silent truncation."""
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [B, H], "float32")
        dec = layers.BeamSearchDecoder(GruLikeCell(), START, END, 2, embedding_fn=_embed,
                                       output_fn=lambda h: _logits(h) * 0.0 +
                                       layers.assign(np.array([0.0, -50.0] + [0.0] * (V - 2),
                                                              "float32")))
        ids, _ = layers.dynamic_decode(dec, inits=enc)
    exe = graphc.Executor()
    exe.run(startup)
    with pytest.raises(DataError, match="capacity"):
        exe.run(main, feed={"enc": np.zeros((B, H), "float32")}, fetch_list=[ids])


# -- BasicDecoder and its helpers ---------------------------------------------------------
def _np_basic_greedy(w, enc, max_step_num=T):
    """Paddle's BasicDecoder + GreedyEmbeddingHelper under dynamic_decode(impute_finished=
    True): argmax ids (a finished entry keeps decoding, its state kept), finished ORed, lengths
    counting the steps each entry was unfinished; padded past the loop's end."""
    batch = enc.shape[0]
    h = np.tanh(enc @ w["init_w"])
    tokens, finished = np.full(batch, START), np.zeros(batch, bool)
    lengths = np.zeros(batch, np.int64)
    ids, logits = [], []
    for _ in range(max_step_num + 1):
        h_new = _np_cell(w, w["emb"][tokens], h)
        step = h_new @ w["out_w"] + w["out_b"]
        tokens = np.argmax(step, axis=1)
        ids.append(tokens)
        logits.append(step)
        lengths += ~finished
        h = np.where(finished[:, None], h, h_new)
        finished = finished | (tokens == END)
        if finished.all():
            break
    pad = max_step_num + 1 - len(ids)
    ids += [np.full(batch, END)] * pad
    logits += [np.zeros((batch, V))] * pad
    return np.stack(ids, 1), np.stack(logits, 1), h, lengths


def test_basic_decoder_with_greedy_helper_equals_numpy():
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        enc = fluid.data("enc", [B, H], "float32")
        h0 = layers.fc(enc, H, act="tanh", param_attr=PA(name="init_w"), bias_attr=False)
        start = layers.fill_constant([B], "int64", START)
        helper = layers.GreedyEmbeddingHelper(_embed, start, END)
        dec = layers.BasicDecoder(GruLikeCell(), helper, output_fn=_logits)
        outs, h, lengths = layers.dynamic_decode(dec, inits=h0, max_step_num=T,
                                                 impute_finished=True, return_length=True)
    w = _weights()
    enc_v = np.random.default_rng(3).standard_normal((B, H)).astype("float32")
    fetch = [outs.sample_ids, outs.cell_outputs, h, lengths]
    _, got = _run(main, startup, fetch, {"enc": enc_v}, w)
    ref = _np_basic_greedy({k: v.astype(np.float64) for k, v in w.items()},
                           enc_v.astype(np.float64))
    np.testing.assert_array_equal(got[0], ref[0])
    for a, b in zip(got[1:], ref[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ref[3].max() < T + 1 and ref[3].min() < ref[3].max()
    for a, b in zip(got, _interpret(main, {"enc": enc_v}, fetch, w)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_training_helper_feeds_the_given_steps_and_sampling_draws_ids():
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [B, 4, E], "float32")
        seq = fluid.data("seq", [B], "int64")
        h0 = layers.fill_constant([B, H], "float32", 0.0)
        dec = layers.BasicDecoder(GruLikeCell(), layers.TrainingHelper(x, seq))
        outs, _, lengths = layers.dynamic_decode(dec, inits=h0, max_step_num=5,
                                                 return_length=True)
        start = layers.fill_constant([B], "int64", START)
        sampler = layers.SampleEmbeddingHelper(_embed, start, END, softmax_temperature=2.0,
                                               seed=3)
        sampled, _ = layers.dynamic_decode(
            layers.BasicDecoder(GruLikeCell(), sampler, output_fn=_logits), inits=h0,
            max_step_num=3)
    w = _weights()
    xv = np.random.default_rng(1).standard_normal((B, 4, E)).astype("float32")
    seqv = np.array([2, 4])
    _, got = _run(main, startup, [outs.cell_outputs, lengths, sampled.sample_ids],
                  {"x": xv, "seq": seqv}, w)
    wd = {k: v.astype(np.float64) for k, v in w.items()}
    h, want = np.zeros((B, H)), []
    for t in range(4):  # the loop ends once every entry has run its sequence_length steps
        h = _np_cell(wd, xv[:, t].astype(np.float64), h)
        want.append(h)
    want += [np.zeros((B, H))] * 2
    np.testing.assert_allclose(got[0], np.stack(want, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], seqv)
    assert got[2].shape == (B, 4) and ((got[2] >= 0) & (got[2] < V)).all()


def test_random_ops_in_a_loop_draw_anew_each_iteration_and_replay_for_the_gradient():
    """SampleEmbeddingHelper's sampling_id runs inside the loop: each iteration must draw its
    own numbers, and while_grad's replay the forward's. With x = 1, h = sum over 3 iterations
    of dropout(x) (upscaled by 2) equals dh/dx exactly when the replay redraws the same
    masks; values 2 and 4 appear only if the iterations' masks differ."""
    x = fluid.data("x", [16, 8], "float32")
    x.stop_gradient = False
    h = layers.scale(x, 0.0)
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", 3)
    cond = layers.less_than(i, n)
    loop = layers.While(cond)
    with loop.block():
        layers.assign(layers.elementwise_add(h, layers.dropout(
            x, 0.5, dropout_implementation="upscale_in_train")), h)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    loss = layers.reduce_sum(h)
    fluid.backward.append_backward(loss)
    hv, gx = graphc.Executor().run(feed={"x": np.ones((16, 8), "float32")},
                                   fetch_list=[h, "x@GRAD"])
    np.testing.assert_array_equal(hv, gx)
    assert {2.0, 4.0} & set(np.unique(hv).tolist())


def test_teacher_forced_decoding_trains_through_the_loop_and_its_arrays():
    """TrainingHelper + BasicDecoder under dynamic_decode: the loss reads the decoded outputs
    (tensor arrays written in the loop), and the gradients equal finite differences."""
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [B, 3, E], "float64")
        seq = fluid.data("seq", [B], "int64")
        h0 = layers.fill_constant([B, H], "float64", 0.0)
        h0.stop_gradient = False
        dec = layers.BasicDecoder(GruLikeCell(), layers.TrainingHelper(x, seq))
        outs, _ = layers.dynamic_decode(dec, inits=h0, max_step_num=3)
        loss = layers.reduce_sum(layers.square(outs.cell_outputs))
        grads = fluid.backward.append_backward(loss)
    assert {p.name for p, _ in grads} == {"z_w", "z_b", "c_w", "c_b"}
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((B, 3, E)), "seq": np.array([3, 2])}
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    w = {n: np.asarray(scope[n]).astype(np.float64) for n in ("z_w", "z_b", "c_w", "c_b")}
    got = exe.run(main, feed=feed, fetch_list=[loss, "c_w@GRAD"], scope=scope)

    def f(c_w):
        h, total = np.zeros((B, H)), 0.0
        for t in range(3):
            xh = np.concatenate([feed["x"][:, t], h], axis=1)
            z = 1 / (1 + np.exp(-(xh @ w["z_w"] + w["z_b"])))
            new = z * h + (1 - z) * np.tanh(xh @ c_w + w["c_b"])
            # impute_finished=False: finished entries step on like the others; the loop ends
            # once all are finished (3 steps), the padded fourth step is zeros
            total += np.sum(new ** 2)
            h = new
        return total

    np.testing.assert_allclose(got[0], [f(w["c_w"])], rtol=1e-10)
    num = np.zeros_like(w["c_w"])
    for idx in np.ndindex(num.shape):
        d = np.zeros_like(num)
        d[idx] = 1e-6
        num[idx] = (f(w["c_w"] + d) - f(w["c_w"] - d)) / 2e-6
    np.testing.assert_allclose(got[1], num, rtol=1e-5, atol=1e-8)
