"""issue 24's further losses, metrics and nn layers (graphc/ops/loss_more, graphc/ops/nn_extra):
NumPy references of Paddle 1.8's semantics on the jitted step and the interpreter, and more."""

from __future__ import annotations

import numpy as np
import pytest
from losses_more_reference import (
    _sigmoid,
    bilinear_ref,
    ctc_ref,
    focal_ref,
    focus_ref,
    hsigmoid_ref,
    levenshtein,
    npair_ref,
    sampled_ref,
    teacher_student_ref,
)

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
                 "npair_loss", "mean_iou", "edit_distance", "warpctc", "ctc_greedy_decoder",
                 "hsigmoid", "row_conv", "fsp_matrix", "add_position_encoding", "affine_grid",
                 "grid_sampler", "nce", "random_crop", "similarity_focus",
                 "sampled_softmax_with_cross_entropy"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
        assert name in fluid.layers.__all__


CTC_SEQS = [([2, 1, 1], 6), ([3], 4), ([], 3), ([1, 2], 5)]  # (label, T): repeats, an empty


@pytest.mark.parametrize("blank", [0, 3])
def test_warpctc_padded_matches_the_forward_algorithm(blank):
    rng = np.random.default_rng(3)
    seqs = [([t if t < blank or blank == 0 else t - 1 for t in lab], n) for lab, n in CTC_SEQS]
    logits = rng.standard_normal((6, 4, 4)).astype("float64")
    lv = np.zeros((4, 3), "int32")
    for i, (lab, _) in enumerate(seqs):
        lv[i, :len(lab)] = lab
    loss = layers.warpctc(graphc.data("x", [6, -1, 4], "float64"), graphc.data("l", [-1, 3],
                                                                               "int32"),
                          blank=blank, input_length=graphc.data("xl", [-1], "int64"),
                          label_length=graphc.data("ll", [-1], "int64"))
    assert loss.shape == (-1, 1)
    ref = [ctc_ref(logits[:n, i], lab, blank) for i, (lab, n) in enumerate(seqs)]
    feed = {"x": logits, "l": lv, "xl": np.array([n for _, n in seqs]),
            "ll": np.array([len(lab) for lab, _ in seqs])}
    for got in _both([loss], feed):
        np.testing.assert_allclose(got[0][:, 0], ref, rtol=1e-9)


@pytest.mark.parametrize("norm_by_times", [False, True])
def test_warpctc_lod_gradient_and_norm_by_times(norm_by_times):
    rng = np.random.default_rng(4)
    tokens = rng.standard_normal((9, 3)).astype("float64")
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    loss = layers.warpctc(x, graphc.data("l", [-1, 1], "int32", lod_level=1),
                          norm_by_times=norm_by_times)
    total = layers.reduce_sum(loss)
    fluid.backward.append_backward(total)
    labels = [[1, 2], [2, 2, 1]]
    feed = {"x": create_lod_tensor(tokens, [[4, 5]]),
            "l": create_lod_tensor(np.array([[1], [2], [2], [2], [1]], "int32"), [[2, 3]])}
    got, grad = graphc.Executor().run(feed=feed, fetch_list=[loss, x.name + "@GRAD"])
    ref = [ctc_ref(tokens[:4], labels[0], 0), ctc_ref(tokens[4:], labels[1], 0)]
    np.testing.assert_allclose(got[:, 0], ref, rtol=1e-9)  # norm_by_times leaves the loss
    num = np.zeros_like(tokens)
    for i in range(tokens.shape[0]):
        for j in range(3):
            d = np.zeros_like(tokens)
            d[i, j] = 1e-6
            seq, lo = (0, 0) if i < 4 else (1, 4)
            hi = lo + (4 if seq == 0 else 5)
            num[i, j] = (ctc_ref((tokens + d)[lo:hi], labels[seq], 0)
                         - ctc_ref((tokens - d)[lo:hi], labels[seq], 0)) / 2e-6
            if norm_by_times:
                num[i, j] /= hi - lo
    np.testing.assert_allclose(np.asarray(grad), num, rtol=1e-5, atol=1e-8)


def test_ctc_greedy_decoder_padded():
    # arg-max paths: [1 1 0 1 2 2 | pad], [0 0 3 3 | ...], [2 | ...]
    paths = [[1, 1, 0, 1, 2, 2], [0, 0, 3, 3], [2]]
    probs = np.zeros((3, 6, 4), "float32")
    for i, path in enumerate(paths):
        probs[i, np.arange(len(path)), path] = 1.0
        probs[i, len(path):, 1] = 1.0  # past the length: never read
    out, length = layers.ctc_greedy_decoder(
        graphc.data("x", [-1, 6, 4]), 0, input_length=graphc.data("n", [-1, 1], "int64"),
        padding_value=-1)
    for got in _both([out, length], {"x": probs, "n": np.array([[6], [4], [1]])}):
        np.testing.assert_array_equal(got[0], [[1, 1, 2, -1, -1, -1], [3, -1, -1, -1, -1, -1],
                                               [2, -1, -1, -1, -1, -1]])
        np.testing.assert_array_equal(got[1][:, 0], [3, 1, 1])


def test_ctc_greedy_decoder_of_a_dense_input_needs_its_lengths():
    # the LoD form is tests/test_ctc_lod.py's
    with pytest.raises(ProgramError, match="is dense; give a LoD value.*with input_length"):
        layers.ctc_greedy_decoder(graphc.data("x", [-1, 6, 4]), 0)


@pytest.mark.parametrize("custom", [False, True])
def test_hsigmoid(custom):
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((3, 4)).astype("float32")
    lv = np.array([[0], [3], [5]], "int64")
    x = graphc.data("x", [-1, 4])
    kw = {}
    table = np.array([[0, 2, -1], [1, -1, -1], [0, 1, 3]], "int64")
    code = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0]], "int64")
    if custom:
        kw = {"path_table": graphc.data("t", [-1, 3], "int64"),
              "path_code": graphc.data("c", [-1, 3], "int64"), "is_custom": True}
    out = layers.hsigmoid(x, graphc.data("l", [-1, 1], "int64"), 6,
                          fluid.ParamAttr(name="hw"), fluid.ParamAttr(name="hb"), **kw)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    feed = {"x": xv, "l": lv, **({"t": table, "c": code} if custom else {})}
    got, w, b = exe.run(feed=feed, fetch_list=[out, "hw", "hb"])
    assert w.shape == ((6 if custom else 5), 4)
    b = b + 0.1 * np.arange(len(b))[:, None]  # a bias that is not zero
    fluid.global_scope().find_var("hb").get_tensor().set(b.astype("float32"), None)
    (got,) = exe.run(feed=feed, fetch_list=[out])
    ref = hsigmoid_ref(xv, w, b, lv[:, 0], 6, table if custom else None, code)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_row_conv():
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((2, 5, 3)).astype("float32")
    out = layers.row_conv(graphc.data("x", [-1, 5, 3]), 2, fluid.ParamAttr(name="rw"))
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    got, w = exe.run(feed={"x": xv}, fetch_list=[out, "rw"])
    ref = np.zeros_like(xv)
    for t in range(5):
        for k in range(3):
            if t + k < 5:
                ref[:, t] += xv[:, t + k] * w[k]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_fsp_matrix_and_position_encoding():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((2, 3, 3, 4))
    s = rng.standard_normal((2, 3, 6))
    fm = layers.fsp_matrix(graphc.data("a", [-1, 2, 3, 4], "float64"),
                           graphc.data("b", [-1, 3, 3, 4], "float64"))
    pe = layers.add_position_encoding(graphc.data("s", [-1, 3, 6], "float64"), 0.5, 2.0)
    pos = np.arange(3)[:, None] / 10000.0 ** (np.arange(3)[None, :] / 2)
    ref_pe = 0.5 * s + 2.0 * np.concatenate([np.sin(pos), np.cos(pos)], 1)[None]
    for got in _both([fm, pe], {"a": a, "b": b, "s": s}):
        np.testing.assert_allclose(got[0], np.einsum("nahw,nbhw->nab", a, b) / 12, rtol=1e-9)
        np.testing.assert_allclose(got[1], ref_pe, rtol=1e-9)


def test_affine_grid_and_grid_sampler():
    rng = np.random.default_rng(8)
    theta = np.array([[[1, 0, 0], [0, 1, 0]], [[0.8, -0.3, 0.2], [0.4, 1.1, -0.5]]])
    xv = rng.standard_normal((2, 2, 3, 4))
    grid = layers.affine_grid(graphc.data("th", [-1, 2, 3], "float64"), [2, 2, 3, 4])
    out = layers.grid_sampler(graphc.data("x", [-1, 2, 3, 4], "float64"), grid)
    assert grid.shape == (-1, 3, 4, 2) and out.shape == (-1, 2, 3, 4)
    base = np.stack([*np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 3)), np.ones((3, 4))],
                    -1)
    ref_grid = np.einsum("hwk,njk->nhwj", base, theta)
    for got in _both([grid, out], {"th": theta, "x": xv}):
        np.testing.assert_allclose(got[0], ref_grid, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got[1], bilinear_ref(xv, ref_grid), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(got[1][0], xv[0], rtol=1e-9)  # the identity map


def test_nn_extra_refusals():
    with pytest.raises(ProgramError, match="data-dependent"):
        layers.affine_grid(graphc.data("th", [-1, 2, 3]), graphc.data("shp", [4], "int32"))


def test_row_conv_and_position_encoding_per_lod_sequence():
    rng = np.random.default_rng(13)
    tokens = rng.standard_normal((7, 4))
    x = graphc.data("x", [-1, 4], "float64", lod_level=1)
    rc = layers.row_conv(x, 1, fluid.ParamAttr(name="rw"))
    pe = layers.add_position_encoding(x, 1.0, 1.0)
    assert rc.lod_level == 1 and pe.lod_level == 1
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    got_rc, got_pe, w = exe.run(feed={"x": create_lod_tensor(tokens, [[3, 4]])},
                                fetch_list=[rc, pe, "rw"], return_numpy=False)
    w = np.asarray(w)
    ref_rc, ref_pe = [], []
    for seq in (tokens[:3], tokens[3:]):
        nxt = np.concatenate([seq[1:], np.zeros((1, 4))])  # a sequence's lookahead stops at its end
        ref_rc.append(seq * w[0] + nxt * w[1])
        pos = np.arange(len(seq))[:, None] / 10000.0 ** (np.arange(2)[None, :] / 1)
        ref_pe.append(seq + np.concatenate([np.sin(pos), np.cos(pos)], 1))
    np.testing.assert_allclose(np.asarray(got_rc), np.concatenate(ref_rc), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(got_pe), np.concatenate(ref_pe), rtol=1e-9)


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "custom_dist"])
def test_nce_matches_its_samples_and_draws_each_step(sampler):
    rng = np.random.default_rng(9)
    xv, lv = rng.standard_normal((3, 4)).astype("float32"), np.array([[1], [7], [0]])
    dist = np.linspace(1, 2, 10) / np.linspace(1, 2, 10).sum()
    out = layers.nce(graphc.data("x", [-1, 4]), graphc.data("l", [-1, 1], "int64"), 10,
                     param_attr=fluid.ParamAttr(name="nw"), bias_attr=fluid.ParamAttr(name="nb"),
                     num_neg_samples=4, sampler=sampler,
                     custom_dist=dist if sampler == "custom_dist" else None)
    labels = next(op for op in graphc.default_main_program().global_block().ops
                  if op.type == "nce").output("SampleLabels")[0]
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    draws = []
    for _ in range(2):
        got, sl, w, b = exe.run(feed={"x": xv, "l": lv}, fetch_list=[out, labels, "nw", "nb"])
        assert sl.shape == (3, 5) and np.all(sl[:, 0] == lv[:, 0]) and np.all(sl < 10)
        q = {"uniform": np.full(sl.shape, 0.1), "custom_dist": dist[sl],
             "log_uniform": np.log((sl + 2) / (sl + 1)) / np.log(11)}[sampler]
        o = _sigmoid(np.einsum("nd,nkd->nk", xv, w[sl]) + b[sl, 0])
        cost = np.where(np.arange(5) < 1, -np.log(o / (o + 4 * q)), -np.log(4 * q / (o + 4 * q)))
        np.testing.assert_allclose(got[:, 0], cost.sum(1) / 5, rtol=1e-5)
        draws.append(sl[:, 1:])
    assert not np.array_equal(draws[0], draws[1])  # a new draw each step


def test_random_crop_takes_a_window_per_instance():
    xv = np.arange(4 * 2 * 5 * 6, dtype="float32").reshape(4, 2, 5, 6)
    out = layers.random_crop(graphc.data("x", [-1, 2, 5, 6]), [3, 4], seed=3)
    assert out.shape == (-1, 2, 3, 4)
    exe = graphc.Executor()
    seen = set()
    for _ in range(3):
        (got,) = exe.run(feed={"x": xv}, fetch_list=[out])
        for n in range(4):
            for ch in range(2):
                r, c = divmod(int(got[n, ch, 0, 0] - xv[n, ch, 0, 0]), 6)
                np.testing.assert_array_equal(got[n, ch], xv[n, ch, r:r + 3, c:c + 4])
                seen.add((r, c))
    assert len(seen) > 1  # offsets vary over instances and steps


@pytest.mark.parametrize("axis, indexes", [(1, [0]), (2, [1, 2]), (3, [0, 3])])
def test_similarity_focus(axis, indexes):
    xv = np.random.default_rng(10).permutation(2 * 3 * 4 * 4).reshape(2, 3, 4, 4)
    xv = xv.astype("float32")
    out = layers.similarity_focus(graphc.data("x", [-1, 3, 4, 4]), axis, indexes)
    for got in _both([out], {"x": xv}):
        np.testing.assert_array_equal(got[0], focus_ref(xv, axis, indexes))


@pytest.mark.parametrize("num_true", [1, 2])
def test_sampled_softmax_with_cross_entropy(num_true):
    rng = np.random.default_rng(11)
    xv = rng.standard_normal((3, 12))
    lv = np.array([[1, 4], [0, 3], [7, 1]])[:, :num_true]
    x = graphc.data("x", [-1, 12], "float64")
    loss = layers.sampled_softmax_with_cross_entropy(x, graphc.data("l", [-1, num_true], "int64"),
                                                     5, num_true=num_true, seed=4)
    op = next(o for o in graphc.default_main_program().global_block().ops
              if o.type == "sampled_softmax_with_cross_entropy")
    fetch = [loss, op.output("Samples")[0], op.output("Probabilities")[0]]
    got, samples, probs = graphc.Executor().run(feed={"x": xv, "l": lv}, fetch_list=fetch)
    assert samples.shape == (3, num_true + 5)
    np.testing.assert_array_equal(samples[:, :num_true], lv)
    assert len(set(samples[0, num_true:])) == 5 and np.all(samples[:, num_true:] == samples[0,
                                                                                          num_true:])
    p = np.log((samples + 2) / (samples + 1)) / np.log(13)
    tries = np.log1p(-probs) / np.log1p(-p)  # Q = 1 - (1 - p)^tries, one count for all
    np.testing.assert_allclose(tries, np.round(tries[0, 0]), rtol=1e-6)
    assert tries[0, 0] >= 5
    np.testing.assert_allclose(got, sampled_ref(xv, samples, probs, num_true, True), rtol=1e-9)


def test_sampled_softmax_customized_samples_and_gradient():
    rng = np.random.default_rng(12)
    xv = rng.standard_normal((2, 6))
    sv = np.array([[2, 0, 5, 2], [4, 1, 3, 0]])  # row 0 samples its own label: a hit
    pv = rng.uniform(0.2, 0.9, (2, 4))
    x = graphc.data("x", [-1, 6], "float64")
    x.stop_gradient = False
    loss = layers.sampled_softmax_with_cross_entropy(
        x, graphc.data("l", [-1, 1], "int64"), 3, use_customized_samples=True,
        customized_samples=graphc.data("s", [-1, 4], "int64"),
        customized_probabilities=graphc.data("p", [-1, 4], "float64"))
    fluid.backward.append_backward(layers.reduce_sum(loss))
    feed = {"x": xv, "l": sv[:, :1], "s": sv, "p": pv}
    got, grad = graphc.Executor().run(feed=feed, fetch_list=[loss, x.name + "@GRAD"])
    np.testing.assert_allclose(got, sampled_ref(xv, sv, pv, 1, True), rtol=1e-9)
    num = np.zeros_like(xv)
    for i in range(2):
        for j in range(6):
            d = np.zeros_like(xv)
            d[i, j] = 1e-6
            num[i, j] = (sampled_ref(xv + d, sv, pv, 1, True).sum()
                         - sampled_ref(xv - d, sv, pv, 1, True).sum()) / 2e-6
    np.testing.assert_allclose(grad, num, rtol=1e-5, atol=1e-8)
