"""Forward results of the tensor manipulation, math and logic layers against NumPy, through the
reference interpreter and the JAX Executor (which must agree exactly), plus layer-level errors.

Each test builds one small program holding several layers, so XLA compiles few programs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import graphc
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.layers.manipulation import one_hot_v2


def run_both(feeds: dict, outs: list) -> list[np.ndarray]:
    """Fetch ``outs`` with the interpreter and the Executor; they must agree (exactly for
    integers and bools); returns the interpreter's results."""
    program = graphc.default_main_program()
    _, interp = run_graph(graphc.lower(program), {}, feeds, [o.name for o in outs])
    compiled = graphc.Executor().run(program, feed=feeds, fetch_list=outs, scope=graphc.Scope())
    results = []
    for out, a, b in zip(outs, interp, compiled):
        a = np.asarray(a)
        assert a.dtype == np.dtype(out.dtype) and b.dtype == a.dtype, (out, a.dtype, b.dtype)
        if a.dtype.kind == "f":  # XLA may fuse and reorder float arithmetic: a few ulps
            np.testing.assert_allclose(b, a, rtol=1e-12 if a.dtype == np.float64 else 1e-6,
                                       err_msg=out.name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=out.name)
        known = [d for d in out.shape if d >= 0]
        assert len(out.shape) == a.ndim and all(
            d < 0 or d == s for d, s in zip(out.shape, a.shape)), (out, a.shape, known)
        results.append(a)
    return results


def data(name, value):
    value = np.asarray(value)
    return graphc.data(name, list(value.shape), dtype=str(value.dtype)), value


RNG = np.random.default_rng(15)


def test_slice_strided_slice_squeeze_unsqueeze_flatten():
    xv = RNG.standard_normal((2, 3, 4)).astype("float32")
    x = graphc.data("x", [-1, 3, 4], dtype="float32")  # unknown batch: shapes at run time
    outs = [
        layers.slice(x, [1, 2], [1, -3], [10000, -1]),
        layers.slice(x, [-1], [-100], [2]),
        layers.slice(x, [0], [-1], [2]),
        layers.strided_slice(x, [2, 1], [-1, 0], [-5, 3], [-2, 2]),
        layers.squeeze(layers.unsqueeze(x, [0, -1]), []),
        layers.squeeze(layers.unsqueeze(x, [1, -1]), [-1, 1]),
        layers.unsqueeze(x, [-1, 0, 2]),
        layers.flatten(x, 0), layers.flatten(x, 2), layers.flatten(x, 3),
    ]
    r = run_both({"x": xv}, outs)
    expected = [xv[:, 1:, 1:3], xv[:, :, :2], xv[1:2], xv[:, 0:3:2, ::-2], xv, xv,
                np.expand_dims(xv, -1)[None][:, :, None], xv.reshape(1, -1),
                xv.reshape(6, 4), xv.reshape(24, 1)]
    for got, want in zip(r, expected):
        np.testing.assert_array_equal(got, want)
    assert tuple(outs[6].shape) == (1, -1, 1, 3, 4, 1)


def test_shape_expand_gather_scatter():
    xv = RNG.standard_normal((5, 3)).astype("float32")
    x, _ = data("x", xv)
    idx, idxv = data("idx", np.array([3, 0, 3], "int64"))
    col, colv = data("col", np.array([[4], [1]], "int32"))
    nd, ndv = data("nd", np.array([[0, 2], [4, 1]], "int64"))
    upd, updv = data("upd", RNG.standard_normal((3, 3)).astype("float32"))
    ids, idsv = data("ids", np.array([2, 0, 2], "int64"))
    uniq, uniqv = data("uniq", np.array([4, 0, 1], "int64"))
    target = graphc.data("target", [-1, 6], dtype="float32")
    outs = [layers.shape(x), layers.expand(x, [2, 1]), layers.expand_as(x, target),
            layers.gather(x, idx), layers.gather(x, col), layers.gather_nd(x, nd),
            layers.scatter(x, ids, upd, overwrite=False),
            layers.scatter(x, uniq, upd, overwrite=True)]
    feeds = {"x": xv, "idx": idxv, "col": colv, "nd": ndv, "upd": updv, "ids": idsv,
             "uniq": uniqv, "target": np.zeros((10, 6), "float32")}
    r = run_both(feeds, outs)
    assert r[0].dtype == np.int32 and list(r[0]) == [5, 3]
    np.testing.assert_array_equal(r[1], np.tile(xv, (2, 1)))
    np.testing.assert_array_equal(r[2], np.tile(xv, (2, 2)))
    np.testing.assert_array_equal(r[3], xv[idxv])
    np.testing.assert_array_equal(r[4], xv[colv[:, 0]])
    np.testing.assert_array_equal(r[5], xv[ndv[:, 0], ndv[:, 1]])
    added = xv.copy()
    added[[2, 0]] = 0  # Paddle's overwrite=False: the scattered rows start from zero
    np.add.at(added, idsv, updv)
    np.testing.assert_allclose(r[6], added, rtol=1e-6)
    replaced = xv.copy()
    replaced[uniqv] = updv
    np.testing.assert_array_equal(r[7], replaced)


def test_scatter_paddle_doc_example():
    x, xv = data("x", np.array([[1, 1], [2, 2], [3, 3]], "float32"))
    i, iv = data("i", np.array([2, 1, 0, 1], "int64"))
    u, uv = data("u", np.array([[1, 1], [2, 2], [3, 3], [4, 4]], "float32"))
    (out,) = run_both({"x": xv, "i": iv, "u": uv}, [layers.scatter(x, i, u, overwrite=False)])
    np.testing.assert_array_equal(out, [[3, 3], [6, 6], [1, 1]])


def test_stack_unstack_one_hot_argmax_argsort():
    av, bv = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    a, _ = data("a", av)
    b, _ = data("b", bv)
    ids, idsv = data("ids", np.array([[1], [3], [0], [7]], "int64"))  # 7: out of range
    ids2, ids2v = data("ids2", np.array([[1, 2], [0, 0]], "int32"))
    parts = layers.unstack(a, axis=-1)
    srt, order = layers.argsort(a, axis=0, descending=True)
    outs = [layers.stack([a, b]), layers.stack([a, b], axis=-1), *parts,
            layers.one_hot(ids, 4, allow_out_of_range=True), one_hot_v2(ids2, 3),
            layers.argmax(a), layers.argmin(a, axis=-1), srt, order,
            *layers.argsort(b)]
    r = run_both({"a": av, "b": bv, "ids": idsv, "ids2": ids2v}, outs)
    np.testing.assert_array_equal(r[0], np.stack([av, bv]))
    np.testing.assert_array_equal(r[1], np.stack([av, bv], -1))
    for k in range(3):
        np.testing.assert_array_equal(r[2 + k], av[:, k])
    np.testing.assert_array_equal(r[5], np.eye(4, dtype="float32")[[1, 3, 0]].tolist()
                                  + [[0, 0, 0, 0]])
    assert r[5].dtype == np.float32
    np.testing.assert_array_equal(r[6], np.eye(3)[ids2v])
    np.testing.assert_array_equal(r[7], av.argmax(0))
    np.testing.assert_array_equal(r[8], av.argmin(-1))
    np.testing.assert_array_equal(r[10], np.argsort(-av, axis=0, kind="stable"))
    np.testing.assert_array_equal(r[9], np.take_along_axis(av, r[10], 0))
    np.testing.assert_array_equal(r[11], np.sort(bv, -1))
    np.testing.assert_array_equal(r[12], np.argsort(bv, -1, kind="stable"))
    assert r[10].dtype == r[12].dtype == r[7].dtype == np.int64


def test_where_interpreter_and_compiled():
    # the rows are one sequence of a LoD value (tests/test_where_lod.py has the chain)
    cv = np.array([[True, False, True], [False, False, True]])
    cond, _ = data("cond", cv)
    out = layers.where(cond)
    assert tuple(out.shape) == (-1, 2) and out.dtype == "int64" and out.lod_level == 1
    program = graphc.default_main_program()
    _, (got,) = run_graph(graphc.lower(program), {}, {"cond": cv}, [out.name])
    assert got.lengths[0].tolist() == [3]
    np.testing.assert_array_equal(got.data[:3], np.argwhere(cv))
    (fetched,) = graphc.Executor().run(program, feed={"cond": cv}, fetch_list=[out],
                                       scope=graphc.Scope())
    np.testing.assert_array_equal(fetched, np.argwhere(cv))


def test_where_with_a_size_bound_compiles_and_pads():
    cv = np.array([0.0, 2.0, 0.0, -1.0], "float32")
    cond, _ = data("cond", cv)
    flags = layers.not_equal(cond, layers.zeros([4], "float32"))
    r = run_both({"cond": cv}, [layers.where(flags, size=3), layers.where(flags, size=1)])
    np.testing.assert_array_equal(r[0], [[1], [3], [-1]])
    np.testing.assert_array_equal(r[1], [[1]])


def test_creation_layers():
    x = graphc.data("x", [-1, 3], dtype="float64")
    xv = RNG.standard_normal((4, 3))
    counter = layers.fill_constant([1], "int64", 5)
    bumped = layers.increment(counter, 2, in_place=False)
    layers.increment(counter)  # in place: counter itself is written again
    outs = [layers.range(0, 10, 3, "int32"), layers.range(1.0, 0.0, -0.25, "float32"),
            layers.arange(5), layers.zeros([2, 2], "int32"), layers.ones([3], "float64"),
            layers.zeros_like(x), layers.ones_like(x),
            layers.fill_constant_batch_size_like(x, [1, 5], "int64", 7),
            layers.fill_constant_batch_size_like(x, [2, 0], "float32", 1.5, 0, 1),
            layers.uniform_random_batch_size_like(x, [0, 6], min=2.0, max=3.0),
            bumped, counter]
    r = run_both({"x": xv}, outs[:9] + outs[10:])
    np.testing.assert_array_equal(r[0], np.arange(0, 10, 3, dtype="int32"))
    np.testing.assert_array_equal(r[1], np.arange(1.0, 0.0, -0.25, dtype="float32"))
    np.testing.assert_array_equal(r[2], np.arange(5))
    np.testing.assert_array_equal(r[3], np.zeros((2, 2), "int32"))
    np.testing.assert_array_equal(r[4], np.ones(3))
    np.testing.assert_array_equal(r[5], np.zeros_like(xv))
    np.testing.assert_array_equal(r[6], np.ones_like(xv))
    np.testing.assert_array_equal(r[7], np.full((4, 5), 7, "int64"))
    np.testing.assert_array_equal(r[8], np.full((2, 4), 1.5, "float32"))
    np.testing.assert_array_equal(r[9], [7])
    np.testing.assert_array_equal(r[10], [6])
    program = graphc.default_main_program()
    (rand,) = graphc.Executor().run(program, feed={"x": xv}, fetch_list=[outs[9]],
                                    scope=graphc.Scope())
    assert rand.shape == (4, 6) and rand.dtype == np.float32
    assert (rand >= 2.0).all() and (rand < 3.0).all() and np.unique(rand).size == 24


REDUCE_DIMS = [None, 1, -1, [0, 2], [-3, -1]]


@pytest.mark.parametrize("keep_dim", [False, True])
def test_reductions_like_numpy(keep_dim):
    xv = RNG.uniform(0.5, 1.5, (2, 3, 4))
    bv = RNG.random((2, 3, 4)) > 0.3
    x, _ = data("x", xv)
    bl, _ = data("bl", bv)
    fns = {layers.reduce_sum: np.sum, layers.reduce_mean: np.mean, layers.reduce_max: np.max,
           layers.reduce_min: np.min, layers.reduce_prod: np.prod}
    outs, want = [], []
    for dim in REDUCE_DIMS:
        axis = None if dim is None else tuple(dim) if isinstance(dim, list) else dim
        for layer, fn in fns.items():
            outs.append(layer(x, dim=dim, keep_dim=keep_dim))
            want.append(fn(xv, axis=axis, keepdims=keep_dim))
        for layer, fn in ((layers.reduce_all, np.all), (layers.reduce_any, np.any)):
            outs.append(layer(bl, dim=dim, keep_dim=keep_dim))
            want.append(fn(bv, axis=axis, keepdims=keep_dim))
    r = run_both({"x": xv, "bl": bv}, outs)
    for out, got, w in zip(outs, r, want):
        w = np.asarray(w)
        w = w.reshape(w.shape or (1,))  # Paddle: a full reduction without keep_dim is [1]
        assert got.shape == w.shape, out
        np.testing.assert_allclose(got, w, rtol=1e-12, err_msg=out.name)


def test_math_layers_like_numpy():
    xv = RNG.standard_normal((3, 4))
    pv = RNG.uniform(0.2, 2.0, (3, 4))
    yv = RNG.standard_normal((4,))
    x, _ = data("x", xv)
    p, _ = data("p", pv)
    y, _ = data("y", yv)
    big, bigv = data("big", np.full((2, 2), 3.0))
    outs = [layers.clip(x, -0.5, 0.4), layers.clip_by_norm(big, 1.0),
            layers.clip_by_norm(x, 1e3), layers.l2_normalize(x, 1),
            layers.l2_normalize(x, -2, epsilon=1e-3), layers.sign(x), layers.abs(x),
            layers.sqrt(p), layers.exp(x), layers.log(p), layers.square(x), layers.pow(p, 1.5),
            layers.elementwise_max(x, y), layers.elementwise_min(x, y),
            layers.elementwise_pow(p, y)]
    r = run_both({"x": xv, "p": pv, "y": yv, "big": bigv}, outs)
    want = [np.clip(xv, -0.5, 0.4), bigv / 6.0, xv,
            xv / np.sqrt((xv ** 2).sum(1, keepdims=True) + 1e-12),
            xv / np.sqrt((xv ** 2).sum(0, keepdims=True) + 1e-3), np.sign(xv), np.abs(xv),
            np.sqrt(pv), np.exp(xv), np.log(pv), xv ** 2, pv ** 1.5, np.maximum(xv, yv),
            np.minimum(xv, yv), pv ** yv]
    for out, got, w in zip(outs, r, want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-15, err_msg=out.name)


def test_integer_elementwise_comparisons_and_logic():
    av = np.array([[7, -7, 5], [-5, 0, 9]], "int64")
    bv = np.array([3, 3, -2], "int64")
    a, _ = data("a", av)
    b, _ = data("b", bv)
    col, colv = data("col", np.array([5, 0], "int64"))
    outs = [layers.elementwise_mod(a, b), layers.elementwise_floordiv(a, b),
            layers.equal(a, b), layers.not_equal(a, b), layers.less_than(a, b),
            layers.less_equal(a, b), layers.greater_than(a, b), layers.greater_equal(a, b)]
    gt = layers.greater_than(a, b)
    le = layers.less_equal(a, b)
    eq_col = layers.equal(a, layers.unsqueeze(col, [1]))
    outs += [layers.logical_and(gt, eq_col), layers.logical_or(gt, eq_col),
             layers.logical_xor(gt, le), layers.logical_not(gt)]
    r = run_both({"a": av, "b": bv, "col": colv}, outs)
    ge = av > bv
    ec = av == colv[:, None]
    want = [np.mod(av, bv), np.floor_divide(av, bv), av == bv, av != bv, av < bv, av <= bv,
            ge, av >= bv, ge & ec, ge | ec, ge ^ (av <= bv), ~ge]
    for out, got, w in zip(outs, r, want):
        np.testing.assert_array_equal(got, w, err_msg=out.name)
    assert all(o.dtype == "bool" for o in outs[2:])


def test_split_with_minus_one_section_and_negative_dim():
    xv = RNG.standard_normal((2, 7))
    x, _ = data("x", xv)
    r = run_both({"x": xv}, layers.split(x, [2, -1, 1], dim=-1))
    for got, want in zip(r, np.split(xv, [2, 6], axis=-1)):
        np.testing.assert_array_equal(got, want)


def test_topk_values_are_differentiable():
    """top_k's Out has a gradient (Paddle's top_k_grad): the op, not only its layer."""
    from graphc.ir.grad_defs import is_differentiable
    assert is_differentiable("top_k")
    assert not is_differentiable("arg_max") and not is_differentiable("where_index")


@pytest.mark.parametrize("build, message", [
    # -- unitops: a fill_constant start now folds (as Paddle takes it); a fed one is refused
    (lambda x: layers.slice(x, [0], [graphc.data("s0", [1], "int32")], [1]),
     "slice: 'starts' must be a list of ints"),
    (lambda x: layers.one_hot(layers.cast(x, "int64"), layers.fill_constant([1], "int32", 3)),
     "one_hot: depth must be an int"),
    (lambda x: layers.range(0, layers.fill_constant([1], "int32", 3), 1, "int32"),
     "range: 'end' must be a number"),
    (lambda x: layers.unstack(graphc.data("u", [-1, 3], "float32"), axis=0),
     "unstack: dimension 0 of 'u' [-1, 3] is unknown; give num"),
    (lambda x: layers.squeeze(x, [5]), "axes entry 5 is out of range for rank 2"),
    (lambda x: layers.squeeze(x, [1]), "dimension 1 of [2, 3] has size 3; only size-1"),
    (lambda x: layers.gather(x, x), "Index must be an integer tensor, got float32"),
    (lambda x: layers.logical_and(x, x), "inputs must be bool"),
])
def test_layer_errors_name_the_layer_and_argument(build, message):
    x = graphc.data("x", [2, 3], dtype="float32")
    with pytest.raises(graphc.GraphcError) as info:
        build(x)
    assert message in str(info.value)


def test_topk_layer_passes_gradients_to_its_input():
    xv = np.array([[0.3, -1.0, 2.0, 0.5], [1.5, 0.1, -0.2, 0.9]])
    x = graphc.data("x", [2, 4], dtype="float64")
    x.stop_gradient = False
    values, indices = layers.topk(x, 2)
    assert not values.stop_gradient and indices.stop_gradient
    graphc.append_backward(layers.reduce_sum(layers.scale(values, 3.0)))
    (grad,) = graphc.Executor().run(feed={"x": xv}, fetch_list=["x@GRAD"],
                                    scope=graphc.Scope())
    np.testing.assert_array_equal(grad, [[0, 0, 3, 3], [3, 0, 0, 3]])


def test_cast_to_int_and_back_blocks_the_gradient():
    """An integer value has no gradient: x -> int64 -> float64 leaves x without one."""
    x = graphc.data("x", [2, 3], dtype="float64")
    x.stop_gradient = False
    y = layers.elementwise_add(layers.cast(layers.cast(x, "int64"), "float64"), x)
    graphc.append_backward(layers.reduce_sum(y))
    (grad,) = graphc.Executor().run(feed={"x": np.full((2, 3), 1.7)}, fetch_list=["x@GRAD"],
                                    scope=graphc.Scope())
    np.testing.assert_array_equal(grad, np.ones((2, 3)))  # only the direct path


def _type(shape, dtype="float32"):
    from graphc.ir.types import TensorType
    return TensorType(tuple(shape), dtype)


@pytest.mark.parametrize("op_type, ins, attrs, message", [
    ("gather_nd", {"X": [_type((3,))], "Index": [_type((), "int64")]}, {},
     "Index must have at least one dimension"),
    ("unstack", {"X": [_type(())]}, {"num": 1}, "X must have at least one dimension"),
    ("squeeze2", {"X": [_type(())]}, {"axes": [0]}, "X must have at least one dimension"),
    ("slice", {"Input": [_type(())]}, {"axes": [0], "starts": [0], "ends": [1]},
     "Input must have at least one dimension"),
    ("scatter", {"X": [_type(())], "Ids": [_type((1,), "int64")], "Updates": [_type(())]},
     {}, "X must have at least one dimension"),
    ("range", {}, {"start": 0.0, "end": float("inf"), "step": 1.0},
     "must be finite"),
    ("range", {}, {"start": 0.0, "end": 1e12, "step": 1.0}, "too long"),
    ("expand_as", {"X": [_type((0, 2))], "target_tensor": [_type((3, 2))]}, {},
     "is not a multiple of X [0, 2]"),
    ("argsort", {"X": [_type(())]}, {}, "X must have at least one dimension"),
])
def test_degenerate_inputs_get_shape_errors(op_type, ins, attrs, message):
    """Scalars, zero-size and non-finite attributes: a ShapeError naming the op, never a
    Python error from inside the inference rule."""
    from graphc.ir.opdef import get_op_def
    opdef = get_op_def(op_type)
    with pytest.raises(graphc.ShapeError, match=f"^at t.py:1: {op_type}: .*{re.escape(message)}"):
        opdef.infer_types(ins, opdef.normalize_attrs(attrs, "at t.py:1"), "at t.py:1")


def test_assign_of_numpy_arrays_and_paddles_where_example():
    arrays = [np.array([[1.5, -2.0], [0.25, 3.0]], "float32"), np.arange(6, dtype="int32"),
              np.array([[2 ** 40], [-3]], "int64"), np.array([True, False, True])]
    outs = [layers.assign(a) for a in arrays]
    for out, a, g in zip(outs, arrays, run_both({}, outs)):
        assert out.dtype == str(a.dtype) and tuple(out.shape) == a.shape
        np.testing.assert_array_equal(g, a)
    # Paddle 1.8's own example for layers.where (its rows: a one-sequence LoD value)
    cond = layers.cast(layers.assign(np.array([[1, 0], [0, 1]], dtype="int32")), "bool")
    out = layers.where(cond)
    (got,) = graphc.Executor().run(graphc.default_main_program(), fetch_list=[out],
                                   scope=graphc.Scope())
    np.testing.assert_array_equal(got, [[0, 0], [1, 1]])


@pytest.mark.parametrize("value, message", [
    (np.zeros(3), "a numpy array of float64; Paddle takes bool, float32, int32 or int64"),
    ([1, 2], "input must be a Variable or a numpy array, got list"),
    (np.zeros(1024 * 1024 + 1, "float32"), "too big"),
])
def test_assign_refuses_what_paddle_refuses(value, message):
    with pytest.raises(graphc.ProgramError, match=re.escape(message)):
        layers.assign(value)
