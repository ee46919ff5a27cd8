"""fluid.layers distributions (Uniform, Normal, Categorical, MultivariateNormalDiag) against
NumPy references of Paddle 1.8's formulas, on the jitted Executor and the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.ir.errors import GraphcError

layers = fluid.layers
RNG = np.random.RandomState(7)
LOW = RNG.uniform(-1, 0, (2, 3)).astype("float32")
HIGH = RNG.uniform(1, 2, (2, 3)).astype("float32")
LOC = RNG.randn(2, 3).astype("float32")
SCALE = RNG.uniform(0.5, 2, (2, 3)).astype("float32")
OTHER_LOC = RNG.randn(2, 3).astype("float32")
OTHER_SCALE = RNG.uniform(0.5, 2, (2, 3)).astype("float32")
VALUE = RNG.uniform(-1.5, 2.5, (2, 3)).astype("float32")
LOGITS = RNG.randn(2, 4).astype("float32")
OTHER_LOGITS = RNG.randn(2, 4).astype("float32")


def _run(outs, feed=None):
    feed = feed or {}
    main = graphc.default_main_program()
    startup = graphc.default_startup_program()
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    jax_out = exe.run(main, feed=feed, fetch_list=outs, scope=scope)
    state = {k: np.asarray(scope[k]) for k in scope.keys()}
    _, ref = run_graph(graphc.lower(main), state, feed, [o.name for o in outs])
    return jax_out, [np.asarray(r) for r in ref]


def _both(outs, wants, feed=None, rtol=1e-5):
    for got in _run(outs, feed):
        for g, w in zip(got, wants):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)


def _softmax_parts(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    z = np.exp(shifted).sum(-1, keepdims=True)
    return shifted, z


def test_uniform_entropy_and_log_prob():
    u = layers.Uniform(LOW, HIGH)
    value = graphc.data("v", [2, 3], "float32")
    inside = ((LOW < VALUE) & (VALUE < HIGH)).astype("float32")
    with np.errstate(divide="ignore"):
        want_lp = np.log(inside) - np.log(HIGH - LOW)
    got = _run([u.entropy(), u.log_prob(value)], {"v": VALUE})
    for entropy, log_prob in got:
        np.testing.assert_allclose(entropy, np.log(HIGH - LOW), rtol=1e-6)
        np.testing.assert_array_equal(np.isinf(log_prob), np.isinf(want_lp))
        finite = np.isfinite(want_lp)
        np.testing.assert_allclose(log_prob[finite], want_lp[finite], rtol=1e-6)


def test_normal_entropy_log_prob_kl():
    n = layers.Normal(LOC, SCALE)
    other = layers.Normal(OTHER_LOC, OTHER_SCALE)
    value = graphc.data("v", [2, 3], "float32")
    entropy = 0.5 + 0.5 * math.log(2 * math.pi) + np.log(SCALE)
    log_prob = (-((VALUE - LOC) ** 2) / (2 * SCALE ** 2) - np.log(SCALE)
                - math.log(math.sqrt(2 * math.pi)))
    ratio = (SCALE / OTHER_SCALE) ** 2
    kl = 0.5 * (ratio + ((LOC - OTHER_LOC) / OTHER_SCALE) ** 2 - 1 - np.log(ratio))
    _both([n.entropy(), n.log_prob(value), n.kl_divergence(other)], [entropy, log_prob, kl],
          {"v": VALUE})


def test_normal_with_variable_parameters_and_a_batch():
    loc = graphc.data("loc", [-1, 3], "float32")
    scale = graphc.data("scale", [-1, 3], "float32")
    n = layers.Normal(loc, scale)
    entropy = n.entropy()
    assert tuple(entropy.shape) == (-1, 3)
    feed = {"loc": LOC, "scale": SCALE}
    _both([entropy], [0.5 + 0.5 * math.log(2 * math.pi) + np.log(SCALE)], feed)


def test_categorical_entropy_and_kl():
    c, other = layers.Categorical(LOGITS), layers.Categorical(OTHER_LOGITS)
    logits, z = _softmax_parts(LOGITS)
    other_logits, other_z = _softmax_parts(OTHER_LOGITS)
    prob = np.exp(logits) / z
    entropy = -(prob * (logits - np.log(z))).sum(-1, keepdims=True)
    kl = (prob * (logits - np.log(z) - other_logits + np.log(other_z))).sum(-1, keepdims=True)
    _both([c.entropy(), c.kl_divergence(other)], [entropy, kl])


def test_multivariate_normal_diag_entropy_and_kl():
    loc, other_loc = np.array([0.3, -1.2], "float32"), np.array([1.0, 0.5], "float32")
    scale = np.diag([0.4, 2.0]).astype("float32")
    other_scale = np.diag([1.5, 0.7]).astype("float32")
    m = layers.MultivariateNormalDiag(loc, scale)
    other = layers.MultivariateNormalDiag(other_loc, other_scale)
    k = 2
    entropy = 0.5 * (k * (1 + math.log(2 * math.pi)) + np.log(np.linalg.det(scale)))
    inv_other = np.linalg.inv(other_scale)
    diff = other_loc - loc
    kl = 0.5 * (np.trace(inv_other @ scale) + diff @ inv_other @ diff - k
                + np.log(np.linalg.det(other_scale) / np.linalg.det(scale)))
    outs = [m.entropy(), m.kl_divergence(other)]
    for got in _run(outs):
        np.testing.assert_allclose(np.asarray(got[0]).reshape(-1), [entropy], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(got[1]).reshape(-1), [kl], rtol=1e-5)


@pytest.mark.parametrize("shape", [[500], [40, 5]])
def test_uniform_sample_shape_and_range(shape):
    u = layers.Uniform(LOW, HIGH)
    s = u.sample(shape, seed=3)
    assert list(s.shape) == shape + [2, 3]
    for (got,) in _run([s]):
        assert got.shape == tuple(shape + [2, 3])
        assert np.all(got >= LOW) and np.all(got <= HIGH)
        flat = got.reshape(-1, 2, 3)
        np.testing.assert_allclose(flat.mean(0), (LOW + HIGH) / 2, atol=0.15)


def test_float_parameters_sample_the_requested_shape():
    u = layers.Uniform(-1.0, 3.0)
    n = layers.Normal(2.0, 0.5)
    us, ns = u.sample([400], seed=1), n.sample([400], seed=2)
    assert list(us.shape) == [400] and list(ns.shape) == [400]
    for got_u, got_n in _run([us, ns]):
        assert got_u.min() >= -1 and got_u.max() <= 3
        assert abs(got_n.mean() - 2.0) < 0.15 and abs(got_n.std() - 0.5) < 0.1


def test_normal_sample_with_a_seed_repeats():
    n = layers.Normal(LOC, SCALE)
    a, b = n.sample([300], seed=11), n.sample([300], seed=11)
    (ga, gb), _ = _run([a, b])
    np.testing.assert_array_equal(ga, gb)
    np.testing.assert_allclose(ga.mean(0), LOC, atol=0.35)


def test_log_prob_gradient_matches_finite_differences():
    loc = graphc.data("loc", [2, 3], "float64")
    loc.stop_gradient = False
    n = layers.Normal(loc, graphc.data("scale", [2, 3], "float64"))
    loss = layers.reduce_sum(n.log_prob(graphc.data("v", [2, 3], "float64")))
    append_backward(loss)
    feed = {"loc": LOC.astype("float64"), "scale": SCALE.astype("float64"),
            "v": VALUE.astype("float64")}
    (grad,) = graphc.Executor().run(feed=feed, fetch_list=[loc.grad_name])
    np.testing.assert_allclose(grad, (VALUE - LOC) / SCALE ** 2, rtol=1e-5)


def test_bad_arguments_are_refused():
    x = graphc.data("x", [2, 3], "float32")
    with pytest.raises(GraphcError):
        layers.Normal(x, 1.0)  # one Variable: all must be
    with pytest.raises(GraphcError):
        layers.Uniform(0, 1)  # ints: Paddle takes float, list, ndarray or Variable
    with pytest.raises(NotImplementedError):
        layers.Categorical(LOGITS).sample()
    with pytest.raises(GraphcError):
        layers.Normal(LOC, SCALE).kl_divergence(layers.Uniform(LOW, HIGH))


@pytest.mark.parametrize("kind", ["Normal", "Uniform"])
def test_sample_with_an_unknown_batch_keeps_each_rows_parameters(kind):
    a = graphc.data("a", [-1, 3], "float32")
    b = graphc.data("b", [-1, 3], "float32")
    dist = getattr(layers, kind)(a, b)
    s = dist.sample([600], seed=5)
    assert list(s.shape) == [600, -1, 3]
    first, second = (LOC, SCALE) if kind == "Normal" else (LOW, HIGH)
    for (got,) in _run([s], {"a": first, "b": second}):
        assert got.shape == (600, 2, 3)
        if kind == "Normal":
            np.testing.assert_allclose(got.mean(0), LOC, atol=0.25)
            np.testing.assert_allclose(got.std(0), SCALE, rtol=0.15)
        else:
            assert np.all(got >= LOW) and np.all(got <= HIGH)
            np.testing.assert_allclose(got.mean(0), (LOW + HIGH) / 2, atol=0.2)
