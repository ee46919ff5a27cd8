"""density_prior_box, bipartite_match and target_assign against loop-by-loop NumPy references
of Paddle 1.8's kernels, and detection_output's composition (the rest: test_layers_detection)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError


def density_ref(fh, fw, ih, iw, dens, sizes, ratios, steps, offset, clip):
    sw, sh = steps if steps[0] and steps[1] else (iw / fw, ih / fh)
    avg = int((sw + sh) * 0.5)
    out = []
    for h in range(fh):
        for w in range(fw):
            cx, cy = (w + offset) * sw, (h + offset) * sh
            for size, d in zip(sizes, dens):
                shift = avg // d
                for r in ratios:
                    bw, bh = size * math.sqrt(r), size / math.sqrt(r)
                    dcx, dcy = cx - avg / 2 + shift / 2, cy - avg / 2 + shift / 2
                    for di in range(d):
                        for dj in range(d):
                            x, y = dcx + dj * shift, dcy + di * shift
                            out.append([max((x - bw / 2) / iw, 0), max((y - bh / 2) / ih, 0),
                                        min((x + bw / 2) / iw, 1), min((y + bh / 2) / ih, 1)])
    boxes = np.array(out).reshape(fh, fw, -1, 4)
    return np.clip(boxes, 0, 1) if clip else boxes


@pytest.mark.parametrize("kw", [
    dict(densities=[4, 2, 1], fixed_sizes=[32.0, 64.0, 128.0], fixed_ratios=[1.0]),
    dict(densities=[3, 1], fixed_sizes=[8.0, 24.0], fixed_ratios=[0.5, 2.0], clip=True,
         steps=[10.0, 7.0], offset=0.3, flatten_to_2d=True, variance=[0.1, 0.2, 0.3, 0.4]),
])
def test_density_prior_box(kw):
    x = graphc.data("x", [-1, 2, 3, 4])
    img = graphc.data("img", [-1, 3, 40, 64])
    boxes, var = layers.density_prior_box(x, img, **kw)
    feed = {"x": np.zeros((1, 2, 3, 4), "float32"), "img": np.zeros((1, 3, 40, 64), "float32")}
    got = graphc.Executor().run(feed=feed, fetch_list=[boxes, var])
    _, ref = run_graph(graphc.lower(graphc.default_main_program()), {}, feed,
                       [boxes.name, var.name])
    expect = density_ref(3, 4, 40, 64, kw["densities"], kw["fixed_sizes"], kw["fixed_ratios"],
                         kw.get("steps", [0.0, 0.0]), kw.get("offset", 0.5),
                         kw.get("clip", False))
    if kw.get("flatten_to_2d"):
        expect = expect.reshape(-1, 4)
    assert boxes.shape == expect.shape and boxes.stop_gradient
    for b, v in (got, ref):
        np.testing.assert_allclose(b, expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(v, np.broadcast_to(kw.get("variance", [0.1, 0.1, 0.2, 0.2]),
                                                      expect.shape), rtol=1e-6)
    assert fluid.layers.density_prior_box is layers.density_prior_box


def match_ref(d, per_prediction, threshold):
    rows, cols = d.shape
    idx, val = np.full(cols, -1), np.zeros(cols)
    pool = list(range(rows))
    while pool:
        best, bj, bi = -1.0, -1, -1
        for j in range(cols):
            if idx[j] != -1:
                continue
            for i in pool:
                if d[i, j] >= 1e-6 and d[i, j] > best:
                    best, bj, bi = d[i, j], j, i
        if bj == -1:
            break
        idx[bj], val[bj] = bi, best
        pool.remove(bi)
    if per_prediction:
        for j in range(cols):
            if idx[j] != -1:
                continue
            best, bi = -1.0, -1
            for i in range(rows):
                if d[i, j] >= 1e-6 and d[i, j] >= threshold and d[i, j] > best:
                    best, bi = d[i, j], i
            if bi != -1:
                idx[j], val[j] = bi, best
    return idx, val


@pytest.mark.parametrize("match_type", [None, "per_prediction"])
def test_bipartite_match_per_lod_instance(match_type):
    rng = np.random.default_rng(10)
    lengths = [[2, 0, 4, 1]]
    dist = rng.uniform(size=(7, 5))
    dist[0, 1] = 0.0  # below the epsilon: never matched
    x = graphc.data("d", [-1, 5], "float64", lod_level=1)
    idx, val = layers.bipartite_match(x, match_type, 0.4)
    assert idx.shape == (-1, 5) and idx.dtype == "int32"
    t = fluid.create_lod_tensor(dist, lengths, fluid.CPUPlace())
    got_i, got_v = graphc.Executor().run(feed={"d": t}, fetch_list=[idx, val])
    starts = np.cumsum([0] + lengths[0])
    for k in range(len(lengths[0])):
        ri, rv = match_ref(dist[starts[k]:starts[k + 1]], match_type == "per_prediction", 0.4)
        np.testing.assert_array_equal(got_i[k], ri)
        np.testing.assert_allclose(got_v[k], rv)


def test_bipartite_match_dense_is_one_instance():
    dist = np.random.default_rng(11).uniform(size=(3, 6))
    idx, val = layers.bipartite_match(graphc.data("d", [3, 6], "float64"))
    got_i, got_v = graphc.Executor().run(feed={"d": dist}, fetch_list=[idx, val])
    ri, rv = match_ref(dist, False, 0.5)
    np.testing.assert_array_equal(got_i, ri[None])
    np.testing.assert_allclose(got_v, rv[None])


@pytest.mark.parametrize("p, with_neg", [(1, False), (4, True)])
def test_target_assign(p, with_neg):
    rng = np.random.default_rng(12)
    lengths = [[3, 0, 2]]
    xv = rng.normal(size=(5, p, 2))
    match = np.array([[2, -1, 0, 1], [-1, -1, -1, -1], [1, 0, -1, -1]], "int32")
    x = graphc.data("x", [-1, p, 2], "float64", lod_level=1)
    mi = graphc.data("m", [-1, 4], "int32")
    feed = {"x": fluid.create_lod_tensor(xv, lengths, fluid.CPUPlace()), "m": match}
    neg = None
    if with_neg:
        neg = graphc.data("neg", [-1, 1], "int32", lod_level=1)
        feed["neg"] = fluid.create_lod_tensor(np.array([[1], [3], [2]], "int32"), [[1, 2, 0]],
                                              fluid.CPUPlace())
    out, wt = layers.target_assign(x, mi, neg, mismatch_value=7)
    assert out.shape == (-1, 4, 2) and wt.dtype == "float32"
    got_o, got_w = graphc.Executor().run(feed=feed, fetch_list=[out, wt])
    starts = [0, 3, 3]
    ref_o, ref_w = np.full((3, 4, 2), 7.0), np.zeros((3, 4, 1))
    for i in range(3):
        for j in range(4):
            if match[i, j] > -1:
                ref_o[i, j] = xv[starts[i] + match[i, j], j % p]
                ref_w[i, j] = 1
    if with_neg:
        for i, col in ((0, 1), (1, 3), (1, 2)):
            ref_o[i, col], ref_w[i, col] = 7.0, 1
    np.testing.assert_allclose(got_o, ref_o)
    np.testing.assert_allclose(got_w, ref_w)


def test_detection_output_is_decode_softmax_and_nms():
    rng = np.random.default_rng(13)
    prior_v = np.concatenate([rng.uniform(0, 0.5, (6, 2)), rng.uniform(0.6, 1, (6, 2))], 1)
    feed = {"loc": rng.normal(0, 0.3, (2, 6, 4)), "conf": rng.normal(size=(2, 6, 3)),
            "prior": prior_v, "pvar": np.full((6, 4), 0.2)}
    loc, conf = graphc.data("loc", [-1, 6, 4], "float64"), graphc.data("conf", [-1, 6, 3],
                                                                        "float64")
    prior, pvar = graphc.data("prior", [6, 4], "float64"), graphc.data("pvar", [6, 4], "float64")
    out = layers.detection_output(loc, conf, prior, pvar, nms_threshold=0.4, keep_top_k=5,
                                  score_threshold=0.2)
    by_hand = layers.multiclass_nms(
        layers.box_coder(prior, pvar, loc, "decode_center_size"),
        layers.transpose(layers.softmax(conf), [0, 2, 1]), 0.2, 400, 5, nms_threshold=0.4)
    got, ref = graphc.Executor().run(feed=feed, fetch_list=[out, by_hand], return_numpy=False)
    assert got.recursive_sequence_lengths() == ref.recursive_sequence_lengths()
    assert sum(got.recursive_sequence_lengths()[0]) > 0
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref))
    with pytest.raises(ProgramError, match="return_index"):
        layers.detection_output(loc, conf, prior, pvar, return_index=True)
