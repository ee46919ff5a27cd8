"""Detection layers of Paddle 1.8 whose outputs are data-sized (NMS variants, RPN proposals,
FPN routing): LoD values holding a static bound of rows, emitting Paddle's ops and attrs."""

from __future__ import annotations

from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable


def _nms_attrs(score_threshold, nms_top_k, keep_top_k, nms_threshold, normalized, nms_eta,
               background_label):
    return {"background_label": int(background_label),
            "score_threshold": float(score_threshold), "nms_top_k": int(nms_top_k),
            "nms_threshold": float(nms_threshold), "nms_eta": float(nms_eta),
            "keep_top_k": int(keep_top_k), "normalized": bool(normalized)}


def _frozen(*outs):
    for v in outs:
        v.stop_gradient = True


def multiclass_nms2(bboxes, scores, score_threshold, nms_top_k, keep_top_k, nms_threshold=0.3,
                    normalized=True, nms_eta=1.0, background_label=0, return_index=False,
                    name=None):
    """multiclass_nms of ``bboxes`` [N, M, 4] and ``scores`` [N, C, M]; with
    ``return_index`` also the LoD index [R, 1] of each row's box (image * M + box)."""
    check_variable("multiclass_nms2", "bboxes", bboxes)
    check_variable("multiclass_nms2", "scores", scores)
    helper = LayerHelper("multiclass_nms2", name)
    out = helper.create_variable_for_type_inference(bboxes.dtype)
    index = helper.create_variable_for_type_inference("int32")
    helper.append_op("multiclass_nms2", {"BBoxes": bboxes, "Scores": scores},
                     {"Out": out, "Index": index},
                     _nms_attrs(score_threshold, nms_top_k, keep_top_k, nms_threshold,
                                normalized, nms_eta, background_label))
    _frozen(out, index)
    return (out, index) if return_index else out


def locality_aware_nms(bboxes, scores, score_threshold, nms_top_k, keep_top_k,
                       nms_threshold=0.3, normalized=True, nms_eta=1.0, background_label=-1,
                       name=None):
    """Locality-aware NMS (EAST) of ``bboxes`` [N, M, 4] scored by ``scores`` [N, C, M]:
    a LoD value of rows [label, score, x1, y1, x2, y2], one sequence per image."""
    check_variable("locality_aware_nms", "bboxes", bboxes)
    check_variable("locality_aware_nms", "scores", scores)
    helper = LayerHelper("locality_aware_nms", name)
    out = helper.create_variable_for_type_inference(bboxes.dtype)
    helper.append_op("locality_aware_nms", {"BBoxes": bboxes, "Scores": scores}, {"Out": out},
                     _nms_attrs(score_threshold, nms_top_k, keep_top_k, nms_threshold,
                                normalized, nms_eta, background_label))
    _frozen(out)
    return out


def _levels(layer, arg, values):
    if not isinstance(values, (list, tuple)) or not values:
        raise ProgramError(f"{layer}: {arg} must be a non-empty list of Variables, one per "
                           f"level, got {values!r}")
    for v in values:
        check_variable(layer, arg, v)
    return list(values)


def retinanet_detection_output(bboxes, scores, anchors, im_info, score_threshold=0.05,
                               nms_top_k=1000, keep_top_k=100, nms_threshold=0.3,
                               nms_eta=1.0):
    """RetinaNet detections from per-level deltas ``bboxes`` [N, Mi, 4], sigmoid
    ``scores`` [N, Mi, C] and ``anchors`` [Mi, 4]: LoD rows [label, score, x1, y1, x2, y2]
    per image (labels count from 1), best score first."""
    bboxes = _levels("retinanet_detection_output", "bboxes", bboxes)
    scores = _levels("retinanet_detection_output", "scores", scores)
    anchors = _levels("retinanet_detection_output", "anchors", anchors)
    check_variable("retinanet_detection_output", "im_info", im_info)
    helper = LayerHelper("retinanet_detection_output")
    out = helper.create_variable_for_type_inference(scores[0].dtype)
    helper.append_op("retinanet_detection_output",
                     {"BBoxes": bboxes, "Scores": scores, "Anchors": anchors,
                      "ImInfo": im_info}, {"Out": out},
                     {"score_threshold": float(score_threshold), "nms_top_k": int(nms_top_k),
                      "keep_top_k": int(keep_top_k), "nms_threshold": float(nms_threshold),
                      "nms_eta": float(nms_eta)})
    _frozen(out)
    return out


def generate_proposals(scores, bbox_deltas, im_info, anchors, variances, pre_nms_top_n=6000,
                       post_nms_top_n=1000, nms_thresh=0.5, min_size=0.1, eta=1.0,
                       name=None):
    """RPN proposals from ``scores`` [N, A, H, W] and ``bbox_deltas`` [N, 4A, H, W] over
    ``anchors``/``variances`` [H, W, A, 4]: (rois [R, 4], probs [R, 1]), LoD per image."""
    for arg, v in (("scores", scores), ("bbox_deltas", bbox_deltas), ("im_info", im_info),
                   ("anchors", anchors), ("variances", variances)):
        check_variable("generate_proposals", arg, v)
    helper = LayerHelper("generate_proposals", name)
    rois = helper.create_variable_for_type_inference(bbox_deltas.dtype)
    probs = helper.create_variable_for_type_inference(scores.dtype)
    helper.append_op("generate_proposals",
                     {"Scores": scores, "BboxDeltas": bbox_deltas, "ImInfo": im_info,
                      "Anchors": anchors, "Variances": variances},
                     {"RpnRois": rois, "RpnRoiProbs": probs},
                     {"pre_nms_topN": int(pre_nms_top_n), "post_nms_topN": int(post_nms_top_n),
                      "nms_thresh": float(nms_thresh), "min_size": float(min_size),
                      "eta": float(eta)})
    _frozen(rois, probs)
    return rois, probs


def distribute_fpn_proposals(fpn_rois, min_level, max_level, refer_level, refer_scale,
                             name=None):
    """Route LoD rois [R, 4] to FPN levels min_level..max_level by their scale: (one LoD
    value per level, restore index [R, 1] of each roi in the levels' concatenation)."""
    check_variable("distribute_fpn_proposals", "fpn_rois", fpn_rois)
    num = int(max_level) - int(min_level) + 1
    if num < 1:
        raise ProgramError(f"distribute_fpn_proposals: max_level {max_level} is below "
                           f"min_level {min_level}")
    helper = LayerHelper("distribute_fpn_proposals", name)
    multi = [helper.create_variable_for_type_inference(fpn_rois.dtype) for _ in range(num)]
    restore = helper.create_variable_for_type_inference("int32")
    helper.append_op("distribute_fpn_proposals", {"FpnRois": fpn_rois},
                     {"MultiFpnRois": multi, "RestoreIndex": restore},
                     {"min_level": int(min_level), "max_level": int(max_level),
                      "refer_level": int(refer_level), "refer_scale": int(refer_scale)})
    _frozen(restore, *multi)
    return multi, restore


def collect_fpn_proposals(multi_rois, multi_scores, min_level, max_level, post_nms_top_n,
                          name=None):
    """The ``post_nms_top_n`` best-scored rois over levels min_level..max_level of the LoD
    ``multi_rois``/``multi_scores`` lists (all images together), grouped by image."""
    num = int(max_level) - int(min_level) + 1
    rois = _levels("collect_fpn_proposals", "multi_rois", multi_rois)[:num]
    scores = _levels("collect_fpn_proposals", "multi_scores", multi_scores)[:num]
    helper = LayerHelper("collect_fpn_proposals", name)
    out = helper.create_variable_for_type_inference(rois[0].dtype)
    helper.append_op("collect_fpn_proposals",
                     {"MultiLevelRois": rois, "MultiLevelScores": scores}, {"FpnRois": out},
                     {"post_nms_topN": int(post_nms_top_n)})
    _frozen(out)
    return out


def generate_proposal_labels(rpn_rois, gt_classes, is_crowd, gt_boxes, im_info,
                             batch_size_per_im=256, fg_fraction=0.25, fg_thresh=0.25,
                             bg_thresh_hi=0.5, bg_thresh_lo=0.0,
                             bbox_reg_weights=[0.1, 0.1, 0.2, 0.2],  # noqa: B006
                             class_nums=None, use_random=True, is_cls_agnostic=False,
                             is_cascade_rcnn=False):
    """Fast R-CNN training samples per image from LoD ``rpn_rois`` and the LoD ground truth:
    (rois, labels_int32, bbox_targets, bbox_inside_weights, bbox_outside_weights)."""
    layer = "generate_proposal_labels"
    for arg, v in (("rpn_rois", rpn_rois), ("gt_classes", gt_classes),
                   ("is_crowd", is_crowd), ("gt_boxes", gt_boxes), ("im_info", im_info)):
        check_variable(layer, arg, v)
    if class_nums is None:
        raise ProgramError(f"{layer}: class_nums is required (the number of classes, "
                           "background included)")
    helper = LayerHelper(layer)
    rois = helper.create_variable_for_type_inference(rpn_rois.dtype)
    labels = helper.create_variable_for_type_inference("int32")
    targets, inside, outside = (helper.create_variable_for_type_inference(rpn_rois.dtype)
                                for _ in range(3))
    helper.append_op(layer, {"RpnRois": rpn_rois, "GtClasses": gt_classes,
                             "IsCrowd": is_crowd, "GtBoxes": gt_boxes, "ImInfo": im_info},
                     {"Rois": rois, "LabelsInt32": labels, "BboxTargets": targets,
                      "BboxInsideWeights": inside, "BboxOutsideWeights": outside},
                     {"batch_size_per_im": int(batch_size_per_im),
                      "fg_fraction": float(fg_fraction), "fg_thresh": float(fg_thresh),
                      "bg_thresh_hi": float(bg_thresh_hi), "bg_thresh_lo": float(bg_thresh_lo),
                      "bbox_reg_weights": [float(w) for w in bbox_reg_weights],
                      "class_nums": int(class_nums), "use_random": bool(use_random),
                      "is_cls_agnostic": bool(is_cls_agnostic),
                      "is_cascade_rcnn": bool(is_cascade_rcnn)})
    _frozen(rois, labels, targets, inside, outside)
    return rois, labels, targets, inside, outside
