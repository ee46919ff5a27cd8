"""Detection training layers of Paddle 1.8 (fluid/layers/detection.py): yolov3_loss, SSD's
multi_box_head and ssd_loss, and the RPN / RetinaNet anchor target assignment."""

from __future__ import annotations

import math

from ..ir.errors import ProgramError
from .detection import bipartite_match, box_coder, iou_similarity, prior_box, target_assign
from .helper import LayerHelper, check_variable
from .loss import smooth_l1, softmax_with_cross_entropy
from .manipulation import flatten, gather
from .math import reduce_sum
from .nn import conv2d
from .tensor import cast, concat, reshape, transpose


def yolov3_loss(x, gt_box, gt_label, anchors, anchor_mask, class_num, ignore_thresh,
                downsample_ratio, gt_score=None, use_label_smooth=True, name=None,
                scale_x_y=1.0):
    """YOLOv3 loss [N] of the head ``x`` [N, len(anchor_mask) * (5 + class_num), H, W]
    against boxes ``gt_box`` [N, B, 4] (center x, y, w, h over the image size), int32
    labels ``gt_label`` [N, B] and optional mixup scores ``gt_score`` [N, B]; boxes with a
    zero width or height are padding. Differentiable w.r.t. ``x``."""
    for arg, var in (("x", x), ("gt_box", gt_box), ("gt_label", gt_label)):
        check_variable("yolov3_loss", arg, var)
    if not isinstance(anchors, (list, tuple)) or not isinstance(anchor_mask, (list, tuple)):
        raise ProgramError("yolov3_loss: anchors and anchor_mask must be lists of ints")
    inputs = {"X": x, "GTBox": gt_box, "GTLabel": gt_label}
    if gt_score is not None:
        check_variable("yolov3_loss", "gt_score", gt_score)
        inputs["GTScore"] = gt_score
    helper = LayerHelper("yolov3_loss", name)
    loss = helper.create_variable_for_type_inference(x.dtype)
    obj = helper.create_variable_for_type_inference(x.dtype)
    match = helper.create_variable_for_type_inference("int32")
    helper.append_op("yolov3_loss", inputs,
                     {"Loss": loss, "ObjectnessMask": obj, "GTMatchMask": match},
                     {"anchors": [int(a) for a in anchors],
                      "anchor_mask": [int(m) for m in anchor_mask],
                      "class_num": int(class_num), "ignore_thresh": float(ignore_thresh),
                      "downsample_ratio": int(downsample_ratio),
                      "use_label_smooth": bool(use_label_smooth),
                      "scale_x_y": float(scale_x_y)})
    obj.stop_gradient = match.stop_gradient = True
    return loss


def _listed(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _per_layer(layer, arg, value, count):
    if not isinstance(value, (list, tuple)) or len(value) != count:
        raise ProgramError(f"{layer}: {arg} must be a list with one entry per input "
                           f"({count}), got {value!r}")


def multi_box_head(inputs, image, base_size, num_classes, aspect_ratios, min_ratio=None,
                   max_ratio=None, min_sizes=None, max_sizes=None, steps=None, step_w=None,
                   step_h=None, offset=0.5, variance=[0.1, 0.1, 0.2, 0.2],  # noqa: B006
                   flip=True, clip=False, kernel_size=1, pad=0, stride=1, name=None,
                   min_max_aspect_ratios_order=False):
    """SSD heads over the feature maps ``inputs``: per map a prior_box and two conv2d
    (4 location and num_classes confidence values per prior), concatenated as Paddle does:
    (locations [N, P, 4], confidences [N, P, num_classes], boxes, variances)."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ProgramError("multi_box_head: inputs must be a non-empty list of Variables")
    layers = len(inputs)
    if layers <= 2:
        if min_sizes is None or max_sizes is None:
            raise ProgramError("multi_box_head: with at most 2 inputs give min_sizes and "
                               "max_sizes")
        _per_layer("multi_box_head", "min_sizes", min_sizes, layers)
        _per_layer("multi_box_head", "max_sizes", max_sizes, layers)
    elif min_sizes is None and max_sizes is None:
        if min_ratio is None or max_ratio is None:
            raise ProgramError("multi_box_head: give min_sizes/max_sizes or min_ratio and "
                               "max_ratio")
        # Paddle's rule: sizes from ratios stepped evenly over the maps after the first
        step = int(math.floor((max_ratio - min_ratio) / (layers - 2)))
        min_sizes, max_sizes = [base_size * 0.10], [base_size * 0.20]
        for ratio in range(int(min_ratio), int(max_ratio) + 1, step):
            min_sizes.append(base_size * ratio / 100.0)
            max_sizes.append(base_size * (ratio + step) / 100.0)
    if aspect_ratios:
        _per_layer("multi_box_head", "aspect_ratios", aspect_ratios, layers)
    for arg, value in (("step_h", step_h), ("step_w", step_w), ("steps", steps)):
        if value:
            _per_layer("multi_box_head", arg, value, layers)
    if steps:
        step_w = step_h = steps
    locs, confs, boxes, variances = [], [], [], []
    for i, feature in enumerate(inputs):
        check_variable("multi_box_head", f"inputs[{i}]", feature)
        ratio = _listed(aspect_ratios[i]) if aspect_ratios is not None else []
        # Paddle keys both steps on step_w being given
        step = [step_w[i] if step_w else 0.0, step_h[i] if step_w else 0.0]
        box, var = prior_box(feature, image, _listed(min_sizes[i]), _listed(max_sizes[i]),
                             ratio, variance, flip, clip, step, offset, None,
                             min_max_aspect_ratios_order)
        boxes.append(box)
        variances.append(var)
        priors = box.shape[2]
        for size, out in ((4, locs), (num_classes, confs)):
            head = conv2d(feature, priors * size, kernel_size, stride=stride, padding=pad)
            out.append(flatten(transpose(head, [0, 2, 3, 1]), axis=1))
    if layers == 1:
        box, var, loc, conf = boxes[0], variances[0], locs[0], confs[0]
    else:
        box = concat([flatten(b, axis=3) for b in boxes])
        var = concat([flatten(v, axis=3) for v in variances])
        loc, conf = concat(locs, axis=1), concat(confs, axis=1)
    # Paddle's [0, -1, k]; the prior count when known keeps dim 1 static for the loss
    priors = math.prod(box.shape[:-1]) if all(d > 0 for d in box.shape) else -1
    shape = [-1, priors] if priors > 0 else [0, -1]
    loc = reshape(loc, shape + [4])
    conf = reshape(conf, shape + [num_classes])
    box.stop_gradient = var.stop_gradient = True
    return loc, conf, box, var


def _mine_hard_examples(cls_loss, match, dist, neg_pos_ratio, neg_overlap, mining_type,
                        sample_size):
    helper = LayerHelper("mine_hard_examples")
    neg = helper.create_variable_for_type_inference("int32")
    updated = helper.create_variable_for_type_inference("int32")
    helper.append_op("mine_hard_examples",
                     {"ClsLoss": cls_loss, "MatchIndices": match, "MatchDist": dist},
                     {"NegIndices": neg, "UpdatedMatchIndices": updated},
                     {"neg_pos_ratio": float(neg_pos_ratio),
                      "neg_dist_threshold": float(neg_overlap), "mining_type": mining_type,
                      "sample_size": int(sample_size or 0)})
    neg.stop_gradient = updated.stop_gradient = True
    return neg, updated


def _as(x, dtype):
    # target_assign's weights are float32; a float64 model multiplies them as its own dtype
    return x if x.dtype == dtype else cast(x, dtype)


def ssd_loss(location, confidence, gt_box, gt_label, prior_box, prior_box_var=None,
             background_label=0, overlap_threshold=0.5, neg_pos_ratio=3.0, neg_overlap=0.5,
             loc_loss_weight=1.0, conf_loss_weight=1.0, match_type="per_prediction",
             mining_type="max_negative", normalize=True, sample_size=None):
    """SSD's multibox loss [N, 1] as Paddle composes it: match the LoD ``gt_box`` [G, 4] to
    the priors [P, 4] (IoU + bipartite_match), mine hard negatives on the confidence loss,
    then softmax CE over the matched and mined priors plus smooth L1 of the encoded boxes,
    summed per image (over the matched-prior count with ``normalize``)."""
    for arg, var in (("location", location), ("confidence", confidence), ("gt_box", gt_box),
                     ("gt_label", gt_label), ("prior_box", prior_box)):
        check_variable("ssd_loss", arg, var)
    if mining_type != "max_negative":
        raise ProgramError("ssd_loss: only mining_type='max_negative' is supported (as in "
                           f"Paddle), got {mining_type!r}")
    if len(confidence.shape) != 3:
        raise ProgramError(f"ssd_loss: confidence must be [N, P, C], got {confidence.shape}")
    num_prior = confidence.shape[1] if confidence.shape[1] > 0 else prior_box.shape[0]
    if num_prior < 0:
        # Paddle reshapes with the run-time shape; graphc needs the prior count when building
        raise ProgramError("ssd_loss: the prior count (confidence's dim 1 or prior_box's "
                           "dim 0) must be known when the program is built")
    iou = iou_similarity(gt_box, prior_box)
    match, dist = bipartite_match(iou, match_type, overlap_threshold)
    label = reshape(gt_label, [-1, 1, 1])
    label.stop_gradient = True
    target, _ = target_assign(label, match, mismatch_value=background_label)
    conf2d = flatten(confidence, axis=2)
    target = flatten(cast(target, "int64"), axis=2)
    target.stop_gradient = True
    conf_loss = reshape(softmax_with_cross_entropy(conf2d, target), [-1, num_prior])
    conf_loss.stop_gradient = True
    neg, updated = _mine_hard_examples(conf_loss, match, dist, neg_pos_ratio, neg_overlap,
                                       mining_type, sample_size)
    encoded = box_coder(prior_box, prior_box_var, gt_box, "encode_center_size")
    target_bbox, loc_weight = target_assign(encoded, updated,
                                            mismatch_value=background_label)
    target_label, conf_weight = target_assign(label, updated, negative_indices=neg,
                                              mismatch_value=background_label)
    target_label = cast(flatten(target_label, axis=2), "int64")
    conf_weight = _as(flatten(conf_weight, axis=2), confidence.dtype)
    target_label.stop_gradient = conf_weight.stop_gradient = True
    conf_loss = softmax_with_cross_entropy(conf2d, target_label) * conf_weight
    target_bbox = flatten(target_bbox, axis=2)
    loc_weight = _as(flatten(loc_weight, axis=2), location.dtype)
    target_bbox.stop_gradient = loc_weight.stop_gradient = True
    loc_loss = smooth_l1(flatten(location, axis=2), target_bbox) * loc_weight
    loss = conf_loss * conf_loss_weight + loc_loss * loc_loss_weight
    loss = reduce_sum(reshape(loss, [-1, num_prior]), dim=1, keep_dim=True)
    if normalize:
        loss = loss / reduce_sum(loc_weight)
    return loss


def _anchor_targets(op_type, inputs, attrs, outputs, dtype):
    for slot, var in inputs.items():
        check_variable(op_type, slot, var)
    helper = LayerHelper(op_type)
    outs = {slot: helper.create_variable_for_type_inference(
        dtype if slot in ("TargetBBox", "BBoxInsideWeight") else "int32") for slot in outputs}
    helper.append_op(op_type, inputs, outs, attrs)
    for v in outs.values():
        v.stop_gradient = True
    return outs


def rpn_target_assign(bbox_pred, cls_logits, anchor_box, anchor_var, gt_boxes, is_crowd,
                      im_info, rpn_batch_size_per_im=256, rpn_straddle_thresh=0.0,
                      rpn_fg_fraction=0.5, rpn_positive_overlap=0.7,
                      rpn_negative_overlap=0.3, use_random=True):
    """Faster R-CNN RPN targets: per image, anchors inside the image (by
    rpn_straddle_thresh) labelled foreground (best IoU of a non-crowd box, or >=
    rpn_positive_overlap) or background (< rpn_negative_overlap), sampled to
    rpn_batch_size_per_im (a fg_fraction of them fg; use_random=False keeps the first ones).
    Returns (scores [F + B, 1], locations [F, 4] gathered from the predictions, int32 labels,
    box deltas, inside weights), LoD values with one sequence per image."""
    check_variable("rpn_target_assign", "bbox_pred", bbox_pred)
    check_variable("rpn_target_assign", "cls_logits", cls_logits)
    outs = _anchor_targets(
        "rpn_target_assign", {"Anchor": anchor_box, "GtBoxes": gt_boxes, "IsCrowd": is_crowd,
                              "ImInfo": im_info},
        {"rpn_batch_size_per_im": int(rpn_batch_size_per_im),
         "rpn_straddle_thresh": float(rpn_straddle_thresh),
         "rpn_positive_overlap": float(rpn_positive_overlap),
         "rpn_negative_overlap": float(rpn_negative_overlap),
         "rpn_fg_fraction": float(rpn_fg_fraction), "use_random": bool(use_random)},
        ("LocationIndex", "ScoreIndex", "TargetBBox", "TargetLabel", "BBoxInsideWeight"),
        anchor_box.dtype)
    scores = gather(reshape(cls_logits, [-1, 1]), outs["ScoreIndex"])
    locations = gather(reshape(bbox_pred, [-1, 4]), outs["LocationIndex"])
    return (scores, locations, outs["TargetLabel"], outs["TargetBBox"],
            outs["BBoxInsideWeight"])


def retinanet_target_assign(bbox_pred, cls_logits, anchor_box, anchor_var, gt_boxes,
                            gt_labels, is_crowd, im_info, num_classes=1,
                            positive_overlap=0.5, negative_overlap=0.4):
    """RetinaNet targets: per image every anchor labelled foreground (best IoU of a
    non-crowd box, or >= positive_overlap; its box's class) or background
    (< negative_overlap, label 0), no sampling. Returns (scores [F + B, num_classes],
    locations [F, 4] gathered from the predictions, int32 labels, box deltas, inside weights,
    foreground count + 1 per image [N, 1]), LoD values with one sequence per image."""
    check_variable("retinanet_target_assign", "bbox_pred", bbox_pred)
    check_variable("retinanet_target_assign", "cls_logits", cls_logits)
    outs = _anchor_targets(
        "retinanet_target_assign",
        {"Anchor": anchor_box, "GtBoxes": gt_boxes, "GtLabels": gt_labels,
         "IsCrowd": is_crowd, "ImInfo": im_info},
        {"positive_overlap": float(positive_overlap),
         "negative_overlap": float(negative_overlap)},
        ("LocationIndex", "ScoreIndex", "TargetBBox", "TargetLabel", "BBoxInsideWeight",
         "ForegroundNumber"), anchor_box.dtype)
    scores = gather(reshape(cls_logits, [-1, int(num_classes)]), outs["ScoreIndex"])
    locations = gather(reshape(bbox_pred, [-1, 4]), outs["LocationIndex"])
    return (scores, locations, outs["TargetLabel"], outs["TargetBBox"],
            outs["BBoxInsideWeight"], outs["ForegroundNumber"])
