"""The detection target ops' slots, attributes and shape rules (one register call each).

Only yolov3_loss differentiates (to X), as in Paddle 1.8; the mining and assignment ops do not.
"""

from __future__ import annotations

from ...ir.opdef import LOSS, NO_GRAD, RANDOM, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType


def _float(c, slot, rank=None):
    x = c.x(slot)
    c.check(x.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {x.dtype}")
    if rank is not None:
        c.check(x.rank == rank, f"{slot} must be {rank}-D, got {list(x.shape)}")
    return x


def _same(a, b):
    return a < 0 or b < 0 or a == b


def _yolov3_loss(c):
    x = _float(c, "X", 4)
    box = _float(c, "GTBox", 3)
    label = c.x("GTLabel")
    anchors, mask, classes = c["anchors"], c["anchor_mask"], c["class_num"]
    c.check(len(anchors) > 0 and len(anchors) % 2 == 0,
            f"anchors must be (width, height) pairs, got {anchors}")
    c.check(len(mask) > 0 and all(0 <= m < len(anchors) // 2 for m in mask),
            f"anchor_mask {mask} must index the {len(anchors) // 2} anchors")
    c.check(classes > 0, f"class_num must be positive, got {classes}")
    c.check(x.shape[1] < 0 or x.shape[1] == len(mask) * (5 + classes),
            f"X's channels must be len(anchor_mask) * (5 + class_num) = "
            f"{len(mask) * (5 + classes)}, got {list(x.shape)}")
    c.check(box.shape[2] in (4, -1), f"GTBox must be [N, B, 4], got {list(box.shape)}")
    c.check(label.dtype == "int32" and label.rank == 2,
            f"GTLabel must be an int32 [N, B], got {label.dtype}{list(label.shape)}")
    c.check(_same(label.shape[1], box.shape[1]),
            f"GTLabel {list(label.shape)} and GTBox {list(box.shape)} must have as many boxes")
    if c.has("GTScore"):
        score = _float(c, "GTScore", 2)
        c.check(_same(score.shape[1], box.shape[1]),
                f"GTScore {list(score.shape)} and GTBox {list(box.shape)} must have as many "
                "boxes")
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    return {"Loss": TensorType((n,), x.dtype),
            "ObjectnessMask": TensorType((n, len(mask), h, w), x.dtype),
            "GTMatchMask": TensorType((n, box.shape[1]), "int32")}


register("yolov3_loss", "X GTBox GTLabel GTScore?", "Loss ObjectnessMask GTMatchMask",
         {"anchors": "ints", "anchor_mask": "ints", "class_num": "int",
          "ignore_thresh": "float", "downsample_ratio": ("int", 32),
          "use_label_smooth": ("bool", True), "scale_x_y": ("float", 1.0)},
         infer=_yolov3_loss, traits=(LOSS,),
         doc="YOLOv3 loss per image: sigmoid-CE x/y, L1 w/h and class terms at each box's "
             "best anchor cell (scaled by 2 - w*h and its score), objectness CE elsewhere "
             "except predictions over ignore_thresh IoU; gradient to X only")


def _mine_hard_examples(c):
    cls = _float(c, "ClsLoss", 2)
    match, dist = c.x("MatchIndices"), _float(c, "MatchDist", 2)
    c.check(match.dtype == "int32" and match.rank == 2,
            f"MatchIndices must be an int32 [N, Np], got {match.dtype}{list(match.shape)}")
    for slot, v in (("MatchIndices", match), ("MatchDist", dist)):
        c.check(_same(v.shape[0], cls.shape[0]) and _same(v.shape[1], cls.shape[1]),
                f"{slot} {list(v.shape)} must be shaped as ClsLoss {list(cls.shape)}")
    if c.has("LocLoss"):
        loc = _float(c, "LocLoss", 2)
        c.check(_same(loc.shape[1], cls.shape[1]),
                f"LocLoss {list(loc.shape)} must be shaped as ClsLoss {list(cls.shape)}")
    kind = c["mining_type"]
    c.check(kind in ("max_negative", "hard_example"),
            f"mining_type must be max_negative or hard_example, got {kind!r}")
    if kind == "max_negative":
        c.check(c["neg_pos_ratio"] > 0, f"neg_pos_ratio must be positive, got "
                f"{c['neg_pos_ratio']}")
        c.check(0 < c["neg_dist_threshold"] < 1,
                f"neg_dist_threshold must be in (0, 1), got {c['neg_dist_threshold']}")
    else:
        c.check(c["sample_size"] > 0, f"sample_size must be positive, got {c['sample_size']}")
    return {"NegIndices": TensorType((-1, 1), "int32", False, 1),
            "UpdatedMatchIndices": TensorType(match.shape, "int32")}


register("mine_hard_examples", "ClsLoss LocLoss? MatchIndices MatchDist",
         "NegIndices UpdatedMatchIndices",
         {"neg_pos_ratio": ("float", 1.0), "neg_dist_threshold": ("float", 0.5),
          "sample_size": ("int", 0), "mining_type": ("str", "max_negative")},
         infer=_mine_hard_examples, traits=(NO_GRAD,),
         doc="per image: the highest-loss eligible priors (unmatched under neg_dist_threshold "
             "for max_negative, at most neg_pos_ratio x positives; any for hard_example, at "
             "most sample_size), ascending, as a LoD value bounded by N * Np rows")
def _anchor_inputs(c, labels):
    anchor = _float(c, "Anchor", 2)
    c.check(anchor.shape[1] in (4, -1), f"Anchor must be [A, 4], got {list(anchor.shape)}")
    gt = _float(c, "GtBoxes", 2)
    c.check(gt.lod_level == 1 and gt.shape[1] in (4, -1),
            f"GtBoxes must be a LoD [G, 4] value (one sequence per image), got lod_level "
            f"{gt.lod_level} and {list(gt.shape)}")
    slots = ("IsCrowd", "GtLabels") if labels else ("IsCrowd",)
    for slot in slots:
        v = c.x(slot)
        c.check(v.dtype in INT_DTYPES and v.lod_level == 1,
                f"{slot} must be an integer LoD value, got {v.dtype} lod_level {v.lod_level}")
    info = _float(c, "ImInfo", 2)
    c.check(info.shape[1] in (3, -1), f"ImInfo must be [N, 3], got {list(info.shape)}")
    return anchor


def _rpn_target_assign(c):
    anchor = _anchor_inputs(c, False)
    c.check(c["rpn_batch_size_per_im"] > 0,
            f"rpn_batch_size_per_im must be positive, got {c['rpn_batch_size_per_im']}")
    c.check(0 <= c["rpn_fg_fraction"] <= 1,
            f"rpn_fg_fraction must be in [0, 1], got {c['rpn_fg_fraction']}")
    lod = ("int32", False, 1)
    return {"LocationIndex": TensorType((-1,), *lod), "ScoreIndex": TensorType((-1,), *lod),
            "TargetBBox": TensorType((-1, 4), anchor.dtype, False, 1),
            "TargetLabel": TensorType((-1, 1), *lod),
            "BBoxInsideWeight": TensorType((-1, 4), anchor.dtype, False, 1)}


register("rpn_target_assign", "Anchor GtBoxes IsCrowd ImInfo",
         "LocationIndex ScoreIndex TargetBBox TargetLabel BBoxInsideWeight",
         {"rpn_batch_size_per_im": ("int", 256), "rpn_straddle_thresh": ("float", 0.0),
          "rpn_positive_overlap": ("float", 0.7), "rpn_negative_overlap": ("float", 0.3),
          "rpn_fg_fraction": ("float", 0.5), "use_random": ("bool", True),
          "seed": ("int", 0)},
         infer=_rpn_target_assign, traits=(NO_GRAD, RANDOM),
         lod_inputs=("GtBoxes", "IsCrowd"), lod="aware",
         doc="per image: anchors inside the image labelled fg (best or >= positive overlap "
             "with a non-crowd box) / bg (< negative overlap), sampled to "
             "rpn_batch_size_per_im; flat indices, encoded targets, labels and weights as "
             "LoD values bounded by N * A rows")


def _retinanet_target_assign(c):
    anchor = _anchor_inputs(c, True)
    lod = ("int32", False, 1)
    return {"LocationIndex": TensorType((-1,), *lod), "ScoreIndex": TensorType((-1,), *lod),
            "TargetBBox": TensorType((-1, 4), anchor.dtype, False, 1),
            "TargetLabel": TensorType((-1, 1), *lod),
            "BBoxInsideWeight": TensorType((-1, 4), anchor.dtype, False, 1),
            "ForegroundNumber": TensorType((-1, 1), *lod)}


register("retinanet_target_assign", "Anchor GtBoxes GtLabels IsCrowd ImInfo",
         "LocationIndex ScoreIndex TargetBBox TargetLabel BBoxInsideWeight ForegroundNumber",
         {"positive_overlap": ("float", 0.5), "negative_overlap": ("float", 0.4)},
         infer=_retinanet_target_assign, traits=(NO_GRAD,),
         lod_inputs=("GtBoxes", "GtLabels", "IsCrowd"), lod="aware",
         doc="per image: every fg anchor (best or >= positive_overlap) with its box's label "
             "and encoded target, every bg anchor (< negative_overlap) labelled 0, and the "
             "fg count + 1, as LoD values bounded by N * A rows")
