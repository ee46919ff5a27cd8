"""Detection layers of Paddle 1.8 (fluid/layers/detection.py, roi_align/roi_pool from nn.py),
emitting Paddle's ops with its attribute names."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .detection_eval import detection_map  # noqa: F401  (Paddle 1.8: layers.detection's, unexported)
from .helper import LayerHelper, check_variable
from .math import softmax
from .tensor import transpose


def _floats(value):
    if value is None:
        return []
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)]


def prior_box(input, image, min_sizes, max_sizes=None, aspect_ratios=[1.0],  # noqa: B006
              variance=[0.1, 0.1, 0.2, 0.2], flip=False, clip=False,  # noqa: B006
              steps=[0.0, 0.0], offset=0.5, name=None,  # noqa: B006
              min_max_aspect_ratios_order=False):
    """SSD prior boxes of feature map ``input`` for ``image``: (boxes, variances), each
    [H, W, num_priors, 4] with coordinates normalised by the image size."""
    check_variable("prior_box", "input", input)
    check_variable("prior_box", "image", image)
    if not isinstance(steps, (list, tuple)) or len(steps) != 2:
        raise ProgramError(f"prior_box: steps must be [step_w, step_h], got {steps!r}")
    helper = LayerHelper("prior_box", name)
    boxes = helper.create_variable_for_type_inference(input.dtype)
    var = helper.create_variable_for_type_inference(input.dtype)
    attrs = {"min_sizes": _floats(min_sizes), "max_sizes": _floats(max_sizes),
             "aspect_ratios": _floats(aspect_ratios), "variances": _floats(variance),
             "flip": bool(flip), "clip": bool(clip), "step_w": float(steps[0]),
             "step_h": float(steps[1]), "offset": float(offset),
             "min_max_aspect_ratios_order": bool(min_max_aspect_ratios_order)}
    helper.append_op("prior_box", {"Input": input, "Image": image},
                     {"Boxes": boxes, "Variances": var}, attrs)
    boxes.stop_gradient = var.stop_gradient = True
    return boxes, var


def box_coder(prior_box, prior_box_var, target_box, code_type="encode_center_size",
              box_normalized=True, name=None, axis=0):
    """Encode ``target_box`` [N, 4] against priors [M, 4] into [N, M, 4] offsets, or decode
    offsets [N, M, 4] back to boxes; the variance is a [M, 4] tensor, 4 floats or None."""
    check_variable("box_coder", "prior_box", prior_box)
    check_variable("box_coder", "target_box", target_box)
    inputs = {"PriorBox": prior_box, "TargetBox": target_box}
    attrs = {"code_type": code_type, "box_normalized": bool(box_normalized), "axis": int(axis)}
    if isinstance(prior_box_var, Variable):
        inputs["PriorBoxVar"] = prior_box_var
    elif isinstance(prior_box_var, (list, tuple)):
        attrs["variance"] = _floats(prior_box_var)
    elif prior_box_var is not None:
        raise ProgramError("box_coder: prior_box_var must be a Variable, a list of 4 floats "
                           f"or None, got {type(prior_box_var).__name__}")
    helper = LayerHelper("box_coder", name)
    out = helper.create_variable_for_type_inference(target_box.dtype)
    helper.append_op("box_coder", inputs, {"OutputBox": out}, attrs)
    return out


def iou_similarity(x, y, box_normalized=True, name=None):
    """Out[i, j] = IoU(x[i], y[j]) of boxes [x1, y1, x2, y2] (+1 on sizes when not
    normalised); a LoD x keeps its LoD."""
    check_variable("iou_similarity", "x", x)
    check_variable("iou_similarity", "y", y)
    helper = LayerHelper("iou_similarity", name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("iou_similarity", {"X": x, "Y": y}, {"Out": out},
                     {"box_normalized": bool(box_normalized)})
    return out


def yolo_box(x, img_size, anchors, class_num, conf_thresh, downsample_ratio, clip_bbox=True,
             name=None):
    """YOLOv3 head ``x`` [N, A*(5+C), H, W] to boxes [N, A*H*W, 4] in image pixels and
    scores [N, A*H*W, C]; both are zero where the objectness is under conf_thresh."""
    check_variable("yolo_box", "x", x)
    check_variable("yolo_box", "img_size", img_size)
    if not isinstance(anchors, (list, tuple)):
        raise ProgramError(f"yolo_box: anchors must be a list of ints, got {anchors!r}")
    helper = LayerHelper("yolo_box", name)
    boxes = helper.create_variable_for_type_inference(x.dtype)
    scores = helper.create_variable_for_type_inference(x.dtype)
    attrs = {"anchors": [int(a) for a in anchors], "class_num": int(class_num),
             "conf_thresh": float(conf_thresh), "downsample_ratio": int(downsample_ratio),
             "clip_bbox": bool(clip_bbox)}
    helper.append_op("yolo_box", {"X": x, "ImgSize": img_size},
                     {"Boxes": boxes, "Scores": scores}, attrs)
    return boxes, scores


def anchor_generator(input, anchor_sizes=None, aspect_ratios=None,
                     variance=[0.1, 0.1, 0.2, 0.2], stride=None, offset=0.5,  # noqa: B006
                     name=None):
    """Faster R-CNN anchors of feature map ``input``: (anchors, variances), each
    [H, W, len(aspect_ratios) * len(anchor_sizes), 4] in image pixels."""
    check_variable("anchor_generator", "input", input)
    if not isinstance(stride, (list, tuple)):
        raise ProgramError(f"anchor_generator: stride must be [stride_w, stride_h], got "
                           f"{stride!r}")
    helper = LayerHelper("anchor_generator", name)
    anchors = helper.create_variable_for_type_inference(input.dtype)
    var = helper.create_variable_for_type_inference(input.dtype)
    attrs = {"anchor_sizes": _floats(anchor_sizes), "aspect_ratios": _floats(aspect_ratios),
             "variances": _floats(variance), "stride": _floats(stride),
             "offset": float(offset)}
    helper.append_op("anchor_generator", {"Input": input},
                     {"Anchors": anchors, "Variances": var}, attrs)
    anchors.stop_gradient = var.stop_gradient = True
    return anchors, var


def polygon_box_transform(input, name=None):
    """EAST geometry map [N, 2k, H, W] to coordinates: 4*w - x on even channels, 4*h - y on
    odd ones."""
    check_variable("polygon_box_transform", "input", input)
    helper = LayerHelper("polygon_box_transform", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("polygon_box_transform", {"Input": input}, {"Output": out}, {})
    return out


def roi_align(input, rois, pooled_height=1, pooled_width=1, spatial_scale=1.0,
              sampling_ratio=-1, name=None, rois_lod=None):
    """RoIAlign of boxes ``rois`` [R, 4] over ``input`` [N, C, H, W] -> [R, C, pooled_height,
    pooled_width]; each box's image is its LoD sequence, or given by offsets ``rois_lod``."""
    check_variable("roi_align", "input", input)
    check_variable("roi_align", "rois", rois)
    inputs = {"X": input, "ROIs": rois}
    if rois_lod is not None:
        check_variable("roi_align", "rois_lod", rois_lod)
        inputs["RoisLod"] = rois_lod
    helper = LayerHelper("roi_align", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("roi_align", inputs, {"Out": out},
                     {"pooled_height": int(pooled_height), "pooled_width": int(pooled_width),
                      "spatial_scale": float(spatial_scale),
                      "sampling_ratio": int(sampling_ratio)})
    return out


def multiclass_nms(bboxes, scores, score_threshold, nms_top_k, keep_top_k, nms_threshold=0.3,
                   normalized=True, nms_eta=1.0, background_label=0, name=None):
    """Greedy NMS per image and class of ``bboxes`` [N, M, 4] scored by ``scores``
    [N, C, M]: a LoD value of rows [label, score, x1, y1, x2, y2], one sequence per image
    (labels ascending, scores descending within a label; docs/porting_from_paddle.md)."""
    check_variable("multiclass_nms", "bboxes", bboxes)
    check_variable("multiclass_nms", "scores", scores)
    helper = LayerHelper("multiclass_nms", name)
    out = helper.create_variable_for_type_inference(bboxes.dtype)
    helper.append_op("multiclass_nms", {"BBoxes": bboxes, "Scores": scores}, {"Out": out},
                     {"background_label": int(background_label),
                      "score_threshold": float(score_threshold), "nms_top_k": int(nms_top_k),
                      "nms_threshold": float(nms_threshold), "nms_eta": float(nms_eta),
                      "keep_top_k": int(keep_top_k), "normalized": bool(normalized)})
    out.stop_gradient = True
    return out


def roi_pool(input, rois, pooled_height=1, pooled_width=1, spatial_scale=1.0, rois_lod=None):
    """RoIPool of boxes ``rois`` [R, 4] over ``input`` [N, C, H, W] -> [R, C, pooled_height,
    pooled_width]; each box's image is its LoD sequence, or given by offsets ``rois_lod``."""
    check_variable("roi_pool", "input", input)
    check_variable("roi_pool", "rois", rois)
    inputs = {"X": input, "ROIs": rois}
    if rois_lod is not None:
        check_variable("roi_pool", "rois_lod", rois_lod)
        inputs["RoisLod"] = rois_lod
    helper = LayerHelper("roi_pool")
    out = helper.create_variable_for_type_inference(input.dtype)
    argmax = helper.create_variable_for_type_inference("int64")
    helper.append_op("roi_pool", inputs, {"Out": out, "Argmax": argmax},
                     {"pooled_height": int(pooled_height), "pooled_width": int(pooled_width),
                      "spatial_scale": float(spatial_scale)})
    return out


def box_clip(input, im_info, name=None):
    """Clip boxes to their image (``im_info`` rows [height, width, scale]): x to
    [0, round(width / scale) - 1], y likewise; a LoD input's sequence i is image i."""
    check_variable("box_clip", "input", input)
    check_variable("box_clip", "im_info", im_info)
    helper = LayerHelper("box_clip", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("box_clip", {"Input": input, "ImInfo": im_info}, {"Output": out}, {})
    return out


def box_decoder_and_assign(prior_box, prior_box_var, target_box, box_score, box_clip,
                           name=None):
    """Decode per-class deltas ``target_box`` [N, 4C] against ``prior_box`` [N, 4] and
    assign each row the box of its best non-background class: (decoded, assigned)."""
    for arg, var in (("prior_box", prior_box), ("prior_box_var", prior_box_var),
                     ("target_box", target_box), ("box_score", box_score)):
        check_variable("box_decoder_and_assign", arg, var)
    helper = LayerHelper("box_decoder_and_assign", name)
    decoded = helper.create_variable_for_type_inference(prior_box.dtype)
    assigned = helper.create_variable_for_type_inference(prior_box.dtype)
    helper.append_op("box_decoder_and_assign",
                     {"PriorBox": prior_box, "PriorBoxVar": prior_box_var,
                      "TargetBox": target_box, "BoxScore": box_score},
                     {"DecodeBox": decoded, "OutputAssignBox": assigned},
                     {"box_clip": float(box_clip)})
    return decoded, assigned


def density_prior_box(input, image, densities=None, fixed_sizes=None, fixed_ratios=None,
                      variance=[0.1, 0.1, 0.2, 0.2], clip=False,  # noqa: B006
                      steps=[0.0, 0.0], offset=0.5, flatten_to_2d=False,  # noqa: B006
                      name=None):
    """Density prior boxes of ``input`` for ``image``: (boxes, variances), each
    [H, W, num_priors, 4] ([H * W * num_priors, 4] with flatten_to_2d)."""
    check_variable("density_prior_box", "input", input)
    check_variable("density_prior_box", "image", image)
    if not isinstance(steps, (list, tuple)) or len(steps) != 2:
        raise ProgramError(f"density_prior_box: steps must be [step_w, step_h], got {steps!r}")
    helper = LayerHelper("density_prior_box", name)
    boxes = helper.create_variable_for_type_inference(input.dtype)
    var = helper.create_variable_for_type_inference(input.dtype)
    attrs = {"densities": [int(d) for d in (densities or [])],
             "fixed_sizes": _floats(fixed_sizes), "fixed_ratios": _floats(fixed_ratios),
             "variances": _floats(variance), "clip": bool(clip), "step_w": float(steps[0]),
             "step_h": float(steps[1]), "offset": float(offset),
             "flatten_to_2d": bool(flatten_to_2d)}
    helper.append_op("density_prior_box", {"Input": input, "Image": image},
                     {"Boxes": boxes, "Variances": var}, attrs)
    boxes.stop_gradient = var.stop_gradient = True
    return boxes, var


def bipartite_match(dist_matrix, match_type=None, dist_threshold=None, name=None):
    """Greedy bipartite matching of each instance's distance matrix (one LoD sequence per
    instance, rows = entities, columns = priors): (match indices int32 [N, M], distances)."""
    check_variable("bipartite_match", "dist_matrix", dist_matrix)
    helper = LayerHelper("bipartite_match", name)
    idx = helper.create_variable_for_type_inference("int32")
    dist = helper.create_variable_for_type_inference(dist_matrix.dtype)
    attrs = {"match_type": match_type or "bipartite",
             "dist_threshold": 0.5 if dist_threshold is None else float(dist_threshold)}
    helper.append_op("bipartite_match", {"DistMat": dist_matrix},
                     {"ColToRowMatchIndices": idx, "ColToRowMatchDist": dist}, attrs)
    idx.stop_gradient = dist.stop_gradient = True
    return idx, dist


def target_assign(input, matched_indices, negative_indices=None, mismatch_value=None,
                  name=None):
    """Gather each instance's targets by ``matched_indices`` [N, M] from the LoD ``input``
    [rows, P, K]: (out [N, M, K], float32 weights [N, M, 1])."""
    check_variable("target_assign", "input", input)
    check_variable("target_assign", "matched_indices", matched_indices)
    inputs = {"X": input, "MatchIndices": matched_indices}
    if negative_indices is not None:
        check_variable("target_assign", "negative_indices", negative_indices)
        inputs["NegIndices"] = negative_indices
    helper = LayerHelper("target_assign", name)
    out = helper.create_variable_for_type_inference(input.dtype)
    weight = helper.create_variable_for_type_inference("float32")
    helper.append_op("target_assign", inputs, {"Out": out, "OutWeight": weight},
                     {"mismatch_value": int(mismatch_value or 0)})
    return out, weight


def detection_output(loc, scores, prior_box, prior_box_var, background_label=0,
                     nms_threshold=0.3, nms_top_k=400, keep_top_k=200, score_threshold=0.01,
                     nms_eta=1.0, return_index=False):
    """SSD's output: decode ``loc`` [N, M, 4] against the priors, softmax ``scores``
    [N, M, C] over classes, then multiclass_nms (as Paddle's layer composes them)."""
    if return_index:
        raise ProgramError("detection_output: return_index=True (multiclass_nms2's index) is "
                           "not supported; call it with return_index=False")
    decoded = box_coder(prior_box, prior_box_var, loc, "decode_center_size")
    probs = transpose(softmax(scores), perm=[0, 2, 1])
    return multiclass_nms(decoded, probs, score_threshold, nms_top_k, keep_top_k,
                          nms_threshold=nms_threshold, nms_eta=nms_eta,
                          background_label=background_label)
