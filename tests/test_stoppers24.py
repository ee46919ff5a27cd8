"""Issue 24's "things that stopped real programs" audit (stoppers24 block of
docs/porting_from_paddle.md): each fix checked against Paddle 1.8's documented behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph

pytestmark = pytest.mark.timeout(120)


def _both(main, startup, feed, fetch):
    """Fetch ``fetch`` (names) through the jitted Executor and the interpreter."""
    scope, exe = fluid.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {v.name: np.asarray(scope[v.name]) for v in startup.list_vars() if v.persistable}
    jit = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    _, interp = run_graph(graphc.lower(main), state, feed, fetch)
    return [np.asarray(v) for v in jit], [np.asarray(v) for v in interp]


# -- an out= variable from create_tensor has no shape until the op writing it gives one -------
def test_create_tensor_filled_by_fill_constant_and_sums_out():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        t = fluid.layers.create_tensor("int64", name="t")
        fluid.layers.fill_constant([2, 3], "int64", 4, out=t)
        s = fluid.layers.create_tensor("float32", name="s")
        a = fluid.layers.fill_constant([2], "float32", 1.5)
        fluid.layers.sums([a, a], out=s)
    assert tuple(t.shape) == (2, 3) and tuple(s.shape) == (2,)
    for got in _both(main, startup, {}, ["t", "s"]):
        np.testing.assert_array_equal(got[0], np.full((2, 3), 4, "int64"))
        np.testing.assert_array_equal(got[1], [3.0, 3.0])
    with pytest.raises(TypeError, match="'out'.*must be a int64"):
        fluid.layers.fill_constant([1], "int64", 0, out=fluid.layers.create_tensor("float32"))


# -- double gradients: fluid.gradients of a gradient (T_grad_grad, the vjp of T_grad) --------
_L = fluid.layers
_DOUBLE = {
    "relu": lambda x: _L.relu(x) * x,
    "sigmoid": _L.sigmoid,
    "tanh": _L.tanh,
    "square-pow": lambda x: _L.square(x) * _L.pow(x, 3.0),
    "elementwise-mul-add-sub-div": lambda x: _L.elementwise_div(
        _L.elementwise_mul(x, x * 2.0 + 1.0), _L.elementwise_sub(_L.elementwise_add(x, x), x)
        * x + 3.0),
    "matmul-mul": lambda x: _L.matmul(x, x, transpose_y=True) + _L.mul(
        x, _L.transpose(x, [1, 0])),
    "reduce_mean-reshape-softmax": lambda x: _L.reduce_mean(
        _L.softmax(_L.reshape(x * x, [4, 3])), dim=1),
    "exp-log-sqrt-elu-leaky": lambda x: _L.exp(x * 0.3) + _L.log(x * x + 1.0) + _L.sqrt(
        x * x + 1.0) + _L.elu(x) * x + _L.leaky_relu(x, 0.1) * x,
    "conv2d": lambda x: _L.conv2d(_L.reshape(x, [1, 1, 3, 4]) * _L.reshape(x, [1, 1, 3, 4]),
                                  2, 2, param_attr=fluid.ParamAttr(
                                      initializer=fluid.initializer.Normal(0.0, 1.0, seed=1))),
    "batch_norm": lambda x: _L.batch_norm(_L.reshape(x, [3, 2, 2, 1]) * x[0:1, 0:1]) * _L.reshape(
        x, [3, 2, 2, 1]),
}
_X = np.random.default_rng(0).normal(size=(3, 4)) + 0.05
_W = np.random.default_rng(1).normal(size=(3, 4))


def _second_derivative_program(fn):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 4], "float64")
        x.stop_gradient = False
        w = fluid.data("w", [3, 4], "float64")
        g = fluid.gradients(_L.reduce_sum(fn(x)), x)[0]
        gg = fluid.gradients(_L.reduce_sum(g * w), x)[0]  # the Hessian times w
    assert gg is not None
    return main, startup, g.name, gg.name


@pytest.mark.parametrize("case", sorted(_DOUBLE))
def test_second_derivative_matches_finite_differences_of_the_first(case):
    main, startup, g, gg = _second_derivative_program(_DOUBLE[case])
    scope, exe = fluid.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {v.name: np.asarray(scope[v.name]) for v in startup.list_vars() if v.persistable}

    def first(xv):
        return np.asarray(exe.run(main, feed={"x": xv, "w": _W}, fetch_list=[g],
                                  scope=scope)[0])

    feed = {"x": _X, "w": _W}
    jit = np.asarray(exe.run(main, feed=feed, fetch_list=[gg], scope=scope)[0])
    _, (interp,) = run_graph(graphc.lower(main), state, feed, [gg])
    np.testing.assert_allclose(np.asarray(interp), jit, rtol=1e-9, atol=1e-12)
    # v . (H w) against the central difference of the first derivative along v (2 runs
    # per direction, not one per element: the suite's time budget)
    for v in np.random.default_rng(3).normal(size=(2, *_X.shape)):
        eps = 1e-6
        fd = np.sum((first(_X + eps * v) - first(_X - eps * v)) * _W) / (2 * eps)
        np.testing.assert_allclose(np.sum(jit * v), fd, rtol=1e-5, atol=1e-6)


def test_a_gradient_penalty_trains_through_the_gradient_ops():
    """WGAN-GP's loss: mean(D(x)) + mean(|dD/dx|^2); minimize differentiates the penalty's
    gradient ops. D(x) = tanh(x W) summed; one SGD step against the NumPy derivative."""
    main, startup = fluid.Program(), fluid.Program()
    wv = np.random.default_rng(2).normal(size=(4, 2))
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 4], "float64")
        x.stop_gradient = False
        d = _L.tanh(_L.fc(x, 2, bias_attr=False, param_attr="W"))
        gx = fluid.gradients(_L.reduce_sum(d), x)[0]
        loss = _L.mean(d) + _L.mean(_L.square(gx))
        fluid.optimizer.SGD(1.0).minimize(loss)

    def loss_of(w):
        t = np.tanh(_X @ w)
        return t.mean() + np.mean(((1 - t * t) @ w.T) ** 2)

    eps, want = 1e-6, np.zeros_like(wv)
    for i in np.ndindex(wv.shape):
        e = np.zeros_like(wv)
        e[i] = eps
        want[i] = (loss_of(wv + e) - loss_of(wv - e)) / (2 * eps)
    scope, exe = fluid.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    scope["W"] = wv
    exe.run(main, feed={"x": _X}, scope=scope)
    np.testing.assert_allclose(wv - np.asarray(scope["W"]), want, rtol=1e-5, atol=1e-8)


def test_a_second_gradient_through_an_op_without_one_is_refused_by_name():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3, 4], "float32")
        x.stop_gradient = False
        label = fluid.data("label", [3, 1], "int64")
        g = fluid.gradients(_L.mean(_L.softmax_with_cross_entropy(x, label)), x)[0]
        with pytest.raises(graphc.ProgramError,
                           match="softmax_with_cross_entropy_grad.*no second derivative"):
            fluid.gradients(_L.reduce_sum(g * g), x)


# -- private helpers widely used scripts call ----------------------------------------------------
def test_framework_get_var_reads_the_global_block():
    from graphc.fluid.framework import _get_var
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [-1, 3], "float32")
        assert _get_var("x") is x
    assert _get_var("x", main) is x
    with pytest.raises(graphc.ProgramError, match="_get_var: needs a name"):
        _get_var(x, main)
