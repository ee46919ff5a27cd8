"""The detection ops' slots, attributes and shape rules (one register call each).

Only roi_align and roi_pool differentiate, as in Paddle 1.8 (the rest register no gradient).
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType


def _float(c, slot, rank=None):
    x = c.x(slot)
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x.dtype}")
    if rank is not None:
        c.check(x.rank == rank, f"{slot} must be {rank}-D, got {list(x.shape)}")
    return x


def _last4(c, slot, x):
    c.check(x.shape[-1] in (4, -1), f"{slot}'s last dim must be 4, got {list(x.shape)}")


def expand_aspect_ratios(ratios, flip):
    """Paddle's ExpandAspectRatios: 1.0 first, then each new ratio (and 1/ratio if flip)."""
    out = [1.0]
    for r in ratios:
        if any(abs(r - o) < 1e-6 for o in out):
            continue
        out.append(float(r))
        if flip:
            out.append(1.0 / r)
    return out


def num_priors(c):
    return (len(expand_aspect_ratios(c["aspect_ratios"], c["flip"])) * len(c["min_sizes"])
            + len(c["max_sizes"]))


def _prior_box(c):
    x = _float(c, "Input", 4)
    _float(c, "Image", 4)
    mins, maxs = c["min_sizes"], c["max_sizes"]
    c.check(len(mins) > 0 and all(m > 0 for m in mins),
            f"min_sizes must be positive, got {mins}")
    c.check(not maxs or len(maxs) == len(mins),
            f"max_sizes {maxs} must be empty or as long as min_sizes {mins}")
    c.check(all(mx > mn for mn, mx in zip(mins, maxs)),
            f"each max_size must exceed its min_size, got {mins} and {maxs}")
    c.check(len(c["variances"]) == 4, f"variances must have 4 values, got {c['variances']}")
    shape = (x.shape[2], x.shape[3], num_priors(c), 4)
    return {"Boxes": TensorType(shape, x.dtype), "Variances": TensorType(shape, x.dtype)}


register("prior_box", "Input Image", "Boxes Variances",
         {"min_sizes": "floats", "max_sizes": ("floats", []),
          "aspect_ratios": ("floats", [1.0]), "variances": ("floats", [0.1, 0.1, 0.2, 0.2]),
          "flip": ("bool", True), "clip": ("bool", True), "step_w": ("float", 0.0),
          "step_h": ("float", 0.0), "offset": ("float", 0.5),
          "min_max_aspect_ratios_order": ("bool", False)},
         infer=_prior_box, traits=(NO_GRAD,),
         doc="SSD prior boxes [H, W, num_priors, 4] of a feature map, and their variances")


def _box_coder(c):
    prior = _float(c, "PriorBox", 2)
    _last4(c, "PriorBox", prior)
    target = _float(c, "TargetBox")
    if c.has("PriorBoxVar"):
        var = _float(c, "PriorBoxVar", 2)
        c.check(var.shape[1] in (4, -1), f"PriorBoxVar must be [M, 4], got {list(var.shape)}")
    c.check(not (c.has("PriorBoxVar") and c["variance"]),
            "give the variance as the PriorBoxVar input or the variance attribute, not both")
    c.check(not c["variance"] or len(c["variance"]) == 4,
            f"variance must have 4 values, got {c['variance']}")
    code = c["code_type"]
    if code == "encode_center_size":
        c.check(target.rank == 2, f"TargetBox must be 2-D to encode, got {list(target.shape)}")
        _last4(c, "TargetBox", target)
        return {"OutputBox": TensorType((target.shape[0], prior.shape[0], 4), target.dtype)}
    c.check(code == "decode_center_size",
            f"code_type must be encode_center_size or decode_center_size, got {code!r}")
    c.check(target.rank == 3, f"TargetBox must be 3-D to decode, got {list(target.shape)}")
    _last4(c, "TargetBox", target)
    c.check(c["axis"] in (0, 1), f"axis must be 0 or 1, got {c['axis']}")
    along = target.shape[1 - c["axis"]]
    c.check(along < 0 or prior.shape[0] < 0 or along == prior.shape[0],
            f"PriorBox has {prior.shape[0]} boxes but TargetBox {list(target.shape)} has "
            f"{along} along axis {1 - c['axis']}")
    return {"OutputBox": TensorType(target.shape, target.dtype)}


register("box_coder", "PriorBox PriorBoxVar? TargetBox", "OutputBox",
         {"code_type": ("str", "encode_center_size"), "box_normalized": ("bool", True),
          "axis": ("int", 0), "variance": ("floats", [])},
         infer=_box_coder, traits=(NO_GRAD,), lod_inputs=("TargetBox",),
         doc="encode boxes against priors (center-size offsets) or decode offsets to boxes")


def _iou_similarity(c):
    x, y = _float(c, "X", 2), _float(c, "Y", 2)
    _last4(c, "X", x)
    _last4(c, "Y", y)
    return {"Out": TensorType((x.shape[0], y.shape[0]), x.dtype)}


register("iou_similarity", "X Y", "Out", {"box_normalized": ("bool", True)},
         infer=_iou_similarity, traits=(NO_GRAD,), lod_inputs=("X",),
         doc="Out[i, j] = IoU of box X[i] and box Y[j]")


def _yolo_box(c):
    x, size = _float(c, "X", 4), c.x("ImgSize")
    c.check(size.dtype in INT_DTYPES and size.rank == 2 and size.shape[1] in (2, -1),
            f"ImgSize must be an integer [N, 2], got {size.dtype}{list(size.shape)}")
    anchors, classes = c["anchors"], c["class_num"]
    c.check(len(anchors) > 0 and len(anchors) % 2 == 0,
            f"anchors must be (width, height) pairs, got {anchors}")
    c.check(classes > 0, f"class_num must be positive, got {classes}")
    c.check(c["downsample_ratio"] > 0,
            f"downsample_ratio must be positive, got {c['downsample_ratio']}")
    an = len(anchors) // 2
    c.check(x.shape[1] < 0 or x.shape[1] == an * (5 + classes),
            f"X's channels must be {an} anchors * (5 + {classes}), got {list(x.shape)}")
    h, w = x.shape[2], x.shape[3]
    boxes = -1 if h < 0 or w < 0 else an * h * w
    return {"Boxes": TensorType((x.shape[0], boxes, 4), x.dtype),
            "Scores": TensorType((x.shape[0], boxes, classes), x.dtype)}


register("yolo_box", "X ImgSize", "Boxes Scores",
         {"anchors": "ints", "class_num": "int", "conf_thresh": "float",
          "downsample_ratio": "int", "clip_bbox": ("bool", True)},
         infer=_yolo_box, traits=(NO_GRAD,),
         doc="YOLOv3 boxes and per-class scores of a head's output (scores zero under "
             "conf_thresh)")


def _anchor_generator(c):
    x = _float(c, "Input", 4)
    sizes, ratios, stride = c["anchor_sizes"], c["aspect_ratios"], c["stride"]
    c.check(len(sizes) > 0 and all(s > 0 for s in sizes),
            f"anchor_sizes must be positive, got {sizes}")
    c.check(len(ratios) > 0 and all(r > 0 for r in ratios),
            f"aspect_ratios must be positive, got {ratios}")
    c.check(len(stride) == 2 and all(s > 0 for s in stride),
            f"stride must be 2 positive values, got {stride}")
    c.check(len(c["variances"]) == 4, f"variances must have 4 values, got {c['variances']}")
    shape = (x.shape[2], x.shape[3], len(sizes) * len(ratios), 4)
    return {"Anchors": TensorType(shape, x.dtype), "Variances": TensorType(shape, x.dtype)}


register("anchor_generator", "Input", "Anchors Variances",
         {"anchor_sizes": "floats", "aspect_ratios": "floats",
          "variances": ("floats", [0.1, 0.1, 0.2, 0.2]), "stride": "floats",
          "offset": ("float", 0.5)},
         infer=_anchor_generator, traits=(NO_GRAD,),
         doc="Faster R-CNN anchors [H, W, ratios*sizes, 4] in image pixels, and variances")


def _polygon_box_transform(c):
    x = _float(c, "Input", 4)
    c.check(x.shape[1] < 0 or x.shape[1] % 2 == 0,
            f"Input's channels must be even (x, y pairs), got {list(x.shape)}")
    return {"Output": TensorType(x.shape, x.dtype)}


register("polygon_box_transform", "Input", "Output", infer=_polygon_box_transform,
         traits=(NO_GRAD,),
         doc="geometry offsets to coordinates: 4*column - x (even channels), 4*row - y (odd)")


def _roi_align(c):
    x, rois = _float(c, "X", 4), c.x("ROIs")
    c.check(rois.rank == 2 and rois.shape[1] in (4, -1),
            f"ROIs must be [R, 4], got {list(rois.shape)}")
    c.check(rois.dtype == x.dtype, f"ROIs must be {x.dtype} like X, got {rois.dtype}")
    if c.has("RoisLod"):
        lod = c.x("RoisLod")
        c.check(lod.dtype in INT_DTYPES and lod.rank == 1,
                f"RoisLod must be 1-D integer offsets, got {lod.dtype}{list(lod.shape)}")
        c.check(rois.lod_level == 0, "give ROIs with a LoD or RoisLod, not both")
    else:
        c.check(rois.lod_level == 1,
                f"ROIs needs a LoD of level 1 (its image of each box) or a RoisLod input, "
                f"got lod_level {rois.lod_level}")
    ph, pw = c["pooled_height"], c["pooled_width"]
    c.check(ph > 0 and pw > 0, f"pooled sizes must be positive, got {ph}x{pw}")
    c.check(c["spatial_scale"] > 0, f"spatial_scale must be positive, got {c['spatial_scale']}")
    return {"Out": TensorType((rois.shape[0], x.shape[1], ph, pw), x.dtype, False,
                              rois.lod_level)}


def _roi_pool(c):
    out = _roi_align(c)["Out"]
    return {"Out": out, "Argmax": TensorType(out.shape, "int64", False, out.lod_level)}


register("roi_pool", "X ROIs RoisLod?", "Out Argmax",
         {"pooled_height": ("int", 1), "pooled_width": ("int", 1),
          "spatial_scale": ("float", 1.0)},
         infer=_roi_pool, lod_inputs=("ROIs",), lod="aware",
         doc="RoIPool: the max of each box's bins (rounded to cells) of its image in X, and "
             "the flat h * W + w index of that max (-1 for an empty bin)")


register("roi_align", "X ROIs RoisLod?", "Out",
         {"pooled_height": ("int", 1), "pooled_width": ("int", 1),
          "spatial_scale": ("float", 1.0), "sampling_ratio": ("int", -1)},
         infer=_roi_align, lod_inputs=("ROIs",), lod="aware",
         doc="RoIAlign: each box's bins averaged over bilinear samples of its image in X "
             "(a LoD ROIs keeps its LoD)")


def nms_keep(c):
    """Rows kept per image: keep_top_k, or every (class, box) pair when it is -1."""
    scores = c.x("Scores")
    k = c["keep_top_k"]
    return k if k > -1 else scores.shape[1] * scores.shape[2]


def _multiclass_nms(c):
    boxes, scores = _float(c, "BBoxes"), _float(c, "Scores")
    c.check(boxes.lod_level == 0 and scores.lod_level == 0 and scores.rank == 3,
            "only the dense form is supported: Scores [N, C, M] and BBoxes [N, M, 4] (not "
            f"Paddle's LoD form with 2-D Scores), got Scores {list(scores.shape)}")
    c.check(boxes.rank == 3 and boxes.shape[2] in (4, -1),
            f"BBoxes must be [N, M, 4], got {list(boxes.shape)}")
    c.check(boxes.shape[1] < 0 or scores.shape[2] < 0 or boxes.shape[1] == scores.shape[2],
            f"BBoxes {list(boxes.shape)} and Scores {list(scores.shape)} must have as many "
            "boxes (M)")
    c.check(c["keep_top_k"] == -1 or c["keep_top_k"] > 0,
            f"keep_top_k must be positive or -1, got {c['keep_top_k']}")
    c.check(c["keep_top_k"] > -1 or (scores.shape[1] > 0 and scores.shape[2] > 0),
            "keep_top_k=-1 needs the class and box counts of Scores known to bound the rows")
    c.check(0 < c["nms_eta"] <= 1, f"nms_eta must be in (0, 1], got {c['nms_eta']}")
    return {"Out": TensorType((-1, 6), boxes.dtype, False, 1)}


register("multiclass_nms", "BBoxes Scores", "Out",
         {"background_label": ("int", 0), "score_threshold": "float", "nms_top_k": "int",
          "nms_threshold": ("float", 0.3), "nms_eta": ("float", 1.0), "keep_top_k": "int",
          "normalized": ("bool", True)},
         infer=_multiclass_nms, traits=(NO_GRAD,), lod_inputs=("BBoxes",), lod="aware",
         doc="per image and class: greedy NMS of the boxes over score_threshold; the "
             "keep_top_k best rows [label, score, x1, y1, x2, y2] per image, as a LoD value")


def _box_clip(c):
    box, info = _float(c, "Input"), _float(c, "ImInfo", 2)
    _last4(c, "Input", box)
    c.check(info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {list(info.shape)}")
    c.check(box.lod_level == 1 or (box.lod_level == 0 and box.rank == 3),
            "Input needs a LoD of level 1 (the image of each box) or the dense form "
            f"[N, M, 4], got lod_level {box.lod_level} and {list(box.shape)}")
    return {"Output": box}


register("box_clip", "Input ImInfo", "Output", infer=_box_clip, traits=(NO_GRAD,),
         lod_inputs=("Input",), lod="aware",
         doc="clip boxes to their image: x to [0, round(w / scale) - 1], y likewise")


def _box_decoder_and_assign(c):
    prior, target, score = _float(c, "PriorBox", 2), _float(c, "TargetBox", 2), \
        _float(c, "BoxScore", 2)
    var = _float(c, "PriorBoxVar", 1)
    _last4(c, "PriorBox", prior)
    c.check(var.shape[0] in (4, -1), f"PriorBoxVar must be [4], got {list(var.shape)}")
    classes = score.shape[1]
    c.check(classes < 0 or target.shape[1] < 0 or target.shape[1] == 4 * classes,
            f"TargetBox {list(target.shape)} must have 4 values per class of BoxScore "
            f"{list(score.shape)}")
    return {"DecodeBox": TensorType(target.shape, target.dtype),
            "OutputAssignBox": TensorType((target.shape[0], 4), target.dtype)}


register("box_decoder_and_assign", "PriorBox PriorBoxVar TargetBox BoxScore",
         "DecodeBox OutputAssignBox", {"box_clip": ("float", 4.135)},
         infer=_box_decoder_and_assign, traits=(NO_GRAD,),
         doc="decode each class's deltas against its prior (pixel boxes, +1 sizes); assign "
             "each row the box of its best non-background class (the prior when none)")


def _density_prior_box(c):
    x = _float(c, "Input", 4)
    _float(c, "Image", 4)
    dens, sizes, ratios = c["densities"], c["fixed_sizes"], c["fixed_ratios"]
    c.check(len(dens) > 0 and len(dens) == len(sizes) and all(d > 0 for d in dens),
            f"densities {dens} must be positive, one per fixed size {sizes}")
    c.check(len(ratios) > 0 and all(r > 0 for r in ratios),
            f"fixed_ratios must be positive, got {ratios}")
    c.check(len(c["variances"]) == 4, f"variances must have 4 values, got {c['variances']}")
    n = len(ratios) * sum(d * d for d in dens)
    h, w = x.shape[2], x.shape[3]
    if c["flatten_to_2d"]:
        shape = (-1 if h < 0 or w < 0 else h * w * n, 4)
    else:
        shape = (h, w, n, 4)
    return {"Boxes": TensorType(shape, x.dtype), "Variances": TensorType(shape, x.dtype)}


register("density_prior_box", "Input Image", "Boxes Variances",
         {"densities": "ints", "fixed_sizes": "floats", "fixed_ratios": "floats",
          "variances": ("floats", [0.1, 0.1, 0.2, 0.2]), "clip": ("bool", False),
          "step_w": ("float", 0.0), "step_h": ("float", 0.0), "offset": ("float", 0.5),
          "flatten_to_2d": ("bool", False)},
         infer=_density_prior_box, traits=(NO_GRAD,),
         doc="prior boxes on a density x density grid per cell, size and ratio, and variances")


def _bipartite_match(c):
    dist = _float(c, "DistMat", 2)
    c.check(dist.lod_level <= 1, f"DistMat's LoD must be of level 1, got {dist.lod_level}")
    c.check(c["match_type"] in ("bipartite", "per_prediction"),
            f"match_type must be bipartite or per_prediction, got {c['match_type']!r}")
    n = -1 if dist.lod_level else 1
    return {"ColToRowMatchIndices": TensorType((n, dist.shape[1]), "int32"),
            "ColToRowMatchDist": TensorType((n, dist.shape[1]), dist.dtype)}


register("bipartite_match", "DistMat", "ColToRowMatchIndices ColToRowMatchDist",
         {"match_type": ("str", "bipartite"), "dist_threshold": ("float", 0.5)},
         infer=_bipartite_match, traits=(NO_GRAD,), lod_inputs=("DistMat",), lod="aware",
         doc="per instance (LoD sequence): greedy bipartite matching of columns to rows by "
             "largest distance; per_prediction also matches the rest at >= dist_threshold")


def _target_assign(c):
    x, match = c.x("X"), c.x("MatchIndices")
    c.check(x.lod_level == 1 and x.rank == 3,
            f"X must be a LoD [rows, P, K] value (one sequence per instance), got "
            f"lod_level {x.lod_level} and {list(x.shape)}")
    c.check(match.dtype == "int32" and match.rank == 2 and match.lod_level == 0,
            f"MatchIndices must be an int32 [N, M], got {match.dtype}{list(match.shape)}")
    m = match.shape[1]
    c.check(x.shape[1] in (1, -1) or m < 0 or x.shape[1] == m,
            f"X's dim 1 must be 1 or M={m}, got {list(x.shape)}")
    if c.has("NegIndices"):
        neg = c.x("NegIndices")
        c.check(neg.dtype == "int32" and neg.lod_level == 1,
                f"NegIndices must be an int32 LoD value, got {neg.dtype} lod_level "
                f"{neg.lod_level}")
    return {"Out": TensorType((match.shape[0], m, x.shape[2]), x.dtype),
            "OutWeight": TensorType((match.shape[0], m, 1), "float32")}


register("target_assign", "X MatchIndices NegIndices?", "Out OutWeight",
         {"mismatch_value": ("int", 0)}, infer=_target_assign, traits=(NO_GRAD,),
         lod_inputs=("X", "NegIndices"), lod="aware",
         doc="Out[i, j] = X[row MatchIndices[i, j] of instance i, j % P] (weight 1), else "
             "mismatch_value (weight 0); NegIndices' columns get weight 1")
