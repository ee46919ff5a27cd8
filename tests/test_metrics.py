"""Metrics: the stateful ``auc`` op over several steps against NumPy/sklearn ROC AUC, and
fluid.metrics' Python accumulators against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import graphc as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError

RNG = np.random.default_rng(1518)


def binned_auc(scores, labels, num_thresholds):
    """Paddle's calcAuc over histograms of int(score * num_thresholds), as plain loops."""
    pos = np.zeros(num_thresholds + 1)
    neg = np.zeros(num_thresholds + 1)
    for s, y in zip(scores, labels):
        (pos if y else neg)[int(np.float32(s) * np.float32(num_thresholds))] += 1
    area = tot_pos = tot_neg = 0.0
    for i in range(num_thresholds, -1, -1):
        prev_pos, prev_neg = tot_pos, tot_neg
        tot_pos += pos[i]
        tot_neg += neg[i]
        area += abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2
    return area / tot_pos / tot_neg if tot_pos > 0 and tot_neg > 0 else 0.0


def _batches(steps, n=16):
    out = []
    for _ in range(steps):
        labels = RNG.integers(0, 2, (n, 1)).astype("int64")
        p = np.clip(RNG.uniform(0, 1, n) * 0.6 + labels[:, 0] * 0.3, 0, 1).astype("float32")
        out.append((np.stack([1 - p, p], 1), labels))
    return out


def _build(slide_steps=1, num_thresholds=2 ** 12 - 1):
    predict = layers.data("predict", [2])
    label = layers.data("label", [1], dtype="int64")
    return layers.auc(predict, label, num_thresholds=num_thresholds, slide_steps=slide_steps)


@pytest.mark.parametrize("slide_steps", [1, 3])
def test_auc_accumulates_over_steps_and_slides_over_batches(slide_steps):
    auc_out, batch_auc, states = _build(slide_steps)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program(), scope=scope)
    for s in states:
        assert np.all(np.asarray(scope[s.name]) == 0)
    batches = _batches(5)
    for step, (pred, lab) in enumerate(batches):
        got_auc, got_batch = exe.run(feed={"predict": pred, "label": lab},
                                     fetch_list=[auc_out, batch_auc], scope=scope)
        seen = batches[: step + 1]
        scores = np.concatenate([b[0][:, 1] for b in seen])
        labels = np.concatenate([b[1][:, 0] for b in seen])
        assert got_auc.dtype == np.float64 and got_auc.shape == (1,)
        np.testing.assert_allclose(got_auc[0], binned_auc(scores, labels, 4095), rtol=1e-12)
        np.testing.assert_allclose(got_auc[0], roc_auc_score(labels, scores), atol=2e-3)
        window = batches[max(0, step + 1 - slide_steps): step + 1]
        np.testing.assert_allclose(
            got_batch[0], binned_auc(np.concatenate([b[0][:, 1] for b in window]),
                                     np.concatenate([b[1][:, 0] for b in window]), 4095),
            rtol=1e-12)
    # the accumulated histograms are the state: counts of every example seen
    stat_pos, stat_neg = (np.asarray(scope[s.name]) for s in states[2:])
    assert stat_pos.shape == (1, 4096)
    assert stat_pos.sum() + stat_neg.sum() == 5 * 16
    assert stat_pos.sum() == sum(int(b[1].sum()) for b in batches)
    batch_pos = np.asarray(scope[states[0].name])
    assert batch_pos.shape == ((slide_steps + 1) * 4096 + 1,) and batch_pos[-1] == 5


def test_auc_interpreter_matches_jax_and_needs_no_gradient():
    x = layers.data("x", [3])
    label = layers.data("label", [1], dtype="int64")
    predict = layers.fc(x, 2, act="softmax")
    loss = layers.mean(layers.cross_entropy(predict, label))
    auc_out, batch_auc, states = layers.auc(predict, label, num_thresholds=200)
    fluid.optimizer.SGD(0.1).minimize(loss)
    ops = fluid.default_main_program().global_block().ops
    assert not any(op.type == "auc_grad" for op in ops)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program(), scope=scope)
    graph = fluid.lower(fluid.default_main_program())
    state = {k: np.asarray(scope[k]) for k in scope.keys()}
    for step in range(3):
        feed = {"x": RNG.standard_normal((8, 3)).astype("float32"),
                "label": RNG.integers(0, 2, (8, 1)).astype("int64")}
        jax_auc, = exe.run(feed=feed, fetch_list=[auc_out], scope=scope)
        state, (ref_auc,) = run_graph(graph, state, feed, [auc_out.name], step)
        np.testing.assert_allclose(jax_auc, ref_auc, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(scope[states[2].name]), state[states[2].name])


def test_auc_without_a_window_and_with_one_class():
    auc_out, batch_auc, _ = _build(slide_steps=0, num_thresholds=10)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(fluid.default_startup_program(), scope=scope)
    pred = np.array([[0.2, 0.8], [0.6, 0.4]], "float32")
    got = exe.run(feed={"predict": pred, "label": np.ones((2, 1), "int64")},
                  fetch_list=[auc_out, batch_auc], scope=scope)
    assert got[0][0] == 0.0 and got[1][0] == 0.0  # no negatives yet: Paddle reports 0
    got = exe.run(feed={"predict": pred, "label": np.array([[0], [0]], "int64")},
                  fetch_list=[auc_out, batch_auc], scope=scope)
    scores, labels = [0.8, 0.4, 0.8, 0.4], [1, 1, 0, 0]
    np.testing.assert_allclose(got[0][0], binned_auc(scores, labels, 10), rtol=1e-12)
    np.testing.assert_allclose(got[1][0], got[0][0])  # slide_steps=0: the batch op accumulates


@pytest.mark.parametrize("build, error, message", [
    (lambda: layers.auc(layers.data("p", [2]), layers.data("l", [1]), ),
     ShapeError, "Label must be integer"),
    (lambda: layers.auc(layers.data("p", [2, 2]), layers.data("l", [1], dtype="int64")),
     ShapeError, "Predict must be"),
    (lambda: layers.auc(layers.data("p", [2]), layers.data("l", [1], dtype="int64"),
                        curve="AP"), ProgramError, "curve must be 'ROC' or 'PR'"),
    (lambda: layers.auc(layers.data("p", [2]), layers.data("l", [1], dtype="int64"),
                        num_thresholds=0), ProgramError, "num_thresholds must be a positive"),
])
def test_auc_errors(build, error, message):
    with pytest.raises(error, match=message):
        build()
