"""beam_search and beam_search_decode (issue 26) against a NumPy simulation of Paddle's
algorithm: random steps with ties and finished sources, unrolled decoding steps, and the
machine-translation chapter's While-loop decoder over tensor arrays of LoD values."""

from __future__ import annotations

import numpy as np
import pytest
from test_lod_control_ops import both, interpret, lod_data

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.runtime.lod import LoDTensor, create_lod_tensor, unpack
from graphc.testing.beam_reference import beam_search_decode_reference, beam_search_reference
from graphc.testing.lod import as_feed

# -- beam_search -------------------------------------------------------------------------------

def _beam_program(level, accumulated, with_ids, beam, width=3):
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        pre_ids = lod_data("pre_ids", 1, "int64", level)
        pre_scores = lod_data("pre_scores", 1, "float32", level)
        ids = lod_data("ids", -1, "int64", level) if with_ids else None  # -1: any width
        scores = lod_data("scores", width, "float32", level)
        outs = layers.beam_search(pre_ids, pre_scores, ids, scores, beam, end_id=0,
                                  is_accumulated=accumulated, return_parent_idx=True)
    return main, list(outs)


def _random_step(rng, level, accumulated, width=3, n=3):
    # n fixed: the compiled step (and the interpreter's compiled beam_search core) depends on
    # the number of sources, so every trial reuses one compilation; empty sources vary
    if level == 1:
        lod = [[int(v) for v in rng.integers(0, 4, n)]]
    else:
        outer = [int(v) for v in rng.integers(0, 3, n)]
        lod = [outer, [int(v) for v in rng.integers(0, 3, sum(outer))]]
    rows = sum(lod[-1])
    pre_ids = rng.integers(0, 3, (rows, 1))  # end_id 0 ends some prefixes
    pre_scores = rng.integers(-3, 0, (rows, 1)).astype("float32")
    ids = rng.integers(0, 6, (rows, width))
    # few distinct values: ties between rows and inside rows, across the beam boundary
    scores = (rng.integers(-4, 0, (rows, width)) if accumulated
              else rng.integers(1, 4, (rows, width)) / 4).astype("float32")
    return lod, pre_ids, pre_scores, ids, scores


@pytest.mark.parametrize("level, accumulated, with_ids, beam", [
    (1, True, True, 2), (2, True, False, 2), (2, False, True, 3), (1, False, False, 1),
    (2, True, True, 4)])
def test_beam_search_against_paddle_reference(level, accumulated, with_ids, beam):
    rng = np.random.default_rng(level * 100 + beam)
    main, outs = _beam_program(level, accumulated, with_ids, beam)
    exe = graphc.Executor()
    for trial in range(12):
        lod, pre_ids, pre_scores, ids, scores = _random_step(rng, level, accumulated)
        feeds = {"pre_ids": create_lod_tensor(pre_ids, lod),
                 "pre_scores": create_lod_tensor(pre_scores, lod),
                 "scores": create_lod_tensor(scores, lod)}
        if with_ids:
            feeds["ids"] = create_lod_tensor(ids, lod)
        want_ids, want_scores, want_parents, want_lengths = beam_search_reference(
            pre_ids, pre_scores, ids if with_ids else None, scores, lod, beam, 0, accumulated)
        # the jitted step only every few trials: one compile per bucket, the rest eager
        got = both(main, feeds, outs, exe) if trial == 0 else interpret(main, feeds, outs)
        (got_ids, lengths), (got_scores, lengths2), parents = got
        assert lengths == lengths2 == want_lengths, (trial, lod)
        np.testing.assert_array_equal(got_ids, want_ids)
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-6)
        # parent_idx: one entry per buffer row, the picks first, 0 past them
        np.testing.assert_array_equal(parents[:len(want_parents)], want_parents)
        assert not parents[len(want_parents):].any()
        assert len(parents) <= max(64, len(lod[0]) * beam) and len(want_ids) <= len(lod[0]) * beam


def test_beam_search_paddle_tie_rule_and_finished_sources():
    # one source, one row of equal scores after a better one: Paddle's list keeps the first
    # tie, then each later tie replaces the last slot (the last one stays)
    lod = [[1], [1]]
    scores = np.array([[-1.0, -2.0, -2.0, -2.0]], "float32")
    want = beam_search_reference([[5]], [[0.0]], None, scores, lod, 2, 0)
    assert want[0].ravel().tolist() == [0, 3]
    # source 0: both prefixes ended and every pick is end_id: finished, dropped; source 1 live
    lod2 = [[2, 1], [1, 1, 1]]
    pre_ids = np.array([[0], [0], [4]])
    pre_scores = np.array([[-1.0], [-2.0], [-0.5]], "float32")
    scores2 = np.full((3, 4), -9.0, "float32")
    scores2[2] = [-3.0, -1.0, -2.0, -4.0]
    for lod_, pi, ps, sc, beam in ((lod, [[5]], [[0.0]], scores, 2),
                                   (lod2, pre_ids, pre_scores, scores2, 2)):
        main, outs = _beam_program(2, True, False, beam, width=4)
        feeds = {"pre_ids": create_lod_tensor(np.asarray(pi), lod_),
                 "pre_scores": create_lod_tensor(np.asarray(ps, "float32"), lod_),
                 "scores": create_lod_tensor(sc, lod_)}
        (ids, lengths), (got_scores, _), parents = both(main, feeds, outs)
        w_ids, w_scores, w_parents, w_lengths = beam_search_reference(
            np.asarray(pi), np.asarray(ps), None, sc, lod_, beam, 0)
        np.testing.assert_array_equal(ids, w_ids)
        np.testing.assert_allclose(got_scores, w_scores)
        assert lengths == w_lengths
    assert w_lengths == [[2, 1], [0, 0, 2]] and w_ids.ravel().tolist() == [1, 2]


def test_beam_search_steps_chain_with_fixed_buffers():
    """Three decoding steps built as Paddle's book decoder builds one (the step's scores from
    the previous picks, lod_reset to their LoD, topk, the log probabilities accumulated,
    beam_search), unrolled: the picks equal the reference fed the reference's own picks, and
    every step's buffers keep one size."""
    rng = np.random.default_rng(7)
    beam, vocab, n = 2, 6, 3
    table = rng.standard_normal((vocab, vocab))
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        ids = lod_data("init_ids", 1, "int64", 2)
        scores = lod_data("init_scores", 1, "float64", 2)
        steps = []
        for _ in range(3):
            logits = layers.embedding(ids, size=[vocab, vocab],
                                      param_attr=fluid.ParamAttr(name="table"), dtype="float64")
            probs = layers.softmax(layers.lod_reset(logits, y=scores))
            top_scores, top_ids = layers.topk(probs, k=beam)
            accu = layers.elementwise_add(layers.log(top_scores), scores)
            ids, scores, parent = layers.beam_search(ids, scores, top_ids, accu, beam,
                                                     end_id=0, return_parent_idx=True)
            steps += [ids, scores, parent]
    init = [[1] * n, [1] * n]
    feeds = {"init_ids": create_lod_tensor(np.array([[1], [2], [3]], "int64"), init),
             "init_scores": create_lod_tensor(np.zeros((n, 1)), init)}
    g = graphc.lower(main)
    fetched = run_graph(g, {"table": table}, {k: as_feed(main, k, v) for k, v in feeds.items()},
                        [o.name for o in steps])[1]
    scope = graphc.Scope()
    with graphc.scope_guard(scope):
        scope.var("table").get_tensor().set(table, graphc.CPUPlace())
        jit = graphc.Executor().run(main, feed=feeds, fetch_list=steps, return_numpy=False)
    pre_ids, pre_scores, lod = np.array([[1], [2], [3]]), np.zeros((n, 1)), init
    for t in range(3):
        x = table[pre_ids.ravel()]
        p = np.exp(x - x.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :beam]
        accu = np.log(np.take_along_axis(p, top, 1)) + pre_scores.reshape(-1, 1)
        want = beam_search_reference(pre_ids, pre_scores, top, accu, lod, beam, 0)
        for got in (fetched[3 * t: 3 * t + 3], jit[3 * t: 3 * t + 3]):
            got_ids, got_scores = (v if isinstance(v, LoDTensor) else unpack(v)
                                   for v in got[:2])
            assert got_ids.recursive_sequence_lengths() == want[3], t
            np.testing.assert_array_equal(np.array(got_ids), want[0])
            np.testing.assert_allclose(np.array(got_scores), want[1], rtol=1e-6)
            np.testing.assert_array_equal(np.asarray(got[2])[:len(want[2])], want[2])
            assert np.asarray(got[2]).shape == (16,)  # max(bucket 16, n * beam) every step
        pre_ids, pre_scores, lod = want[0], want[1], want[3]



# -- beam_search_decode over tensor arrays of LoD values ---------------------------------------

def _decode_program(n, beam, vocab, steps):
    """``steps`` beam-search steps unrolled as the book's decoder writes them, each step's
    picks written to two tensor arrays, then beam_search_decode."""
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        ids = lod_data("init_ids", 1, "int64", 2)
        scores = lod_data("init_scores", 1, "float64", 2)
        i = layers.fill_constant([1], "int64", 0)
        ids_array = layers.array_write(ids, i)
        scores_array = layers.array_write(scores, i)
        for t in range(steps):
            logits = layers.embedding(ids, size=[vocab, vocab],
                                      param_attr=fluid.ParamAttr(name="table"), dtype="float64")
            probs = layers.softmax(layers.lod_reset(logits, y=scores))
            top_scores, top_ids = layers.topk(probs, k=beam)
            accu = layers.elementwise_add(layers.log(top_scores), scores)
            ids, scores = layers.beam_search(ids, scores, top_ids, accu, beam, end_id=0)
            i = layers.fill_constant([1], "int64", t + 1)
            layers.array_write(ids, i, array=ids_array)
            layers.array_write(scores, i, array=scores_array)
        out = layers.beam_search_decode(ids_array, scores_array, beam, end_id=0)
    return main, [*out, ids_array]


def _reference_decode(table, init_ids, n, beam, steps):
    pre_ids, pre_scores, lod = init_ids, np.zeros((n, 1)), [[1] * n, [1] * n]
    picks = [(pre_ids, pre_scores, lod)]
    for _ in range(steps):
        x = table[pre_ids.ravel()]
        p = np.exp(x - x.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :beam]
        accu = np.log(np.take_along_axis(p, top, 1)) + pre_scores.reshape(-1, 1)
        pre_ids, pre_scores, _, lod = beam_search_reference(pre_ids, pre_scores, top, accu,
                                                            lod, beam, 0)
        picks.append((pre_ids, pre_scores, lod))
    return picks


def _run_decoder_both_ways(main, outs, table, init_ids, n, want):
    """Run the decoder through the interpreter and the jitted Executor; both give ``want``
    (ids, scores, lengths). Returns the Executor's fetches."""
    want_ids, want_scores, want_lengths = want
    init = [[1] * n, [1] * n]
    feeds = {"init_ids": create_lod_tensor(init_ids, init),
             "init_scores": create_lod_tensor(np.zeros((n, 1)), init)}
    g = graphc.lower(main)
    fetched = run_graph(g, {"table": table}, {k: as_feed(main, k, v) for k, v in feeds.items()},
                        [o.name for o in outs])[1]
    scope = graphc.Scope()
    with graphc.scope_guard(scope):
        scope.var("table").get_tensor().set(table, graphc.CPUPlace())
        jit = graphc.Executor().run(main, feed=feeds, fetch_list=outs, return_numpy=False)
    for got in (fetched, jit):
        got_ids, got_scores = (v if isinstance(v, LoDTensor) else unpack(v) for v in got[:2])
        assert got_ids.recursive_sequence_lengths() == want_lengths
        np.testing.assert_array_equal(np.array(got_ids), want_ids)
        np.testing.assert_allclose(np.array(got_scores), want_scores, rtol=1e-6)
    return jit


@pytest.mark.parametrize("seed", [0, 1])
def test_beam_search_decode_backtraces_paddle_hypotheses(seed):
    rng = np.random.default_rng(seed)
    n, beam, vocab, steps = 3, 2, 6, 4
    table = rng.standard_normal((vocab, vocab)) * 2
    table[:, 0] += 1.0 * seed  # seed 1: ends often, sources finish and get pruned
    init_ids = np.array([[1], [2], [3]])
    main, outs = _decode_program(n, beam, vocab, steps)
    picks = _reference_decode(table, init_ids, n, beam, steps)
    want = beam_search_decode_reference([(i, s, lod) for i, s, lod in picks], beam, 0)
    jit = _run_decoder_both_ways(main, outs, table, init_ids, n, want)
    # the array of picks fetches as Paddle's LoDTensorArray: one LoDTensor per step
    steps_fetched = jit[2]
    assert len(steps_fetched) == steps + 1
    for t, (ids_t, _, lod_t) in enumerate(picks):
        assert steps_fetched[t].recursive_sequence_lengths() == [list(v) for v in lod_t]
        np.testing.assert_array_equal(np.array(steps_fetched[t]).reshape(-1), ids_t.ravel())


def _book_decoder(n, beam, vocab, max_len):
    """The machine-translation chapter's decoder, Paddle 1.8 spelling: a While loop reading
    the previous picks from tensor arrays, beam_search, writing the new picks, stopping at
    max_len or when no source has picks left; then beam_search_decode."""
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        init_ids = layers.data("init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = layers.data("init_scores", shape=[1], dtype="float64", lod_level=2)
        array_len = layers.fill_constant(shape=[1], dtype="int64", value=max_len)
        counter = layers.zeros(shape=[1], dtype="int64", force_cpu=True)
        ids_array = layers.create_array("int64", capacity=max_len + 1)
        scores_array = layers.create_array("float64", capacity=max_len + 1)
        layers.array_write(init_ids, array=ids_array, i=counter)
        layers.array_write(init_scores, array=scores_array, i=counter)
        cond = layers.less_than(x=counter, y=array_len)
        while_op = layers.While(cond=cond)
        with while_op.block():
            pre_ids = layers.array_read(array=ids_array, i=counter)
            pre_score = layers.array_read(array=scores_array, i=counter)
            logits = layers.embedding(pre_ids, size=[vocab, vocab],
                                      param_attr=fluid.ParamAttr(name="table"), dtype="float64")
            probs = layers.softmax(layers.lod_reset(logits, y=pre_score))
            topk_scores, topk_indices = layers.topk(probs, k=beam)
            accu = layers.elementwise_add(layers.log(topk_scores), pre_score)
            selected_ids, selected_scores = layers.beam_search(
                pre_ids, pre_score, topk_indices, accu, beam, end_id=0)
            layers.increment(x=counter, value=1, in_place=True)
            layers.array_write(selected_ids, array=ids_array, i=counter)
            layers.array_write(selected_scores, array=scores_array, i=counter)
            length_cond = layers.less_than(x=counter, y=array_len)
            finish_cond = layers.logical_not(layers.is_empty(x=selected_ids))
            layers.logical_and(x=length_cond, y=finish_cond, out=cond)
        outs = layers.beam_search_decode(ids_array, scores_array, beam, end_id=0)
    return main, list(outs)


@pytest.mark.parametrize("end_bias", [0.0, 4.0])
def test_book_decoder_while_loop_equals_numpy_beam_search(end_bias):
    """end_bias 4: every source ends early, the loop stops on is_empty before max_len."""
    rng = np.random.default_rng(0)
    n, beam, vocab, max_len = 3, 2, 6, 6
    table = rng.standard_normal((vocab, vocab)) * 2
    table[:, 0] += end_bias
    init_ids = np.array([[1], [2], [3]])
    main, outs = _book_decoder(n, beam, vocab, max_len)
    picks = _reference_decode(table, init_ids, n, beam, max_len)
    while len(picks) > 1 and not len(picks[-1][0]):
        picks.pop()  # the loop stops after the first step that picks nothing
    if end_bias:
        assert len(picks) < max_len
    _run_decoder_both_ways(main, outs, table, init_ids, n,
                           beam_search_decode_reference(picks, beam, 0))


def test_book_decoder_round_trips_through_text_and_program():
    """Arrays of LoD values print as array<lod2<...>>, parse back, and keep their element LoD
    through to_program (a While's renamed copies included)."""
    main, _ = _book_decoder(3, 2, 6, 4)
    g = graphc.lower(main)
    g.verify()
    text = g.to_text(show_source=True)
    assert "array<lod2<i64[5,-1,1]>>" in text
    back = graphc.parse(text)
    back.verify()
    assert back.to_text(show_source=True) == text
    again = graphc.lower(g.to_program())
    again.verify()
    assert again.structurally_equal(g, check_source=True)
