"""Detection layers (prior_box, box_coder, iou_similarity, yolo_box) against loop-by-loop
NumPy references of Paddle 1.8's kernels, on the jitted Executor and the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest
from detection_reference import multiclass_nms_ref, roi_align_ref, roi_pool_ref

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.testing.lod import lod_grad_check


def run_both(feed, fetch):
    got = graphc.Executor().run(feed=feed, fetch_list=fetch)
    _, ref = run_graph(graphc.lower(graphc.default_main_program()), {}, feed,
                       [v.name for v in fetch])
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    return got


def prior_box_ref(fh, fw, ih, iw, mins, maxs, ars, var, flip, clip, steps, offset, order):
    ratios = [1.0]
    for r in ars:
        if all(abs(r - o) >= 1e-6 for o in ratios):
            ratios.append(r)
            if flip:
                ratios.append(1 / r)
    sw, sh = steps if steps[0] and steps[1] else (iw / fw, ih / fh)
    out = []
    for h in range(fh):
        for w in range(fw):
            cx, cy = (w + offset) * sw, (h + offset) * sh
            cell = []

            def push(bw, bh, cx=cx, cy=cy, cell=cell):
                cell.append([(cx - bw) / iw, (cy - bh) / ih, (cx + bw) / iw, (cy + bh) / ih])
            for s, mn in enumerate(mins):
                if order:
                    push(mn / 2, mn / 2)
                    if maxs:
                        push(math.sqrt(mn * maxs[s]) / 2, math.sqrt(mn * maxs[s]) / 2)
                    for r in ratios:
                        if abs(r - 1) >= 1e-6:
                            push(mn * math.sqrt(r) / 2, mn / math.sqrt(r) / 2)
                else:
                    for r in ratios:
                        push(mn * math.sqrt(r) / 2, mn / math.sqrt(r) / 2)
                    if maxs:
                        push(math.sqrt(mn * maxs[s]) / 2, math.sqrt(mn * maxs[s]) / 2)
            out.append(cell)
    boxes = np.array(out).reshape(fh, fw, -1, 4)
    if clip:
        boxes = np.clip(boxes, 0, 1)
    return boxes, np.broadcast_to(np.array(var), boxes.shape)


@pytest.mark.parametrize("kw", [
    dict(min_sizes=[2.0], max_sizes=[5.0], aspect_ratios=[2.0], flip=True, clip=True),
    dict(min_sizes=[2.0, 4.0], max_sizes=[3.0, 9.0], aspect_ratios=[1.0, 2.0, 0.5],
         flip=True, min_max_aspect_ratios_order=True),
    dict(min_sizes=3.0, aspect_ratios=[3.0], steps=[5.0, 2.0], offset=0.2,
         variance=[0.1, 0.2, 0.3, 0.4]),
    dict(min_sizes=[3.0], steps=[5.0, 0.0]),  # one step unset: both from the image
])
def test_prior_box(kw):
    x = graphc.data("x", [-1, 3, 2, 3])
    img = graphc.data("img", [-1, 3, 8, 12])
    boxes, var = layers.prior_box(x, img, **kw)
    feed = {"x": np.zeros((2, 3, 2, 3), "float32"), "img": np.zeros((2, 3, 8, 12), "float32")}
    got_b, got_v = run_both(feed, [boxes, var])
    mins = kw["min_sizes"] if isinstance(kw["min_sizes"], list) else [kw["min_sizes"]]
    rb, rv = prior_box_ref(2, 3, 8, 12, mins, kw.get("max_sizes", []),
                           kw.get("aspect_ratios", [1.0]),
                           kw.get("variance", [0.1, 0.1, 0.2, 0.2]), kw.get("flip", False),
                           kw.get("clip", False), kw.get("steps", [0.0, 0.0]),
                           kw.get("offset", 0.5), kw.get("min_max_aspect_ratios_order", False))
    assert boxes.shape == rb.shape and boxes.stop_gradient
    np.testing.assert_allclose(got_b, rb, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_v, rv, rtol=1e-6)


def test_prior_box_bad_max_sizes():
    x = graphc.data("x", [-1, 3, 2, 3])
    img = graphc.data("img", [-1, 3, 8, 12])
    with pytest.raises(ShapeError, match="max_size"):
        layers.prior_box(x, img, [4.0], [2.0])


def coder_ref(prior, var, target, code, norm_flag, axis):
    norm = 0.0 if norm_flag else 1.0
    m = prior.shape[0]
    if code == "encode_center_size":
        n = target.shape[0]
        out = np.zeros((n, m, 4))
        for i in range(n):
            for j in range(m):
                pw = prior[j, 2] - prior[j, 0] + norm
                ph = prior[j, 3] - prior[j, 1] + norm
                pcx, pcy = prior[j, 0] + pw / 2, prior[j, 1] + ph / 2
                tcx = (target[i, 0] + target[i, 2]) / 2
                tcy = (target[i, 1] + target[i, 3]) / 2
                tw = target[i, 2] - target[i, 0] + norm
                th = target[i, 3] - target[i, 1] + norm
                out[i, j] = [(tcx - pcx) / pw, (tcy - pcy) / ph, np.log(abs(tw / pw)),
                             np.log(abs(th / ph))]
                if var is not None:
                    out[i, j] /= var[j] if var.ndim == 2 else var
        return out
    out = np.zeros(target.shape)
    for i in range(target.shape[0]):
        for j in range(target.shape[1]):
            p = j if axis == 0 else i
            pw = prior[p, 2] - prior[p, 0] + norm
            ph = prior[p, 3] - prior[p, 1] + norm
            pcx, pcy = prior[p, 0] + pw / 2, prior[p, 1] + ph / 2
            v = np.ones(4) if var is None else (var[p] if var.ndim == 2 else var)
            t = target[i, j]
            cx, cy = v[0] * t[0] * pw + pcx, v[1] * t[1] * ph + pcy
            w, h = np.exp(v[2] * t[2]) * pw, np.exp(v[3] * t[3]) * ph
            out[i, j] = [cx - w / 2, cy - h / 2, cx + w / 2 - norm, cy + h / 2 - norm]
    return out


def boxes(rng, n, scale=1.0):
    lo = rng.uniform(0, 0.5, (n, 2)) * scale
    return np.concatenate([lo, lo + rng.uniform(0.1, 0.5, (n, 2)) * scale], 1)


# axis only matters when decoding: encoding runs with axis 0 only
@pytest.mark.parametrize("code, normalized, axis", [
    ("encode_center_size", True, 0), ("encode_center_size", False, 0),
    ("decode_center_size", True, 0), ("decode_center_size", False, 0),
    ("decode_center_size", True, 1)])
@pytest.mark.parametrize("var_kind", ["none", "list", "tensor"])
def test_box_coder(code, var_kind, normalized, axis):
    rng = np.random.default_rng(0)
    scale = 1.0 if normalized else 20.0
    prior_v = boxes(rng, 3, scale).astype("float32")
    var_v = rng.uniform(0.1, 0.3, (3, 4)).astype("float32")
    if code == "encode_center_size":
        target_v = boxes(rng, 5, scale).astype("float32")
        tshape = [-1, 4]
    else:
        target_v = rng.normal(0, 0.5, (5, 3, 4) if axis == 0 else (3, 5, 4)).astype("float32")
        tshape = [-1, 3, 4] if axis == 0 else [3, -1, 4]
    prior = graphc.data("prior", [3, 4])
    target = graphc.data("target", tshape)
    feed = {"prior": prior_v, "target": target_v}
    if var_kind == "tensor":
        var, ref_var = graphc.data("var", [3, 4]), var_v
        feed["var"] = var_v
    elif var_kind == "list":
        var, ref_var = [0.1, 0.2, 0.3, 0.4], np.array([0.1, 0.2, 0.3, 0.4])
    else:
        var, ref_var = None, None
    out = layers.box_coder(prior, var, target, code, normalized, axis=axis)
    (got,) = run_both(feed, [out])
    ref = coder_ref(prior_v.astype("float64"), ref_var, target_v.astype("float64"), code,
                    normalized, axis)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_box_coder_decode_needs_3d_target():
    prior = graphc.data("prior", [3, 4])
    target = graphc.data("target", [-1, 4])
    with pytest.raises(ShapeError, match="3-D"):
        layers.box_coder(prior, None, target, "decode_center_size")


def iou_ref(x, y, normalized):
    norm = 0.0 if normalized else 1.0
    out = np.zeros((len(x), len(y)))
    for i, a in enumerate(x):
        for j, b in enumerate(y):
            iw = max(min(a[2], b[2]) - max(a[0], b[0]) + norm, 0)
            ih = max(min(a[3], b[3]) - max(a[1], b[1]) + norm, 0)
            inter = iw * ih
            area_a = (a[2] - a[0] + norm) * (a[3] - a[1] + norm)
            area_b = (b[2] - b[0] + norm) * (b[3] - b[1] + norm)
            out[i, j] = inter / (area_a + area_b - inter)
    return out


@pytest.mark.parametrize("normalized", [True, False])
def test_iou_similarity(normalized):
    rng = np.random.default_rng(1)
    scale = 1.0 if normalized else 10.0
    xv, yv = boxes(rng, 4, scale).astype("float32"), boxes(rng, 3, scale).astype("float32")
    xv[3] = [5, 5, 6, 6]  # disjoint from every y: IoU 0
    x = graphc.data("x", [-1, 4])
    y = graphc.data("y", [3, 4])
    out = layers.iou_similarity(x, y, box_normalized=normalized)
    assert out.shape == (-1, 3)
    (got,) = run_both({"x": xv, "y": yv}, [out])
    np.testing.assert_allclose(got, iou_ref(xv, yv, normalized), rtol=1e-5, atol=1e-6)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def yolo_ref(x, img, anchors, classes, thresh, ds, clip):
    n, _, gh, gw = x.shape
    an = len(anchors) // 2
    bx = np.zeros((n, an * gh * gw, 4))
    sc = np.zeros((n, an * gh * gw, classes))
    for i in range(n):
        ih, iw = img[i]
        for j in range(an):
            for k in range(gh):
                for m in range(gw):
                    ch = x[i, j * (5 + classes):(j + 1) * (5 + classes), k, m]
                    conf = sigmoid(ch[4])
                    if conf < thresh:
                        continue
                    cx = (m + sigmoid(ch[0])) * iw / gw
                    cy = (k + sigmoid(ch[1])) * ih / gh
                    w = np.exp(ch[2]) * anchors[2 * j] * iw / (ds * gw)
                    h = np.exp(ch[3]) * anchors[2 * j + 1] * ih / (ds * gh)
                    b = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
                    if clip:
                        b = [max(b[0], 0), max(b[1], 0), min(b[2], iw - 1), min(b[3], ih - 1)]
                    idx = j * gh * gw + k * gw + m
                    bx[i, idx] = b
                    sc[i, idx] = conf * sigmoid(ch[5:])
    return bx, sc


@pytest.mark.parametrize("clip", [True, False])
def test_yolo_box(clip):
    rng = np.random.default_rng(2)
    anchors, classes = [10, 13, 16, 30], 3
    xv = rng.normal(0, 1.5, (2, 2 * 8, 3, 4)).astype("float32")
    img_v = np.array([[96, 128], [60, 50]], "int32")
    x = graphc.data("x", [-1, 16, 3, 4])
    img = graphc.data("img", [-1, 2], "int32")
    b, s = layers.yolo_box(x, img, anchors, classes, 0.5, 32, clip_bbox=clip)
    assert (b.shape, s.shape) == ((-1, 24, 4), (-1, 24, 3))
    got_b, got_s = run_both({"x": xv, "img": img_v}, [b, s])
    rb, rs = yolo_ref(xv.astype("float64"), img_v, anchors, classes, 0.5, 32, clip)
    assert (rs == 0).any() and (rs > 0).any()  # both sides of the threshold are checked
    np.testing.assert_allclose(got_b, rb, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_s, rs, rtol=1e-4, atol=1e-6)


def test_yolo_box_bad_channels():
    x = graphc.data("x", [-1, 15, 3, 4])
    img = graphc.data("img", [-1, 2], "int32")
    with pytest.raises(ShapeError, match="channels"):
        layers.yolo_box(x, img, [10, 13, 16, 30], 3, 0.5, 32)


def anchor_ref(fh, fw, sizes, ratios, var, stride, offset):
    out = np.zeros((fh, fw, len(sizes) * len(ratios), 4))
    sw, sh = stride
    for h in range(fh):
        for w in range(fw):
            cx, cy = w * sw + offset * (sw - 1), h * sh + offset * (sh - 1)
            k = 0
            for r in ratios:
                for s in sizes:
                    base_w = math.floor(math.sqrt(sw * sh / r) + 0.5)
                    base_h = math.floor(base_w * r + 0.5)
                    aw, ah = s / sw * base_w, s / sh * base_h
                    out[h, w, k] = [cx - 0.5 * (aw - 1), cy - 0.5 * (ah - 1),
                                    cx + 0.5 * (aw - 1), cy + 0.5 * (ah - 1)]
                    k += 1
    return out, np.broadcast_to(np.array(var), out.shape)


def test_anchor_generator():
    x = graphc.data("x", [-1, 3, 2, 3])
    a, v = layers.anchor_generator(x, [32.0, 64.0], [0.5, 1.0, 2.0], [0.1, 0.1, 0.2, 0.3],
                                   [16.0, 8.0], 0.5)
    assert a.shape == (2, 3, 6, 4) and a.stop_gradient
    got_a, got_v = run_both({"x": np.zeros((1, 3, 2, 3), "float32")}, [a, v])
    ra, rv = anchor_ref(2, 3, [32.0, 64.0], [0.5, 1.0, 2.0], [0.1, 0.1, 0.2, 0.3],
                        [16.0, 8.0], 0.5)
    np.testing.assert_allclose(got_a, ra, rtol=1e-5)
    np.testing.assert_allclose(got_v, rv, rtol=1e-6)


def test_polygon_box_transform():
    xv = np.random.default_rng(3).normal(size=(2, 4, 3, 5)).astype("float32")
    x = graphc.data("x", [-1, 4, 3, 5])
    out = layers.polygon_box_transform(x)
    (got,) = run_both({"x": xv}, [out])
    ref = np.empty_like(xv)
    for c in range(4):
        for h in range(3):
            for w in range(5):
                ref[:, c, h, w] = (4 * w if c % 2 == 0 else 4 * h) - xv[:, c, h, w]
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    with pytest.raises(ShapeError, match="even"):
        layers.polygon_box_transform(graphc.data("odd", [-1, 3, 3, 5]))


def roi_data(rng):
    xv = rng.normal(size=(2, 3, 6, 7))
    rois = np.array([[0.0, 0.0, 13.0, 11.0], [4.0, 2.0, 9.0, 7.5], [1.0, 3.0, 2.0, 3.5],
                     [-3.0, -2.0, 16.0, 14.0], [6.5, 5.0, 12.0, 11.5]])
    return xv, rois, [[3, 2]]


@pytest.mark.parametrize("ratio", [-1, 2])
def test_roi_align_with_lod_rois(ratio):
    xv, rois, lengths = roi_data(np.random.default_rng(4))
    x = graphc.data("x", [-1, 3, 6, 7], "float64")
    r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
    out = layers.roi_align(x, r, 2, 3, 0.5, ratio)
    assert out.shape == (-1, 3, 2, 3) and out.lod_level == 1
    t = fluid.create_lod_tensor(rois, lengths, fluid.CPUPlace())
    (got,) = graphc.Executor().run(feed={"x": xv, "rois": t}, fetch_list=[out],
                                   return_numpy=False)
    ref = roi_align_ref(xv, rois, [0, 0, 0, 1, 1], 2, 3, 0.5, ratio)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-12)


def test_roi_align_with_rois_lod_offsets_and_its_gradient():
    rng = np.random.default_rng(5)
    xv, rois, _ = roi_data(rng)
    x = graphc.data("x", [2, 3, 6, 7], "float64")
    x.stop_gradient = False
    r = graphc.data("rois", [5, 4], "float64")
    offsets = graphc.data("offsets", [3], "int64")
    out = layers.roi_align(x, r, 2, 2, 0.5, -1, rois_lod=offsets)
    feed = {"x": xv, "rois": rois, "offsets": np.array([0, 1, 5])}
    (got,) = run_both(feed, [out])
    ref = roi_align_ref(xv, rois, [0, 1, 1, 1, 1], 2, 2, 0.5, -1)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    loss = layers.reduce_sum(layers.square(out))
    lod_grad_check(graphc.default_main_program(), loss, feed, ["x"], rng)


@pytest.mark.parametrize("lod", [True, False])
def test_roi_pool(lod):
    rng = np.random.default_rng(7)
    xv, rois, lengths = roi_data(rng)
    x = graphc.data("x", [2, 3, 6, 7], "float64")
    x.stop_gradient = False
    if lod:
        r = graphc.data("rois", [-1, 4], "float64", lod_level=1)
        out = layers.roi_pool(x, r, 2, 3, 0.5)
        feed = {"x": xv, "rois": fluid.create_lod_tensor(rois, lengths, fluid.CPUPlace())}
        batch = [0, 0, 0, 1, 1]
    else:
        r = graphc.data("rois", [5, 4], "float64")
        out = layers.roi_pool(x, r, 2, 3, 0.5, rois_lod=graphc.data("offsets", [3], "int64"))
        feed = {"x": xv, "rois": rois, "offsets": np.array([0, 4, 5])}
        batch = [0, 0, 0, 0, 1]
    argmax = graphc.default_main_program().global_block().ops[-1].output("Argmax")[0]
    got, got_arg = graphc.Executor().run(feed=feed, fetch_list=[out, argmax],
                                         return_numpy=False)
    ref, ref_arg = roi_pool_ref(xv, rois, batch, 2, 3, 0.5)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(got_arg), ref_arg)
    if not lod:
        lod_grad_check(graphc.default_main_program(), layers.reduce_sum(layers.square(out)),
                       feed, ["x"], rng)


def test_roi_align_needs_lod_or_offsets():
    x = graphc.data("x", [-1, 3, 6, 7])
    with pytest.raises(ShapeError, match="RoisLod"):
        # not a feed: a feed declared dense is re-typed on the op's demand (seqtype)
        layers.roi_align(x, layers.fill_constant([2, 4], "float32", 0.0))


def nms_boxes(rng, n, m, scale):
    lo = rng.uniform(0, 3, (n, m, 2)) * scale
    return np.concatenate([lo, lo + rng.uniform(0.5, 2.0, (n, m, 2)) * scale], -1)


@pytest.mark.parametrize("kw", [
    dict(score_threshold=0.3, nms_top_k=-1, keep_top_k=-1),
    dict(score_threshold=0.2, nms_top_k=4, keep_top_k=5, nms_threshold=0.2),
    dict(score_threshold=0.1, nms_top_k=-1, keep_top_k=3, nms_eta=0.9, nms_threshold=0.7,
         background_label=-1),
    dict(score_threshold=0.05, nms_top_k=6, keep_top_k=10, normalized=False,
         background_label=2),
    dict(score_threshold=0.99, nms_top_k=6, keep_top_k=10),  # nothing survives
])
def test_multiclass_nms(kw):
    rng = np.random.default_rng(6)
    scale = 1.0 if kw.get("normalized", True) else 10.0
    bv = nms_boxes(rng, 3, 8, scale).astype("float32")
    sv = rng.uniform(size=(3, 4, 8)).astype("float32")
    b = graphc.data("b", [-1, 8, 4])
    s = graphc.data("s", [-1, 4, 8])
    out = layers.multiclass_nms(b, s, **kw)
    assert out.shape == (-1, 6) and out.lod_level == 1
    (got,) = graphc.Executor().run(feed={"b": bv, "s": sv}, fetch_list=[out],
                                   return_numpy=False)
    args = {"nms_threshold": 0.3, "normalized": True, "nms_eta": 1.0, "background_label": 0,
            **kw}
    rows, counts = multiclass_nms_ref(bv.astype("float64"), sv.astype("float64"),
                                      args["score_threshold"], args["nms_top_k"],
                                      args["keep_top_k"], args["nms_threshold"],
                                      args["normalized"], args["nms_eta"],
                                      args["background_label"])
    assert got.recursive_sequence_lengths() == [counts]
    np.testing.assert_allclose(np.asarray(got).reshape(-1, 6), rows, rtol=1e-5, atol=1e-6)


def test_multiclass_nms_refuses_the_lod_form():
    with pytest.raises(ShapeError, match="dense form"):
        layers.multiclass_nms(graphc.data("b", [-1, 4]), graphc.data("s", [-1, 3]), 0.1, 5, 5)


def clip_ref(box, inf):
    h, w = math.floor(inf[0] / inf[2] + 0.5), math.floor(inf[1] / inf[2] + 0.5)
    return np.minimum(np.maximum(box, 0), [w - 1, h - 1, w - 1, h - 1])


CLIP_BOXES = np.random.default_rng(8).uniform(-20, 120, (5, 4))
CLIP_INFO = np.array([[60.0, 81.0, 1.0], [100.0, 90.0, 1.6]])


def test_box_clip_lod():
    bv, info, ref = CLIP_BOXES, CLIP_INFO, clip_ref
    x = graphc.data("x", [-1, 4], "float64", lod_level=1)
    im = graphc.data("im", [-1, 3], "float64")
    out = layers.box_clip(x, im)
    assert out.lod_level == 1
    t = fluid.create_lod_tensor(bv, [[2, 3]], fluid.CPUPlace())
    (got,) = graphc.Executor().run(feed={"x": t, "im": info}, fetch_list=[out],
                                   return_numpy=False)
    expect = np.concatenate([ref(bv[:2], info[0]), ref(bv[2:], info[1])])
    np.testing.assert_allclose(np.asarray(got), expect)


def test_box_clip_dense_batch_major():
    bv, info, ref = CLIP_BOXES, CLIP_INFO, clip_ref
    im = graphc.data("im", [-1, 3], "float64")
    dense = layers.box_clip(graphc.data("d", [-1, 5, 4], "float64"), im)
    (got,) = run_both({"d": np.stack([bv, bv]), "im": info}, [dense])
    np.testing.assert_allclose(got, np.stack([ref(bv, info[0]), ref(bv, info[1])]))


def test_box_decoder_and_assign():
    rng = np.random.default_rng(9)
    n, classes = 4, 3
    prior_v = boxes(rng, n, 50.0)
    var_v = np.array([0.1, 0.1, 0.2, 0.2])
    target_v = rng.normal(0, 8, (n, classes * 4))  # large deltas: box_clip binds
    score_v = rng.uniform(size=(n, classes))
    score_v[1, 1:] = -2.0  # no foreground score above -1: the prior is assigned
    names = ("prior", "var", "target", "score")
    ins = [graphc.data(nm, list(v.shape), "float64")
           for nm, v in zip(names, (prior_v, var_v, target_v, score_v))]
    dec, assign = layers.box_decoder_and_assign(*ins, box_clip=1.5)
    got_d, got_a = run_both(dict(zip(names, (prior_v, var_v, target_v, score_v))),
                            [dec, assign])
    ref_d = np.zeros((n, classes * 4))
    ref_a = np.zeros((n, 4))
    for i in range(n):
        pw = prior_v[i, 2] - prior_v[i, 0] + 1
        ph = prior_v[i, 3] - prior_v[i, 1] + 1
        pcx, pcy = prior_v[i, 0] + pw / 2, prior_v[i, 1] + ph / 2
        for j in range(classes):
            d = target_v[i, 4 * j:4 * j + 4]
            cx, cy = var_v[0] * d[0] * pw + pcx, var_v[1] * d[1] * ph + pcy
            w = np.exp(min(var_v[2] * d[2], 1.5)) * pw
            h = np.exp(min(var_v[3] * d[3], 1.5)) * ph
            ref_d[i, 4 * j:4 * j + 4] = [cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1]
        best, best_j = -1.0, -1
        for j in range(1, classes):
            if score_v[i, j] > best:
                best, best_j = score_v[i, j], j
        ref_a[i] = ref_d[i, 4 * best_j:4 * best_j + 4] if best_j > 0 else prior_v[i]
    np.testing.assert_allclose(got_d, ref_d, rtol=1e-10)
    np.testing.assert_allclose(got_a, ref_a, rtol=1e-10)


def test_fluid_spelling():
    for name in ("box_clip", "box_decoder_and_assign", "roi_pool", "multiclass_nms",
                 "roi_align", "prior_box", "box_coder", "iou_similarity", "yolo_box",
                 "anchor_generator", "polygon_box_transform"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
        assert name in fluid.layers.__all__
