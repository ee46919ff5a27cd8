"""Metric ops: ``auc``, Paddle's stateful ROC AUC, whose positive/negative histograms are
persistable int64 state that the op reads and writes back every step (as batch_norm's stats)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, STATEFUL, register
from ...ir.shapes import prod_or_unknown
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dims_compatible


def auc_state_size(num_thresholds: int, slide_steps: int) -> int:
    """Entries of the StatPos/StatNeg state: one histogram of num_thresholds + 1 buckets, or
    with slide_steps > 0 one per step of the window, their sum, and a step counter."""
    buckets = num_thresholds + 1
    return buckets if slide_steps == 0 else (slide_steps + 1) * buckets + 1


def _auc(c):
    pred, label = c.x("Predict"), c.x("Label")
    c.check(pred.dtype in FLOAT_DTYPES, f"Predict must be floating point, got {pred.dtype}")
    c.check(pred.rank == 2, f"Predict must be [N, C] (the last column is the positive "
                            f"probability), got {list(pred.shape)}")
    c.check(label.dtype in INT_DTYPES, f"Label must be integer, got {label.dtype}")
    c.check(label.rank == 2 and label.shape[1] in (1, -1)
            and dims_compatible(label.shape[:1], pred.shape[:1]),
            f"Label must be [N, 1] for Predict {list(pred.shape)}, got {list(label.shape)}")
    c.check(c["num_thresholds"] >= 1, f"num_thresholds must be >= 1, got {c['num_thresholds']}")
    c.check(c["slide_steps"] >= 0, f"slide_steps must be >= 0, got {c['slide_steps']}")
    c.check(c["curve"] in ("ROC", "PR"), f"curve must be 'ROC' or 'PR', got {c['curve']!r}")
    size = auc_state_size(c["num_thresholds"], c["slide_steps"])
    for slot in ("StatPos", "StatNeg"):
        t = c.x(slot)
        c.check(t.dtype == "int64", f"{slot} must be int64, got {t.dtype}")
        c.check(prod_or_unknown(t.shape) in (size, -1),
                f"{slot} must hold {size} counts for num_thresholds={c['num_thresholds']}, "
                f"slide_steps={c['slide_steps']}, got {list(t.shape)}")
    return {"AUC": TensorType((1,), "float64"), "StatPosOut": c.x("StatPos"),
            "StatNegOut": c.x("StatNeg")}


register("auc", "Predict Label StatPos StatNeg", "AUC StatPosOut StatNegOut", {
    "curve": ("str", "ROC"), "num_thresholds": ("int", 2 ** 12 - 1), "slide_steps": ("int", 1),
}, infer=_auc, traits=(NO_GRAD, STATEFUL),
    # CTR-DNN's prediction of LoD token rows with a dense label per token: the real tokens
    # are the examples (aware: the packed buffer's padding rows are none); AUC is dense
    lod_inputs=("Predict", "Label"), lod="aware", lod_outputs={"AUC": ()},
    inplace={"StatPosOut": "StatPos", "StatNegOut": "StatNeg"},
    doc="adds the batch's predictions to positive/negative histograms (bucket "
        "int(p * num_thresholds)) and returns the ROC AUC of the accumulated ones; "
        "slide_steps > 0 keeps only the last slide_steps batches (Paddle computes the ROC "
        "curve for curve='PR' too, and so does graphc)")
