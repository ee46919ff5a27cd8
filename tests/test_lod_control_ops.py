"""The LoD ops of control-flow programs (issue 26): lod_reset / lod_append, lod_rank_table,
max_sequence_len and reorder_lod_tensor_by_rank against NumPy references of Paddle's semantics
over random LoDs (empty sequences included), the jitted step equal to the interpreter,
gradients by finite differences, and the errors bad input meets (beam_search's included;
its semantics: tests/test_lod_beam_search.py)."""

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
    with pytest.raises(TypeError, match="must be a rank table"):  # arr2lod: Paddle's TypeError
        layers.reorder_lod_tensor_by_rank(x, graphc.data("t", [4], "int64"))
    with pytest.raises(ProgramError, match="'pre_ids' .* must be one of \\['int64'\\]"):
        layers.beam_search(graphc.data("p", [-1, 1], "int32"), x, None, x, 2, 0)
    with pytest.raises(ShapeError, match="beam_search: scores must be a LoD value"):
        layers.beam_search(lod_data("pi", 1, "int64"), lod_data("ps", 1, "float32"), None,
                           layers.fill_constant([3, 4], "float32", 0.0), 2, 0)  # no feed


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
    # an array of LoD values widens its buffers for a bigger element (arrmix: was refused)
    def bigger():
        i = layers.fill_constant([1], "int64", 0)
        a = layers.array_write(lod_data("small", 1), i)
        return layers.array_write(lod_data("big", 1), layers.increment(i), array=a)

    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        out = bigger()
    elements, = graphc.Executor().run(
        main, feed={"small": create_lod_tensor(np.ones((2, 1)), [[2]]),
                    "big": create_lod_tensor(np.full((20, 1), 3.), [[20]])},
        fetch_list=[out], return_numpy=False)
    assert [e.recursive_sequence_lengths() for e in elements] == [[[2]], [[20]]]
    np.testing.assert_array_equal(np.asarray(elements[1]), np.full((20, 1), 3.))
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
