"""``detection_map``: Paddle's mean average precision of detections against ground truth,
over the batch or accumulated in persistable state across runs (fluid.metrics.DetectionMAP).

Paddle keeps the accumulated (score, flag) records as LoD tensors that grow every run; graphc
keeps them in a fixed-capacity table (attribute ``capacity``) so the step has static shapes.
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, STATEFUL, register
from ...ir.types import FLOAT_DTYPES, TensorType

#: default rows of the TruePos/FalsePos tables (records of every detection seen so far):
#: 262144 detections, 3 MiB a table; a step costs O(capacity) (merge and AP passes)
DEFAULT_CAPACITY = 1 << 18


def _detection_map(c):
    det, label = c.x("DetectRes"), c.x("Label")
    c.check(det.dtype in FLOAT_DTYPES and det.rank == 2 and det.shape[1] in (6, -1)
            and det.lod_level == 1,
            "DetectRes must be a floating LoD value (level 1: the image of each row) of rows "
            f"[label, score, x1, y1, x2, y2], got {det}")
    c.check(label.dtype == det.dtype and label.rank == 2 and label.shape[1] in (5, 6, -1)
            and label.lod_level == 1,
            f"Label must be a LoD value (level 1) of {det.dtype} rows [label, x1, y1, x2, y2] "
            f"or [label, difficult, x1, y1, x2, y2], got {label}")
    ncls, cap = c["class_num"], c["capacity"]
    c.check(ncls > 0, f"class_num must be positive, got {ncls}")
    c.check(cap > 0, f"capacity must be positive, got {cap}")
    c.check(c["ap_type"] in ("integral", "11point"),
            f"ap_type must be 'integral' or '11point', got {c['ap_type']!r}")
    states = [c.has(s) for s in ("PosCount", "TruePos", "FalsePos")]
    c.check(all(states) or not any(states), "give PosCount, TruePos and FalsePos together")
    if c.has("HasState"):
        has = c.x("HasState")
        c.check(has.dtype == "int32" and has.shape in ((1,), (-1,)),
                f"HasState must be int32 [1], got {has}")
    if all(states):
        pos = c.x("PosCount")
        c.check(pos.dtype == "int32" and pos.shape == (ncls, 1),
                f"PosCount must be int32 [class_num={ncls}, 1], got {pos}")
        for slot in ("TruePos", "FalsePos"):
            t = c.x(slot)
            c.check(t.dtype == det.dtype and t.shape == (cap, 3) and t.lod_level == 0,
                    f"{slot} must be a dense {det.dtype} [capacity={cap}, 3] table, got {t}")
    table = TensorType((cap, 3), det.dtype)
    return {"MAP": TensorType((1,), det.dtype),
            "AccumPosCount": TensorType((ncls, 1), "int32"),
            "AccumTruePos": table, "AccumFalsePos": table}


register("detection_map", "DetectRes Label HasState? PosCount? TruePos? FalsePos?",
         "MAP AccumPosCount AccumTruePos AccumFalsePos",
         {"class_num": "int", "background_label": ("int", 0),
          "overlap_threshold": ("float", 0.5), "evaluate_difficult": ("bool", True),
          "ap_type": ("str", "integral"), "capacity": ("int", DEFAULT_CAPACITY)},
         infer=_detection_map, traits=(NO_GRAD, STATEFUL),
         lod_inputs=("DetectRes", "Label"), lod="aware",
         doc="mAP of the detections (rows [label, score, box]; boxes clipped to [0, 1]) "
             "matched greedily by score to the ground truth of their image and class (IoU > "
             "overlap_threshold); with HasState = 1 the PosCount/TruePos/FalsePos state is "
             "added first. State: PosCount int32 [class_num, 1] positives per class; "
             "TruePos/FalsePos [capacity, 3] records (class, score, flag) sorted by class, "
             "then score descending (earlier runs first on ties), empty rows (class -1) last. "
             "When the records reach capacity MAP is NaN (the table is full; reset it). As "
             "Paddle's kernel, a class counts when its positive count is above 0 and differs "
             "from background_label; labels outside [0, class_num) are dropped")
