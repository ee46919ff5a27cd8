"""Detection evaluation: fluid.metrics.DetectionMAP / the detection_map op against a NumPy
reference of Paddle's kernel (tests/detection_eval_reference.py) over several batches with
accumulation and a reset, on the jitted Executor and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.testing.lod import as_feed
from tests.detection_eval_reference import DetectionMAPReference

CLASSES = 4


def _box(rng, lo=0.0, hi=1.0):
    x1, y1 = rng.uniform(lo, hi - 0.3, 2)
    w, h = rng.uniform(0.1, 0.3, 2)
    return [x1, y1, x1 + w, y1 + h]


def make_batch(rng, images=3, empty_gt=None, empty_det=None):
    """(det rows, det lengths, gt rows [label, difficult, box], gt lengths): detections near
    the ground truth (some twice, some with another class, some past the image border)
    and random false ones; every score distinct."""
    det, dl, gt, gl = [], [], [], []
    for n in range(images):
        gts = [] if n == empty_gt else [
            [int(rng.integers(1, CLASSES)), int(rng.random() < 0.3), *_box(rng)]
            for _ in range(rng.integers(1, 4))]
        dets = []
        for g in gts:
            for _ in range(rng.integers(0, 3)):
                cls = g[0] if rng.random() < 0.8 else int(rng.integers(1, CLASSES))
                dets.append([cls, 0.0, *(np.asarray(g[2:]) + rng.normal(0, 0.04, 4))])
        for _ in range(rng.integers(0, 3)):
            dets.append([int(rng.integers(1, CLASSES)), 0.0, *_box(rng, -0.1, 1.1)])
        if n == empty_det:
            dets = []
        det += dets
        gt += gts
        dl.append(len(dets))
        gl.append(len(gts))
    det = np.asarray(det, np.float32).reshape(-1, 6)
    det[:, 1] = rng.permutation(len(det)) / max(len(det), 1) + rng.uniform(0, 1e-3)
    return det, dl, np.asarray(gt, np.float32).reshape(-1, 6), gl


def build(difficult=True, **kwargs):
    det = fluid.layers.data("det", shape=[6], dtype="float32", lod_level=1)
    label = fluid.layers.data("gt_label", shape=[1], dtype="int32", lod_level=1)
    box = fluid.layers.data("gt_box", shape=[4], dtype="float32", lod_level=1)
    hard = fluid.layers.data("difficult", shape=[1], dtype="int32", lod_level=1) \
        if difficult else None
    kwargs.setdefault("capacity", 4096)  # small tables: fast steps (the default is tested)
    metric = fluid.metrics.DetectionMAP(det, label, box, hard, class_num=CLASSES, **kwargs)
    return metric


def feed_of(batch, difficult=True):
    det, dl, gt, gl = batch
    place = fluid.CPUPlace()
    feed = {"det": fluid.create_lod_tensor(det, [dl], place),
            "gt_label": fluid.create_lod_tensor(gt[:, :1].astype(np.int32), [gl], place),
            "gt_box": fluid.create_lod_tensor(gt[:, 2:], [gl], place)}
    if difficult:
        feed["difficult"] = fluid.create_lod_tensor(gt[:, 1:2].astype(np.int32), [gl], place)
    return feed


class _Interpreter:
    """Runs programs on the interpreter with a state carried between runs (an Executor's
    ``run(program)`` for DetectionMAP.reset)."""

    def __init__(self, startup):
        self.state, _ = run_graph(graphc.lower(startup))

    def run(self, program, feed=None, fetch_list=()):
        packed = {k: as_feed(program, k, v) for k, v in (feed or {}).items()}
        new, got = run_graph(graphc.lower(program), self.state, packed,
                             [f.name for f in fetch_list])
        self.state.update(new)
        return got


CONFIGS = [
    pytest.param({}, id="integral"),
    pytest.param({"ap_version": "11point"}, id="11point"),
    pytest.param({"evaluate_difficult": False}, id="integral-no-difficult"),
    pytest.param({"evaluate_difficult": False, "ap_version": "11point",
                  "overlap_threshold": 0.3}, id="11point-no-difficult-0.3"),
]


@pytest.mark.parametrize("backend", ["jit", "interpreter"])
@pytest.mark.parametrize("config", CONFIGS)
def test_batches_accumulate_and_reset_as_paddle(config, backend):
    rng = np.random.default_rng(7)
    metric = build(**config)
    cur, accum = metric.get_map_var()
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    if backend == "jit":
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
    else:
        exe = _Interpreter(startup)
    ref = DetectionMAPReference(
        CLASSES, config.get("overlap_threshold", 0.5), config.get("evaluate_difficult", True),
        config.get("ap_version", "integral"))
    batches = [make_batch(rng, 3, empty_gt=1), make_batch(rng, 4, empty_det=2),
               make_batch(rng, 2), make_batch(rng, 3)]
    for i, batch in enumerate(batches):
        if i == 2:
            metric.reset(exe)
        got_cur, got_acc = exe.run(main, feed=feed_of(batch), fetch_list=[cur, accum])
        want_cur = DetectionMAPReference(
            CLASSES, ref.thr, ref.difficult, ref.ap_type).run(*batch)
        want_acc = ref.run(*batch, has_state=i not in (0, 2))
        np.testing.assert_allclose(got_cur, [want_cur], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_acc, [want_acc], rtol=1e-5, atol=1e-6)
        if i in (0, 2):  # first run after the start or a reset: the state was ignored
            np.testing.assert_allclose(got_acc, got_cur, rtol=1e-6)
    assert 0 < want_acc < 1 and want_acc != want_cur


def test_hand_computed_map():
    """Class 1: one gt, hits at 0.9 (tp) and 0.8 (duplicate: fp): AP 1. Class 2: two gts,
    one found: AP 0.5 integral, (6 * 1 + 5 * 0) / 11 11-point. A box past the border is
    clipped before matching."""
    det = np.array([[1, 0.9, 0.1, 0.1, 0.5, 0.5], [1, 0.8, 0.1, 0.1, 0.5, 0.5],
                    [2, 0.7, 0.5, 0.5, 1.4, 1.2]], np.float32)
    gt = np.array([[1, 0, 0.1, 0.1, 0.5, 0.5], [2, 0, 0.5, 0.5, 1.0, 1.0],
                   [2, 0, 0.0, 0.0, 0.1, 0.1]], np.float32)
    for ap, want in (("integral", 0.75), ("11point", (1 + 6 / 11) / 2)):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            metric = build(ap_version=ap, capacity=None)  # the default capacity
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        got = exe.run(main, feed=feed_of((det, [2, 1], gt, [1, 2])),
                      fetch_list=list(metric.get_map_var()))
        np.testing.assert_allclose(np.concatenate(got), [want, want], rtol=1e-6)


def test_difficult_ground_truth_is_not_counted_when_not_evaluated():
    """The only gt is difficult: with evaluate_difficult=False it has no positives, the
    detection on it is ignored, and the mAP over no class is 0."""
    det = np.array([[1, 0.9, 0.1, 0.1, 0.5, 0.5]], np.float32)
    gt = np.array([[1, 1, 0.1, 0.1, 0.5, 0.5]], np.float32)
    for evaluate, want in ((True, 1.0), (False, 0.0)):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            metric = build(evaluate_difficult=evaluate)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        got = exe.run(main, feed=feed_of((det, [1], gt, [1])),
                      fetch_list=list(metric.get_map_var()))
        np.testing.assert_allclose(np.concatenate(got), [want, want])


def test_label_without_difficult_column_and_state_layout():
    rng = np.random.default_rng(3)
    batch = make_batch(rng, 3)
    metric = build(difficult=False)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(graphc.default_startup_program())
    ref = DetectionMAPReference(CLASSES)
    nodiff = (batch[0], batch[1], np.delete(batch[2], 1, axis=1), batch[3])
    got = exe.run(feed=feed_of(batch, difficult=False), fetch_list=list(metric.get_map_var()))
    np.testing.assert_allclose(np.concatenate(got), [ref.run(*nodiff)] * 2, rtol=1e-5)
    op = [o for o in graphc.default_main_program().global_block().ops
          if o.type == "detection_map"][1]
    scope = fluid.global_scope()
    pos = np.asarray(scope.find_var(op.outputs["AccumPosCount"][0]).get_tensor())
    table = np.asarray(scope.find_var(op.outputs["AccumTruePos"][0]).get_tensor())
    fp = np.asarray(scope.find_var(op.outputs["AccumFalsePos"][0]).get_tensor())
    assert pos.shape == (CLASSES, 1) and pos.sum() == len(batch[2])
    real = table[:, 0] >= 0
    assert real.sum() == len(batch[0]) and not real[real.sum():].any()
    # class order (as Paddle's LoD lists), then score descending (the order its AP sorts)
    keys = table[real][:, :2] * [1, -1]
    assert all(tuple(a) <= tuple(b) for a, b in zip(keys, keys[1:]))
    np.testing.assert_array_equal(fp[real, 2], 1 - table[real, 2])
    assert np.asarray(scope.find_var(metric.has_state.name).get_tensor()).tolist() == [1]


def test_full_table_gives_nan():
    from graphc.layers.detection_eval import detection_map
    det = fluid.layers.data("det", shape=[6], dtype="float32", lod_level=1)
    label = fluid.layers.data("label", shape=[5], dtype="float32", lod_level=1)
    helper = graphc.layers.helper.LayerHelper("t")
    from graphc.layers.detection_eval import map_state, map_states
    states = map_states(helper, CLASSES, "float32", capacity=4)
    has = map_state(helper, "has_state", [1], "int32", 1)
    out = detection_map(det, label, CLASSES, has_state=has, input_states=states,
                        out_states=states)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(graphc.default_startup_program())
    rows = np.array([[1, 0.9 - 0.1 * i, 0.1, 0.1, 0.5, 0.5] for i in range(3)], np.float32)
    gt = np.array([[1, 0.1, 0.1, 0.5, 0.5]], np.float32)
    feed = {"det": fluid.create_lod_tensor(rows, [[3]], fluid.CPUPlace()),
            "label": fluid.create_lod_tensor(gt, [[1]], fluid.CPUPlace())}
    (first,) = exe.run(feed=feed, fetch_list=[out])
    assert first[0] == pytest.approx(1.0)  # 3 records of 4
    (second,) = exe.run(feed=feed, fetch_list=[out])
    assert np.isnan(second[0])  # 6 records: the table is full


def test_build_errors():
    det = fluid.layers.data("det", shape=[6], dtype="float32", lod_level=1)
    # not a feed: a feed declared dense would be re-typed on the op's demand (seqtype)
    dense = fluid.layers.fill_constant([3, 6], "float32", 0.0)
    label = fluid.layers.data("label", shape=[4], dtype="float32", lod_level=1)
    from graphc.layers.detection_eval import detection_map
    with pytest.raises(ShapeError, match="Label must be a LoD value"):
        detection_map(det, label, CLASSES)
    with pytest.raises(ShapeError, match="DetectRes must be a floating LoD value"):
        detection_map(dense, det, CLASSES)
    with pytest.raises(ProgramError, match="ap_version"):
        detection_map(det, det, CLASSES, ap_version="voc")
    with pytest.raises(fluid.metrics.MetricError, match="class_num"):
        fluid.metrics.DetectionMAP(det, label, label)
    with pytest.raises(fluid.metrics.MetricError, match="capacity"):
        fluid.metrics.DetectionMAP(det, label, label, class_num=3, capacity=0)
    with pytest.raises(ProgramError, match="capacity"):
        detection_map(det, det, CLASSES, capacity=-1)


def test_multiclass_nms_output_feeds_detection_map():
    """The SSD evaluation pipeline: multiclass_nms's LoD rows go straight into DetectionMAP;
    the mAP is the reference's over the fetched detections."""
    rng = np.random.default_rng(11)
    n, m = 2, 12
    boxes = fluid.layers.data("boxes", shape=[m, 4], dtype="float32")
    scores = fluid.layers.data("scores", shape=[CLASSES, m], dtype="float32")
    label = fluid.layers.data("gt_label", shape=[1], dtype="int32", lod_level=1)
    box = fluid.layers.data("gt_box", shape=[4], dtype="float32", lod_level=1)
    det = fluid.layers.multiclass_nms(boxes, scores, score_threshold=0.05, nms_top_k=8,
                                      keep_top_k=6)
    metric = fluid.metrics.DetectionMAP(det, label, box, class_num=CLASSES, capacity=256)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(graphc.default_startup_program())
    ref = DetectionMAPReference(CLASSES)
    for _ in range(2):
        gt = [[int(rng.integers(1, CLASSES)), 0, *_box(rng)] for _ in range(n * 2)]
        gt = np.asarray(gt, np.float32)
        b = np.concatenate([gt[:, 2:].reshape(n, 2, 4) + rng.normal(0, 0.03, (n, 2, 4)),
                            rng.uniform(0, 0.7, (n, m - 2, 4))], axis=1).astype(np.float32)
        b[..., 2:] = b[..., :2] + np.abs(b[..., 2:] - b[..., :2]) + 0.05
        s = rng.uniform(0, 1, (n, CLASSES, m)).astype(np.float32)
        feed = {"boxes": b, "scores": s, **{k: v for k, v in feed_of(
            (np.zeros((0, 6), np.float32), [0] * n, gt, [2] * n), difficult=False).items()
            if k != "det"}}
        got_det, got_cur, got_acc = exe.run(feed=feed, fetch_list=[det, *metric.get_map_var()],
                                            return_numpy=False)
        rows = np.asarray(got_det)
        lens = got_det.recursive_sequence_lengths()[0]
        assert len(rows) > 0
        want_cur = DetectionMAPReference(CLASSES).run(rows, lens, gt, [2] * n)
        want_acc = ref.run(rows, lens, gt, [2] * n)
        np.testing.assert_allclose(np.asarray(got_cur), [want_cur], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got_acc), [want_acc], rtol=1e-5, atol=1e-6)


def test_detections_and_labels_of_other_batches_are_refused():
    metric = build(difficult=False)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(graphc.default_startup_program())
    det = np.array([[1, 0.9, 0.1, 0.1, 0.5, 0.5]], np.float32)
    gt = np.array([[1, 0, 0.1, 0.1, 0.5, 0.5]] * 2, np.float32)
    feed = feed_of((det, [1, 0], gt, [1, 1, 0]), difficult=False)
    with pytest.raises(graphc.GraphcError, match="DetectRes holds 2 images but Label 3"):
        exe.run(feed=feed, fetch_list=list(metric.get_map_var()))


@pytest.mark.parametrize("backend", ["jit", "interpreter"])
def test_layers_detection_detection_map_over_one_batch(backend):
    """Paddle 1.8's unexported fluid.layers.detection.detection_map (overlap 0.3 default):
    the batch's mAP, no state."""
    rng = np.random.default_rng(5)
    det = fluid.layers.data("det", shape=[6], dtype="float32", lod_level=1)
    label = fluid.layers.data("label", shape=[6], dtype="float32", lod_level=1)
    out = fluid.layers.detection.detection_map(det, label, CLASSES, ap_version="11point")
    batch = make_batch(rng, 4)
    feed = {"det": fluid.create_lod_tensor(batch[0], [batch[1]], fluid.CPUPlace()),
            "label": fluid.create_lod_tensor(batch[2], [batch[3]], fluid.CPUPlace())}
    if backend == "jit":
        (got,) = fluid.Executor(fluid.CPUPlace()).run(feed=feed, fetch_list=[out])
    else:
        (got,) = _Interpreter(graphc.default_startup_program()).run(
            graphc.default_main_program(), feed, [out])
    want = DetectionMAPReference(CLASSES, 0.3, ap_type="11point").run(*batch)
    np.testing.assert_allclose(got, [want], rtol=1e-5, atol=1e-6)
