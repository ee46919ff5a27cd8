"""Operators on Variables as Paddle 1.8 patches them: arithmetic with Variables and scalars
on both sides, powers, floor division, modulo and comparisons, checked against NumPy."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import graphc
from graphc import layers

X = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], "float32")
Y = np.array([[2.0, 2.0, -0.5], [1.0, 3.0, 2.0]], "float32")

CASES = [
    ("x + y", lambda x, y: x + y), ("x - 2", lambda x, y: x - 2), ("3 - x", lambda x, y: 3 - x),
    ("2 * x", lambda x, y: 2 * x), ("x / y", lambda x, y: x / y), ("x / 4", lambda x, y: x / 4),
    ("2 / y", lambda x, y: 2 / y), ("y ** 2", lambda x, y: y ** 2),
    ("2 ** x", lambda x, y: 2 ** x), ("x ** y", lambda x, y: np.abs(x) ** y),
    ("-x", lambda x, y: -x),
]


@pytest.mark.parametrize("text, expect", CASES, ids=[c[0] for c in CASES])
def test_arithmetic_matches_numpy(text, expect):
    x = layers.data("x", [-1, 3], append_batch_size=False)
    y = layers.data("y", [-1, 3], append_batch_size=False)
    xin = layers.abs(x) if text == "x ** y" else x
    out = eval(text, {"x": xin, "y": y})
    exe = graphc.Executor()
    got, = exe.run(feed={"x": X, "y": Y}, fetch_list=[out])
    np.testing.assert_allclose(got, expect(X, Y), rtol=1e-6)


@pytest.mark.parametrize("op, expect", [
    (operator.lt, np.less), (operator.le, np.less_equal), (operator.gt, np.greater),
    (operator.ge, np.greater_equal)])
@pytest.mark.parametrize("scalar", [False, True])
def test_comparisons_build_compare_ops(op, expect, scalar):
    x = layers.data("x", [-1, 3], append_batch_size=False)
    y = layers.data("y", [-1, 3], append_batch_size=False)
    out = op(x, 1.0) if scalar else op(x, y)
    assert out.dtype == "bool"
    got, = graphc.Executor().run(feed={"x": X, "y": Y}, fetch_list=[out])
    np.testing.assert_array_equal(got, expect(X, 1.0 if scalar else Y))


def test_integer_floor_division_and_modulo():
    a = layers.data("a", [-1, 3], dtype="int64", append_batch_size=False)
    ints = np.array([[7, -7, 9], [5, 0, -3]], "int64")
    outs = [a // 2, a % 3, a + 1, a * 2]
    got = graphc.Executor().run(feed={"a": ints}, fetch_list=outs)
    for g, want in zip(got, [ints // 2, ints % 3, ints + 1, ints * 2]):
        np.testing.assert_array_equal(g, want)


def test_equality_builds_compare_ops_and_hashing_keeps_identity():
    # Paddle 1.8 patches == and != too (equal / not_equal ops); Variables stay hashable
    x = layers.data("x", [-1, 3], append_batch_size=False)
    y = layers.data("y", [-1, 3], append_batch_size=False)
    eq, ne, eq1 = x == y, x != y, x == 1.5
    assert all(isinstance(v, graphc.Variable) and v.dtype == "bool" for v in (eq, ne, eq1))
    assert len({x, y, x}) == 2 and {x: 1}[x] == 1 and (x == None) is False  # noqa: E711
    got = graphc.Executor().run(feed={"x": X, "y": Y}, fetch_list=[eq, ne, eq1])
    for g, want in zip(got, [X == Y, X != Y, X == 1.5]):
        np.testing.assert_array_equal(g, want)


def test_unsupported_operands_are_type_errors():
    x = layers.data("x", [-1, 3], append_batch_size=False)
    with pytest.raises(TypeError):
        _ = x + "a"
    with pytest.raises(graphc.ProgramError, match="by the constant 0"):
        _ = x / 0


def test_integer_variable_with_a_fractional_constant_is_refused():
    """Paddle 1.8 asserts here: the constant, made in the variable's integer dtype, would be
    truncated (a * 1.5 computing a * 1, a + 0.5 computing a + 0)."""
    a = layers.data("a", [-1, 3], dtype="int64", append_batch_size=False)
    for make in (lambda: a * 1.5, lambda: a + 0.5, lambda: 2.5 - a, lambda: a / 0.5,
                 lambda: a * float("nan")):
        with pytest.raises(graphc.ProgramError, match="'a' is int64: the constant"):
            make()
    ints = np.array([[7, -7, 9]], "int64")
    got, = graphc.Executor().run(feed={"a": ints}, fetch_list=[a * 2.0])  # whole: fine
    np.testing.assert_array_equal(got, ints * 2)
