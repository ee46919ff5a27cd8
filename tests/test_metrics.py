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


def _auc_training(places):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        main.random_seed = startup.random_seed = 5
        x = layers.data("x", [3])
        label = layers.data("label", [1], dtype="int64")
        predict = layers.fc(x, 2, act="softmax")
        loss = layers.mean(layers.cross_entropy(predict, label))
        auc_out, batch_auc, states = layers.auc(predict, label, num_thresholds=300,
                                                slide_steps=2)
        fluid.optimizer.SGD(0.5).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    program = main if places == 1 else fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(places))
    rng = np.random.default_rng(4)
    out = []
    for _ in range(3):
        xv = rng.normal(size=(16, 3)).astype("float32")
        feed = {"x": xv, "label": (xv[:, :1] > 0).astype("int64")}
        got = exe.run(program, feed=feed, fetch_list=[auc_out, batch_auc], scope=scope)
        out.append([np.asarray(g).reshape(-1) for g in got])
    return out, {s.name: np.asarray(scope[s.name]) for s in states}, states


def test_auc_on_four_devices_counts_the_whole_batch_as_one_device_does():
    want, want_state, states = _auc_training(1)
    got, state, _ = _auc_training(4)
    for (w_auc, w_batch), (g_auc, g_batch) in zip(want, got):
        assert g_auc.shape == (4,)  # one value per device, all the global one
        np.testing.assert_allclose(g_auc, np.repeat(w_auc, 4), rtol=1e-9)
        np.testing.assert_allclose(g_batch, np.repeat(w_batch, 4), rtol=1e-9)
    for name, value in want_state.items():
        np.testing.assert_array_equal(state[name], value)
    pos, neg = (state[s.name] for s in states[2:])
    assert pos.sum() + neg.sum() == 3 * 16  # every example of every device, once


def test_auc_on_simulated_replicas_counts_every_replica():
    from graphc.backends.interpreter import run_replicas
    predict = layers.data("predict", [2])
    label = layers.data("label", [1], dtype="int64")
    auc_out, _, states = layers.auc(predict, label, num_thresholds=50, slide_steps=0)
    graph = fluid.lower(fluid.default_main_program())
    (pred, lab), = _batches(1)
    zeros = {s.name: np.zeros(s.shape, "int64") for s in states}
    state, (got,) = run_replicas(graph, zeros, {"predict": pred, "label": lab},
                                 [auc_out.name], num_replicas=4)
    want = binned_auc(pred[:, 1], lab[:, 0], 50)
    np.testing.assert_allclose(np.asarray(got).reshape(-1), np.repeat(want, 4), rtol=1e-12)


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


# -- fluid.metrics: Python-side accumulators ------------------------------------------------------
def test_precision_recall_and_composite_over_batches():
    from graphc.fluid import metrics
    precision, recall = metrics.Precision("p"), metrics.Recall()
    composite = metrics.CompositeMetric()
    composite.add_metric(precision)
    composite.add_metric(recall)
    all_preds, all_labels = [], []
    for _ in range(3):
        preds = RNG.uniform(0, 1, (10, 1)).astype("float32")
        labels = RNG.integers(0, 2, (10, 1)).astype("int64")
        composite.update(preds, labels)
        all_preds.append(np.rint(preds[:, 0]))
        all_labels.append(labels[:, 0])
    p, y = np.concatenate(all_preds), np.concatenate(all_labels)
    tp, fp, fn = np.sum((p == 1) & (y == 1)), np.sum((p == 1) & (y == 0)), np.sum(
        (p == 0) & (y == 1))
    assert composite.eval() == [tp / (tp + fp), tp / (tp + fn)]
    assert str(precision) == "p" and precision.get_config() == {
        "name": "p", "states": {"tp": tp, "fp": fp}}
    composite.reset()
    assert (precision.tp, precision.fp, recall.tp, recall.fn) == (0, 0, 0, 0)
    assert precision.eval() == 0.0 and recall.eval() == 0.0


def test_accuracy_is_the_weighted_mean_of_batch_accuracies():
    from graphc.fluid import metrics
    acc = metrics.Accuracy()
    with pytest.raises(ValueError, match="no data in Accuracy"):
        acc.eval()
    values, weights = [0.5, 0.75, 1.0], [4, 8, 2]
    for v, w in zip(values, weights):
        acc.update(np.array([v], "float32"), w)
    np.testing.assert_allclose(acc.eval(), np.average(values, weights=weights))
    acc.reset()
    assert acc.value == 0.0 and acc.weight == 0.0


def test_auc_metric_matches_the_auc_op_formula_and_sklearn():
    from graphc.fluid import metrics
    auc = metrics.Auc("auc", num_thresholds=4095)
    scores, labels = [], []
    for pred, lab in _batches(4):
        auc.update(pred, lab)
        scores.append(pred[:, 1])
        labels.append(lab[:, 0])
    s, y = np.concatenate(scores), np.concatenate(labels)
    np.testing.assert_allclose(auc.eval(), binned_auc(s, y, 4095), rtol=1e-12)
    np.testing.assert_allclose(auc.eval(), roc_auc_score(y, s), atol=2e-3)
    auc.reset()
    assert auc.eval() == 0.0


def test_chunk_evaluator_and_edit_distance():
    from graphc.fluid import metrics
    chunks = metrics.ChunkEvaluator()
    chunks.update(np.array([5]), np.array([6]), np.array([3]))
    chunks.update(4, 2, 2)
    p, r = 5 / 9, 5 / 8
    np.testing.assert_allclose(chunks.eval(), (p, r, 2 * p * r / (p + r)))
    edit = metrics.EditDistance("ed")
    with pytest.raises(ValueError, match="no data in EditDistance"):
        edit.eval()
    edit.update(np.array([[0.0], [2.0], [1.0]]), np.array([3]))
    edit.update(np.array([[0.0], [0.0]]), 2)
    np.testing.assert_allclose(edit.eval(), (3.0 / 5, 2 / 5))


def test_metric_errors():
    from graphc.fluid import metrics
    from graphc.ir.errors import GraphcError
    with pytest.raises(GraphcError, match="'preds' must be a numpy ndarray"):
        metrics.Precision().update([1, 0], np.array([1, 0]))
    with pytest.raises(GraphcError, match="probabilities must lie in"):
        metrics.Auc("a").update(np.array([[0.0, 1.5]]), np.array([1]))
    with pytest.raises(GraphcError, match="expected a MetricBase"):
        metrics.CompositeMetric().add_metric("acc")
