"""The LoD ops of control-flow programs (issue 26): lod_reset / lod_append, lod_rank_table,
max_sequence_len, reorder_lod_tensor_by_rank and beam_search, each against a NumPy reference
of Paddle's semantics over random LoDs (empty sequences included), the jitted step equal to
the interpreter, gradients by finite differences, and the errors bad input meets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.backends.lowering import LoweringError
from graphc.ir.errors import ProgramError, ShapeError
from graphc.runtime.lod import LoDTensor, create_lod_tensor, unpack
from graphc.testing.beam_reference import beam_search_decode_reference, beam_search_reference
from graphc.testing.lod import as_feed, lod_lengths, random_lod_tensor, split
from graphc.testing.lod_checks import fd_check, token_loss

EXAMPLES = settings(max_examples=8, deadline=None)
seeds = st.integers(0, 2 ** 16)


def interpret(main, feeds: dict, outs):
    """Run ``main`` on the interpreter; LoD results as (tokens, lengths)."""
    g = graphc.lower(main)
    fetched = run_graph(g, {}, {k: as_feed(main, k, v) for k, v in feeds.items()},
                        [o.name for o in outs])[1]
    return [v if isinstance(v, np.ndarray) else (np.array(unpack(v)),
                                                 unpack(v).recursive_sequence_lengths())
            for v in fetched]


def jitted(main, feeds: dict, outs, exe=None):
    got = (exe or graphc.Executor()).run(main, feed=feeds, fetch_list=outs, return_numpy=False)
    return [(np.array(v), v.recursive_sequence_lengths()) if isinstance(v, LoDTensor)
            and v.recursive_sequence_lengths() else np.asarray(v) for v in got]


def both(main, feeds, outs, exe=None):
    """The interpreter's results, after checking the jitted step gives the same."""
    ref, got = interpret(main, feeds, outs), jitted(main, feeds, outs, exe)
    for o, a, b in zip(outs, ref, got):
        if isinstance(a, tuple):
            assert isinstance(b, tuple) and a[1] == b[1], o.name
            np.testing.assert_allclose(b[0], a[0], rtol=1e-6, err_msg=o.name)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-6, err_msg=o.name)
    return ref


def offsets(lengths):
    return [int(v) for v in np.cumsum([0, *lengths])]


def lod_data(name, width, dtype="float64", level=1):
    return graphc.data(name, [-1, width], dtype, lod_level=level)


# -- lod_reset / lod_append -------------------------------------------------------------------

@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, data=st.data())
def test_lod_reset_to_target_lod_and_y_offsets(lengths, seed, data):
    rng = np.random.default_rng(seed)
    x = random_lod_tensor(rng, lengths, (2,))
    total = sum(lengths[0])
    cuts = sorted(data.draw(st.lists(st.integers(0, total), max_size=4)))
    target = [0, *cuts, total]
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        xv = lod_data("x", 2)
        y = graphc.data("y", [1, len(target)], "int32")
        outs = [layers.lod_reset(xv, target_lod=target), layers.lod_reset(xv, y=y)]
    feeds = {"x": x, "y": np.array([target], "int32")}
    want = [list(np.diff(target))]
    for tokens, got_lengths in interpret(main, feeds, outs):
        np.testing.assert_array_equal(tokens, np.array(x))
        assert got_lengths == want


@EXAMPLES
@given(lengths=lod_lengths(2), seed=seeds)
def test_lod_reset_takes_y_lod_whole(lengths, seed):
    rng = np.random.default_rng(seed)
    total = sum(lengths[1])
    x = rng.standard_normal((total, 3))
    y = random_lod_tensor(rng, lengths, (1,))
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        xd = graphc.data("x", [total, 3], "float64")  # a dense x takes y's LoD
        xl = lod_data("xl", 3)  # a LoD x's own LoD is replaced
        yv = lod_data("y", 1, level=2)
        outs = [layers.lod_reset(xd, y=yv), layers.lod_reset(xl, y=yv)]
        pooled = layers.sequence_pool(outs[0], "sum")  # the new LoD is what ops see
    flat = create_lod_tensor(x, [[total]])
    got = interpret(main, {"x": x, "xl": flat, "y": y}, [*outs, pooled])
    for tokens, got_lengths in got[:2]:
        np.testing.assert_allclose(tokens, x)
        assert got_lengths == [list(map(int, v)) for v in lengths]
    want = np.stack([s.sum(0) for s in split(x, lengths[1])]) if total or lengths[1] else None
    np.testing.assert_allclose(got[2][0].reshape(-1, 3), want.reshape(-1, 3) if want is not None
                               else np.zeros((len(lengths[1]), 3)))


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, data=st.data())
def test_lod_append_adds_a_level_below(lengths, seed, data):
    rng = np.random.default_rng(seed)
    x = random_lod_tensor(rng, lengths, (2,))
    rows = sum(lengths[0])
    assume(rows > 0)  # Paddle's offsets need two entries: no rows, nothing to append to
    inner = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    d = rng.standard_normal((sum(inner), 2))
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        xv = lod_data("x", 2)
        # a dense value: the appended level is its only one
        outs = [layers.lod_append(graphc.data("d", [sum(inner), 2], "float64"),
                                  offsets(inner)),
                # below a LoD value: one entry per row of x, x's lengths now count entries
                layers.lod_append(xv, list(range(rows + 1))),
                layers.lod_append(xv, graphc.data("lv", [rows + 1], "int32"))]
    feeds = {"x": x, "d": d, "lv": np.arange(rows + 1, dtype="int32")}
    got = interpret(main, feeds, outs)
    np.testing.assert_allclose(got[0][0].reshape(d.shape), d)
    assert got[0][1] == [inner]
    for tokens, got_lengths in got[1:]:
        np.testing.assert_allclose(tokens, np.array(x))
        assert got_lengths == [list(lengths[0]), [1] * rows]


def test_lod_reset_feeds_sequence_ops_and_paddle_examples():
    # Paddle's op examples: target_lod [0, 4, 6]; Y = [[0, 2, 6]]; Y a 2-level LoD value
    x = create_lod_tensor(np.arange(1.0, 7.0).reshape(6, 1), [[2, 3, 1]])
    y = create_lod_tensor(np.arange(6.0).reshape(6, 1) + 0.1, [[2, 2], [2, 3, 1, 0]])
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        xv, yv = lod_data("x", 1), lod_data("y", 1, level=2)
        outs = [layers.lod_reset(xv, target_lod=[0, 4, 6]),
                layers.lod_reset(xv, y=graphc.data("off", [1, 3], "int32")),
                layers.lod_reset(xv, y=yv)]
        outs.append(layers.sequence_pool(outs[0], "max"))
    got = both(main, {"x": x, "y": y, "off": np.array([[0, 2, 6]], "int32")}, outs)
    assert [g[1] for g in got[:3]] == [[[4, 2]], [[2, 4]], [[2, 2], [2, 3, 1, 0]]]
    np.testing.assert_allclose(got[3].ravel(), [4.0, 6.0])


# -- rank table, max_sequence_len, reorder_lod_tensor_by_rank ----------------------------------

def rank_table_reference(lengths):
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep order
    return np.array([[i, lengths[i]] for i in order], np.int64).reshape(-1, 2)


def reorder_reference(tokens, lengths, index):
    """Sequences of ``tokens`` (level 1 or 2 lengths) in the order ``index``."""
    if len(lengths) == 1:
        seqs = split(tokens, lengths[0])
        out = [seqs[i] for i in index]
        return (np.concatenate(out) if out else tokens[:0]), [[lengths[0][i] for i in index]]
    subs = split(tokens, lengths[1])
    owner = np.cumsum([0, *lengths[0]])
    new0, new1, out = [], [], []
    for i in index:
        new0.append(lengths[0][i])
        for j in range(owner[i], owner[i + 1]):
            new1.append(lengths[1][j])
            out.append(subs[j])
    return (np.concatenate(out) if out else tokens[:0]), [new0, new1]


@EXAMPLES
@given(lengths=lod_lengths(2), key_lengths=lod_lengths(1), seed=seeds)
def test_rank_table_and_reorder_against_references(lengths, key_lengths, seed):
    rng = np.random.default_rng(seed)
    n = len(lengths[0])
    keys = [int(v) for v in rng.integers(0, 4, n)]  # ties and empty sequences
    key = random_lod_tensor(rng, [keys], (1,))
    x2 = random_lod_tensor(rng, lengths, (2,))
    x1 = random_lod_tensor(rng, [lengths[0]], (3,))
    rows = rng.standard_normal((n, 4))
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        table = layers.lod_rank_table(lod_data("key", 1))
        outs = [table, layers.max_sequence_len(table),
                layers.reorder_lod_tensor_by_rank(lod_data("x2", 2, level=2), table),
                layers.reorder_lod_tensor_by_rank(lod_data("x1", 3), table),
                layers.reorder_lod_tensor_by_rank(graphc.data("rows", [-1, 4], "float64"),
                                                  table),
                layers.lod_rank_table(lod_data("x2b", 2, level=2))]  # level 0: sub-sequences
    got = interpret(main, {"key": key, "x2": x2, "x1": x1, "rows": rows, "x2b": x2}, outs)
    want_table = rank_table_reference(keys)
    np.testing.assert_array_equal(got[0], want_table)
    np.testing.assert_array_equal(got[1], [max(keys, default=0)])
    index = want_table[:, 0]
    for (tokens, got_lengths), x, lod in ((got[2], x2, lengths), (got[3], x1, [lengths[0]])):
        want, want_lengths = reorder_reference(np.array(x), lod, index)
        np.testing.assert_allclose(tokens, want)
        assert got_lengths == [list(map(int, v)) for v in want_lengths]
    np.testing.assert_allclose(got[4], rows[index])
    np.testing.assert_array_equal(got[5], rank_table_reference(list(lengths[0])))
    del key_lengths


def test_reorder_gradient_is_the_inverse_permutation():
    rng = np.random.default_rng(3)
    lengths = [[2, 0, 3, 1]]
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = lod_data("x", 2)
        x.stop_gradient = False
        table = layers.lod_rank_table(x)
        out = layers.reorder_lod_tensor_by_rank(x, table)
        # weights per token position of the reordered batch: d loss / d out = w
        w = lod_data("w", 2)
        loss = layers.reduce_sum(layers.elementwise_mul(out, w))
        fluid.backward.append_backward(loss)
    x_t = random_lod_tensor(rng, lengths, (2,))
    w_tokens = rng.standard_normal((6, 2))
    w_t = create_lod_tensor(w_tokens, [[3, 2, 1, 0]])  # the reordered LoD: lengths 3, 2, 1, 0
    grad = main.global_block().var("x@GRAD")
    got = both(main, {"x": x_t, "w": w_t}, [grad])[0]
    # sequence order [2, 0, 3, 1]: out tokens = x[2:5], x[0:2], x[5:6]; the gradient of x
    # takes w's rows back to those places
    want = np.concatenate([w_tokens[3:5], w_tokens[0:3], w_tokens[5:6]])
    np.testing.assert_allclose(got[0], want)
    assert got[1] == lengths


@pytest.mark.parametrize("level", [1, 2])
def test_lod_reset_and_reorder_fd_gradients(level):
    rng = np.random.default_rng(level)
    lengths = [[2, 0, 3, 1]] if level == 1 else [[1, 0, 2], [2, 3, 1]]
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x = lod_data("x", 2, level=level)
        x.stop_gradient = False
        table = layers.lod_rank_table(x)
        out = layers.reorder_lod_tensor_by_rank(layers.scale(x, 1.5), table)
        out = layers.lod_reset(out, target_lod=[0, 1, 6])  # the tokens in two new sequences
        out = layers.sequence_softmax(layers.reduce_sum(out, dim=[1], keep_dim=True))
        padded, _ = layers.sequence_pad(out, layers.fill_constant([1], "float64", 0.0),
                                        maxlen=5)
        loss, w = token_loss(layers.reshape(padded, [2, 5]), rng)
        fd_check(graphc.default_main_program(), loss,
                 {"x": random_lod_tensor(rng, lengths, (2,)), **w}, ["x"], rng, coords=8)


def test_jitted_step_equals_interpreter_for_every_op_and_gradient():
    rng = np.random.default_rng(11)
    lengths = [[2, 0, 3, 1]]
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = lod_data("x", 2)
        x.stop_gradient = False
        y = lod_data("y", 1, level=2)
        table = layers.lod_rank_table(x)
        reset = layers.lod_reset(x, y=y)
        appended = layers.lod_append(x, list(range(7)))
        outs = [table, layers.max_sequence_len(table), reset, appended,
                layers.lod_reset(x, target_lod=[0, 6]),
                layers.reorder_lod_tensor_by_rank(reset, layers.lod_rank_table(y)),
                layers.reorder_lod_tensor_by_rank(appended, table)]
        loss = layers.sums([layers.reduce_sum(layers.sequence_pool(o, "sqrt"))
                            for o in outs[2:]])
        fluid.backward.append_backward(loss)
        outs.append(main.global_block().var("x@GRAD"))
    feeds = {"x": random_lod_tensor(rng, lengths, (2,)),
             "y": random_lod_tensor(rng, [[1, 2], [4, 0, 2]], (1,))}
    got = both(main, feeds, outs)
    np.testing.assert_array_equal(got[0], [[2, 3], [0, 2], [3, 1], [1, 0]])
    assert got[5][1] == [[2, 1], [0, 2, 4]]


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


# -- errors ------------------------------------------------------------------------------------

def test_layers_refuse_bad_arguments():
    x = lod_data("x", 2)
    with pytest.raises(ProgramError, match="lod_reset: give y or target_lod"):
        layers.lod_reset(x)
    with pytest.raises(ProgramError, match="'y' .* must be one of \\['int32'\\]"):
        layers.lod_reset(x, y=graphc.data("f", [3], "float32"))
    with pytest.raises(ProgramError, match="lod_append: level must be a list"):
        layers.lod_append(x, 3)
    with pytest.raises(ProgramError, match="'x' .* must be one of"):
        layers.lod_reset(graphc.data("b", [4], "bool"), target_lod=[0, 4])
    with pytest.raises(ShapeError, match="lod_reset: target_lod must start at 0"):
        layers.lod_reset(x, target_lod=[1, 2, 6])
    with pytest.raises(ShapeError, match="lod_reset: target_lod ends at 5 but X has 6 rows"):
        layers.lod_reset(graphc.data("d", [6, 2]), target_lod=[0, 5])
    with pytest.raises(ShapeError, match="lod_rank_table: X must be a LoD value"):
        layers.lod_rank_table(graphc.data("d2", [6, 2]))
    with pytest.raises(ShapeError, match="must be a rank table"):
        layers.reorder_lod_tensor_by_rank(x, graphc.data("t", [4], "int64"))
    with pytest.raises(ProgramError, match="'pre_ids' .* must be one of \\['int64'\\]"):
        layers.beam_search(graphc.data("p", [-1, 1], "int32"), x, None, x, 2, 0)
    with pytest.raises(ShapeError, match="beam_search: scores must be a LoD value"):
        layers.beam_search(lod_data("pi", 1, "int64"), lod_data("ps", 1, "float32"), None,
                           graphc.data("s", [-1, 4], "float32"), 2, 0)


def test_run_time_checks_raise_data_errors():
    x = create_lod_tensor(np.ones((5, 2)), [[4, 1]])

    def run(build, feeds):
        main = graphc.Program()
        with graphc.program_guard(main, graphc.Program()):
            out = build()
        return interpret(main, feeds, [out]), main, out

    with pytest.raises(DataError, match="a last offset equal to X's row count"):
        run(lambda: layers.lod_reset(lod_data("x", 2), target_lod=[0, 2, 6]), {"x": x})
    with pytest.raises(DataError, match="offsets starting at 0"):
        run(lambda: layers.lod_reset(lod_data("x", 2), y=graphc.data("o", [3], "int32")),
            {"x": x, "o": np.array([1, 2, 5], "int32")})
    with pytest.raises(DataError, match="ascending offsets"):
        run(lambda: layers.lod_reset(lod_data("x", 2), y=graphc.data("o", [3], "int32")),
            {"x": x, "o": np.array([0, 4, 3], "int32")})
    with pytest.raises(DataError, match="one per entry of the appended level"):
        run(lambda: layers.lod_append(lod_data("x", 2), [0, 5]), {"x": x})
    with pytest.raises(DataError, match="a LoD whose tokens are X's rows"):
        run(lambda: layers.lod_reset(lod_data("x", 2), y=lod_data("y", 1)),
            {"x": x, "y": create_lod_tensor(np.ones((3, 1)), [[3]])})
    with pytest.raises(LoweringError, match="the rank table holds 2 sequences but X holds 3"):
        run(lambda: layers.reorder_lod_tensor_by_rank(graphc.data("r", [3, 2], "float64"),
                                                      layers.lod_rank_table(lod_data("x", 2))),
            {"x": x, "r": np.zeros((3, 2))})
    # an array of LoD values keeps its first element's buffers: a bigger element is refused
    def overflow():
        i = layers.fill_constant([1], "int64", 0)
        a = layers.array_write(lod_data("small", 1), i)
        return layers.array_write(lod_data("big", 1), layers.increment(i), array=a)

    with pytest.raises(DataError, match="at most 16 tokens: the buffer of the array's first"):
        run(overflow, {"small": create_lod_tensor(np.ones((2, 1)), [[2]]),
                       "big": create_lod_tensor(np.ones((20, 1)), [[20]])})
    with pytest.raises(ShapeError, match="an array's elements share one type"):
        layers.array_write(lod_data("l2", 1, level=2), layers.fill_constant([1], "int64", 1),
                           array=layers.array_write(lod_data("l1", 1),
                                                    layers.fill_constant([1], "int64", 0)))
    with pytest.raises(ProgramError, match="beam_search_decode: 'ids' .* must be a tensor array"):
        layers.beam_search_decode(lod_data("i", 1, "int64", 2), lod_data("s", 1, level=2), 2, 0)
    # compiled: the step refuses the batch and commits nothing
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        out = layers.lod_reset(lod_data("x", 2), target_lod=[0, 2, 6])
    with pytest.raises(DataError, match="X's row count"):
        graphc.Executor().run(main, feed={"x": x}, fetch_list=[out])


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


@pytest.mark.parametrize("seed", [0, 1])
def test_beam_search_decode_backtraces_paddle_hypotheses(seed):
    rng = np.random.default_rng(seed)
    n, beam, vocab, steps = 3, 2, 6, 4
    table = rng.standard_normal((vocab, vocab)) * 2
    table[:, 0] += 1.0 * seed  # seed 1: ends often, sources finish and get pruned
    init_ids = np.array([[1], [2], [3]])
    main, outs = _decode_program(n, beam, vocab, steps)
    picks = _reference_decode(table, init_ids, n, beam, steps)
    want_ids, want_scores, want_lengths = beam_search_decode_reference(
        [(i, s, lod) for i, s, lod in picks], beam, 0)
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
    want_ids, want_scores, want_lengths = beam_search_decode_reference(picks, beam, 0)
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
        got_ids, got_scores = (v if isinstance(v, LoDTensor) else unpack(v) for v in got)
        assert got_ids.recursive_sequence_lengths() == want_lengths
        np.testing.assert_array_equal(np.array(got_ids), want_ids)
        np.testing.assert_allclose(np.array(got_scores), want_scores, rtol=1e-6)
