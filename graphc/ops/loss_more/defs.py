"""Definitions of the losses in this family: focal, teacher-student, center, n-pair, and the
metrics mean_iou and edit_distance (padded sequences with lengths, docs/porting_from_paddle.md)."""

from __future__ import annotations

from ...ir.opdef import LOSS, NO_GRAD, RANDOM, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dims_compatible


def _float(c, slot):
    t = c.x(slot)
    c.check(t.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {t.dtype}")
    return t


def _int(c, slot):
    t = c.x(slot)
    c.check(t.dtype in INT_DTYPES, f"{slot} must be an integer tensor, got {t.dtype}")
    return t


def _label_column(c, x, slot="Label"):
    lab = c.x(slot)
    c.check(lab.rank == 2 and lab.shape[1] in (1, -1)
            and dims_compatible(lab.shape[:1], x.shape[:1]),
            f"{slot} must be [N, 1] with X's N, got {slot} {list(lab.shape)} and "
            f"X {list(x.shape)}")
    return lab


def _focal(c):
    x = _float(c, "X")
    c.check(x.rank == 2, f"X must be [N, C], got {list(x.shape)}")
    _label_column(c, x)
    _int(c, "Label")
    fg = _int(c, "FgNum")
    c.check(fg.rank == 1 and fg.shape[0] in (1, -1), f"FgNum must be [1], got {list(fg.shape)}")
    return {"Out": x}


register("sigmoid_focal_loss", "X Label FgNum", "Out",
         {"gamma": ("float", 2.0), "alpha": ("float", 0.25)}, infer=_focal, traits=(LOSS,),
         doc="per class d: -(Label == d+1) alpha (1-p)^gamma log p - (Label not in {-1, d+1}) "
             "(1-alpha) p^gamma log(1-p), p = sigmoid(X), divided by max(FgNum, 1)")


def _teacher_student(c):
    x = _float(c, "X")
    c.check(x.rank == 2 and x.shape[1] in (1, -1), f"X must be [N, 1], got {list(x.shape)}")
    lab = _label_column(c, x)
    c.check(lab.dtype == x.dtype, f"Label is {lab.dtype} but X is {x.dtype}")
    return {"Y": x}


register("teacher_student_sigmoid_loss", "X Label", "Y",
         {"soft_max_up_bound": ("float", 15.0), "soft_max_lower_bound": ("float", -15.0)},
         infer=_teacher_student, traits=(LOSS,),
         doc="sigmoid cross-entropy with the click bit of Label (< -1: 0, < 0: 1, < 1: 0, "
             "else 1) plus, for Label >= 0, the one with the teacher's score Label mod 1")


def _center(c):
    x = _float(c, "X")
    c.check(x.rank == 2, f"X must be [N, D], got {list(x.shape)}")
    _label_column(c, x)
    _int(c, "Label")
    cen = c.x("Centers")
    c.check(cen.rank == 2 and dims_compatible(cen.shape[1:], x.shape[1:])
            and cen.shape[0] in (c["cluster_num"], -1),
            f"Centers must be [cluster_num={c['cluster_num']}, D={x.shape[1]}], "
            f"got {list(cen.shape)}")
    rate = _float(c, "CenterUpdateRate")
    c.check(rate.rank == 1 and rate.shape[0] in (1, -1),
            f"CenterUpdateRate must be [1], got {list(rate.shape)}")
    return {"SampleCenterDiff": x, "Loss": TensorType((x.shape[0], 1), x.dtype),
            "CentersOut": cen}


register("center_loss", "X Label Centers CenterUpdateRate", "SampleCenterDiff Loss CentersOut",
         {"cluster_num": "int", "need_update": ("bool", True)}, infer=_center, traits=(LOSS,),
         doc="Loss = 0.5 |X - Centers[Label]|^2 per row; when need_update, CentersOut[k] = "
             "Centers[k] + rate * sum of the rows' (X - Centers[k]) labelled k / (1 + count)")


def _npair(c):
    a, p = _float(c, "Anchor"), _float(c, "Positive")
    c.check(a.rank == 2 and p.rank == 2 and dims_compatible(a.shape, p.shape),
            f"Anchor {list(a.shape)} and Positive {list(p.shape)} must both be [N, D]")
    lab = c.x("Labels")
    c.check(lab.rank in (1, 2) and dims_compatible(lab.shape[:1], a.shape[:1]),
            f"Labels must be [N] or [N, 1] with Anchor's N, got {list(lab.shape)}")
    return {"Out": TensorType((1,), a.dtype)}


register("npair_loss", "Anchor Positive Labels", "Out", {"l2_reg": ("float", 0.002)},
         infer=_npair, traits=(LOSS,),
         doc="mean soft-label softmax cross-entropy of Anchor Positive^T against the rows of "
             "same-label indicators (normalised), plus l2_reg/4 (mean |a|^2 + mean |p|^2)")


def _mean_iou(c):
    pred, lab = _int(c, "Predictions"), _int(c, "Labels")
    c.check(dims_compatible(pred.shape, lab.shape) and pred.rank == lab.rank,
            f"Predictions {list(pred.shape)} and Labels {list(lab.shape)} must have the same "
            f"shape")
    n = c["num_classes"]
    c.check(n > 0, f"num_classes must be > 0, got {n}")
    for slot in ("InWrongs", "InCorrects"):
        for t in c.xs(slot) if c.has(slot) else []:
            c.check(t.shape in ((n,), (-1,)), f"{slot} must be [num_classes={n}], got "
                                               f"{list(t.shape)}")
    return {"OutMeanIou": TensorType((1,), "float32"), "OutWrong": TensorType((n,), "int32"),
            "OutCorrect": TensorType((n,), "int32")}


register("mean_iou", "Predictions Labels InWrongs*? InCorrects*? InMeanIou*?",
         "OutMeanIou OutWrong OutCorrect", {"num_classes": "int"}, infer=_mean_iou,
         traits=(NO_GRAD,),
         doc="per class: correct = pred == label == k; wrong counts k as label or prediction of "
             "a mismatch; mean over classes seen of correct / (correct + wrong)")


def _edit_distance(c):
    h, r = _int(c, "Hyps"), _int(c, "Refs")
    c.check(h.rank == 2 and r.rank == 2 and dims_compatible(h.shape[:1], r.shape[:1]),
            f"Hyps {list(h.shape)} and Refs {list(r.shape)} must be padded [N, L] with the "
            f"same N")
    for slot in ("HypsLength", "RefsLength"):
        t = _int(c, slot)
        c.check(t.rank == 1 and dims_compatible(t.shape, h.shape[:1]),
                f"{slot} must be [N], got {list(t.shape)}")
    return {"Out": TensorType((h.shape[0], 1), "float32"), "SequenceNum": TensorType((1,),
                                                                                     "int64")}


register("edit_distance", "Hyps Refs HypsLength RefsLength", "Out SequenceNum",
         {"normalized": ("bool", False), "ignored_tokens": ("ints", ())},
         infer=_edit_distance, traits=(NO_GRAD,),
         doc="Levenshtein distance of each padded hypothesis (its first HypsLength tokens, "
             "ignored_tokens dropped) to its reference; divided by the reference's length "
             "when normalized")


def _warpctc(c):
    logits = _float(c, "Logits")
    c.check(logits.rank == 3, f"Logits must be padded [T, N, num_classes + 1], got "
                              f"{list(logits.shape)}")
    lab = _int(c, "Label")
    n = logits.shape[1:2]
    c.check(lab.rank == 2 and dims_compatible(lab.shape[:1], n),
            f"Label must be padded [N, L] with Logits' N, got Label {list(lab.shape)} and "
            f"Logits {list(logits.shape)}")
    for slot in ("LogitsLength", "LabelLength"):
        t = _int(c, slot)
        c.check(t.rank == 1 and dims_compatible(t.shape, n),
                f"{slot} must be [N], got {list(t.shape)}")
    k = logits.shape[2]
    c.check(0 <= c["blank"] and (k < 0 or c["blank"] < k),
            f"blank {c['blank']} must be in [0, {k}) for Logits {list(logits.shape)}")
    return {"Loss": TensorType((logits.shape[1], 1), logits.dtype)}


register("warpctc", "Logits Label LogitsLength LabelLength", "Loss",
         {"blank": ("int", 0), "norm_by_times": ("bool", False)}, infer=_warpctc,
         traits=(LOSS,),
         doc="CTC loss -log p(Label | softmax(Logits)) per sequence (forward algorithm in log "
             "space); norm_by_times divides the gradient, not the loss, by the sequence's T")


def _ctc_align(c):
    x = _int(c, "Input")
    if x.lod_level:
        # Paddle's LoD form: [T, 1] arg-max ids per token in, the kept ids per sequence out;
        # the output's buffer is the input's (a sequence never grows), its lengths the counts
        c.check(x.rank == 2 and x.shape[1] in (1, -1),
                f"a LoD Input must hold one id per token ([T, 1]), got {x}")
        c.check(not c.has("InputLength"),
                f"InputLength is for a padded [N, T] Input; the LoD Input {x} has its lengths")
        # Paddle aligns over the outermost level: a level-2 Input's sequences are its
        # top-level entries (their sub-sequences back to back), and the Output has one level
        return {"Output": x.with_lod(1)}
    c.check(x.rank == 2, f"Input must be padded [N, T] (with InputLength) or a LoD value "
                         f"[T, 1], got {list(x.shape)}")
    c.check(c.has("InputLength"), f"a padded Input {list(x.shape)} needs InputLength [N, 1]")
    ln = _int(c, "InputLength")
    c.check(ln.rank == 2 and ln.shape[1] in (1, -1) and dims_compatible(ln.shape[:1],
                                                                       x.shape[:1]),
            f"InputLength must be [N, 1], got {list(ln.shape)}")
    return {"Output": x, "OutputLength": TensorType((x.shape[0], 1), ln.dtype)}


register("ctc_align", "Input InputLength?", "Output OutputLength?",
         {"blank": ("int", 0), "merge_repeated": ("bool", True), "padding_value": ("int", 0)},
         infer=_ctc_align, traits=(NO_GRAD,), lod_inputs=("Input",), lod="aware",
         doc="each sequence's tokens with repeats merged and blanks removed: a LoD Input gives "
             "a LoD Output of the kept ids; a padded one (first InputLength tokens of a row) "
             "the kept ids moved to the front, padding_value after, OutputLength their count")


def _sampled_softmax(c):
    x = _float(c, "Logits")
    c.check(x.rank == 2, f"Logits must be [N, K], got {list(x.shape)}")
    lab = _int(c, "Labels")
    c.check(lab.rank == 2 and dims_compatible(lab.shape[:1], x.shape[:1]),
            f"Labels must be [N, num_true] with Logits' N, got {list(lab.shape)}")
    s = c["num_samples"]
    c.check(s > 0 and (x.shape[1] < 0 or s <= x.shape[1]),
            f"num_samples {s} must be in [1, K] for Logits {list(x.shape)}")
    width = -1 if lab.shape[1] < 0 else lab.shape[1] + s
    if c["use_customized_samples"]:
        c.check(c.has("CustomizedSamples") and c.has("CustomizedProbabilities"),
                "use_customized_samples needs CustomizedSamples and CustomizedProbabilities")
        for slot in ("CustomizedSamples", "CustomizedProbabilities"):
            t = c.x(slot)
            c.check(t.rank == 2 and dims_compatible(t.shape, (x.shape[0], width)),
                    f"{slot} must be [N, num_true + num_samples = {width}], got "
                    f"{list(t.shape)}")
    return {"Loss": TensorType((x.shape[0], 1), x.dtype),
            "Samples": TensorType((x.shape[0], width), "int64"),
            "Probabilities": TensorType((x.shape[0], width), x.dtype)}


register("sampled_softmax_with_cross_entropy",
         "Logits Labels CustomizedSamples? CustomizedProbabilities?",
         "Loss Samples Probabilities",
         {"num_samples": "int", "remove_accidental_hits": ("bool", True),
          "use_customized_samples": ("bool", False), "seed": ("int", 0)},
         infer=_sampled_softmax, traits=(LOSS, RANDOM),
         grad_reads=("Logits", "Labels", "Samples", "Probabilities"),
         doc="softmax cross-entropy over the true classes and num_samples unique log-uniform "
             "samples (shared by the batch), logits less log Q, accidental hits masked")
