"""Loss layers (square_error_cost, sigmoid_cross_entropy_with_logits, cos_sim, log_loss, huber,
smooth_l1, bpr, margin_rank, rank, kldiv, mse) against NumPy, with their shapes and errors.
Gradients are checked by finite differences in test_gradients.py."""

from __future__ import annotations

import numpy as np
import pytest

import graphc as fluid
from graphc import layers
from graphc.ir.errors import ShapeError

RNG = np.random.default_rng(15)


def _run(outputs, feed):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(fluid.default_startup_program(), scope=scope)
    return exe.run(fluid.default_main_program(), feed=feed, fetch_list=list(outputs),
                   scope=scope)


def _data(name, value):
    return fluid.data(name, list(value.shape), dtype=str(value.dtype))


def _softplus(x):
    return np.logaddexp(0, x)


def test_square_error_cost_and_mse_loss():
    x, y = RNG.standard_normal((4, 3)).astype("float32"), RNG.standard_normal((4, 3)).astype(
        "float32")
    xv, yv = layers.data("x", [3]), layers.data("y", [3])
    cost, mse = layers.square_error_cost(xv, yv), layers.mse_loss(xv, yv)
    assert cost.shape == (-1, 3) and tuple(mse.shape) in ((1,), ())
    types = [op.type for op in fluid.default_main_program().global_block().ops]
    assert types[:2] == ["elementwise_sub", "square"]  # built as Paddle builds it
    got_cost, got_mse = _run([cost, mse], {"x": x, "y": y})
    np.testing.assert_allclose(got_cost, (x - y) ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.reshape(got_mse, ()), np.mean((x - y) ** 2), rtol=1e-6)


@pytest.mark.parametrize("normalize", [False, True])
def test_sigmoid_cross_entropy_with_logits(normalize):
    x = (RNG.standard_normal((3, 5)) * 30).astype("float32")  # large logits stay finite
    label = RNG.uniform(0, 1, (3, 5)).astype("float32")
    label[0, 0] = label[2, 4] = -1
    out = layers.sigmoid_cross_entropy_with_logits(_data("x", x), _data("label", label),
                                                   ignore_index=-1, normalize=normalize)
    (got,) = _run([out], {"x": x, "label": label})
    want = _softplus(x.astype("float64")) - x * label
    want[label == -1] = 0
    if normalize:
        want /= np.sum(label != -1)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows", [4, 1])
def test_cos_sim_broadcasts_a_single_row_of_y(rows):
    x = RNG.standard_normal((4, 6)).astype("float32")
    y = RNG.standard_normal((rows, 6)).astype("float32")
    out = layers.cos_sim(_data("x", x), _data("y", y))
    assert out.shape == (4, 1)
    (got,) = _run([out], {"x": x, "y": y})
    want = np.sum(x * y, 1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-5)


def test_log_loss_huber_smooth_l1():
    p = RNG.uniform(0.05, 0.95, (5, 1)).astype("float32")
    lab = RNG.integers(0, 2, (5, 1)).astype("float32")
    x = RNG.standard_normal((5, 3)).astype("float32")
    y = (x + RNG.standard_normal((5, 3)) * 2).astype("float32")
    iw, ow = (RNG.uniform(0.5, 1.5, (5, 3)).astype("float32") for _ in range(2))
    pv, lv, xv, yv, iwv, owv = (_data(n, v) for n, v in
                                [("p", p), ("lab", lab), ("x", x), ("y", y), ("iw", iw),
                                 ("ow", ow)])
    outs = [layers.log_loss(pv, lv), layers.huber_loss(xv, yv, 1.5),
            layers.smooth_l1(xv, yv), layers.smooth_l1(xv, yv, iwv, owv, sigma=2.0)]
    got = _run(outs, {"p": p, "lab": lab, "x": x, "y": y, "iw": iw, "ow": ow})
    eps = 1e-4
    np.testing.assert_allclose(got[0], -lab * np.log(p + eps) - (1 - lab) * np.log(1 - p + eps),
                               rtol=1e-5)
    r = y - x
    np.testing.assert_allclose(got[1], np.where(np.abs(r) <= 1.5, 0.5 * r * r,
                                                1.5 * (np.abs(r) - 0.75)), rtol=1e-5)

    def smooth(d, sigma):
        s2 = sigma * sigma
        return np.where(np.abs(d) < 1 / s2, 0.5 * d * d * s2, np.abs(d) - 0.5 / s2)

    assert outs[2].shape == (5, 1)
    np.testing.assert_allclose(got[2], smooth(x - y, 1.0).sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got[3], (ow * smooth(iw * (x - y), 2.0)).sum(1, keepdims=True),
                               rtol=1e-5)


def test_ranking_losses():
    scores = RNG.standard_normal((4, 5)).astype("float32")
    item = RNG.integers(0, 5, (4, 1)).astype("int64")
    left, right = (RNG.standard_normal((4, 1)).astype("float32") for _ in range(2))
    sign = np.array([[1], [-1], [1], [-1]], "float32")
    prob = RNG.uniform(0, 1, (4, 1)).astype("float32")
    sv, iv, lv, rv, gv, pv = (_data(n, v) for n, v in [
        ("scores", scores), ("item", item), ("left", left), ("right", right), ("sign", sign),
        ("prob", prob)])
    outs = [layers.bpr_loss(sv, iv), layers.margin_rank_loss(gv, lv, rv, margin=0.2),
            layers.rank_loss(pv, lv, rv)]
    got = _run(outs, {"scores": scores, "item": item, "left": left, "right": right,
                      "sign": sign, "prob": prob})
    want_bpr = []
    for row, k in zip(scores.astype("float64"), item[:, 0]):
        others = np.delete(row, k)
        want_bpr.append(-np.mean(-_softplus(others - row[k])))
    np.testing.assert_allclose(got[0].reshape(-1), want_bpr, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.maximum(0, -sign * (left - right) + 0.2), rtol=1e-6)
    np.testing.assert_allclose(got[2], _softplus(left - right) - prob * (left - right),
                               rtol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "batchmean", "mean", "sum"])
def test_kldiv_loss(reduction):
    x = np.log(RNG.uniform(0.1, 1, (3, 4))).astype("float32")
    target = RNG.uniform(0, 1, (3, 4)).astype("float32")
    target[0, 0] = 0
    out = layers.kldiv_loss(_data("x", x), _data("t", target), reduction=reduction)
    (got,) = _run([out], {"x": x, "t": target})
    safe = np.where(target > 0, target, 1)
    full = np.where(target > 0, target * (np.log(safe) - x), 0)
    want = {"none": full, "batchmean": full.sum() / 3, "mean": full.mean(),
            "sum": full.sum()}[reduction]
    assert got.shape == ((3, 4) if reduction == "none" else (1,))
    np.testing.assert_allclose(got.reshape(np.shape(want)), want, rtol=1e-5)


@pytest.mark.parametrize("build, message", [
    (lambda: layers.cos_sim(fluid.data("a", [4, 3]), fluid.data("b", [2, 3])),
     "Y must have 1 row or as many rows as X"),
    (lambda: layers.sigmoid_cross_entropy_with_logits(fluid.data("a", [4, 3]),
                                                      fluid.data("b", [4, 2])),
     r"X \[4, 3\] and Label \[4, 2\] must have the same shape"),
    (lambda: layers.bpr_loss(fluid.data("a", [4, 3]), fluid.data("b", [4, 1])),
     "Label must be integer"),
    (lambda: layers.kldiv_loss(fluid.data("a", [4, 3]), fluid.data("b", [4, 3]), "avg"),
     "reduction must be one of"),
    (lambda: layers.log_loss(fluid.data("a", [4, 2]), fluid.data("b", [4, 2])),
     r"Predicted must be \[N, 1\]"),
])
def test_shape_errors_name_the_op_and_input(build, message):
    with pytest.raises(ShapeError, match=message):
        build()


# -- issue 24: cross_entropy of a zero probability
@pytest.mark.parametrize("interpreter", [False, True], ids=["jax", "interpreter"])
@pytest.mark.parametrize("soft", [False, True])
def test_cross_entropy_of_zero_probability_is_paddles_clamped_value(soft, interpreter):
    """Paddle clamps log(x) to +-1e20: -log(0) is 1e20 (finite), and a zero soft label times
    a zero probability contributes 0, not NaN."""
    from graphc.backends.interpreter import run_graph
    prob = np.array([[0.0, 0.5, 0.5], [0.2, 0.8, 0.0]], "float32")
    if soft:
        label = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], "float32")
        want = -(label * np.log(np.maximum(prob, 1e-45)).clip(-1e20)).sum(1, keepdims=True)
        want[0, 0] = 1e20
    else:
        label = np.array([[0], [2]], "int64")
        want = np.array([[1e20], [1e20]], "float32")
    out = layers.cross_entropy(_data("p", prob), _data("l", label), soft_label=soft)
    feed = {"p": prob, "l": label}
    if interpreter:
        _, (got,) = run_graph(fluid.lower(fluid.default_main_program()), {}, feed, [out.name])
    else:
        (got,) = fluid.Executor().run(feed=feed, fetch_list=[out])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-6)
