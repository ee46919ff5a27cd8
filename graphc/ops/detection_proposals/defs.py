"""The detection_proposals ops' slots, attributes and shape rules (one register call each).

None differentiates (Paddle 1.8 registers no gradient); each output's bound is in its doc.
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, RANDOM, register
from ...ir.types import FLOAT_DTYPES, TensorType
from ..detection.defs import _multiclass_nms

_NMS_ATTRS = {"background_label": ("int", 0), "score_threshold": "float", "nms_top_k": "int",
              "nms_threshold": ("float", 0.3), "nms_eta": ("float", 1.0), "keep_top_k": "int",
              "normalized": ("bool", True)}


def _float(c, slot, x, rank=None):
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x.dtype}")
    if rank is not None:
        c.check(x.rank == rank, f"{slot} must be {rank}-D, got {list(x.shape)}")
    return x


def _lod_rows(cols, dtype):
    return TensorType((-1, cols), dtype, False, 1)


def _multiclass_nms2(c):
    out = _multiclass_nms(c)["Out"]
    return {"Out": out, "Index": _lod_rows(1, "int32")}


register("multiclass_nms2", "BBoxes Scores", "Out Index", _NMS_ATTRS,
         infer=_multiclass_nms2, traits=(NO_GRAD,), lod_inputs=("BBoxes",), lod="aware",
         doc="multiclass_nms, and Index: each row's box as image * M + box (both LoD values "
             "of at most keep_top_k rows per image, C * M when keep_top_k is -1)")


def _locality_aware_nms(c):
    boxes = _float(c, "BBoxes", c.x("BBoxes"), 3)
    c.check(boxes.shape[2] in (4, -1),
            "only 4-value boxes [xmin, ymin, xmax, ymax] are supported (not Paddle's "
            f"polygon boxes of 8 to 32 values), got BBoxes {list(boxes.shape)}")
    return _multiclass_nms(c)


register("locality_aware_nms", "BBoxes Scores", "Out",
         {**_NMS_ATTRS, "background_label": ("int", -1)},
         infer=_locality_aware_nms, traits=(NO_GRAD,),
         doc="per class: merge each box into the last unmerged one it overlaps (score-"
             "weighted, scores added), then greedy NMS; at most keep_top_k (else C * M) LoD "
             "rows [label, score, x1, y1, x2, y2] per image")


def _retinanet(c):
    boxes, scores, anchors = c.xs("BBoxes"), c.xs("Scores"), c.xs("Anchors")
    info = _float(c, "ImInfo", c.x("ImInfo"), 2)
    c.check(len(boxes) == len(scores) == len(anchors) > 0,
            f"BBoxes, Scores and Anchors need one value per level, got {len(boxes)}, "
            f"{len(scores)} and {len(anchors)}")
    c.check(info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {list(info.shape)}")
    classes = scores[0].shape[2] if scores[0].rank == 3 else -1
    for lvl, (b, s, a) in enumerate(zip(boxes, scores, anchors)):
        _float(c, f"BBoxes[{lvl}]", b, 3)
        _float(c, f"Scores[{lvl}]", s, 3)
        _float(c, f"Anchors[{lvl}]", a, 2)
        c.check(b.shape[2] in (4, -1) and a.shape[1] in (4, -1),
                f"BBoxes[{lvl}] {list(b.shape)} and Anchors[{lvl}] {list(a.shape)} must "
                "hold 4 values per box")
        ms = {d for d in (b.shape[1], s.shape[1], a.shape[0]) if d >= 0}
        c.check(len(ms) <= 1, f"level {lvl}: BBoxes {list(b.shape)}, Scores {list(s.shape)} "
                f"and Anchors {list(a.shape)} must have as many boxes")
        c.check(s.shape[2] < 0 or classes < 0 or s.shape[2] == classes,
                f"Scores[{lvl}] {list(s.shape)} must have {classes} classes like Scores[0]")
    c.check(c["keep_top_k"] > 0, f"keep_top_k must be positive, got {c['keep_top_k']}")
    return {"Out": _lod_rows(6, boxes[0].dtype)}


register("retinanet_detection_output", "BBoxes* Scores* Anchors* ImInfo", "Out",
         {"score_threshold": ("float", 0.05), "nms_top_k": ("int", 1000),
          "nms_threshold": ("float", 0.3), "nms_eta": ("float", 1.0),
          "keep_top_k": ("int", 100)},
         infer=_retinanet, traits=(NO_GRAD,),
         doc="per level the nms_top_k best (anchor, class) scores over score_threshold (0 on "
             "the last level) decoded against their anchors; per-class NMS; the keep_top_k "
             "best rows [label + 1, score, box] per image, a LoD value")


def _generate_proposals(c):
    scores = _float(c, "Scores", c.x("Scores"), 4)
    deltas = _float(c, "BboxDeltas", c.x("BboxDeltas"), 4)
    info = _float(c, "ImInfo", c.x("ImInfo"), 2)
    anchors = _float(c, "Anchors", c.x("Anchors"), 4)
    var = _float(c, "Variances", c.x("Variances"), 4)
    a, h, w = scores.shape[1:]
    c.check(deltas.shape[1] < 0 or a < 0 or deltas.shape[1] == 4 * a,
            f"BboxDeltas {list(deltas.shape)} needs 4 channels per anchor of Scores "
            f"{list(scores.shape)}")
    want = (h, w, a, 4)
    for slot, t in (("Anchors", anchors), ("Variances", var)):
        c.check(all(x < 0 or y < 0 or x == y for x, y in zip(t.shape, want)),
                f"{slot} must be [H, W, A, 4] = {list(want)}, got {list(t.shape)}")
    c.check(info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {list(info.shape)}")
    return {"RpnRois": _lod_rows(4, scores.dtype), "RpnRoiProbs": _lod_rows(1, scores.dtype)}


register("generate_proposals", "Scores BboxDeltas ImInfo Anchors Variances",
         "RpnRois RpnRoiProbs",
         {"pre_nms_topN": ("int", 6000), "post_nms_topN": ("int", 1000),
          "nms_thresh": ("float", 0.5), "min_size": ("float", 0.1), "eta": ("float", 1.0)},
         infer=_generate_proposals, traits=(NO_GRAD,),
         doc="RPN proposals per image: the pre_nms_topN best anchors decoded, clipped, small "
             "ones dropped, NMS, the post_nms_topN best; LoD values (bound per image: "
             "min(pre_nms_topN, post_nms_topN, A * H * W))")


def _distribute_fpn_proposals(c):
    rois = _float(c, "FpnRois", c.x("FpnRois"), 2)
    c.check(rois.lod_level == 1, "FpnRois needs a LoD of level 1 (the image of each roi), "
            f"got {rois}")
    c.check(rois.shape[1] in (4, -1), f"FpnRois must be [R, 4], got {list(rois.shape)}")
    lo, hi = c["min_level"], c["max_level"]
    c.check(0 <= lo <= hi, f"need 0 <= min_level <= max_level, got {lo} and {hi}")
    c.check(c["refer_scale"] > 0, f"refer_scale must be positive, got {c['refer_scale']}")
    return {"MultiFpnRois": [_lod_rows(4, rois.dtype) for _ in range(hi - lo + 1)],
            "RestoreIndex": _lod_rows(1, "int32")}


register("distribute_fpn_proposals", "FpnRois", "MultiFpnRois* RestoreIndex",
         {"min_level": "int", "max_level": "int", "refer_level": "int", "refer_scale": "int"},
         infer=_distribute_fpn_proposals, traits=(NO_GRAD,), lod_inputs=("FpnRois",),
         lod="aware",
         doc="route each roi to level floor(log2(sqrt(area) / refer_scale) + refer_level) "
             "clipped to [min_level, max_level]; one LoD value per level (bound: all rois) "
             "and RestoreIndex, each roi's row in their concatenation (FpnRois's LoD)")


def _collect_fpn_proposals(c):
    rois, scores = c.xs("MultiLevelRois"), c.xs("MultiLevelScores")
    c.check(len(rois) == len(scores) > 0, f"MultiLevelRois ({len(rois)}) and "
            f"MultiLevelScores ({len(scores)}) need one value per level")
    for lvl, (r, s) in enumerate(zip(rois, scores)):
        _float(c, f"MultiLevelRois[{lvl}]", r, 2)
        _float(c, f"MultiLevelScores[{lvl}]", s, 2)
        c.check(r.lod_level == 1 and s.lod_level == 1,
                f"level {lvl}: rois and scores need a LoD of level 1, got {r} and {s}")
        c.check(r.shape[1] in (4, -1) and s.shape[1] in (1, -1),
                f"level {lvl}: rois must be [R, 4] and scores [R, 1], got {r} and {s}")
    c.check(c["post_nms_topN"] > 0, f"post_nms_topN must be positive, got "
            f"{c['post_nms_topN']}")
    return {"FpnRois": _lod_rows(4, rois[0].dtype)}


register("collect_fpn_proposals", "MultiLevelRois* MultiLevelScores*", "FpnRois",
         {"post_nms_topN": "int"}, infer=_collect_fpn_proposals, traits=(NO_GRAD,),
         lod_inputs=("MultiLevelRois", "MultiLevelScores"), lod="aware",
         doc="the post_nms_topN best-scored rois of all levels and images (bound), grouped "
             "by image as a LoD value")


def _generate_proposal_labels(c):
    rois = _float(c, "RpnRois", c.x("RpnRois"), 2)
    boxes = _float(c, "GtBoxes", c.x("GtBoxes"), 2)
    info = _float(c, "ImInfo", c.x("ImInfo"), 2)
    for slot in ("RpnRois", "GtClasses", "IsCrowd", "GtBoxes"):
        c.check(c.x(slot).lod_level == 1, f"{slot} needs a LoD of level 1 (the image of each "
                f"row), got {c.x(slot)}")
    for slot in ("GtClasses", "IsCrowd"):
        c.check(c.x(slot).dtype == "int32", f"{slot} must be int32, got {c.x(slot).dtype}")
    c.check(rois.shape[1] in (4, -1) and boxes.shape[1] in (4, -1),
            f"RpnRois {list(rois.shape)} and GtBoxes {list(boxes.shape)} must be [R, 4]")
    c.check(info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {list(info.shape)}")
    c.check(c["class_nums"] > 0, f"class_nums must be positive, got {c['class_nums']}")
    c.check(c["batch_size_per_im"] > 0 or c["is_cascade_rcnn"],
            f"batch_size_per_im must be positive, got {c['batch_size_per_im']}")
    c.check(len(c["bbox_reg_weights"]) == 4,
            f"bbox_reg_weights needs 4 values, got {c['bbox_reg_weights']}")
    wide = _lod_rows(4 * c["class_nums"], rois.dtype)
    return {"Rois": _lod_rows(4, rois.dtype), "LabelsInt32": _lod_rows(1, "int32"),
            "BboxTargets": wide, "BboxInsideWeights": wide, "BboxOutsideWeights": wide}


register("generate_proposal_labels", "RpnRois GtClasses IsCrowd GtBoxes ImInfo",
         "Rois LabelsInt32 BboxTargets BboxInsideWeights BboxOutsideWeights",
         {"batch_size_per_im": ("int", 256), "fg_fraction": ("float", 0.25),
          "fg_thresh": ("float", 0.25), "bg_thresh_hi": ("float", 0.5),
          "bg_thresh_lo": ("float", 0.0), "bbox_reg_weights": ("floats", [0.1, 0.1, 0.2, 0.2]),
          "class_nums": "int", "use_random": ("bool", True),
          "is_cls_agnostic": ("bool", False), "is_cascade_rcnn": ("bool", False)},
         infer=_generate_proposal_labels, traits=(NO_GRAD, RANDOM),
         lod_inputs=("RpnRois", "GtClasses", "IsCrowd", "GtBoxes"), lod="aware",
         doc="Fast R-CNN sampling per image over [gt boxes; rois / scale]: fg (max IoU >= "
             "fg_thresh, at most batch_size_per_im * fg_fraction) then bg rows, with labels "
             "and class-wide box targets; LoD values of at most batch_size_per_im rows each")
