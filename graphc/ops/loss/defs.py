"""Loss ops beyond softmax/cross-entropy: sigmoid cross-entropy with logits, cos_sim, log_loss,
huber, smooth_l1, bpr, margin_rank, rank and kldiv losses, with Paddle 1.8's slots."""

from __future__ import annotations

from ...ir.opdef import LOSS, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dims_compatible


def _float(c, slot):
    t = c.x(slot)
    c.check(t.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {t.dtype}")
    return t


def _same_shape(c, a, b):
    ta, tb = _float(c, a), _float(c, b)
    c.check(ta.rank == tb.rank and dims_compatible(ta.shape, tb.shape),
            f"{a} {list(ta.shape)} and {b} {list(tb.shape)} must have the same shape")
    c.check(ta.dtype == tb.dtype, f"{a} is {ta.dtype} but {b} is {tb.dtype}")
    return ta


def _sigmoid_ce(c):
    return {"Out": _same_shape(c, "X", "Label")}


register("sigmoid_cross_entropy_with_logits", "X Label", "Out",
         {"ignore_index": ("int", -100), "normalize": ("bool", False)}, infer=_sigmoid_ce,
         traits=(LOSS,), lod_inputs=("X", "Label"),
         doc="max(X, 0) - X * Label + log(1 + exp(-|X|)) per element; 0 where Label == "
             "ignore_index; divided by the count of other elements when normalize")


def _cos_sim(c):
    x, y = _float(c, "X"), _float(c, "Y")
    c.check(x.rank >= 2 and x.rank == y.rank,
            f"X {list(x.shape)} and Y {list(y.shape)} must have the same rank >= 2")
    c.check(dims_compatible(x.shape[1:], y.shape[1:]),
            f"X {list(x.shape)} and Y {list(y.shape)} differ past the first dimension")
    c.check(y.shape[0] in (1, -1) or x.shape[0] < 0 or y.shape[0] == x.shape[0],
            f"Y must have 1 row or as many rows as X, got X {list(x.shape)}, "
            f"Y {list(y.shape)}")
    col = TensorType((x.shape[0], 1), x.dtype)
    return {"Out": col, "XNorm": col, "YNorm": TensorType((y.shape[0], 1), y.dtype)}


register("cos_sim", "X Y", "Out XNorm YNorm", infer=_cos_sim, lod_inputs=("X", "Y"),
         # Paddle shares X's LoD to Out; a LoD Y pairs with X's rows, so Out keeps it too
         lod_outputs={"Out": ("X", "Y"), "XNorm": ("X", "Y"), "YNorm": ("Y",)},
         doc="cosine similarity of X's and Y's rows (flattened past dim 0); a Y with one row "
             "is compared with every row of X")


def _log_loss(c):
    p = _same_shape(c, "Predicted", "Labels")
    c.check(p.rank == 2 and p.shape[1] in (1, -1), f"Predicted must be [N, 1], got "
                                                   f"{list(p.shape)}")
    return {"Loss": p}


register("log_loss", "Predicted Labels", "Loss", {"epsilon": ("float", 1e-4)},
         infer=_log_loss, traits=(LOSS,),
         doc="-Labels * log(Predicted + eps) - (1 - Labels) * log(1 - Predicted + eps)")


def _huber(c):
    x = _same_shape(c, "X", "Y")
    c.check(c["delta"] >= 0, f"delta must be >= 0, got {c['delta']}")
    return {"Out": x, "Residual": x}


register("huber_loss", "X Y", "Out Residual", {"delta": "float"}, infer=_huber,
         traits=(LOSS,),
         doc="r = Y - X; 0.5 r^2 where |r| <= delta, else delta * (|r| - 0.5 delta)")


def _smooth_l1(c):
    x = _same_shape(c, "X", "Y")
    for slot in ("InsideWeight", "OutsideWeight"):
        if c.has(slot):
            t = c.x(slot)
            c.check(dims_compatible(t.shape, x.shape),
                    f"{slot} {list(t.shape)} must match X {list(x.shape)}")
    c.check(x.rank >= 2, f"X must have rank >= 2, got {list(x.shape)}")
    return {"Diff": x, "Out": TensorType((x.shape[0], 1), x.dtype)}


register("smooth_l1_loss", "X Y InsideWeight? OutsideWeight?", "Diff Out",
         {"sigma": ("float", 1.0)}, infer=_smooth_l1, traits=(LOSS,),
         doc="per row: sum of OutsideWeight * smooth_l1(InsideWeight * (X - Y)), where "
             "smooth_l1(d) = 0.5 (sigma d)^2 if |d| < 1/sigma^2 else |d| - 0.5/sigma^2")


def _bpr(c):
    # Paddle's shape rule: X [..., C] and Label [..., 1] of the same leading dims, Y [..., 1]
    # (its test_layers builds a [N, 30, 10] X); each leading index is one row
    x, label = _float(c, "X"), c.x("Label")
    c.check(x.rank >= 2, f"X must be [N, C] (or [..., C]), got {list(x.shape)}")
    c.check(label.dtype in INT_DTYPES, f"Label must be integer, got {label.dtype}")
    c.check(label.rank == x.rank and label.shape[-1] in (1, -1)
            and dims_compatible(label.shape[:-1], x.shape[:-1]),
            f"Label must be [N, 1] for X {list(x.shape)}, got {list(label.shape)}")
    return {"Y": TensorType((*x.shape[:-1], 1), x.dtype)}


register("bpr_loss", "X Label", "Y", infer=_bpr, traits=(LOSS,), lod_inputs=("X", "Label"),
         lod_outputs={"Y": ("X", "Label")},  # Paddle shares X's LoD: one loss per token row
         doc="Bayesian personalised ranking: -mean over j != label of log sigmoid(X[label] - "
             "X[j]) per row")


def _pairwise(c, slots):
    first = _float(c, slots[0])
    for s in slots[1:]:
        t = _float(c, s)
        c.check(dims_compatible(t.shape, first.shape) and t.rank == first.rank,
                f"{s} {list(t.shape)} must match {slots[0]} {list(first.shape)}")
    c.check(first.rank == 2 and first.shape[1] in (1, -1),
            f"{slots[0]} must be [N, 1], got {list(first.shape)}")
    return first


def _margin_rank(c):
    x = _pairwise(c, ("X1", "X2", "Label"))
    return {"Out": x, "Activated": x}


register("margin_rank_loss", "X1 X2 Label", "Out Activated", {"margin": ("float", 0.1)},
         infer=_margin_rank, traits=(LOSS,),
         doc="max(0, -Label * (X1 - X2) + margin); Activated marks where it is positive")


def _rank(c):
    return {"Out": _pairwise(c, ("Left", "Right", "Label"))}


register("rank_loss", "Label Left Right", "Out", infer=_rank, traits=(LOSS,),
         doc="RankNet: log(1 + exp(Left - Right)) - Label * (Left - Right)")


_REDUCTIONS = ("none", "batchmean", "mean", "sum")


def _kldiv(c):
    x = _same_shape(c, "X", "Target")
    c.check(c["reduction"] in _REDUCTIONS,
            f"reduction must be one of {list(_REDUCTIONS)}, got {c['reduction']!r}")
    shape = x.shape if c["reduction"] == "none" else (1,)
    return {"Loss": TensorType(shape, x.dtype)}


register("kldiv_loss", "X Target", "Loss", {"reduction": ("str", "mean")}, infer=_kldiv,
         traits=(LOSS,),
         doc="Target * (log Target - X) where Target > 0 (X holds log-probabilities), "
             "reduced by none / batchmean / mean / sum")
