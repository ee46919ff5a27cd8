"""lod_rank_table below level 0 (rank1, issue 26): Paddle's table over every entry of a deeper
level of the batch, against a NumPy reference, on the interpreter and jitted."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc import lower
from graphc.backends.interpreter import run_graph
from graphc.runtime.lod import create_lod_tensor
from graphc.testing.lod import as_feed

# three levels, Paddle's test_lod_rank_table batch; a 2-level one with an empty entry
CASES = [([[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]], 1),
         ([[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]], 2),
         ([[2, 0, 3], [1, 4, 2, 0, 2]], 1)]


def rank_items(lengths, level):
    """Paddle's LoDRankTable at ``level``: (entry, length) over that level's entries of the
    whole batch, longest first, ties in batch order (a stable sort)."""
    lens = lengths[level]
    return sorted(enumerate(lens), key=lambda item: -item[1])


@pytest.fixture(scope="module")
def programs():
    built = {}
    for depth in (2, 3):
        for level in range(1, depth):
            main = fluid.Program()
            with fluid.program_guard(main, fluid.Program()):
                x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=depth)
                table = fluid.layers.control_flow.lod_rank_table(x, level=level)
                table.persistable = True
                longest = fluid.layers.control_flow.max_sequence_len(table)
            built[depth, level] = main, table, longest
    return built


@pytest.mark.parametrize("lengths,level", CASES)
def test_a_deeper_level_table_equals_paddles_items(programs, lengths, level):
    main, table, longest = programs[len(lengths), level]
    rows = sum(lengths[-1])
    feed = create_lod_tensor(np.arange(2 * rows, dtype="float32").reshape(rows, 2), lengths)
    want = rank_items(lengths, level)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    (jit,) = exe.run(main, feed={"x": feed}, fetch_list=[longest], scope=scope)
    assert scope.find_var(table.name).get_lod_rank_table().items() == want
    assert int(np.asarray(jit)[0]) == max(lengths[level])
    _, (got_table, got_len) = run_graph(lower(main), {}, {"x": as_feed(main, "x", feed)},
                                        [table.name, longest.name])
    # the table's LoD: the levels above its own (Paddle's coarse LoD); the buffer's unused
    # entries follow the real ones, as length -1
    for v, w in zip(got_table.lengths, lengths[:level]):  # deeper ones padded with 0
        assert np.asarray(v).tolist() == w + [0] * (len(v) - len(w))
    rows = np.asarray(got_table.data)
    assert [tuple(r) for r in rows[:len(want)].tolist()] == want
    assert (rows[len(want):, 1] == -1).all()
    assert int(np.asarray(got_len)[0]) == max(lengths[level])


@pytest.fixture(scope="module")
def round_trip():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=3)
        x.stop_gradient = False
        table = fluid.layers.control_flow.lod_rank_table(x, level=1)
        array = fluid.layers.control_flow.lod_tensor_to_array(x, table)
        back = fluid.layers.control_flow.array_to_lod_tensor(array, table)
        loss = fluid.layers.reduce_sum(fluid.layers.scale(back, 3.0))
        fluid.backward.append_backward(loss)
    return main, back


def test_a_level_1_table_splits_and_restores_every_level(round_trip):
    """Paddle's test_lod_tensor_to_array_level_2_skip_level batch: the steps are the level-2
    entries of each level-1 entry; array_to_lod_tensor puts back all three levels, and the
    gradient (3 for every token) passes back through both."""
    main, back = round_trip
    lengths = [[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]]
    rows = sum(lengths[-1])
    xv = np.arange(rows, dtype="float32").reshape(rows, 1)
    feed = create_lod_tensor(xv, lengths)
    out, grad = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": feed}, fetch_list=[back, "x@GRAD"], scope=fluid.Scope(),
        return_numpy=False)
    np.testing.assert_array_equal(np.asarray(out), xv)
    assert out.recursive_sequence_lengths() == lengths
    np.testing.assert_array_equal(np.asarray(grad), np.full_like(xv, 3.0))
    _, (got,) = run_graph(lower(main), {}, {"x": as_feed(main, "x", feed)}, [back.name])
    assert [np.asarray(v)[:len(w)].tolist() for v, w in zip(got.lengths, lengths)] == lengths
    np.testing.assert_array_equal(np.asarray(got.data)[:rows], xv)


# -- a LoD fed to a variable declared dense that only LoD-optional ops read --------------------

SEQS = [2, 0, 3, 1]  # the sequences of `x` (rows 6); `key` ranks four sequences
KEYS = [1, 3, 2, 2]
XV = np.arange(12, dtype="float32").reshape(6, 2)


def reorder_reference(x, lengths, order):
    """Paddle's reorder_lod_tensor_by_rank: sequence order[r] becomes sequence r (a dense x:
    row order[r])."""
    ends = np.cumsum(lengths)
    parts = [x[e - n:e] for e, n in zip(ends, lengths)]
    return np.concatenate([parts[i] for i in order]), [lengths[i] for i in order]


@pytest.fixture(scope="module")
def reordered():
    """x (declared dense, as Paddle's test_reorder_lod_tensor) reordered by key's table; y the
    same with a dense reading of the feed beside it."""
    built = {}
    for name in ("only", "beside"):
        main = fluid.Program()
        with fluid.program_guard(main, fluid.Program()):
            x = fluid.layers.data(name="x", shape=[2], dtype="float32")
            key = fluid.layers.data(name="key", shape=[1], dtype="float32", lod_level=1)
            table = fluid.layers.control_flow.lod_rank_table(key)
            out = fluid.layers.reorder_lod_tensor_by_rank(x, table)
            fetch = [out]
            if name == "beside":
                fetch.append(fluid.layers.scale(x, 2.0))
        built[name] = main, fetch
    return built


def _key_feed():
    return create_lod_tensor(np.zeros((sum(KEYS), 1), "float32"), [KEYS])


def _run_both(main, feed, fetch):
    """Jitted (the executor) and on the interpreter (of the copy the executor runs)."""
    from graphc.runtime.feed_shapes import unchecked_feeds
    jit = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetch,
                                               scope=fluid.Scope(), return_numpy=False)
    ran, _ = unchecked_feeds(main, feed)
    # a variable the run keeps dense takes the fed rows (the executor drops their LoD)
    packed = {n: as_feed(ran, n, v if ran.global_block().var(n).lod_level else np.asarray(v))
              for n, v in feed.items()}
    _, interp = run_graph(lower(ran), {}, packed, [v.name for v in fetch])
    return jit, interp


def test_reorder_uses_the_lod_fed_to_a_dense_declared_x(reordered):
    main, fetch = reordered["only"]
    order = [i for i, _ in rank_items([KEYS], 0)]
    want, want_lengths = reorder_reference(XV, SEQS, order)
    jit, interp = _run_both(main, {"x": create_lod_tensor(XV, [SEQS]), "key": _key_feed()},
                            fetch)
    np.testing.assert_array_equal(np.asarray(jit[0]), want)
    assert jit[0].recursive_sequence_lengths() == [want_lengths]
    got = interp[0]
    np.testing.assert_array_equal(np.asarray(got.data)[:len(want)], want)
    assert np.asarray(got.lengths[0]).tolist() == want_lengths
    assert main.global_block().var("x").lod_level == 0  # the program itself is unchanged


def test_reorder_of_dense_rows_and_a_dense_reading_keep_the_rows(reordered):
    order = [i for i, _ in rank_items([KEYS], 0)]
    rows = XV[:4]
    main, fetch = reordered["only"]  # the same program fed plain rows: rows are sequences
    jit, interp = _run_both(main, {"x": rows, "key": _key_feed()}, fetch)
    for got in (jit[0], interp[0]):
        np.testing.assert_array_equal(np.asarray(got), rows[order])
    # a LoD fed where the feed is also read as dense rows (scale): dropped, rows reordered
    main, fetch = reordered["beside"]
    lod_rows = create_lod_tensor(rows, [[1, 3]])
    jit, interp = _run_both(main, {"x": lod_rows, "key": _key_feed()}, fetch)
    for got in (jit, interp):
        np.testing.assert_array_equal(np.asarray(got[0]), rows[order])
        np.testing.assert_array_equal(np.asarray(got[1]), rows * 2)


@pytest.mark.parametrize("layer", ["reorder", "shrink"])
def test_reordering_or_shrinking_by_a_deeper_table_is_refused_when_built(layer):
    from graphc.ir.errors import ShapeError
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=2)
        table = fluid.layers.control_flow.lod_rank_table(x, level=1)
        with pytest.raises(ShapeError, match="table of a level below 0 is not supported"):
            if layer == "reorder":
                fluid.layers.reorder_lod_tensor_by_rank(x, table)
            else:
                i = fluid.layers.fill_constant([1], "int64", 0)
                fluid.layers.control_flow.shrink_memory(x, i, table)
