"""split_lod_tensor / merge_lod_tensor (ifelse26): NumPy references of Paddle 1.8's semantics
over dense rows and random 1- and 2-level LoDs (empty sequences, all-true and all-false masks),
the jitted step equal to the interpreter, one compiled step for every mask, ops over a side
exact on its rows only, agreement with IfElse, and the errors bad input meets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_lod_control_ops import both

import graphc
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.ir.errors import ArgumentTypeError, ShapeError
from graphc.runtime.lod import create_lod_tensor
from graphc.testing.lod import lod_lengths, random_lod_tensor, split

EXAMPLES = settings(max_examples=5, deadline=None)


def split_ref(tokens, lengths, mask):
    """Paddle's split, as graphc fetches it: (tokens, lengths) of each side, whose level-0
    lengths list the side's sequences and then an empty one per sequence of the other side."""
    n = len(mask)
    if lengths is None:  # a dense X: its rows
        return [(tokens[mask == side], [[1] * int((mask == side).sum()) +
                                        [0] * int((mask != side).sum())])
                for side in (True, False)]
    if len(lengths) == 1:
        seqs = split(tokens, lengths[0])
    else:  # each top-level sequence: its sub-sequence lengths and its tokens
        subs = split(np.asarray(lengths[1]), lengths[0])
        seqs = split(tokens, [int(s.sum()) for s in subs])
    out = []
    for side in (True, False):
        idx = [i for i in range(n) if mask[i] == side]
        rows = np.concatenate([seqs[i] for i in idx]) if idx else tokens[:0]
        lens = [[lengths[0][i] for i in idx] + [0] * (n - len(idx))]
        if len(lengths) == 2:
            lens.append([int(v) for i in idx for v in subs[i]])
        out.append((rows, lens))
    return out


def _program(level: int, width: int = 2):
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = (graphc.data("x", [-1, width], "float64", lod_level=level) if level
             else graphc.data("x", [-1, width], "float64"))
        m = graphc.data("m", [-1, 1], "bool")
        yes, no = layers.split_lod_tensor(x, m)
        back = layers.merge_lod_tensor(yes, no, x, m)
        routed = layers.merge_lod_tensor(layers.exp(yes), layers.scale(no, -2.0), x, m)
    return main, [yes, no, back, routed]


def _check_case(level, lengths, seed, mask):
    rng = np.random.default_rng(seed)
    n = len(mask)
    x = (random_lod_tensor(rng, lengths, (2,)) if level else rng.standard_normal((n, 2)))
    main, outs = _program(level)
    got = both(main, {"x": x, "m": mask[:, None]}, outs)
    tokens = np.array(x)
    for (rows, lens), g in zip(split_ref(tokens, lengths if level else None, mask), got):
        np.testing.assert_array_equal(g[0], rows)
        assert g[1] == lens
    routed_ref = np.empty_like(tokens)
    row_flags = (mask if not level else
                 np.repeat(mask, [r.shape[0] for r in _top_sequences(tokens, lengths)]))
    routed_ref[row_flags] = np.exp(tokens[row_flags])
    routed_ref[~row_flags] = -2.0 * tokens[~row_flags]
    for g, ref in ((got[2], tokens), (got[3], routed_ref)):
        if level:  # X's LoD comes back with X's rows
            assert g[1] == x.recursive_sequence_lengths()
            g = g[0]
        np.testing.assert_allclose(g, ref, rtol=1e-12)


def _top_sequences(tokens, lengths):
    if len(lengths) == 1:
        return split(tokens, lengths[0])
    return split(tokens, [int(s.sum()) for s in split(np.asarray(lengths[1]), lengths[0])])


masks = st.sampled_from(["random", "all", "none"])


def _mask(rng, n, kind):
    return {"all": np.ones(n, bool), "none": np.zeros(n, bool)}.get(
        kind, rng.random(n) < 0.5)


@EXAMPLES
@given(n=st.integers(1, 6), seed=st.integers(0, 2 ** 16), kind=masks)
def test_split_merge_dense_rows(n, seed, kind):
    _check_case(0, None, seed, _mask(np.random.default_rng(seed), n, kind))


@EXAMPLES
@given(lengths=lod_lengths(1), seed=st.integers(0, 2 ** 16), kind=masks)
def test_split_merge_level1_sequences(lengths, seed, kind):
    _check_case(1, lengths, seed, _mask(np.random.default_rng(seed), len(lengths[0]), kind))


@EXAMPLES
@given(lengths=lod_lengths(2), seed=st.integers(0, 2 ** 16), kind=masks)
def test_split_merge_level2_top_sequences(lengths, seed, kind):
    _check_case(2, lengths, seed, _mask(np.random.default_rng(seed), len(lengths[0]), kind))


def test_paddle_examples():
    """Paddle's own cases (test_split_and_merge_lod_tensor_op): rows [0, 0, 1, 1, 1, 1, 0, ...]
    and sequences [[3, 6, 1]] split by [0, 1, 0]."""
    dense = np.arange(10).reshape(10, 1).astype("float64")
    mask = np.array([0, 0, 1, 1, 1, 1, 0, 0, 0, 0], bool)
    main, outs = _program(0, width=1)
    got = both(main, {"x": dense, "m": mask[:, None]}, outs)
    assert got[0][0].ravel().tolist() == [2, 3, 4, 5]
    assert got[1][0].ravel().tolist() == [0, 1, 6, 7, 8, 9]
    np.testing.assert_array_equal(got[2], dense)
    main, outs = _program(1, width=1)
    x = create_lod_tensor(dense, [[3, 6, 1]])
    got = both(main, {"x": x, "m": np.array([[0], [1], [0]], bool)}, outs)
    assert (got[0][0].ravel().tolist(), got[0][1]) == ([3, 4, 5, 6, 7, 8], [[6, 0, 0]])
    assert (got[1][0].ravel().tolist(), got[1][1]) == ([0, 1, 2, 9], [[3, 1, 0]])
    assert (got[2][0].ravel().tolist(), got[2][1]) == (list(range(10)), [[3, 6, 1]])


def test_one_compiled_step_serves_every_mask():
    main, outs = _program(1)
    exe = graphc.Executor()
    rng = np.random.default_rng(0)
    x = random_lod_tensor(rng, [[2, 0, 3, 1]], (2,))
    for bits in ([1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]):
        both(main, {"x": x, "m": np.array(bits, bool)[:, None]}, outs, exe)
    assert sum(step.traces for prep in exe._prepared[main][1].values()
               for step in prep.steps.values()) == 1


def test_ops_over_a_side_see_its_rows_only():
    """A side is a LoD value whose padding is empty sequences: mean and sum over it are over
    the side's rows (Paddle's semantics), not over the batch."""
    rng = np.random.default_rng(1)
    xv, mask = rng.standard_normal((7, 3)), np.array([1, 0, 1, 1, 0, 0, 1], bool)
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x, m = graphc.data("x", [-1, 3], "float64"), graphc.data("m", [-1, 1], "bool")
        yes, no = layers.split_lod_tensor(x, m)
        outs = [layers.mean(yes), layers.reduce_sum(no), layers.sequence_pool(yes, "sum")]
    got = both(main, {"x": xv, "m": mask[:, None]}, outs)
    np.testing.assert_allclose(got[0], [xv[mask].mean()], rtol=1e-12)
    np.testing.assert_allclose(got[1], [xv[~mask].sum()], rtol=1e-12)
    # one sequence per row of the side, then empty ones (pooled to zeros)
    np.testing.assert_allclose(got[2], np.concatenate([xv[mask], np.zeros((3, 3))]))


def test_agrees_with_ifelse():
    """Paddle 1.8's IfElse is split_lod_tensor, a block per side and merge_lod_tensor: graphc's
    IfElse, split/merge, and split/merge with a ConditionalBlock([mask]) per side (Paddle's
    raw API, which runs in every step) give the same rows with the same weights."""
    rng = np.random.default_rng(2)
    xv, label = rng.standard_normal((6, 4)), rng.integers(0, 10, (6, 1))
    results = []
    for form in ("split", "ifelse", "raw"):
        main, start = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, start):
            x, y = graphc.data("x", [-1, 4], "float64"), graphc.data("y", [-1, 1], "int64")
            cond = layers.less_than(y, layers.fill_constant([1], "int64", 5))

            def block(rows, name, size):
                h = layers.fc(rows, size, act="tanh", param_attr=f"{name}_w",
                              bias_attr=f"{name}_b")
                return layers.fc(h, 3, act="softmax", param_attr=f"{name}_w2",
                                 bias_attr=f"{name}_b2")
            if form == "split":
                yes, no = layers.split_lod_tensor(x, cond)
                out = layers.merge_lod_tensor(block(yes, "t", 5), block(no, "f", 7), x, cond)
            elif form == "raw":  # Paddle's test_if_else_op raw API: a ConditionalBlock per side
                yes, no = layers.split_lod_tensor(x, cond)
                sides = [layers.create_tensor("float64"), layers.create_tensor("float64")]
                for rows, side, name, size in ((yes, sides[0], "t", 5), (no, sides[1], "f", 7)):
                    with layers.ConditionalBlock([cond]).block():
                        layers.assign(block(rows, name, size), side)
                out = layers.merge_lod_tensor(sides[0], sides[1], x, cond)
            else:
                ie = layers.IfElse(cond)
                with ie.true_block():
                    ie.output(block(ie.input(x), "t", 5))
                with ie.false_block():
                    ie.output(block(ie.input(x), "f", 7))
                out = ie()[0]
        scope = graphc.Scope()
        exe = graphc.Executor()
        with graphc.scope_guard(scope):
            exe.run(start)
            if results:  # the first form's weights
                for name, value in results[0][1].items():
                    scope.var(name).get_tensor().set(value, graphc.CPUPlace())
            got = exe.run(main, feed={"x": xv, "y": label}, fetch_list=[out])[0]
            weights = {n: np.array(scope.find_var(n).get_tensor())
                       for n in ("t_w", "t_b", "t_w2", "t_b2", "f_w", "f_b", "f_w2", "f_b2")}
        results.append((got, weights))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-10)
    np.testing.assert_allclose(results[0][0], results[2][0], rtol=1e-10)


# -- errors -----------------------------------------------------------------------------------

def test_layer_arguments_are_checked():
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x, m = graphc.data("x", [-1, 1], "float32"), graphc.data("m", [-1, 1], "bool")
        with pytest.raises(TypeError):
            layers.split_lod_tensor(set(), m)
        with pytest.raises(TypeError):
            layers.split_lod_tensor(x, set())
        with pytest.raises(ArgumentTypeError, match="'level' must be an int"):
            layers.split_lod_tensor(x, m, level=None)
        with pytest.raises(ArgumentTypeError, match="'x' must be a Variable"):
            layers.merge_lod_tensor(x, x, set(), m)
        lod = graphc.data("s", [-1, 1], "float32", lod_level=2)
        with pytest.raises(ShapeError, match="level 0 only") as info:
            layers.split_lod_tensor(lod, m, level=1)
        assert "op split_lod_tensor" in str(info.value) and "test_lod_split.py" in str(info.value)


def test_a_mask_of_other_rows_is_refused_when_run():
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x, m = graphc.data("x", [-1, 2], "float64"), graphc.data("m", [-1, 1], "bool")
        yes, _ = layers.split_lod_tensor(x, m)
    with pytest.raises(ShapeError, match="Mask holds 3 flags but X has 4 rows") as info:
        graphc.Executor().run(main, feed={"x": np.zeros((4, 2)), "m": np.ones((3, 1), bool)},
                              fetch_list=[yes])
    assert "split_lod_tensor" in str(info.value)


def test_a_side_with_too_few_rows_is_a_data_error():
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x, m = graphc.data("x", [4, 2], "float64"), graphc.data("m", [4, 1], "bool")
        a, b = graphc.data("a", [1, 2], "float64"), graphc.data("b", [3, 2], "float64")
        out = layers.merge_lod_tensor(a, b, x, m)
    feed = {"x": np.zeros((4, 2)), "a": np.ones((1, 2)), "b": np.ones((3, 2)),
            "m": np.array([[1], [1], [0], [0]], bool)}
    with pytest.raises(DataError, match="holds 1 at .* InTrue rows .* for each of X's flagged") \
            as info:
        graphc.Executor().run(main, feed=feed, fetch_list=[out])
    assert "merge_lod_tensor" in str(info.value)


def test_ifelse_argument_types_are_type_errors():
    """Paddle's TestIfElseError: a cond, a name or an output of the wrong type is a TypeError
    (graphc's ArgumentTypeError, a ProgramError naming the line)."""
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        src = graphc.data("data", [-1, 1], "float32")
        cond = layers.less_than(src, layers.fill_constant([1], "float32", 123.0))
        with pytest.raises(ArgumentTypeError, match="cond must be a Variable"):
            layers.IfElse(set())
        with pytest.raises(ArgumentTypeError, match="name must be a str"):
            layers.IfElse(cond, set())
        ie = layers.IfElse(cond)
        with pytest.raises(ArgumentTypeError, match="outputs must be Variables"):
            with ie.true_block():
                ie.output([])


def test_merge_infer_with_the_mask_as_x():
    """Paddle's IfElse merges with x=cond (only its rows matter); merge_lod_tensor_infer is
    the gradient-free form Paddle's inference programs hold."""
    from graphc.fluid.layer_helper import LayerHelper
    rng = np.random.default_rng(3)
    xv, mask = rng.standard_normal((5, 2)), np.array([[0], [1], [1], [0], [1]], bool)
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x, m = graphc.data("x", [-1, 2], "float64"), graphc.data("m", [-1, 1], "bool")
        yes, no = layers.split_lod_tensor(x, m)
        helper = LayerHelper("merge_lod_tensor_infer")
        out = helper.create_variable_for_type_inference(dtype="float64")
        helper.append_op(type="merge_lod_tensor_infer",
                         inputs={"X": m, "Mask": m, "InTrue": layers.tanh(yes), "InFalse": no},
                         outputs={"Out": out}, attrs={"level": 0})
        plain = layers.merge_lod_tensor(layers.tanh(yes), no, m, m)
    got = both(main, {"x": xv, "m": mask}, [out, plain])
    ref = np.where(mask, np.tanh(xv), xv)
    np.testing.assert_allclose(got[0], ref, rtol=1e-12)
    np.testing.assert_allclose(got[1], ref, rtol=1e-12)


def test_a_persistable_side_reads_back_from_the_scope():
    """Paddle's split test marks the sides persistable and reads them from the scope: a LoD
    value there reads as its tokens and lengths."""
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        x = graphc.data("x", [-1, 1], "int32", lod_level=1)
        m = graphc.data("m", [-1, 1], "bool")
        yes, no = layers.split_lod_tensor(x, m)
        yes.persistable = no.persistable = True
    scope = graphc.Scope()
    x = create_lod_tensor(np.arange(10).reshape(10, 1).astype("int32"), [[3, 6, 1]])
    graphc.Executor().run(main, feed={"x": x, "m": np.array([[0], [1], [0]], bool)},
                          scope=scope)
    t = scope.find_var(yes.name).get_tensor()
    assert np.array(t).ravel().tolist() == [3, 4, 5, 6, 7, 8] and t.shape() == [6, 1]
    assert t.recursive_sequence_lengths() == [[6, 0, 0]] and t.lod() == [[0, 6, 6, 6]]
    assert scope.find_var(no.name).get_tensor().recursive_sequence_lengths() == [[3, 1, 0]]


def test_a_side_centred_on_its_own_mean_and_its_gradient():
    """What graphc's IfElse refuses (``rows - mean(rows)`` mixes rows) is exact with split /
    merge: each side's mean is over its own rows, values and gradients (finite differences)."""
    from graphc.testing.lod_checks import fd_check, token_loss
    rng = np.random.default_rng(5)
    xv, mask = rng.standard_normal((6, 3)), np.array([[1], [0], [0], [1], [1], [0]], bool)
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x, m = graphc.data("x", [6, 3], "float64"), graphc.data("m", [6, 1], "bool")
        x.stop_gradient = False
        yes, no = layers.split_lod_tensor(x, m)
        centred = [layers.elementwise_sub(s, layers.mean(s)) for s in (yes, no)]
        out = layers.merge_lod_tensor(centred[0], layers.tanh(centred[1]), x, m)
        (got,) = both(main, {"x": xv, "m": mask}, [out])
        f = mask[:, 0]
        ref = np.where(mask, xv - xv[f].mean(), np.tanh(xv - xv[~f].mean()))
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        loss, w = token_loss(out, rng)
        fd_check(main, loss, {"x": xv, "m": mask, **w}, ["x"], rng, coords=8)
