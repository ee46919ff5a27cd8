"""Detection training layers (yolov3_loss, multi_box_head, ssd_loss and its
mine_hard_examples op) against loop-by-loop NumPy references of Paddle 1.8's kernels and
Python composition, on the jitted Executor and the interpreter; a tiny SSD trains."""

from __future__ import annotations

import numpy as np
import pytest
from detection_targets_reference import (
    mine_ref,
    retinanet_ref,
    rpn_candidates,
    rpn_ref,
    ssd_loss_ref,
    yolov3_loss_ref,
)

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.layers.detection_targets import _mine_hard_examples
from graphc.testing.lod import as_feed


def run_both(feed, fetch, rtol=1e-5):
    got = graphc.Executor().run(feed=feed, fetch_list=fetch, return_numpy=False)
    main = graphc.default_main_program()
    packed = {k: as_feed(main, k, v) for k, v in feed.items()}
    _, ref = run_graph(graphc.lower(main), {}, packed,
                       [v if isinstance(v, str) else v.name for v in fetch])
    for a, b in zip(got, ref):
        if hasattr(b, "lengths"):  # the interpreter's LoD value: its real tokens
            b = np.asarray(b.data)[:int(np.sum(b.lengths[0]))]
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-6)
    return [g if getattr(g, "recursive_sequence_lengths", list)() else np.asarray(g)
            for g in got]


def op_outputs(op_type):
    op = next(o for o in graphc.default_main_program().global_block().ops
              if o.type == op_type)
    return op.outputs


# -- yolov3_loss ------------------------------------------------------------------------------
ANCHORS = [10, 13, 16, 30, 33, 23, 30, 61]


def yolo_data(rng, n=2, classes=3, h=4):
    x = rng.standard_normal((n, 2 * (5 + classes), h, h)) * 0.8
    box = np.array([[[0.3, 0.4, 0.3, 0.5], [0.71, 0.2, 0.2, 0.1], [0.0, 0.0, 0.0, 0.0],
                     [0.5, 0.55, 0.9, 0.8]],
                    [[0.1, 0.9, 0.05, 0.1], [0.31, 0.41, 0.28, 0.45], [0.6, 0.6, 0.4, 0.3],
                     [0.3, 0.4, 0.3, 0.5]]])[:n]
    label = np.array([[0, 2, 1, 1], [2, 1, 0, 1]], np.int32)[:n]
    score = rng.uniform(0.3, 1.0, (n, 4))
    return x, box, label, score


@pytest.mark.parametrize("kw", [{}, {"smooth": False}, {"score": True},
                                {"scale": 1.2, "ignore": 0.3}, {"mask": [0, 1]}],
                         ids=["default", "no-smooth", "gt-score", "scale-x-y", "mask-01"])
def test_yolov3_loss(kw):
    rng = np.random.default_rng(1)
    x, box, label, score = yolo_data(rng)
    mask = kw.get("mask", [1, 2])
    ignore = kw.get("ignore", 0.5)
    xv = graphc.data("x", [-1, 16, 4, 4], "float64")
    bv = graphc.data("box", [-1, 4, 4], "float64")
    lv = graphc.data("label", [-1, 4], "int32")
    feed = {"x": x, "box": box, "label": label}
    sv = None
    if kw.get("score"):
        sv = graphc.data("score", [-1, 4], "float64")
        feed["score"] = score
    loss = layers.yolov3_loss(xv, bv, lv, ANCHORS, mask, 3, ignore, 8, gt_score=sv,
                              use_label_smooth=kw.get("smooth", True),
                              scale_x_y=kw.get("scale", 1.0))
    assert (loss.shape, loss.dtype) == ((-1,), "float64")
    outs = op_outputs("yolov3_loss")
    got = run_both(feed, [loss, outs["ObjectnessMask"][0], outs["GTMatchMask"][0]])
    ref = yolov3_loss_ref(x, box, label, ANCHORS, mask, 3, ignore, 8,
                          score if kw.get("score") else None, kw.get("smooth", True),
                          kw.get("scale", 1.0))
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)
    assert (ref[2] == -1).any() and (ref[2] >= 0).any()  # padding and matched boxes seen


def test_yolov3_loss_gradient_is_to_x_only():
    rng = np.random.default_rng(2)
    x, box, label, _ = yolo_data(rng)
    xv = graphc.data("x", [2, 16, 4, 4], "float64")
    xv.stop_gradient = False
    bv = graphc.data("box", [2, 4, 4], "float64")
    bv.stop_gradient = False
    loss = layers.reduce_sum(layers.yolov3_loss(
        xv, bv, graphc.data("label", [2, 4], "int32"), ANCHORS, [1, 2], 3, 0.5, 8))
    graphc.append_backward(loss)
    gx, gb = graphc.Executor().run(feed={"x": x, "box": box, "label": label},
                                   fetch_list=["x@GRAD", "box@GRAD"])
    assert np.abs(gx).sum() > 0
    np.testing.assert_array_equal(gb, 0)


def test_yolov3_loss_bad_channels():
    x = graphc.data("x", [-1, 15, 4, 4])
    with pytest.raises(ShapeError, match="len\\(anchor_mask\\)"):
        layers.yolov3_loss(x, graphc.data("b", [-1, 3, 4]), graphc.data("l", [-1, 3], "int32"),
                           ANCHORS, [1, 2], 3, 0.5, 8)


# -- mine_hard_examples -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["max_negative", "hard_example"])
def test_mine_hard_examples(kind):
    rng = np.random.default_rng(3)
    n, p = 3, 9
    cls = rng.permutation(n * p).reshape(n, p) * 0.1
    match = rng.integers(-1, 2, (n, p)).astype(np.int32)
    match[2] = -1  # an image without positives: no negatives under max_negative
    dist = rng.uniform(0, 0.8, (n, p))
    cv = graphc.data("cls", [-1, p], "float64")
    mv = graphc.data("match", [-1, p], "int32")
    dv = graphc.data("dist", [-1, p], "float64")
    neg, updated = _mine_hard_examples(cv, mv, dv, 1.5, 0.5, kind, 4)
    assert (neg.shape, neg.lod_level) == ((-1, 1), 1)
    t, u = run_both({"cls": cls, "match": match, "dist": dist}, [neg, updated])
    negs, upd = mine_ref(cls, None, match, dist, 1.5, 0.5, kind, 4)
    assert t.recursive_sequence_lengths() == [[len(s) for s in negs]]
    np.testing.assert_array_equal(np.asarray(t).reshape(-1), sum(negs, []))
    np.testing.assert_array_equal(u, upd)


# -- ssd_loss and multi_box_head ----------------------------------------------------------------
def ssd_data(rng, n=2, p=12, c=4):
    centers = rng.uniform(0.15, 0.85, (p, 2))
    sizes = rng.uniform(0.1, 0.3, (p, 2))
    prior = np.concatenate([centers - sizes / 2, centers + sizes / 2], 1)
    var = np.tile([0.1, 0.1, 0.2, 0.2], (p, 1))
    counts = [3, 2][:n]
    boxes, labels = [], []
    for k in counts:
        pick = rng.choice(p, k, replace=False)
        jitter = rng.uniform(-0.03, 0.03, (k, 4))
        boxes.append(prior[pick] + jitter)
        labels.append(rng.integers(1, c, k))
    loc = rng.standard_normal((n, p, 4)) * 0.5
    conf = rng.standard_normal((n, p, c))
    return loc, conf, boxes, labels, prior, var


@pytest.mark.parametrize("kw", [{}, {"match_type": "bipartite", "normalize": False},
                                {"neg_pos_ratio": 1.0, "loc_loss_weight": 0.5,
                                 "conf_loss_weight": 2.0, "background_label": 0},
                                {"no_var": True}],
                         ids=["default", "bipartite-unnormalized", "weights", "no-variance"])
def test_ssd_loss(kw):
    rng = np.random.default_rng(4)
    loc, conf, boxes, labels, prior, var = ssd_data(rng)
    lv = graphc.data("loc", [-1, 12, 4], "float64")
    cv = graphc.data("conf", [-1, 12, 4], "float64")
    bv = graphc.data("box", [-1, 4], "float64", lod_level=1)
    tv = graphc.data("label", [-1, 1], "int32", lod_level=1)
    pv = graphc.data("prior", [12, 4], "float64")
    vv = graphc.data("var", [12, 4], "float64")
    no_var = kw.pop("no_var", False)
    loss = layers.ssd_loss(lv, cv, bv, tv, pv, None if no_var else vv, **kw)
    assert loss.shape == (-1, 1)
    lengths = [[len(b) for b in boxes]]
    feed = {"loc": loc, "conf": conf, "prior": prior, "var": var,
            "box": fluid.create_lod_tensor(np.concatenate(boxes), lengths, fluid.CPUPlace()),
            "label": fluid.create_lod_tensor(np.concatenate(labels)[:, None].astype(np.int32),
                                             lengths, fluid.CPUPlace())}
    (got,) = run_both(feed, [loss])
    ref = ssd_loss_ref(loc, conf, boxes, labels, prior, np.ones_like(var) if no_var else var,
                       background=kw.get("background_label", 0),
                       ratio=kw.get("neg_pos_ratio", 3.0),
                       loc_w=kw.get("loc_loss_weight", 1.0),
                       conf_w=kw.get("conf_loss_weight", 1.0),
                       match_type=kw.get("match_type", "per_prediction"),
                       normalize=kw.get("normalize", True))
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_ssd_loss_refuses_hard_example():
    with pytest.raises(graphc.ProgramError, match="max_negative"):
        layers.ssd_loss(graphc.data("l", [-1, 5, 4]), graphc.data("c", [-1, 5, 3]),
                        graphc.data("b", [-1, 4], lod_level=1),
                        graphc.data("t", [-1, 1], "int32", lod_level=1),
                        graphc.data("p", [5, 4]), mining_type="hard_example")


def test_multi_box_head_composes_prior_box_and_conv_heads():
    rng = np.random.default_rng(5)
    image = graphc.data("image", [-1, 3, 32, 32])
    f1 = graphc.data("f1", [-1, 4, 4, 4])
    f2 = graphc.data("f2", [-1, 4, 2, 2])
    loc, conf, box, var = layers.multi_box_head(
        [f1, f2], image, 32, 5, [[2.0], [2.0, 3.0]], min_sizes=[8.0, 16.0],
        max_sizes=[16.0, 28.0], flip=True, clip=True)
    # priors per cell: (1, 2, 1/2) + max = 4 on f1, (1, 2, 1/2, 3, 1/3) + max = 6 on f2
    p = 4 * 4 * 4 + 2 * 2 * 6
    assert (loc.shape, conf.shape, box.shape, var.shape) == \
        ((-1, p, 4), (-1, p, 5), (p, 4), (p, 4))
    b1, _ = layers.prior_box(f1, image, [8.0], [16.0], [2.0], flip=True, clip=True)
    feed = {"image": rng.standard_normal((2, 3, 32, 32)).astype("float32"),
            "f1": rng.standard_normal((2, 4, 4, 4)).astype("float32"),
            "f2": rng.standard_normal((2, 4, 2, 2)).astype("float32")}
    graphc.Executor().run(graphc.default_startup_program())
    lo, co, bo, vo, b1o = graphc.Executor().run(feed=feed,
                                                fetch_list=[loc, conf, box, var, b1])
    np.testing.assert_allclose(bo[:64], b1o.reshape(-1, 4))
    np.testing.assert_allclose(vo, np.tile([0.1, 0.1, 0.2, 0.2], (p, 1)), rtol=1e-6)
    # a 1x1 conv head: location k of cell (y, x) is W[k] . f[:, y, x] + b, priors cell-major
    scope = graphc.global_scope()
    convs = [op for op in graphc.default_main_program().global_block().ops
             if op.type == "conv2d"]
    w = np.asarray(scope.find_var(convs[0].inputs["Filter"][0]).get_tensor())
    bias_op = next(op for op in graphc.default_main_program().global_block().ops
                   if op.type == "elementwise_add"
                   and op.inputs["X"][0] == convs[0].outputs["Output"][0])
    bias = np.asarray(scope.find_var(bias_op.inputs["Y"][0]).get_tensor())
    want = np.einsum("kc,nchw->nhwk", w[:, :, 0, 0], feed["f1"]) + bias
    want = want.reshape(2, 64, 4)
    np.testing.assert_allclose(lo[:, :64], want, rtol=1e-4, atol=1e-5)
    assert co.shape == (2, p, 5)


def test_multi_box_head_one_map_keeps_prior_box_layout():
    image = graphc.data("image", [-1, 3, 32, 32])
    loc, conf, box, var = layers.multi_box_head([graphc.data("f", [-1, 4, 3, 3])], image, 32, 2,
                                                [[2.0]], min_sizes=[8.0], max_sizes=[16.0],
                                                steps=[10.0])
    assert (loc.shape, conf.shape, box.shape, var.shape) == \
        ((-1, 36, 4), (-1, 36, 2), (3, 3, 4, 4), (3, 3, 4, 4))
    (op,) = [o for o in graphc.default_main_program().global_block().ops
             if o.type == "prior_box"]
    assert (op.attrs["step_w"], op.attrs["step_h"], op.attrs["flip"]) == (10.0, 10.0, True)


def test_multi_box_head_sizes_from_ratios():
    image = graphc.data("image", [-1, 3, 64, 64])
    feats = [graphc.data(f"f{i}", [-1, 2, s, s]) for i, s in enumerate([8, 4, 2, 1])]
    _, _, box, _ = layers.multi_box_head(feats, image, 64, 3, [[2.0]] * 4, min_ratio=20,
                                         max_ratio=90)
    ops = [op for op in graphc.default_main_program().global_block().ops
           if op.type == "prior_box"]
    # step = floor(70 / 2) = 35: ratios 20, 55, 90 after Paddle's fixed 10% / 20% first map
    assert [op.attrs["min_sizes"] for op in ops] == [[6.4], [12.8], [35.2], [57.6]]
    assert [op.attrs["max_sizes"] for op in ops] == [[12.8], [35.2], [57.6], [80.0]]
    assert box.shape == ((64 + 16 + 4 + 1) * 4, 4)


def test_tiny_ssd_trains():
    """conv backbone -> multi_box_head -> ssd_loss -> SGD: the loss falls."""
    rng = np.random.default_rng(6)
    image = graphc.data("image", [-1, 3, 16, 16])
    gt = graphc.data("gt", [-1, 4], lod_level=1)
    label = graphc.data("label", [-1, 1], "int32", lod_level=1)
    f1 = layers.conv2d(image, 8, 3, stride=2, padding=1, act="relu")
    f2 = layers.conv2d(f1, 8, 3, stride=2, padding=1, act="relu")
    loc, conf, box, var = layers.multi_box_head([f1, f2], image, 16, 3, [[2.0], [2.0]],
                                                min_sizes=[4.0, 8.0], max_sizes=[8.0, 14.0],
                                                clip=True)
    loss = layers.reduce_mean(layers.ssd_loss(loc, conf, gt, label, box, var))
    fluid.optimizer.SGD(0.05).minimize(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    boxes = np.array([[0.1, 0.1, 0.5, 0.6], [0.5, 0.4, 0.9, 0.9], [0.2, 0.3, 0.7, 0.8]],
                     np.float32)
    feed = {"image": rng.standard_normal((2, 3, 16, 16)).astype(np.float32),
            "gt": fluid.create_lod_tensor(boxes, [[2, 1]], fluid.CPUPlace()),
            "label": fluid.create_lod_tensor(np.array([[1], [2], [1]], np.int32), [[2, 1]],
                                             fluid.CPUPlace())}
    losses = [exe.run(feed=feed, fetch_list=[loss])[0].item() for _ in range(8)]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0], losses


# -- rpn_target_assign and retinanet_target_assign ------------------------------------------
def anchor_data():
    """Anchors of sizes 8 and 14 on a stride-6 grid over a 32 x 32 image (some straddle),
    two images: 3 boxes (a tiny one whose best anchor is also background: Paddle's weight-0
    location row), and 3 boxes of which one is crowd (image 2 at scale 0.5)."""
    anchors = []
    for cy in range(2, 32, 6):
        for cx in range(2, 32, 6):
            for s in (8, 14):
                anchors.append([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2])
    anchors = np.array(anchors)
    gts = [np.array([[3.0, 4.0, 12.0, 11.0], [15.0, 14.0, 29.0, 27.0], [30.0, 0.0, 31.0, 1.0]]),
           np.array([[10.0, 6.0, 40.0, 30.0], [2.0, 30.0, 20.0, 52.0],
                     [30.0, 30.0, 60.0, 60.0]])]
    crowd = [np.array([[0], [0], [0]], np.int32), np.array([[0], [1], [0]], np.int32)]
    labels = [np.array([[3], [1], [2]], np.int32), np.array([[2], [4], [1]], np.int32)]
    info = np.array([[32.0, 32.0, 1.0], [30.0, 28.0, 0.5]])
    return anchors, gts, crowd, labels, info


def lod_feed(parts, dtype):
    return fluid.create_lod_tensor(np.concatenate(parts).astype(dtype),
                                   [[len(p) for p in parts]], fluid.CPUPlace())


@pytest.mark.parametrize("kw", [{}, {"rpn_batch_size_per_im": 12, "rpn_fg_fraction": 0.25},
                                {"rpn_straddle_thresh": -1.0, "rpn_positive_overlap": 0.5,
                                 "rpn_negative_overlap": 0.2}],
                         ids=["default", "few-samples", "no-straddle-filter"])
def test_rpn_target_assign_deterministic(kw):
    anchors, gts, crowd, _, info = anchor_data()
    a = len(anchors)
    rng = np.random.default_rng(7)
    bbox_pred = rng.standard_normal((2, a * 4))
    logits = rng.standard_normal((2, a))
    bp = graphc.data("bp", [-1, a * 4], "float64")
    cl = graphc.data("cl", [-1, a], "float64")
    an = graphc.data("anchor", [a, 4], "float64")
    av = graphc.data("var", [a, 4], "float64")
    gv = graphc.data("gt", [-1, 4], "float64", lod_level=1)
    cv = graphc.data("crowd", [-1, 1], "int32", lod_level=1)
    iv = graphc.data("info", [-1, 3], "float64")
    outs = layers.rpn_target_assign(bp, cl, an, av, gv, cv, iv, use_random=False, **kw)
    assert [o.lod_level for o in outs] == [1] * 5
    op = op_outputs("rpn_target_assign")
    fetch = list(outs) + [op["LocationIndex"][0], op["ScoreIndex"][0]]
    feed = {"bp": bbox_pred, "cl": logits, "anchor": anchors, "var": np.ones((a, 4)),
            "gt": lod_feed(gts, "float64"), "crowd": lod_feed(crowd, "int32"), "info": info}
    got = run_both(feed, fetch)
    scores, locs, label, delta, weight, loc_idx, score_idx = got
    args = {"rpn_batch_size_per_im": 256, "rpn_straddle_thresh": 0.0, "rpn_fg_fraction": 0.5,
            "rpn_positive_overlap": 0.7, "rpn_negative_overlap": 0.3, **kw}
    ref = rpn_ref(anchors, gts, crowd, info, args["rpn_batch_size_per_im"],
                  args["rpn_straddle_thresh"], args["rpn_fg_fraction"],
                  args["rpn_positive_overlap"], args["rpn_negative_overlap"])
    assert loc_idx.recursive_sequence_lengths() == [[len(r[0]) for r in ref]]
    assert score_idx.recursive_sequence_lengths() == [[len(r[1]) for r in ref]]
    np.testing.assert_array_equal(np.asarray(loc_idx), sum((r[0] for r in ref), []))
    np.testing.assert_array_equal(np.asarray(score_idx), sum((r[1] for r in ref), []))
    np.testing.assert_array_equal(np.asarray(label).reshape(-1), sum((r[2] for r in ref), []))
    np.testing.assert_allclose(np.asarray(delta), np.array(sum((r[3] for r in ref), [])),
                               rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(weight), sum((r[4] for r in ref), []))
    np.testing.assert_allclose(np.asarray(scores).reshape(-1),
                               logits.reshape(-1)[np.asarray(score_idx)])
    np.testing.assert_allclose(np.asarray(locs),
                               bbox_pred.reshape(-1, 4)[np.asarray(loc_idx)])
    assert sum(len(r[0]) for r in ref) > 0 and sum(r[2].count(0) for r in ref) > 0
    assert any(w == [0.0] * 4 for r in ref for w in r[4])  # a fg-and-bg anchor's row


def test_rpn_target_assign_random_samples_a_seeded_subset():
    anchors, gts, crowd, _, info = anchor_data()
    a = len(anchors)
    an = graphc.data("anchor", [a, 4], "float64")
    gv = graphc.data("gt", [-1, 4], "float64", lod_level=1)
    cv = graphc.data("crowd", [-1, 1], "int32", lod_level=1)
    iv = graphc.data("info", [-1, 3], "float64")
    outs = layers.rpn_target_assign(graphc.data("bp", [-1, a * 4], "float64"),
                                    graphc.data("cl", [-1, a], "float64"), an, an, gv, cv, iv,
                                    rpn_batch_size_per_im=10, rpn_fg_fraction=0.3)
    op = op_outputs("rpn_target_assign")
    feed = {"bp": np.zeros((2, a * 4)), "cl": np.zeros((2, a)), "anchor": anchors,
            "gt": lod_feed(gts, "float64"), "crowd": lod_feed(crowd, "int32"), "info": info}
    exe = graphc.Executor()
    runs = [exe.run(feed=feed, fetch_list=[op["ScoreIndex"][0], outs[2]], return_numpy=False)
            for _ in range(3)]
    cands = rpn_candidates(anchors, gts, crowd, info, 0.7, 0.3)
    picks = []
    for score_idx, label in runs:
        lengths = score_idx.recursive_sequence_lengths()[0]
        assert all(n <= 10 for n in lengths)
        idx, lab = np.asarray(score_idx).reshape(-1), np.asarray(label).reshape(-1)
        start = 0
        for i, n in enumerate(lengths):
            part, part_lab = idx[start:start + n], lab[start:start + n]
            start += n
            # fg at most 3, every pick a candidate of its kind, fg listed first ascending
            assert part_lab.sum() <= 3 and list(part_lab) == sorted(part_lab, reverse=True)
            assert set(part[part_lab == 1]) <= cands[i][0]
            assert set(part[part_lab == 0]) <= cands[i][1]
        picks.append(tuple(idx))
    assert len(set(picks)) > 1  # each step draws anew


def test_retinanet_target_assign():
    anchors, gts, crowd, labels, info = anchor_data()
    a, classes = len(anchors), 5
    rng = np.random.default_rng(8)
    bbox_pred = rng.standard_normal((2, a, 4))
    logits = rng.standard_normal((2, a, classes))
    an = graphc.data("anchor", [a, 4], "float64")
    gv = graphc.data("gt", [-1, 4], "float64", lod_level=1)
    lv = graphc.data("label", [-1, 1], "int32", lod_level=1)
    cv = graphc.data("crowd", [-1, 1], "int32", lod_level=1)
    iv = graphc.data("info", [-1, 3], "float64")
    outs = layers.retinanet_target_assign(graphc.data("bp", [-1, a, 4], "float64"),
                                          graphc.data("cl", [-1, a, classes], "float64"), an,
                                          an, gv, lv, cv, iv, num_classes=classes)
    assert [o.lod_level for o in outs] == [1] * 6
    op = op_outputs("retinanet_target_assign")
    feed = {"bp": bbox_pred, "cl": logits, "anchor": anchors, "gt": lod_feed(gts, "float64"),
            "label": lod_feed(labels, "int32"), "crowd": lod_feed(crowd, "int32"),
            "info": info}
    got = run_both(feed, list(outs) + [op["LocationIndex"][0], op["ScoreIndex"][0]])
    scores, locs, label, delta, weight, fg_num, loc_idx, score_idx = got
    ref = retinanet_ref(anchors, gts, labels, crowd, info, 0.5, 0.4)
    np.testing.assert_array_equal(np.asarray(loc_idx), sum(([k + r[5] for k in r[0]]
                                                            for r in ref), []))
    np.testing.assert_array_equal(np.asarray(score_idx), sum(([k + r[5] for k in r[1]]
                                                              for r in ref), []))
    np.testing.assert_array_equal(np.asarray(label).reshape(-1), sum((r[2] for r in ref), []))
    np.testing.assert_allclose(np.asarray(delta), np.array(sum((r[3] for r in ref), [])),
                               rtol=1e-9)
    np.testing.assert_array_equal(np.asarray(weight), 1.0)
    np.testing.assert_array_equal(np.asarray(fg_num).reshape(-1), [r[4] for r in ref])
    np.testing.assert_allclose(np.asarray(scores),
                               logits.reshape(-1, classes)[np.asarray(score_idx)])
    np.testing.assert_allclose(np.asarray(locs), bbox_pred.reshape(-1, 4)[np.asarray(loc_idx)])


def test_gather_by_a_lod_index_keeps_its_lod_and_differentiates():
    """What the two target layers rely on: Out = X[Index] row by row with Index's LoD."""
    x = graphc.data("x", [5, 3], "float64")
    x.stop_gradient = False
    idx = graphc.data("idx", [-1, 1], "int32", lod_level=1)
    out = layers.gather(x, idx)
    assert (out.shape, out.lod_level) == ((-1, 3), 1)
    loss = layers.reduce_sum(layers.square(out))
    graphc.append_backward(loss)
    xv = np.arange(15.0).reshape(5, 3)
    feed = {"x": xv, "idx": lod_feed([np.array([[4], [0]]), np.array([[2]])], "int32")}
    got, total, grad = graphc.Executor().run(feed=feed, fetch_list=[out, loss, "x@GRAD"],
                                             return_numpy=False)
    assert got.recursive_sequence_lengths() == [[2, 1]]
    np.testing.assert_array_equal(np.asarray(got), xv[[4, 0, 2]])
    np.testing.assert_allclose(np.asarray(total), [np.sum(xv[[4, 0, 2]] ** 2)])
    want = np.zeros_like(xv)
    want[[4, 0, 2]] = 2 * xv[[4, 0, 2]]
    np.testing.assert_allclose(np.asarray(grad), want)
    main = graphc.default_main_program()
    _, (ref,) = run_graph(graphc.lower(main), {},
                          {k: as_feed(main, k, v) for k, v in feed.items()}, ["x@GRAD"])
    np.testing.assert_allclose(np.asarray(ref), want)


def test_build_time_errors_name_the_input():
    with pytest.raises(ShapeError, match="mining_type must be"):
        _mine_hard_examples(graphc.data("c", [-1, 5]), graphc.data("m", [-1, 5], "int32"),
                            graphc.data("d", [-1, 5]), 3.0, 0.5, "most_negative", 0)
    a = graphc.data("anchor", [6, 4])
    with pytest.raises(ShapeError, match="GtBoxes must be a LoD"):
        layers.rpn_target_assign(graphc.data("bp", [-1, 24]), graphc.data("cl", [-1, 6]), a, a,
                                 layers.fill_constant([2, 4], "float32", 0.0),  # no feed
                                 graphc.data("crowd", [-1, 1], "int32", lod_level=1),
                                 graphc.data("info", [-1, 3]))
    with pytest.raises(ShapeError, match="GtLabels must be an integer LoD"):
        layers.retinanet_target_assign(graphc.data("bp2", [-1, 6, 4]),
                                       graphc.data("cl2", [-1, 6, 2]), a, a,
                                       graphc.data("gt2", [-1, 4], lod_level=1),
                                       graphc.data("gl", [-1, 1], lod_level=1),
                                       graphc.data("crowd2", [-1, 1], "int32", lod_level=1),
                                       graphc.data("info2", [-1, 3]), 2)
    with pytest.raises(ShapeError, match="GTLabel must be an int32"):
        layers.yolov3_loss(graphc.data("x", [-1, 14, 4, 4]), graphc.data("b", [-1, 3, 4]),
                           graphc.data("l", [-1, 3], "int64"), ANCHORS, [1, 2], 2, 0.5, 8)


def test_fluid_spelling():
    for name in ("yolov3_loss", "multi_box_head", "ssd_loss", "rpn_target_assign",
                 "retinanet_target_assign"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
