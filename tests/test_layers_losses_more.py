"""issue 24's further losses and metrics (graphc/ops/loss_more): NumPy references of Paddle
1.8's semantics on the jitted step and the interpreter, center updates, padded and LoD inputs."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.fluid import create_lod_tensor
from graphc.ir.errors import ProgramError


def _both(fetch, feed):
    """The fetches from the jitted Executor and from the interpreter."""
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    jitted = exe.run(feed=feed, fetch_list=fetch)
    _, interp = run_graph(graphc.lower(graphc.default_main_program()), {}, feed,
                          [v.name for v in fetch])
    return jitted, interp


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def focal_ref(x, label, fg, gamma, alpha):
    out = np.zeros_like(x)
    p = _sigmoid(x)
    for i in range(x.shape[0]):
        for d in range(x.shape[1]):
            g = label[i, 0]
            if g == d + 1:
                out[i, d] = -alpha * (1 - p[i, d]) ** gamma * np.log(p[i, d]) / max(fg, 1)
            elif g != -1:
                out[i, d] = -(1 - alpha) * p[i, d] ** gamma * np.log(1 - p[i, d]) / max(fg, 1)
    return out


@pytest.mark.parametrize("fg", [0, 3])
def test_sigmoid_focal_loss(fg):
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 3)).astype("float32")
    lv = np.array([[0], [2], [-1], [3]], "int32")
    x = graphc.data("x", [-1, 3])
    out = layers.sigmoid_focal_loss(x, graphc.data("l", [-1, 1], "int32"),
                                    graphc.data("fg", [1], "int32"), gamma=1.5, alpha=0.3)
    assert out.shape == (-1, 3)
    ref = focal_ref(xv.astype("float64"), lv, fg, 1.5, 0.3)
    for got in _both([out], {"x": xv, "l": lv, "fg": np.array([fg], "int32")}):
        np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-7)
    assert np.all(ref[2] == 0)  # an ignored row


def teacher_student_ref(x, label):
    def ce(z):
        return max(x, 0) - x * z + np.log1p(np.exp(-abs(x)))
    if label < -1:
        return ce(0)
    if label < 0:
        return ce(1)
    if label < 1:
        return ce(0) + ce(label)
    return ce(1) + ce(label - 1)


def test_teacher_student_sigmoid_loss():
    xv = np.array([[0.5], [-1.2], [2.0], [30.0], [-0.3]], "float32")
    lv = np.array([[-2.0], [-0.5], [0.4], [1.7], [1.0]], "float32")
    out = layers.teacher_student_sigmoid_loss(graphc.data("x", [-1, 1]),
                                              graphc.data("l", [-1, 1]))
    ref = np.array([[teacher_student_ref(float(a), float(b))] for a, b in zip(xv[:, 0], lv[:, 0])])
    for got in _both([out], {"x": xv, "l": lv}):
        np.testing.assert_allclose(got[0], ref, rtol=1e-5)


def test_center_loss_and_its_center_update():
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((4, 3)).astype("float32")
    lv = np.array([[0], [2], [0], [2]], "int64")
    x = graphc.data("x", [-1, 3])
    loss = layers.center_loss(x, graphc.data("l", [-1, 1], "int64"), 3, 0.5,
                              fluid.ParamAttr(name="centers",
                                              initializer=fluid.initializer.Constant(0.25)))
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    centers = np.full((3, 3), 0.25, "float32")
    for _ in range(3):  # each run sees the previous run's update
        got, now = exe.run(feed={"x": xv, "l": lv}, fetch_list=[loss, "centers"])
        diff = xv - centers[lv[:, 0]]
        np.testing.assert_allclose(got, 0.5 * (diff ** 2).sum(1, keepdims=True), rtol=1e-5)
        for k in range(3):
            rows = lv[:, 0] == k
            centers[k] += 0.5 * diff[rows].sum(0) / (1 + rows.sum())
        np.testing.assert_allclose(now, centers, rtol=1e-5)  # class 1 has no rows: unmoved


def test_center_loss_trains_only_through_x():
    x = graphc.data("x", [-1, 3])
    x.stop_gradient = False
    loss = layers.mean(layers.center_loss(x, graphc.data("l", [-1, 1], "int64"), 3, 0.1, None))
    params = [p for p, _ in fluid.backward.append_backward(loss)]
    assert params == []  # the centers move by the op's own rule, never by an optimizer


def npair_ref(a, p, labels, l2_reg):
    same = (labels[:, None] == labels[None, :]).astype(float)
    target = same / same.sum(1, keepdims=True)
    logits = a @ p.T
    logits = logits - logits.max(1, keepdims=True)
    logsm = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    ce = -(target * logsm).sum(1)
    l2 = ((a ** 2).sum(1).mean() + (p ** 2).sum(1).mean()) * 0.25 * l2_reg
    return l2 + ce.mean()


def test_npair_loss():
    rng = np.random.default_rng(2)
    av, pv = rng.standard_normal((2, 5, 4)).astype("float32")
    lv = np.array([1, 2, 1, 3, 2], "int64")
    out = layers.npair_loss(graphc.data("a", [-1, 4]), graphc.data("p", [-1, 4]),
                            graphc.data("l", [-1], "int64"), l2_reg=0.01)
    assert out.shape == (1,)
    ref = npair_ref(av.astype(float), pv.astype(float), lv, 0.01)
    for got in _both([out], {"a": av, "p": pv, "l": lv}):
        np.testing.assert_allclose(got[0], [ref], rtol=1e-5)


def test_mean_iou():
    pred = np.array([[0, 1, 2, 2], [1, 1, 0, 3]], "int32")
    lab = np.array([[0, 1, 1, 2], [1, 0, 0, 3]], "int32")
    outs = layers.mean_iou(graphc.data("p", [-1, 4], "int32"), graphc.data("l", [-1, 4], "int32"),
                           5)
    correct = np.array([2, 2, 1, 1, 0])
    wrong = np.array([1, 2, 1, 0, 0])  # a mismatch counts against its label and its prediction
    iou = correct[:4] / (correct[:4] + wrong[:4])  # class 4 never appears: left out
    for got in _both(list(outs), {"p": pred, "l": lab}):
        np.testing.assert_allclose(got[0], [iou.mean()], rtol=1e-6)
        np.testing.assert_array_equal(got[1], wrong)
        np.testing.assert_array_equal(got[2], correct)


def levenshtein(a, b):
    d = np.arange(len(b) + 1, dtype=float)
    for i, x in enumerate(a, 1):
        prev, d[0] = d.copy(), i
        for j, y in enumerate(b, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (x != y))
    return d[len(b)]


@pytest.mark.parametrize("normalized, ignored", [(False, None), (True, [9]), (True, None)])
def test_edit_distance_padded(normalized, ignored):
    hyps = [[1, 2, 3, 9], [4, 4], [], [7, 9, 8, 7, 6]]
    refs = [[1, 3], [5], [1, 2, 9], [9, 7, 8, 6]]
    hv = np.zeros((4, 6), "int64")
    rv = np.full((4, 5), 9, "int64")  # padding never counts, even an ignored token's value
    for i, (h, r) in enumerate(zip(hyps, refs)):
        hv[i, :len(h)], rv[i, :len(r)] = h, r
    d, n = layers.edit_distance(
        graphc.data("h", [-1, 6], "int64"), graphc.data("r", [-1, 5], "int64"), normalized,
        ignored, graphc.data("hl", [-1], "int64"), graphc.data("rl", [-1], "int64"))
    assert (d.shape, d.dtype) == ((-1, 1), "float32")
    keep = [t for t in (ignored or [])]
    ref = []
    for h, r in zip(hyps, refs):
        h, r = [t for t in h if t not in keep], [t for t in r if t not in keep]
        ref.append(levenshtein(h, r) / (len(r) if normalized else 1))
    feed = {"h": hv, "r": rv, "hl": np.array([len(h) for h in hyps]),
            "rl": np.array([len(r) for r in refs])}
    for got in _both([d, n], feed):
        np.testing.assert_allclose(got[0][:, 0], ref, rtol=1e-6)
        assert list(got[1]) == [4]


def test_edit_distance_lod():
    d, _ = layers.edit_distance(graphc.data("h", [-1, 1], "int64", lod_level=1),
                                graphc.data("r", [-1, 1], "int64", lod_level=1),
                                normalized=False, ignored_tokens=[0])
    feed = {"h": create_lod_tensor(np.array([[1], [0], [2], [3], [4], [4]]), [[4, 2]]),
            "r": create_lod_tensor(np.array([[1], [3], [5]]), [[2, 1]])}
    (got,) = graphc.Executor().run(feed=feed, fetch_list=[d])
    np.testing.assert_allclose(got[:, 0], [1.0, 2.0])


def test_edit_distance_padded_needs_lengths():
    with pytest.raises(ProgramError, match="pass its lengths"):
        layers.edit_distance(graphc.data("h", [-1, 6], "int64"),
                             graphc.data("r", [-1, 5], "int64"))


def test_fluid_spelling():
    for name in ("sigmoid_focal_loss", "teacher_student_sigmoid_loss", "center_loss",
                 "npair_loss", "mean_iou", "edit_distance"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
        assert name in fluid.layers.__all__
