"""Variable as Paddle 1.8 patches it (issue 24): indexing and slicing (slice/strided_slice ops,
with gradients), astype, the arithmetic/comparison operators, attribute setters."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.ir.errors import GraphcError, ShapeError

INDEXES = [
    ("cols", lambda v: v[:, 1:3]),
    ("row", lambda v: v[0]),
    ("last_reversed", lambda v: v[-1, ::-1]),
    ("steps", lambda v: v[:, ::2, -3:-1]),
    ("negative_step", lambda v: v[:, 3:0:-2]),
    ("scalar", lambda v: v[1, 2, 3]),
    ("last_col", lambda v: v[:, -1]),
    ("clamped", lambda v: v[:, -10:10]),
    ("whole", lambda v: v[:]),
]


def _both(out, feed):
    (got,) = graphc.Executor().run(feed=feed, fetch_list=[out])
    _, (ref,) = run_graph(graphc.lower(graphc.default_main_program()), {}, feed, [out.name])
    return got, np.asarray(ref)


@pytest.mark.parametrize("name, index", INDEXES, ids=[n for n, _ in INDEXES])
def test_indexing_matches_numpy(name, index):
    value = np.random.RandomState(0).rand(3, 4, 5).astype("float32")
    x = graphc.data("x", [-1, 4, 5], "float32")
    out = index(x)
    want = np.asarray(index(value)).reshape(np.shape(index(value)) or (1,))
    # a dimension that follows the batch size is unknown (-1) at build time
    small, large = (np.shape(index(np.zeros((n, 4, 5)))) for n in (3, 7))
    assert tuple(out.shape) == (tuple(-1 if p != q else p for p, q in zip(small, large)) or (1,))
    for got in _both(out, {"x": value}):
        np.testing.assert_array_equal(got, want)


def test_shape_of_batch_is_int32_of_shape_one():
    x = graphc.data("x", [-1, 7], "float32")
    n = layers.shape(x)[0]
    assert (tuple(n.shape), n.dtype) == ((1,), "int32")
    for got in _both(n, {"x": np.zeros((5, 7), "float32")}):
        np.testing.assert_array_equal(got, [5])


def test_ops_are_slice_then_strided_slice():
    x = graphc.data("x", [4, 6], "float32")
    x[1:3]
    x[::2]
    ops = [op.type for op in graphc.default_main_program().global_block().ops]
    assert ops == ["slice", "strided_slice"]


@pytest.mark.parametrize("index", [lambda v: v[:, 1:3], lambda v: v[2, ::-2],
                                   lambda v: v[-1], lambda v: v[1:, -2]],
                         ids=["cols", "row_reversed", "last_row", "col"])
def test_gradient_scatters_into_the_indexed_places(index):
    value = np.random.RandomState(1).randn(3, 4)
    x = graphc.data("x", [3, 4], "float64")
    x.stop_gradient = False
    picked = index(x)
    weight = np.random.RandomState(2).randn(*picked.shape)
    loss = layers.reduce_sum(picked * graphc.data("w", list(weight.shape), "float64"))
    append_backward(loss)
    feed = {"x": value, "w": weight}
    (grad,) = graphc.Executor().run(feed=feed, fetch_list=[x.grad_name])
    want = np.zeros_like(value)
    view = index(want)
    if np.ndim(view):
        view[...] = weight.reshape(view.shape)
    np.testing.assert_allclose(grad, want)
    # finite differences of the loss agree
    eps, (base,) = 1e-6, graphc.Executor().run(feed=feed, fetch_list=[loss])
    bumped = value.copy()
    bumped[0, 1] += eps
    (up,) = graphc.Executor().run(feed={"x": bumped, "w": weight}, fetch_list=[loss])
    np.testing.assert_allclose((up - base) / eps, grad[0, 1], atol=1e-5)


@pytest.mark.parametrize("bad, error", [
    (lambda x: x[5], ShapeError),
    (lambda x: x[0, 0, 0], ShapeError),
    (lambda x: x[::0], GraphcError),
    (lambda x: x[..., 1], GraphcError),
    (lambda x: x[None], GraphcError),
    (lambda x: x[1.5], GraphcError),
    (lambda x: x[x], GraphcError),
])
def test_bad_indexes_are_refused_at_build_time(bad, error):
    x = graphc.data("x", [4, 6], "float32")
    with pytest.raises(error):
        bad(x)


def test_variables_are_not_iterable():
    x = graphc.data("x", [-1, 6], "float32")
    with pytest.raises(TypeError):
        iter(x)
    with pytest.raises(GraphcError):  # a Variable given as a shape still gets graphc's advice
        graphc.data("y", x, "float32")


def test_astype_casts():
    x = graphc.data("x", [2, 3], "float32")
    out = x.astype("int64")
    assert out.dtype == "int64"
    value = np.array([[1.7, -2.2, 3.0], [0.0, 9.9, -0.5]], "float32")
    for got in _both(out, {"x": value}):
        np.testing.assert_array_equal(got, value.astype("int64"))


OPERATORS = [
    ("neg", lambda a, b: -a),
    ("pow", lambda a, b: a ** 2),
    ("rpow", lambda a, b: 2 ** a),
    ("pow_var", lambda a, b: a ** b),
    ("floordiv", lambda a, b: a // b),
    ("mod", lambda a, b: a % b),
    ("rsub", lambda a, b: 1 - a),
    ("rtruediv", lambda a, b: 3 / b),
    ("truediv", lambda a, b: a / b),
]


@pytest.mark.parametrize("name, fn", OPERATORS, ids=[n for n, _ in OPERATORS])
def test_arithmetic_operators(name, fn):
    a_val = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -1.0]], "float32")
    b_val = np.array([[2.0, 3.0, 1.5], [1.5, 2.0, 4.0]], "float32")
    a, b = graphc.data("a", [2, 3], "float32"), graphc.data("b", [2, 3], "float32")
    out = fn(a, b)
    assert out.dtype == "float32"
    for got in _both(out, {"a": a_val, "b": b_val}):
        np.testing.assert_allclose(got, fn(a_val, b_val), rtol=1e-6)


@pytest.mark.parametrize("fn", [lambda a, b: a < b, lambda a, b: a <= 0.5,
                                lambda a, b: a > b, lambda a, b: a >= 1.5],
                         ids=["lt", "le_scalar", "gt", "ge_scalar"])
def test_comparisons_give_bool_variables(fn):
    a_val = np.array([1.5, -2.0, 3.0, 0.5], "float32")
    b_val = np.array([2.0, -2.0, 1.5, 0.5], "float32")
    a, b = graphc.data("a", [4], "float32"), graphc.data("b", [4], "float32")
    out = fn(a, b)
    assert out.dtype == "bool"
    for got in _both(out, {"a": a_val, "b": b_val}):
        np.testing.assert_array_equal(got, fn(a_val, b_val))


def test_attribute_setters():
    x = graphc.data("x", [2, 3], "float32")
    assert x.stop_gradient
    x.stop_gradient = False
    x.persistable = True
    assert (x.stop_gradient, x.persistable) == (False, True)
    assert (x.shape, x.dtype, x.lod_level) == ((2, 3), "float32", 0)


def test_fluid_layers_rnn_is_not_a_submodule():
    """A layers submodule named rnn used to shadow Paddle's fluid.layers.rnn function."""
    import types
    assert not isinstance(getattr(fluid.layers, "rnn", None), types.ModuleType)
    from graphc.fluid.layers import dynamic_gru, dynamic_lstm  # noqa: F401  still resolve


def test_static_mode_methods_as_paddle():
    x = graphc.data("x", [2, 3], "float32")
    assert "x" in x.to_string(True) and "float32" in x.to_string(True, with_details=True)
    for name in ("numpy", "gradient", "backward", "detach", "clear_gradient"):
        with pytest.raises(GraphcError, match="dygraph"):
            getattr(x, name)()
    with pytest.raises(GraphcError, match="dygraph"):
        x.set_value(np.zeros((2, 3)))


# -- portut: a one-element integer Variable as the first index picks a row (Python's rule for
# a negative one); Paddle's tests index so inside while_loop bodies (``x[i]``)
@pytest.mark.parametrize("row", [0, 2, -1, -3])
@pytest.mark.parametrize("shape, rest", [((3,), ()), ((3, 4, 5), ()), ((3, 4, 5), (1, 3))],
                         ids=["1d", "3d", "3d_then_slice"])
def test_a_variable_index_picks_a_row(row, shape, rest):
    value = np.random.RandomState(3).rand(*shape)
    x = graphc.data("x", [-1, *shape[1:]], "float64")
    i = graphc.data("i", [1], "int64")
    out = x[(i, slice(*rest))] if rest else x[i]
    want = value[row][slice(*rest)] if rest else value[row]
    want = np.reshape(want, np.shape(want) or (1,))
    assert list(out.shape) == list(want.shape)
    for got in _both(out, {"x": value, "i": np.array([row])}):
        np.testing.assert_array_equal(got, want)


def test_a_variable_index_gradient_lands_on_its_row():
    value = np.random.RandomState(4).randn(3, 4)
    x = graphc.data("x", [3, 4], "float64")
    x.stop_gradient = False
    i = graphc.data("i", [1], "int32")
    weight = np.arange(4.0)
    loss = layers.reduce_sum(x[i] * graphc.data("w", [4], "float64"))
    append_backward(loss)
    (grad,) = graphc.Executor().run(feed={"x": value, "i": np.array([-2], "int32"), "w": weight},
                                    fetch_list=[x.grad_name])
    want = np.zeros_like(value)
    want[-2] = weight
    np.testing.assert_allclose(grad, want)


@pytest.mark.parametrize("bad", [lambda x, i: x[1:i], lambda x, i: x[0, i],
                                 lambda x, i: x[layers.cast(i, "float32")],
                                 lambda x, i: x[layers.concat([i, i])]],
                         ids=["bound", "second_axis", "float", "two_elements"])
def test_variable_indexes_that_are_not_a_row_are_refused(bad):
    x = graphc.data("x", [4, 6], "float32")
    i = graphc.data("i", [1], "int64")
    with pytest.raises(GraphcError, match="Variable index|Variable '"):
        bad(x, i)
