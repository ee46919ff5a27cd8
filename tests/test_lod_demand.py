"""Sequence ops on feeds declared dense (seqtype, issues 24/26): the feed is re-typed as a LoD
value on the op's demand, as Paddle runs the fed LoD; array capacities taken from the data."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc import lower
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.runtime.feeds import FeedError
from graphc.runtime.lod import create_lod_tensor
from graphc.testing.lod import as_feed

LENGTHS = [[2, 0, 3]]
RNG = np.random.default_rng(7)
X = RNG.standard_normal((5, 3)).astype("float32")
W = RNG.standard_normal((3, 4)).astype("float32")


def _segments(lengths):
    ends = np.cumsum(lengths)
    return [slice(e - n, e) for e, n in zip(ends, lengths)]


@pytest.fixture(scope="module")
def pooled():
    """x declared dense (Paddle's tests declare sequence inputs so), fc -> relu -> scale, then
    sequence ops: x and everything on its rows become LoD values when built."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.fc(x, 4, act="relu", bias_attr=False,
                            param_attr=fluid.ParamAttr(name="w"))
        h = fluid.layers.scale(h, 2.0)
        total = fluid.layers.sequence_pool(h, "sum")
        last = fluid.layers.sequence_last_step(h)
    return main, startup, x, h, [total, last]


def _reference(x, lengths):
    h = np.maximum(x @ W, 0) * 2
    segs = _segments(lengths)
    total = np.stack([h[s].sum(0) for s in segs])
    last = np.stack([h[s][-1] if s.stop > s.start else np.zeros(4, "float32") for s in segs])
    return total, last


def test_a_sequence_op_retypes_the_dense_feed_and_what_is_built_on_it(pooled):
    main, _, x, h, _ = pooled
    assert (x.lod_level, h.lod_level) == (1, 1)
    assert "sequence_pool" in x.lod_demanded_by
    # the feed gets tokens first: a LoD value's leading dimension is its token count
    assert list(x.shape) == [-1, 3]


def test_the_retyped_program_equals_numpy_on_the_interpreter_and_jitted(pooled):
    main, startup, _, _, outs = pooled
    want = _reference(X, LENGTHS[0])
    feed = create_lod_tensor(X, LENGTHS)
    _, got = run_graph(lower(main), {"w": W}, {"x": as_feed(main, "x", feed)},
                       [o.name for o in outs])
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-6)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.global_scope().var("w").get_tensor().set(W, fluid.CPUPlace())
        jit = exe.run(main, feed={"x": feed}, fetch_list=outs)
    for g, w in zip(jit, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_dense_array_fed_to_the_retyped_feed_is_refused_naming_the_op(pooled):
    main, startup, _, _, outs = pooled
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.raises(FeedError, match=r"(?s)feed 'x'.*sequence_pool.*needs sequences"):
            exe.run(main, feed={"x": X}, fetch_list=outs)


@pytest.mark.parametrize("source", ["parameter", "fill_constant"])
def test_a_value_not_computed_from_a_feed_still_refuses(source):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        if source == "parameter":
            v = fluid.layers.create_parameter([4, 3], "float32", name="p")
        else:
            v = fluid.layers.fill_constant([4, 3], "float32", 1.0)
        v = fluid.layers.relu(v)
        with pytest.raises(ShapeError, match="X must be a LoD value"):
            fluid.layers.sequence_pool(v, "sum")
        assert v.lod_level == 0


def test_only_what_a_sequence_op_needs_is_retyped():
    """The recommender chapter's shape: a dense-declared id (fed one-row LoDs) concatenated
    with dense features stays dense; a title declared dense and pooled becomes a LoD value."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        uid = fluid.layers.data(name="uid", shape=[1], dtype="int64")
        feat = fluid.layers.data(name="feat", shape=[2], dtype="float32")
        emb = fluid.layers.embedding(uid, size=[10, 2])
        user = fluid.layers.fc(fluid.layers.concat([emb, feat], axis=1), 3)
        title = fluid.layers.data(name="title", shape=[1], dtype="int64")
        pooled = fluid.layers.sequence_pool(fluid.layers.embedding(title, size=[10, 3]), "sum")
        fluid.layers.elementwise_add(user, pooled)
    assert (uid.lod_level, feat.lod_level, user.lod_level) == (0, 0, 0)
    assert title.lod_level == 1 and pooled.lod_level == 0


def test_a_level_two_lod_fed_runs_a_copy_typed_for_it(pooled):
    main, startup, _, _, outs = pooled
    lengths = [[2, 1], [2, 0, 3]]  # pooling a level-2 value pools its sub-sequences
    feed = create_lod_tensor(X, lengths)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.global_scope().var("w").get_tensor().set(W, fluid.CPUPlace())
        total, = exe.run(main, feed={"x": feed}, fetch_list=outs[:1], return_numpy=False)
    assert total.recursive_sequence_lengths() == [[2, 1]]
    np.testing.assert_allclose(np.array(total), _reference(X, lengths[1])[0], rtol=1e-5,
                               atol=1e-6)


def test_dynamic_rnn_steps_a_feed_declared_dense():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        rnn = fluid.layers.DynamicRNN()
        with rnn.block():
            step = rnn.step_input(x)
            mem = rnn.memory(shape=[3], value=0.0)
            total = fluid.layers.elementwise_add(mem, step)
            rnn.update_memory(mem, total)
            rnn.output(total)
        out = rnn()
    assert x.lod_level == 1
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        got, = exe.run(main, feed={"x": create_lod_tensor(X, LENGTHS)}, fetch_list=[out])
    want = np.concatenate([np.cumsum(X[s], 0) for s in _segments(LENGTHS[0])])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_dynamic_rnn_of_a_parameter_still_refuses():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        p = fluid.layers.create_parameter([4, 3], "float32", name="q")
        rnn = fluid.layers.DynamicRNN()
        with pytest.raises(ProgramError, match="must be a LoD value"):
            with rnn.block():
                rnn.step_input(p)


# -- capacity from the data ---------------------------------------------------------------
@pytest.fixture(scope="module")
def steps_round_trip():
    """lod_tensor_to_array without a capacity, each step doubled, gathered back."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        table = fluid.layers.lod_rank_table(x)
        array = fluid.layers.lod_tensor_to_array(x, table)
        back = fluid.layers.array_to_lod_tensor(array, table)
        fixed = fluid.layers.lod_tensor_to_array(x, table, capacity=130)
        steps = fluid.layers.max_sequence_len(table)
    return main, startup, back, fixed, steps


def test_long_sequences_take_a_bucketed_capacity(steps_round_trip):
    main, _, back, _, steps = steps_round_trip
    exe = fluid.Executor(fluid.CPUPlace())
    for lengths in ([[129, 3]], [[200, 7]]):  # one bucket (256): one re-typed copy
        data = np.arange(sum(lengths[0]), dtype="float32").reshape(-1, 1)
        got, n = exe.run(main, feed={"x": create_lod_tensor(data, lengths)},
                         fetch_list=[back, steps], return_numpy=False)
        np.testing.assert_array_equal(np.array(got), data)
        assert got.recursive_sequence_lengths() == lengths
        assert int(np.array(n)[0]) == lengths[0][0]
    copies = main.__dict__["_feed_shaped"]
    assert len(copies) == 1 and next(iter(copies))[2] == 256


def test_an_explicit_capacity_exceeded_is_refused_naming_it(steps_round_trip):
    main, _, _, fixed, _ = steps_round_trip
    data = np.zeros((140, 1), "float32")
    with pytest.raises(DataError, match="at most 130 steps"):
        fluid.Executor(fluid.CPUPlace()).run(
            main, feed={"x": create_lod_tensor(data, [[140]])}, fetch_list=[fixed])


# -- a reshape across rows drops the LoD of feeds declared with one (Paddle shares a
# reshape's LoD only where dim 0 is unchanged): TDM's infer, the Transformer's decoder inputs
def _reshaped(needs_sequences: bool):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        h = fluid.layers.fc(x, 4, bias_attr=False, param_attr=fluid.ParamAttr(name="w"))
        if needs_sequences:
            fluid.layers.sequence_pool(h, "sum")
        out = fluid.layers.reshape(h, [-1, 2])
    return main, startup, x, out


def test_a_reshape_across_rows_drops_the_declared_lod_and_reshapes_the_fed_rows():
    main, startup, x, out = _reshaped(needs_sequences=False)
    assert (x.lod_level, out.lod_level, list(out.shape)) == (0, 0, [-1, 2])
    assert "reshape" in x.lod_dropped_by
    want = (X @ W).reshape(-1, 2)
    _, (got,) = run_graph(lower(main), {"w": W}, {"x": X}, [out.name])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.global_scope().var("w").get_tensor().set(W, fluid.CPUPlace())
        for feed in (create_lod_tensor(X, LENGTHS), X):  # a fed LoD is dropped, as Paddle's
            (jit,) = exe.run(main, feed={"x": feed}, fetch_list=[out])
            np.testing.assert_allclose(jit, want, rtol=1e-5, atol=1e-6)


def test_a_reshape_across_rows_of_sequences_an_op_needs_still_refuses():
    with pytest.raises(ShapeError, match="reshaping the LoD value .* does not keep one row"):
        _reshaped(needs_sequences=True)
