"""lod_tensor_to_array, array_to_lod_tensor and shrink_memory (arr2lod) against NumPy references
of Paddle 1.8's semantics over random LoDs (empty sequences, levels 1 to 3), the jitted
Executor equal to the interpreter, Paddle's own expected arrays, and the errors bad input meets.
Gradients by finite differences: tests/test_gradients.py's arr2lod block."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.backends.lowering import LoweringError
from graphc.build.backward import append_backward
from graphc.ir.errors import ArgumentTypeError, ProgramError, ShapeError
from graphc.runtime.fetches import fetched
from graphc.runtime.lod import LoDTensor, create_lod_tensor, unpack
from graphc.testing.lod import as_feed, lod_lengths, random_lod_tensor

EXAMPLES = settings(max_examples=6, deadline=None)
seeds = st.integers(0, 2 ** 16)


# -- NumPy references ---------------------------------------------------------------------------

def _offsets(lengths):
    return [np.concatenate([[0], np.cumsum(v, dtype=np.int64)]) for v in lengths]


def rank_order(lengths0):
    return sorted(range(len(lengths0)), key=lambda i: -lengths0[i])  # stable: ties in order


def to_array_reference(tokens, lengths):
    """Paddle's elements: element t holds, for each sequence longer than t in rank order, its
    t-th level-1 entry with what it holds (tokens, and the LoD of the levels below)."""
    offs = _offsets(lengths)
    order = rank_order(lengths[0])
    out = []
    for t in range(max(lengths[0], default=0)):
        rows, lods = [], [[] for _ in lengths[1:]]
        for s in order:
            if lengths[0][s] <= t:
                break
            lo, hi = offs[0][s] + t, offs[0][s] + t + 1
            for lv in range(1, len(lengths)):  # the entry's entries, level by level
                lods[lv - 1] += list(lengths[lv][lo:hi])
                lo, hi = offs[lv][lo], offs[lv][hi]
            rows.append(tokens[lo:hi])
        out.append((np.concatenate(rows), lods))
    return out


def shrink_reference(x, lengths, k):
    """The first k rows of dense x, or x's first k sequences (their tokens and LoD)."""
    if lengths is None:
        return x[:k], None
    offs = _offsets(lengths)
    lo, hi, lod = 0, min(k, len(lengths[0])), []
    for lv, v in enumerate(lengths):
        lod.append(list(v[lo:hi]))
        lo, hi = offs[lv][lo], offs[lv][hi]
    return x[lo:hi], lod


# -- running a program both ways ---------------------------------------------------------------

def _host(v):
    """A fetched value as (tokens, LoD) pairs: arrays as lists of them."""
    if isinstance(v, list):
        return [_host(e) for e in v]
    if isinstance(v, LoDTensor):
        return np.array(v), v.recursive_sequence_lengths()
    return np.asarray(v), []


def interpret(main, feeds, outs):
    g = graphc.lower(main)
    got = run_graph(g, {}, {k: as_feed(main, k, v) for k, v in feeds.items()},
                    [o.name for o in outs])[1]
    # run_graph hands a tensor array back wrapped in a 0-d object array
    got = [v.item() if isinstance(v, np.ndarray) and v.dtype == object else v for v in got]
    return [_host(unpack(v)) if hasattr(v, "lengths") else _host(fetched(v, 1, False))
            for v in got]


def _same(a, b, what):
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), what
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{k}]")
        return
    np.testing.assert_allclose(b[0], a[0], rtol=1e-6, err_msg=what)
    assert a[1] == b[1], what


def both(main, feeds, outs, exe=None):
    """The interpreter's results, after checking the jitted Executor gives the same."""
    ref = interpret(main, feeds, outs)
    got = (exe or graphc.Executor()).run(main, feed=feeds, fetch_list=outs, return_numpy=False)
    for o, a, b in zip(outs, ref, got):
        _same(a, _host(b), o.name)
    return ref


def _program(level, dtype="float64", width=2, capacity=None):
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = graphc.data("x", [-1, width], dtype, lod_level=level)
        table = layers.lod_rank_table(x)
        array = layers.lod_tensor_to_array(x, table, capacity=capacity)
        back = layers.array_to_lod_tensor(array, table)
        longest = layers.max_sequence_len(table)
        length = layers.array_length(array)
    return main, [array, back, longest, length]


_PROGRAMS: dict = {}


def _cached(level):
    """One program and Executor per level: hypothesis examples reuse its compiled steps."""
    if level not in _PROGRAMS:
        _PROGRAMS[level] = (*_program(level), graphc.Executor())
    return _PROGRAMS[level]


def _check_split(level, lengths, seed):
    rng = np.random.default_rng(seed)
    main, outs, exe = _cached(level)
    x = random_lod_tensor(rng, lengths, (2,))
    array, back, longest, length = both(main, {"x": x}, outs, exe)
    want = to_array_reference(np.array(x), [list(v) for v in lengths])
    assert len(array) == len(want) == int(length[0].reshape(-1)[0])
    for (rows, lod), (want_rows, want_lod) in zip(array, want):
        np.testing.assert_allclose(rows, want_rows)
        assert lod == want_lod
    np.testing.assert_allclose(back[0], np.array(x))
    assert back[1] == [list(map(int, v)) for v in lengths]
    assert int(longest[0].reshape(-1)[0]) == max(lengths[0], default=0)


@EXAMPLES
@given(lengths=lod_lengths(1, max_sequences=6), seed=seeds)
def test_level_1_against_the_reference(lengths, seed):
    _check_split(1, lengths, seed)


@EXAMPLES
@given(lengths=lod_lengths(2), seed=seeds)
def test_level_2_against_the_reference(lengths, seed):
    _check_split(2, lengths, seed)


# Paddle's test_lod_tensor_array_ops expectations (lengths, expected rows, expected LoDs)
PADDLE_CASES = [
    ([[3, 6, 1]], [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6),
    ([[3, 6, 0, 1]], [[3, 0, 9], [4, 1], [5, 2], [6], [7], [8]], [[]] * 6),
    ([[2, 3], [3, 6, 2, 6, 3]],
     [[9, 10, 0, 1, 2], [11, 12, 13, 14, 15, 16, 3, 4, 5, 6, 7, 8], [17, 18, 19]],
     [[[2, 3]], [[6, 6]], [[3]]]),
    ([[3, 2, 4, 2], [3, 4, 4, 0, 1, 5, 2, 2, 2, 7, 1]],
     [[12, 13, 14, 15, 16, 0, 1, 2, 23, 24, 25, 26, 27, 28, 29],
      [17, 18, 3, 4, 5, 6, 11, 30], [19, 20, 7, 8, 9, 10], [21, 22]],
     [[[5, 3, 0, 7]], [[2, 4, 1, 1]], [[2, 4]], [[2]]]),
    ([[2, 3, 1], [2, 3, 1, 4, 2, 1], [3, 4, 4, 6, 4, 1, 1, 4, 4, 8, 6, 1, 4]],
     [[21, 0, 1, 2, 3, 4, 5, 6, 46, 47, 48, 49], list(range(22, 39)) + list(range(7, 21)),
      list(range(39, 46))],
     [[[1, 2, 1], [1, 3, 4, 4]], [[4, 3], [1, 4, 4, 8, 4, 6, 4]], [[2], [6, 1]]]),
]


@pytest.mark.parametrize("lengths, rows, lods", PADDLE_CASES,
                         ids=["level1", "level1-empty", "level2", "level2-empty", "level3"])
def test_paddles_expected_arrays(lengths, rows, lods):
    total = sum(lengths[-1])
    main, outs = _program(len(lengths), "int32", width=1)
    x = create_lod_tensor(np.arange(total, dtype="int32").reshape(-1, 1), lengths)
    array, back, longest, _ = both(main, {"x": x}, outs)
    assert [r.ravel().tolist() for r, _ in array] == rows
    assert [lod for _, lod in array] == lods
    assert back[0].ravel().tolist() == list(range(total)) and back[1] == lengths
    assert int(longest[0].reshape(-1)[0]) == len(rows)
    # and the reference agrees with Paddle's numbers
    want = to_array_reference(np.arange(total), lengths)
    assert [w.tolist() for w, _ in want] == rows and [lod for _, lod in want] == lods


def test_array_steps_run_through_ops_and_back():
    """A step read, changed and written back, the array turned back into a LoD value: step t
    of every sequence changed, the rest as it was (interpreter == jitted)."""
    rng = np.random.default_rng(0)
    lengths = [[2, 0, 4, 1, 3]]
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = graphc.data("x", [-1, 3], "float64", lod_level=1)
        table = layers.lod_rank_table(x)
        array = layers.lod_tensor_to_array(x, table, capacity=6)
        i = layers.fill_constant([1], "int64", 1)
        step = layers.array_read(array, i)
        layers.array_write(layers.scale(step, 10.0, bias=1.0), i, array=array)
        out = layers.array_to_lod_tensor(array, table)
    x_t = random_lod_tensor(rng, lengths, (3,))
    tokens = np.array(x_t)
    got = both(main, {"x": x_t}, [out])[0]
    want = tokens.copy()
    for start, n in zip(np.cumsum([0, *lengths[0]]), lengths[0]):
        if n > 1:
            want[start + 1] = tokens[start + 1] * 10.0 + 1.0
    np.testing.assert_allclose(got[0], want)
    assert got[1] == lengths


def test_dense_elements_are_rows_by_rank():
    """An array of dense [N, D] elements (a fixed-shape step value): row j of element t is
    the rank-j sequence's step t."""
    lengths = [[2, 0, 3, 1]]
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        k = graphc.data("k", [-1, 1], "float64", lod_level=1)
        table = layers.lod_rank_table(k)
        array = layers.create_array("float64", capacity=4)
        for t in range(3):
            layers.array_write(layers.fill_constant([4, 2], "float64", float(t)) +
                               graphc.data(f"r{t}", [4, 2], "float64"),
                               layers.fill_constant([1], "int64", t), array=array)
        out = layers.array_to_lod_tensor(array, table)
    rows = [np.arange(8.0).reshape(4, 2) * (t + 1) for t in range(3)]
    feeds = {"k": create_lod_tensor(np.zeros((6, 1)), lengths),
             **{f"r{t}": rows[t] for t in range(3)}}
    got = both(main, feeds, [out])[0]
    order = rank_order(lengths[0])  # [2, 0, 3, 1]
    want = [rows[t][order.index(s)] + t for s in range(4) for t in range(lengths[0][s])]
    np.testing.assert_allclose(got[0], np.array(want))
    assert got[1] == lengths


# -- shrink_memory ------------------------------------------------------------------------------

@EXAMPLES
@given(key=lod_lengths(1), lengths=lod_lengths(2), seed=seeds)
def test_shrink_memory_against_the_reference(key, lengths, seed):
    rng = np.random.default_rng(seed)
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        table = layers.lod_rank_table(graphc.data("k", [-1, 1], "float64", lod_level=1))
        dense = graphc.data("d", [-1, 3], "float64")
        x2 = graphc.data("x2", [-1, 2], "float64", lod_level=2)
        i = graphc.data("i", [1], "int64")
        outs = [layers.shrink_memory(dense, i, table), layers.shrink_memory(x2, i, table)]
        outs.append(layers.shrink_memory(outs[0], layers.increment(i, in_place=False), table))
    step = int(rng.integers(0, 4))
    d = rng.standard_normal((len(key[0]), 3))
    x2_t = random_lod_tensor(rng, lengths, (2,))
    feeds = {"k": random_lod_tensor(rng, key, (1,)), "d": d, "x2": x2_t,
             "i": np.array([step], "int64")}
    got = both(main, feeds, outs)
    alive = [sum(v > s for v in key[0]) for s in (step, step + 1)]
    want, _ = shrink_reference(d, None, alive[0])
    np.testing.assert_allclose(got[0][0], want)
    assert got[0][1] == [[1] * alive[0] + [0] * (len(key[0]) - alive[0])]
    want, lod = shrink_reference(np.array(x2_t), [list(v) for v in lengths], alive[0])
    np.testing.assert_allclose(got[1][0], want)
    n0 = len(lengths[0])
    assert got[1][1][0] == lod[0] + [0] * (n0 - len(lod[0]))
    assert [v for v in got[1][1][1] if v] == [v for v in lod[1] if v]
    np.testing.assert_allclose(got[2][0], d[:min(alive)])


def test_shrink_memory_gradient_keeps_the_rows_kept():
    """Paddle's test_shrink_rnn_memory: three shrinks by steps 0, 1, 2 of lengths [1, 2, 3];
    the mean's gradient reaches the row kept to the end only."""
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = graphc.data("x", [-1, 4], "float64")
        x.stop_gradient = False
        table = layers.lod_rank_table(graphc.data("k", [-1, 1], "float64", lod_level=1))
        i = layers.zeros([1], "int64")
        mem = x
        for _ in range(3):
            mem = layers.shrink_memory(mem, i, table)
            i = layers.increment(i, in_place=False)
        append_backward(layers.mean(mem))
    x_np = np.random.default_rng(1).random((3, 4))
    feeds = {"x": x_np, "k": create_lod_tensor(np.zeros((6, 1)), [[1, 2, 3]])}
    got = both(main, feeds, [mem, main.global_block().var("x@GRAD")])
    np.testing.assert_allclose(got[0][0], x_np[:1])
    want = np.zeros((3, 4))
    want[0] = 0.25
    np.testing.assert_allclose(got[1][0], want)


# -- bad input -------------------------------------------------------------------------------

def test_build_time_errors_name_the_layer():
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x = graphc.data("x", [-1, 2], "float64", lod_level=1)
        dense = graphc.data("d", [-1, 2], "float64")
        table = layers.lod_rank_table(x)
        with pytest.raises(ArgumentTypeError, match="lod_tensor_to_array"):
            layers.lod_tensor_to_array(np.zeros(3), table)
        with pytest.raises(ArgumentTypeError, match="'table'"):
            layers.lod_tensor_to_array(x, [table])
        with pytest.raises(ArgumentTypeError, match="rank table"):
            layers.lod_tensor_to_array(x, dense)
        with pytest.raises(ShapeError, match="must be a LoD value"):  # not from a feed: a
            # feed declared dense is re-typed on this demand instead (seqtype, lod_demand.py)
            layers.lod_tensor_to_array(layers.fill_constant([3, 2], "float64", 0.0), table)
        with pytest.raises(ShapeError, match="tensor array"):
            layers.array_to_lod_tensor(dense, table)
        with pytest.raises(ProgramError, match="capacity"):
            layers.lod_tensor_to_array(x, table, capacity=0)
        with pytest.raises(ShapeError, match="one element"):
            layers.shrink_memory(dense, table, table)


def test_run_time_errors():
    main, outs = _program(1, capacity=3)
    with pytest.raises(DataError, match="at most 3 steps"):
        graphc.Executor().run(main, feed={"x": create_lod_tensor(np.zeros((4, 2)), [[4]])},
                              fetch_list=outs[:1])
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = graphc.data("x", [-1, 2], "float64", lod_level=1)
        other = graphc.data("o", [-1, 2], "float64", lod_level=1)
        array = layers.lod_tensor_to_array(x, layers.lod_rank_table(other))
    feeds = {"x": create_lod_tensor(np.zeros((3, 2)), [[1, 2]]),
             "o": create_lod_tensor(np.zeros((3, 2)), [[2, 1]])}
    with pytest.raises(DataError, match="lod_rank_table"):
        graphc.Executor().run(main, feed=feeds, fetch_list=[array])


def test_an_array_turned_back_with_another_table_is_refused():
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = graphc.data("x", [-1, 2], "float64", lod_level=1)
        other = graphc.data("o", [-1, 2], "float64", lod_level=1)
        out = layers.array_to_lod_tensor(layers.lod_tensor_to_array(x, layers.lod_rank_table(x)),
                                         layers.lod_rank_table(other))
    feeds = {"x": create_lod_tensor(np.zeros((3, 2)), [[1, 2]]),
             "o": create_lod_tensor(np.zeros((3, 2)), [[1, 1, 1]])}
    with pytest.raises(LoweringError, match="rank table holds 3 sequences but the array"):
        graphc.Executor().run(main, feed=feeds, fetch_list=[out])
