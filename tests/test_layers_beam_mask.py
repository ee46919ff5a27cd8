"""gather_tree (beam paths backtraced through the parent indices) and generate_mask_labels
against NumPy references of Paddle's algorithms, on the jitted step and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.runtime.lod import LoDError
from graphc.testing.lod import as_feed


def gather_tree_reference(ids, parents):
    """Paddle's gather_tree_op: per (batch, beam), start at the last step and follow parents."""
    out = np.empty_like(ids)
    steps, batch, beams = ids.shape
    for b in range(batch):
        for k in range(beams):
            if steps == 0:
                continue
            out[-1, b, k] = ids[-1, b, k]
            parent = parents[-1, b, k]
            for t in range(steps - 2, -1, -1):
                out[t, b, k] = ids[t, b, parent]
                parent = parents[t, b, parent]
    return out


def _run_both(feed, fetch):
    (got,) = graphc.Executor().run(feed=feed, fetch_list=[fetch])
    _, (ref,) = run_graph(graphc.lower(graphc.default_main_program()), {}, feed, [fetch.name])
    return np.asarray(got), np.asarray(ref)


@pytest.mark.parametrize("dtype, steps, batch, beams", [
    ("int64", 5, 2, 3), ("int32", 1, 3, 2), ("int64", 4, 1, 1), ("int32", 6, 2, 4)])
def test_gather_tree_matches_numpy(dtype, steps, batch, beams):
    rng = np.random.default_rng(steps * 10 + beams)
    ids = rng.integers(0, 50, (steps, batch, beams)).astype(dtype)
    parents = rng.integers(0, beams, (steps, batch, beams)).astype(dtype)
    x = graphc.data("ids", [steps, -1, beams], dtype)
    p = graphc.data("parents", [steps, -1, beams], dtype)
    out = layers.gather_tree(x, p)
    assert (out.shape, out.dtype) == ((steps, -1, beams), dtype)
    got, ref = _run_both({"ids": ids, "parents": parents}, out)
    want = gather_tree_reference(ids, parents)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)
    assert got.dtype == np.dtype(dtype)


def test_gather_tree_paddle_doc_example():
    ids = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], "int64")
    parents = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], "int64")
    x = fluid.layers.data("ids", [3, 2, 2], dtype="int64", append_batch_size=False)
    p = fluid.layers.data("parents", [3, 2, 2], dtype="int64",
                          append_batch_size=False)
    out = fluid.layers.gather_tree(x, p)
    got, ref = _run_both({"ids": ids, "parents": parents}, out)
    want = [[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)


def test_gather_tree_has_no_gradient_and_checks_its_inputs():
    x = graphc.data("ids", [3, -1, 2], "int64")
    out = layers.gather_tree(x, graphc.data("parents", [3, -1, 2], "int64"))
    assert out.stop_gradient
    from graphc.ir.opdef import NO_GRAD, get_op_def
    assert NO_GRAD in get_op_def("gather_tree").traits
    with pytest.raises(ShapeError, match="Parents .* must have the shape of Ids"):
        layers.gather_tree(x, graphc.data("bad", [3, -1, 4], "int64"))
    with pytest.raises(ShapeError, match="Ids must be int32/int64"):
        layers.gather_tree(graphc.data("f", [3, -1, 2]), graphc.data("q", [3, -1, 2], "int64"))


def test_gather_tree_fluid_spelling():
    assert fluid.layers.gather_tree is layers.gather_tree
    assert "gather_tree" in fluid.layers.__all__


# -- LoD level 3 (image -> object -> polygon -> points) -----------------------------------------

def _polygons(rng, images):
    """Samples nested 3 deep: per image, per object, per polygon, points [x, y]."""
    return [[[rng.standard_normal((int(rng.integers(3, 6)), 2)).astype("float32")
              for _ in range(int(rng.integers(1, 3)))]
             for _ in range(int(rng.integers(0, 3)))] for _ in range(images)]


def _lengths(samples):
    objs = [len(img) for img in samples]
    polys = [len(obj) for img in samples for obj in img]
    points = [len(poly) for img in samples for obj in img for poly in obj]
    return [objs, polys, points]


def _level3_program():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        segms = fluid.layers.data("segms", [2], dtype="float32", lod_level=3)
        h = layers.scale(segms, scale=2.0, bias=1.0)
        total = layers.reduce_sum(h)
    return main, startup, segms, h, total


def test_level3_feeds_and_fetches_through_the_data_feeder():
    rng = np.random.default_rng(3)
    samples = _polygons(rng, 4)
    main, _, segms, h, total = _level3_program()
    assert segms.lod_level == 3 and h.lod_level == 3 and total.lod_level == 0
    feed = fluid.DataFeeder([segms], fluid.CPUPlace()).feed([(s,) for s in samples])
    assert feed["segms"].recursive_sequence_lengths() == _lengths(samples)
    points = np.concatenate([p for img in samples for obj in img for p in obj])
    got, tot = graphc.Executor().run(main, feed=feed, fetch_list=[h, total],
                                     return_numpy=False)
    assert got.recursive_sequence_lengths() == _lengths(samples)
    np.testing.assert_allclose(np.asarray(got), points * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tot).reshape(()), (points * 2 + 1).sum(), rtol=1e-5)


def test_level3_create_lod_tensor_data_parallel_and_stacked_iterations():
    rng = np.random.default_rng(4)
    batches = [_polygons(rng, 4) for _ in range(2)]
    tensors = [fluid.create_lod_tensor(
        np.concatenate([p for img in b for obj in img for p in obj]), _lengths(b),
        fluid.CPUPlace()) for b in batches]
    assert tensors[0].recursive_sequence_lengths() == _lengths(batches[0])
    main, _, _, h, _ = _level3_program()
    exe = graphc.Executor()
    single = [exe.run(main, feed={"segms": t}, fetch_list=[h], return_numpy=False)[0]
              for t in tensors]
    cp = graphc.CompiledProgram(main).with_data_parallel(places=graphc.cpu_places(2))
    (split,) = exe.run(cp, feed={"segms": tensors[0]}, fetch_list=[h], return_numpy=False)
    assert split.recursive_sequence_lengths() == single[0].recursive_sequence_lengths()
    np.testing.assert_allclose(np.asarray(split), np.asarray(single[0]), rtol=1e-6)
    cp = graphc.CompiledProgram(main)
    cp.exec_strategy.num_iteration_per_run = 2
    (stacked,) = exe.run(cp, feed=[{"segms": t} for t in tensors], fetch_list=[h],
                         return_numpy=False)
    for one, many in zip(single, stacked):
        assert many.recursive_sequence_lengths() == one.recursive_sequence_lengths()
        np.testing.assert_allclose(np.asarray(many), np.asarray(one), rtol=1e-6)
    with pytest.raises(LoDError, match="at most 3 lists"):
        fluid.create_lod_tensor(np.zeros((3, 2), "float32"), [[1], [1], [1], [3]], None)
    with pytest.raises(LoDError, match="the last level's lengths sum to 2"):
        fluid.create_lod_tensor(np.zeros((3, 2), "float32"), [[1], [1], [2]], None)


def test_an_op_reading_the_lod_refuses_level_3():
    segms = graphc.data("segms", [-1, 2], lod_level=3)
    with pytest.raises(ShapeError, match="level-3 LoD value .* takes at most level 2"):
        layers.sequence_pool(segms, "sum")
    assert layers.scale(segms).lod_level == 3  # row-wise ops see the tokens: any level


# -- generate_mask_labels against a step-by-step reference of Paddle's kernel -------------------

def _to_int(value):  # C's static_cast<int>: toward zero
    return int(np.trunc(value))


def poly2mask_reference(xy, h, w):
    """Paddle's Poly2Mask step by step: the edge walk, the y-boundary points, the sorted
    run lengths (zero runs merged) and their decode."""
    k = len(xy)
    x = [_to_int(5.0 * float(xy[j][0]) + .5) for j in range(k)] + [0]
    y = [_to_int(5.0 * float(xy[j][1]) + .5) for j in range(k)] + [0]
    x[k], y[k] = x[0], y[0]
    u, v = [], []
    for j in range(k):
        xs, xe, ys, ye = x[j], x[j + 1], y[j], y[j + 1]
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe, ys, ye = xe, xs, ye, ys
        if dx >= dy:
            s = (ye - ys) / dx if dx else 0.0
            for d in range(dx + 1):
                t = dx - d if flip else d
                u.append(t + xs)
                v.append(_to_int(ys + s * t + .5))
        else:
            s = (xe - xs) / dy
            for d in range(dy + 1):
                t = dy - d if flip else d
                v.append(t + ys)
                u.append(_to_int(xs + s * t + .5))
    a = []
    for j in range(1, len(u)):
        if u[j] != u[j - 1]:
            xd = float(u[j] if u[j] < u[j - 1] else u[j] - 1)
            xd = (xd + .5) / 5.0 - .5
            if np.floor(xd) != xd or xd < 0 or xd > w - 1:
                continue
            yd = float(v[j] if v[j] < v[j - 1] else v[j - 1])
            yd = min(max((yd + .5) / 5.0 - .5, 0), h)
            a.append(int(xd) * h + int(np.ceil(yd)))
    a = sorted(a) + [h * w]
    runs, prev = [], 0
    for p in a:
        runs.append(p - prev)
        prev = p
    b, j = [runs[0]], 1
    while j < len(runs):
        if runs[j] > 0:
            b.append(runs[j])
            j += 1
        else:
            j += 1
            if j < len(runs):
                b[-1] += runs[j]
                j += 1
    flat, val = [], 0
    for n in b:
        flat += [val] * n
        val = 1 - val
    return np.array(flat[:h * w], np.uint8).reshape(w, h).T


def mask_labels_reference(im_info, classes, crowd, segms, rois, labels, num_classes, m):
    """Per image (lists of numpy values) Paddle's SampleMaskForOneImage."""
    out_rois, out_has, out_masks, counts = [], [], [], []
    for info, cls, cr, polys, r, lab in zip(im_info, classes, crowd, segms, rois, labels):
        if len(r) == 0:
            counts.append(0)
            continue
        gts = [polys[i] for i in range(len(cls)) if cls[i] > 0 and cr[i] == 0]
        scale = np.float32(info[2])
        fg = [i for i in range(len(lab)) if lab[i] > 0]
        rows = []
        if fg:
            boxes = []
            for g in gts:
                pts = np.concatenate(g)
                boxes.append([pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(),
                              pts[:, 1].max()])
            for i in fg:
                box = r[i].astype(np.float32) / scale
                best, best_iou = 0, np.float32(np.finfo(np.float32).tiny)
                for gi, gb in enumerate(boxes):
                    iw = min(box[2], gb[2]) - max(box[0], gb[0]) + 1
                    ih = min(box[3], gb[3]) - max(box[1], gb[1]) + 1
                    inter = max(iw, 0) * max(ih, 0)
                    union = ((box[2] - box[0] + 1) * (box[3] - box[1] + 1)
                             + (gb[2] - gb[0] + 1) * (gb[3] - gb[1] + 1) - inter)
                    iou = inter / union if inter > 0 else 0
                    if iou > best_iou:
                        best, best_iou = gi, iou
                bw = max(box[2] - box[0], np.float32(1))
                bh = max(box[3] - box[1], np.float32(1))
                mask = np.zeros((m, m), np.uint8)
                for poly in gts[best]:
                    p = [((px - box[0]) * np.float32(m) / bw, (py - box[1]) * np.float32(m) / bh)
                         for px, py in poly.astype(np.float32)]
                    mask = np.maximum(mask, poly2mask_reference(p, m, m))
                target = np.full(num_classes * m * m, -1, np.int32)
                target[lab[i] * m * m:(lab[i] + 1) * m * m] = mask.reshape(-1)
                rows.append((box * scale, i, target))
        else:
            bg = [i for i in range(len(lab)) if lab[i] == 0]
            rows.append((r[0].astype(np.float32) / scale * scale, bg[0],
                         np.full(num_classes * m * m, -1, np.int32)))
        counts.append(len(rows))
        for box, i, target in rows:
            out_rois.append(box)
            out_has.append([i])
            out_masks.append(target)
    return np.array(out_rois, np.float32), np.array(out_has), np.array(out_masks), counts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poly_to_mask_matches_the_step_by_step_reference(seed):
    from graphc.ops.mask_labels.raster import poly_to_mask
    rng = np.random.default_rng(seed)
    for _ in range(30):
        k = int(rng.integers(1, 7))
        xy = rng.uniform(-3, 17, (k, 2)).astype(np.float32)
        if rng.random() < 0.3:
            xy = np.round(xy)  # vertices on pixel centres and repeated points
            xy[-1] = xy[0]
        np.testing.assert_array_equal(poly_to_mask(xy, 14, 14), poly2mask_reference(xy, 14, 14))


def _mask_batch(rng):
    """Two images with rois, one without; gts of 1-2 polygons around random boxes."""
    im_info = np.array([[64, 64, 2.0], [64, 64, 1.0], [64, 64, 1.0]], np.float32)
    classes, crowd, segms, rois, labels = [], [], [], [], []
    for img, (n_gt, n_roi) in enumerate([(3, 5), (2, 4), (1, 0)]):
        cls = rng.integers(0, 4, n_gt).astype(np.int32)
        cls[0] = 2
        cr = (rng.random(n_gt) < 0.2).astype(np.int32)
        cr[0] = 0
        polys = []
        for _ in range(n_gt):
            cx, cy = rng.uniform(8, 40, 2)
            polys.append([(np.array([cx, cy], np.float32)
                           + rng.uniform(-8, 8, (int(rng.integers(3, 7)), 2))).astype(np.float32)
                          for _ in range(int(rng.integers(1, 3)))])
        xy = rng.uniform(0, 40, (n_roi, 2))
        r = np.concatenate([xy, xy + rng.uniform(4, 20, (n_roi, 2))], 1).astype(np.float32)
        r *= im_info[img, 2]
        lab = rng.integers(0, 4, n_roi).astype(np.int32)
        if img == 1:
            lab[:] = [-1, 0, 0, -1]  # no foreground: the first roi, indexed by bg roi 1
        classes.append(cls)
        crowd.append(cr)
        segms.append(polys)
        rois.append(r)
        labels.append(lab)
    return im_info, classes, crowd, segms, rois, labels


def _lod(arrays, dtype, cols):
    return fluid.create_lod_tensor(np.concatenate(arrays).astype(dtype).reshape(-1, cols),
                                   [[len(a) for a in arrays]], fluid.CPUPlace())


def test_generate_mask_labels_matches_paddles_kernel():
    rng = np.random.default_rng(5)
    num_classes, m = 4, 7
    im_info, classes, crowd, segms, rois, labels = _mask_batch(rng)
    info_v = fluid.layers.data("im_info", [3], dtype="float32")
    cls_v = fluid.layers.data("gt_classes", [1], dtype="int32", lod_level=1)
    crowd_v = fluid.layers.data("is_crowd", [1], dtype="int32", lod_level=1)
    segm_v = fluid.layers.data("gt_segms", [2], dtype="float32", lod_level=3)
    rois_v = fluid.layers.data("rois", [4], dtype="float32", lod_level=1)
    lab_v = fluid.layers.data("labels_int32", [1], dtype="int32", lod_level=1)
    outs = fluid.layers.generate_mask_labels(info_v, cls_v, crowd_v, segm_v, rois_v, lab_v,
                                             num_classes, m)
    assert [o.lod_level for o in outs] == [1, 1, 1]
    assert outs[2].shape == (-1, num_classes * m * m) and outs[1].dtype == "int32"
    feeder = fluid.DataFeeder([segm_v], fluid.CPUPlace())
    feed = {"im_info": im_info, "gt_classes": _lod(classes, "int32", 1),
            "is_crowd": _lod(crowd, "int32", 1), "rois": _lod(rois, "float32", 4),
            "labels_int32": _lod(labels, "int32", 1),
            "gt_segms": feeder.feed([(s,) for s in segms])["gt_segms"]}
    want = mask_labels_reference(im_info, classes, crowd, segms, rois, labels, num_classes, m)
    got = graphc.Executor().run(feed=feed, fetch_list=list(outs), return_numpy=False)
    for g, w in zip(got, want[:3]):
        assert g.recursive_sequence_lengths() == [want[3]]
        np.testing.assert_allclose(np.asarray(g), w.reshape(np.asarray(g).shape), rtol=1e-6)
    assert (np.asarray(got[2]) >= 0).sum() > 0  # some fg masks were drawn
    assert np.asarray(got[1]).reshape(-1)[want[3][0]] == 1  # image 1: its first bg roi
    main = graphc.default_main_program()
    packed = {k: as_feed(main, k, v) for k, v in feed.items()}
    _, refs = run_graph(graphc.lower(main), {}, packed, [o.name for o in outs])
    for r, w in zip(refs, want[:3]):
        r = r.numpy()
        assert r.lengths[0].tolist() == want[3]
        np.testing.assert_allclose(r.data[:len(w)], w.reshape(len(w), -1), rtol=1e-6)


def test_generate_mask_labels_refuses_bad_inputs():
    info = graphc.data("im_info", [-1, 3])
    ints = [graphc.data(n, [-1, 1], "int32", lod_level=1) for n in ("c", "k", "l")]
    rois = graphc.data("rois", [-1, 4], lod_level=1)
    with pytest.raises(ShapeError, match="GtSegms must be a level-3 LoD value"):
        layers.generate_mask_labels(info, ints[0], ints[1], graphc.data("s", [-1, 2],
                                    lod_level=2), rois, ints[2], 3, 7)
    with pytest.raises(graphc.ProgramError, match="resolution must be a positive int"):
        layers.generate_mask_labels(info, ints[0], ints[1], graphc.data("s3", [-1, 2],
                                    lod_level=3), rois, ints[2], 3, 0)
    assert fluid.layers.generate_mask_labels is layers.generate_mask_labels
