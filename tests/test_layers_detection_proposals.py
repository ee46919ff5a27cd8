"""Issue 24, detection proposals: multiclass_nms2, locality_aware_nms, retinanet output,
generate_proposals, generate_proposal_labels, distribute/collect_fpn_proposals."""

from __future__ import annotations

import numpy as np
import pytest
from detection_proposals_reference import (
    collect_ref,
    distribute_ref,
    generate_proposals_ref,
    locality_aware_nms_ref,
    proposal_labels_ref,
    retinanet_ref,
)
from detection_reference import multiclass_nms_ref

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.testing.lod import as_feed


def run_both(feed, fetch):
    """(rows, lengths) of each LoD fetch from the jitted Executor, checked against the
    interpreter's."""
    got = graphc.Executor().run(feed=feed, fetch_list=fetch, return_numpy=False)
    main = graphc.default_main_program()
    packed = {k: as_feed(main, k, v) for k, v in feed.items()}
    _, ref = run_graph(graphc.lower(main), {}, packed, [v.name for v in fetch])
    out = []
    for a, b in zip(got, ref):
        lengths = a.recursive_sequence_lengths()[0]
        rows = np.asarray(a)
        np.testing.assert_array_equal(np.asarray(b.lengths[0]), lengths)
        np.testing.assert_allclose(np.asarray(b.data)[:len(rows)], rows, rtol=1e-6, atol=1e-6)
        out.append((rows, list(lengths)))
    return out


def nms_boxes(rng, n, m, scale):
    lo = rng.uniform(0, 3, (n, m, 2)) * scale
    return np.concatenate([lo, lo + rng.uniform(0.5, 2.0, (n, m, 2)) * scale], -1)


NMS_KW = [
    dict(score_threshold=0.3, nms_top_k=-1, keep_top_k=-1),
    dict(score_threshold=0.2, nms_top_k=4, keep_top_k=5, nms_threshold=0.2),
    dict(score_threshold=0.1, nms_top_k=-1, keep_top_k=3, nms_eta=0.9, nms_threshold=0.7,
         background_label=-1),
    dict(score_threshold=0.05, nms_top_k=6, keep_top_k=10, normalized=False,
         background_label=2),
    dict(score_threshold=0.99, nms_top_k=6, keep_top_k=10),  # nothing survives
]


def nms_data(kw, seed=6):
    rng = np.random.default_rng(seed)
    scale = 1.0 if kw.get("normalized", True) else 10.0
    return (nms_boxes(rng, 3, 8, scale).astype("float64"),
            rng.uniform(size=(3, 4, 8)).astype("float64"))


def nms_args(kw, background=0):
    a = {"nms_threshold": 0.3, "normalized": True, "nms_eta": 1.0,
         "background_label": background, **kw}
    return (a["score_threshold"], a["nms_top_k"], a["keep_top_k"], a["nms_threshold"],
            a["normalized"], a["nms_eta"], a["background_label"])


@pytest.mark.parametrize("kw", NMS_KW)
def test_multiclass_nms2(kw):
    bv, sv = nms_data(kw)
    out, index = layers.multiclass_nms2(graphc.data("b", [-1, 8, 4], "float64"),
                                        graphc.data("s", [-1, 4, 8], "float64"),
                                        return_index=True, **kw)
    assert out.shape == (-1, 6) and out.lod_level == 1 and index.lod_level == 1
    assert index.dtype == "int32"
    (rows, counts), (idx, idx_counts) = run_both({"b": bv, "s": sv}, [out, index])
    ref, ref_counts = multiclass_nms_ref(bv, sv, *nms_args(kw))
    assert counts == ref_counts == idx_counts
    np.testing.assert_allclose(rows, ref, rtol=1e-10)
    image = np.repeat(np.arange(3), counts)
    # each row's box is bboxes.reshape(-1, 4)[index]
    np.testing.assert_array_equal(bv.reshape(-1, 4)[idx[:, 0]], rows[:, 2:])
    assert np.all(idx[:, 0] // 8 == image)


def test_multiclass_nms2_without_index_is_multiclass_nms():
    out = layers.multiclass_nms2(graphc.data("b", [-1, 8, 4]), graphc.data("s", [-1, 4, 8]),
                                 0.1, 5, 5)
    assert isinstance(out, graphc.Variable) and out.lod_level == 1


@pytest.mark.parametrize("kw", NMS_KW)
def test_locality_aware_nms(kw):
    bv, sv = nms_data(kw, seed=7)
    out = layers.locality_aware_nms(graphc.data("b", [-1, 8, 4], "float64"),
                                    graphc.data("s", [-1, 4, 8], "float64"), **kw)
    assert out.shape == (-1, 6) and out.lod_level == 1
    ((rows, counts),) = run_both({"b": bv, "s": sv}, [out])
    ref, ref_counts = locality_aware_nms_ref(bv, sv, *nms_args(kw, background=-1))
    assert counts == ref_counts
    np.testing.assert_allclose(rows, ref, rtol=1e-10)


def test_locality_aware_nms_merges_overlapping_neighbours():
    # two near-identical boxes merge into one, weighted by their scores (score 0.9 + 0.3)
    bv = np.array([[[0, 0, 10, 10], [0, 0, 10, 12], [20, 20, 30, 30]]], "float64")
    sv = np.array([[[0.9, 0.3, 0.5]]], "float64")
    out = layers.locality_aware_nms(graphc.data("b", [-1, 3, 4], "float64"),
                                    graphc.data("s", [-1, 1, 3], "float64"), 0.1, -1, -1,
                                    nms_threshold=0.5, normalized=False)
    ((rows, counts),) = run_both({"b": bv, "s": sv}, [out])
    assert counts == [2]
    np.testing.assert_allclose(rows, [[0, 1.2, 0, 0, 10, 10.5], [0, 0.5, 20, 20, 30, 30]])


def test_locality_aware_nms_refuses_polygons():
    with pytest.raises(ShapeError, match="4-value boxes"):
        layers.locality_aware_nms(graphc.data("b", [-1, 8, 8]), graphc.data("s", [-1, 2, 8]),
                                  0.1, 5, 5)


def retina_data(rng, n=2, sizes=(6, 3), ncls=3):
    deltas = [rng.normal(0, 0.3, (n, m, 4)) for m in sizes]
    scores = [rng.uniform(size=(n, m, ncls)) for m in sizes]
    anchors = []
    for m in sizes:
        lo = rng.uniform(0, 30, (m, 2))
        anchors.append(np.concatenate([lo, lo + rng.uniform(4, 12, (m, 2))], 1))
    info = np.array([[40, 36, 1.0], [50, 60, 2.0]])[:n]
    return deltas, scores, anchors, info


@pytest.mark.parametrize("kw", [
    dict(),
    dict(score_threshold=0.5, nms_top_k=4, keep_top_k=5, nms_threshold=0.2),
    dict(score_threshold=0.3, nms_top_k=-1, keep_top_k=7, nms_threshold=0.6, nms_eta=0.8),
])
def test_retinanet_detection_output(kw):
    deltas, scores, anchors, info = retina_data(np.random.default_rng(3))
    d = [graphc.data(f"d{i}", [-1, v.shape[1], 4], "float64") for i, v in enumerate(deltas)]
    s = [graphc.data(f"s{i}", [-1, v.shape[1], 3], "float64") for i, v in enumerate(scores)]
    a = [graphc.data(f"a{i}", list(v.shape), "float64") for i, v in enumerate(anchors)]
    im = graphc.data("im", [-1, 3], "float64")
    out = layers.retinanet_detection_output(d, s, a, im, **kw)
    assert out.shape == (-1, 6) and out.lod_level == 1
    feed = {"im": info}
    for i in range(2):
        feed.update({f"d{i}": deltas[i], f"s{i}": scores[i], f"a{i}": anchors[i]})
    ((rows, counts),) = run_both(feed, [out])
    args = {"score_threshold": 0.05, "nms_top_k": 1000, "keep_top_k": 100,
            "nms_threshold": 0.3, "nms_eta": 1.0, **kw}
    ref, ref_counts = retinanet_ref(deltas, scores, anchors, info, args["score_threshold"],
                                    args["nms_top_k"], args["keep_top_k"],
                                    args["nms_threshold"], args["nms_eta"])
    assert counts == ref_counts
    np.testing.assert_allclose(rows, ref, rtol=1e-10, atol=1e-10)


def test_retinanet_detection_output_checks_levels():
    d = graphc.data("d", [-1, 6, 4])
    with pytest.raises(ShapeError, match="as many boxes"):
        layers.retinanet_detection_output([d], [graphc.data("s", [-1, 5, 3])],
                                          [graphc.data("a", [6, 4])], graphc.data("im", [-1, 3]))


def proposal_data(rng, n=2, a=3, h=4, w=5):
    scores = rng.uniform(size=(n, a, h, w))
    deltas = rng.normal(0, 0.4, (n, 4 * a, h, w))
    ctr = np.stack(np.meshgrid(np.arange(w) * 8.0 + 4, np.arange(h) * 8.0 + 4), -1)
    sizes = np.array([8.0, 16.0, 24.0])[:a]
    anchors = np.concatenate([ctr[:, :, None, :] - sizes[None, None, :, None] / 2,
                              ctr[:, :, None, :] + sizes[None, None, :, None] / 2], -1)
    var = np.broadcast_to(np.array([0.1, 0.1, 0.2, 0.2]), anchors.shape).copy()
    info = np.array([[32, 40, 1.0], [30, 36, 2.0]])[:n]
    return scores, deltas, info, anchors, var


@pytest.mark.parametrize("kw", [
    dict(pre_nms_top_n=6000, post_nms_top_n=1000, nms_thresh=0.5, min_size=0.1),
    dict(pre_nms_top_n=20, post_nms_top_n=8, nms_thresh=0.3, min_size=4.0, eta=0.9),
    dict(pre_nms_top_n=30, post_nms_top_n=5, nms_thresh=0.0, min_size=2.0),  # no NMS
    dict(pre_nms_top_n=10, post_nms_top_n=10, nms_thresh=0.5, min_size=1e4),  # none left
])
def test_generate_proposals(kw):
    sv, dv, info, av, vv = proposal_data(np.random.default_rng(11))
    names = ["scores", "deltas", "im", "anchors", "var"]
    vals = [sv, dv, info, av, vv]
    vars_ = [graphc.data(k, [-1, *v.shape[1:]] if k in ("scores", "deltas", "im")
                         else list(v.shape), "float64") for k, v in zip(names, vals)]
    rois, probs = layers.generate_proposals(*vars_, **kw)
    assert rois.shape == (-1, 4) and probs.shape == (-1, 1) and rois.lod_level == 1
    (r, counts), (p, pcounts) = run_both(dict(zip(names, vals)), [rois, probs])
    args = {"eta": 1.0, **kw}
    ref_r, ref_p, ref_counts = generate_proposals_ref(
        sv, dv, info, av, vv, args["pre_nms_top_n"], args["post_nms_top_n"],
        args["nms_thresh"], args["min_size"], args["eta"])
    assert counts == pcounts == ref_counts
    np.testing.assert_allclose(r, ref_r, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(p, ref_p, rtol=1e-10)


def test_generate_proposals_checks_deltas():
    with pytest.raises(ShapeError, match="4 channels per anchor"):
        layers.generate_proposals(graphc.data("s", [-1, 3, 4, 5]),
                                  graphc.data("d", [-1, 8, 4, 5]), graphc.data("im", [-1, 3]),
                                  graphc.data("a", [4, 5, 3, 4]), graphc.data("v", [4, 5, 3, 4]))


def fpn_rois(rng, lengths):
    lo = rng.uniform(0, 100, (sum(lengths), 2))
    size = np.exp(rng.uniform(np.log(4), np.log(400), (sum(lengths), 2)))
    rois = np.concatenate([lo, lo + size], 1)
    rois[1] = [5, 5, 3, 9]  # an invalid box: area 0, the lowest level
    return rois


@pytest.mark.parametrize("lengths", [[5, 0, 7], [9]])
def test_distribute_fpn_proposals(lengths):
    rois = fpn_rois(np.random.default_rng(2), lengths)
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    multi, restore = layers.distribute_fpn_proposals(r, 2, 5, 4, 224)
    assert len(multi) == 4 and all(m.lod_level == 1 for m in multi)
    assert restore.dtype == "int32"
    got = run_both({"rois": fluid.create_lod_tensor(rois, [lengths], fluid.CPUPlace())},
                   [*multi, restore])
    ref, ref_restore = distribute_ref(rois, lengths, 2, 5, 4, 224)
    for (rows, counts), (want, want_counts) in zip(got, ref):
        assert counts == want_counts
        np.testing.assert_allclose(rows.reshape(-1, 4), want)
    np.testing.assert_array_equal(got[-1][0], ref_restore)
    assert got[-1][1] == lengths
    # the restore index puts the concatenated levels back in the input order
    cat = np.concatenate([rows.reshape(-1, 4) for rows, _ in got[:-1]])
    np.testing.assert_allclose(cat[got[-1][0][:, 0]], rois)


def test_distribute_fpn_proposals_needs_lod():
    # dense rows no feed reaches (a feed declared dense would be re-typed as a LoD value:
    # ir/lod_demand.py)
    with pytest.raises(ShapeError, match="LoD of level 1"):
        layers.distribute_fpn_proposals(layers.fill_constant([3, 4], "float32", 1.0), 2, 5,
                                         4, 224)


@pytest.mark.parametrize("post", [4, 10, 100])
def test_collect_fpn_proposals(post):
    rng = np.random.default_rng(5)
    lengths = [[3, 2], [0, 4], [2, 2]]
    rois = [fpn_rois(rng, ln) if sum(ln) > 1 else rng.uniform(size=(sum(ln), 4))
            for ln in lengths]
    scores = [rng.uniform(size=(sum(ln), 1)) for ln in lengths]
    rv = [graphc.data(f"r{i}", [-1, 4], "float64", lod_level=1) for i in range(3)]
    sv = [graphc.data(f"s{i}", [-1, 1], "float64", lod_level=1) for i in range(3)]
    # levels 2..4 of the three given: all of them
    out = layers.collect_fpn_proposals(rv, sv, 2, 4, post)
    assert out.shape == (-1, 4) and out.lod_level == 1
    feed = {}
    for i, ln in enumerate(lengths):
        feed[f"r{i}"] = fluid.create_lod_tensor(rois[i], [ln], fluid.CPUPlace())
        feed[f"s{i}"] = fluid.create_lod_tensor(scores[i], [ln], fluid.CPUPlace())
    ((rows, counts),) = run_both(feed, [out])
    ref, ref_counts = collect_ref(rois, scores, lengths, post)
    assert counts == ref_counts
    np.testing.assert_allclose(rows, ref)


def test_collect_fpn_proposals_takes_the_first_levels():
    rv = [graphc.data(f"r{i}", [-1, 4], lod_level=1) for i in range(3)]
    sv = [graphc.data(f"s{i}", [-1, 1], lod_level=1) for i in range(3)]
    layers.collect_fpn_proposals(rv, sv, 2, 3, 10)
    op = graphc.default_main_program().global_block().ops[-1]
    assert len(op.inputs["MultiLevelRois"]) == 2


def test_fluid_spelling():
    for name in ("multiclass_nms2", "locality_aware_nms", "retinanet_detection_output",
                 "generate_proposal_labels",
                 "generate_proposals", "distribute_fpn_proposals", "collect_fpn_proposals"):
        assert getattr(fluid.layers, name) is getattr(layers, name)


def label_data(rng):
    glen, rlen = [2, 3], [6, 5]
    gts = []
    for _ in range(sum(glen)):
        lo = rng.uniform(0, 40, 2)
        gts.append(np.concatenate([lo, lo + rng.uniform(8, 20, 2)]))
    gts = np.array(gts)
    info = np.array([[64, 64, 1.0], [80, 80, 2.0]])
    rois, g0 = [], 0
    for n in range(2):  # rois near the image's gt boxes (in the scaled image)
        for _ in range(rlen[n]):
            base = gts[g0 + rng.integers(glen[n])]
            rois.append((base + rng.normal(0, 4, 4)) * info[n][2])
        g0 += glen[n]
    classes = rng.integers(1, 4, (sum(glen), 1)).astype("int32")
    crowd = np.zeros((sum(glen), 1), "int32")
    crowd[3] = 1
    return np.array(rois), rlen, classes, crowd, gts, glen, info


def proposal_label_layers(**kw):
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    cls = graphc.data("cls", [-1, 1], "int32", lod_level=1)
    crowd = graphc.data("crowd", [-1, 1], "int32", lod_level=1)
    gt = graphc.data("gt", [-1, 4], "float64", lod_level=1)
    im = graphc.data("im", [-1, 3], "float64")
    return layers.generate_proposal_labels(r, cls, crowd, gt, im, **kw)


def proposal_label_feed(rois, rlen, classes, crowd, gts, glen, info):
    lod = lambda v, ln: fluid.create_lod_tensor(v, [ln], fluid.CPUPlace())  # noqa: E731
    return {"rois": lod(rois, rlen), "cls": lod(classes, glen), "crowd": lod(crowd, glen),
            "gt": lod(gts, glen), "im": info}


@pytest.mark.parametrize("kw", [
    dict(batch_size_per_im=8, fg_fraction=0.5, fg_thresh=0.5, bg_thresh_hi=0.5),
    dict(batch_size_per_im=4, fg_fraction=0.25, fg_thresh=0.3, bg_thresh_lo=0.05,
         is_cls_agnostic=True),
    dict(batch_size_per_im=64, fg_thresh=0.6, bg_thresh_hi=0.6, is_cascade_rcnn=True),
])
def test_generate_proposal_labels(kw):
    data = label_data(np.random.default_rng(8))
    outs = proposal_label_layers(class_nums=4, use_random=False, **kw)
    assert [v.shape for v in outs] == [(-1, 4), (-1, 1), (-1, 16), (-1, 16), (-1, 16)]
    assert outs[1].dtype == "int32" and all(v.lod_level == 1 for v in outs)
    got = run_both(proposal_label_feed(*data), list(outs))
    args = {"fg_fraction": 0.25, "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0,
            "is_cls_agnostic": False, "is_cascade_rcnn": False, **kw}
    *want, counts = proposal_labels_ref(
        *data, args["batch_size_per_im"], args["fg_fraction"], args["fg_thresh"],
        args["bg_thresh_hi"], args["bg_thresh_lo"], [0.1, 0.1, 0.2, 0.2], 4,
        args["is_cls_agnostic"], args["is_cascade_rcnn"])
    assert all(c == counts for _, c in got)
    assert sum(counts) > 0
    for (rows, _), ref in zip(got, [*want, want[-1]]):
        np.testing.assert_allclose(rows, ref, rtol=1e-9, atol=1e-9)


def test_generate_proposal_labels_random_sampling():
    data = label_data(np.random.default_rng(8))
    outs = proposal_label_layers(class_nums=4, batch_size_per_im=4, fg_fraction=0.5)
    rois, labels, _, _, _ = graphc.Executor().run(
        feed=proposal_label_feed(*data), fetch_list=list(outs), return_numpy=False)
    counts = rois.recursive_sequence_lengths()[0]
    assert all(c <= 4 for c in counts)
    lab = np.asarray(labels)[:, 0]
    start = 0
    for c in counts:  # at most 2 foreground rows per image, each before the background ones
        fg = lab[start:start + c] > 0
        assert fg.sum() <= 2 and not np.any(np.diff(fg.astype(int)) > 0)
        start += c
    # each sampled roi is one of the image's gt boxes or rois (scaled back)
    rows = np.asarray(rois)
    cand = np.concatenate([data[4][:2], data[0][:6], data[4][2:] * 2, data[0][6:]])
    assert all(np.min(np.abs(cand - r).max(1)) < 1e-9 for r in rows)


def test_generate_proposal_labels_needs_class_nums():
    with pytest.raises(graphc.ProgramError, match="class_nums"):
        proposal_label_layers()


def test_float32_outputs_keep_their_declared_dtypes():
    rng = np.random.default_rng(1)
    f32 = lambda v: np.asarray(v, "float32")  # noqa: E731
    bv, sv = nms_data(NMS_KW[1])
    out2, idx = layers.multiclass_nms2(graphc.data("b", [-1, 8, 4]), graphc.data("s", [-1, 4, 8]),
                                       0.2, 4, 5, return_index=True)
    la = layers.locality_aware_nms(graphc.data("b2", [-1, 8, 4]),
                                   graphc.data("s2", [-1, 4, 8]), 0.2, 4, 5)
    sv_, dv, info, av, vv = proposal_data(rng)
    rois, probs = layers.generate_proposals(
        graphc.data("ps", [-1, 3, 4, 5]), graphc.data("pd", [-1, 12, 4, 5]),
        graphc.data("im", [-1, 3]), graphc.data("a", [4, 5, 3, 4]),
        graphc.data("v", [4, 5, 3, 4]), 30, 10)
    multi, restore = layers.distribute_fpn_proposals(rois, 2, 3, 2, 8)
    fpn = layers.collect_fpn_proposals([rois, rois], [probs, probs], 2, 3, 12)
    feed = {"b": f32(bv), "s": f32(sv), "b2": f32(bv), "s2": f32(sv), "ps": f32(sv_),
            "pd": f32(dv), "im": f32(info), "a": f32(av), "v": f32(vv)}
    fetch = [out2, idx, la, rois, probs, *multi, restore, fpn]
    got = graphc.Executor().run(feed=feed, fetch_list=fetch, return_numpy=False)
    for var, value in zip(fetch, got):
        assert np.asarray(value).dtype == np.dtype(var.dtype), var.name
    # distribute_fpn_proposals keeps every roi once
    counts = got[3].recursive_sequence_lengths()[0]
    assert sum(sum(v.recursive_sequence_lengths()[0]) for v in got[5:7]) == sum(counts)
    assert sorted(np.asarray(got[7])[:, 0]) == list(range(sum(counts)))
