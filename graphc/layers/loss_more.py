"""More losses and metrics of fluid.layers (issue 24): sigmoid_focal_loss,
teacher_student_sigmoid_loss, center_loss, npair_loss, mean_iou and edit_distance."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .helper import LayerHelper, check_variable


def _one(helper, op_type, inputs, slot, attrs, dtype, stop_gradient=False):
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs, {slot: out}, attrs)
    return out


def sigmoid_focal_loss(x, label, fg_num, gamma=2, alpha=0.25):
    """Per-element focal loss of logits ``x`` [N, C] against int ``label`` [N, 1] (0 is
    background, -1 ignored), divided by ``fg_num`` (the foreground count, int [1])."""
    for arg, v in (("x", x), ("label", label), ("fg_num", fg_num)):
        check_variable("sigmoid_focal_loss", arg, v)
    helper = LayerHelper("sigmoid_focal_loss")
    return _one(helper, "sigmoid_focal_loss", {"X": x, "Label": label, "FgNum": fg_num}, "Out",
                {"gamma": float(gamma), "alpha": float(alpha)}, x.dtype)


def teacher_student_sigmoid_loss(input, label, soft_max_up_bound=15.0,
                                 soft_max_lower_bound=-15.0):
    """Sigmoid cross-entropy against a click bit and a teacher's score packed in ``label``."""
    check_variable("teacher_student_sigmoid_loss", "input", input)
    check_variable("teacher_student_sigmoid_loss", "label", label)
    helper = LayerHelper("teacher_student_sigmoid_loss")
    return _one(helper, "teacher_student_sigmoid_loss", {"X": input, "Label": label}, "Y",
                {"soft_max_up_bound": float(soft_max_up_bound),
                 "soft_max_lower_bound": float(soft_max_lower_bound)}, input.dtype)


def center_loss(input, label, num_classes, alpha, param_attr, update_center=True):
    """0.5 |input - center[label]|^2 per row ([N, 1]); the centers are a parameter
    [num_classes, D] that the op itself moves towards its rows by ``alpha`` (not trained)."""
    check_variable("center_loss", "input", input)
    check_variable("center_loss", "label", label)
    if input.shape[1] < 0:
        raise ProgramError(f"center_loss: the feature size of input {list(input.shape)} must be "
                           f"known")
    helper = LayerHelper("center_loss")
    centers = helper.create_parameter(param_attr, [num_classes, input.shape[1]], input.dtype)
    # Paddle's centers take no gradient step: only the op's own update moves them
    centers.stop_gradient = True
    centers.trainable = False
    if isinstance(alpha, Variable):
        rate = alpha
    else:
        from .tensor import fill_constant
        rate = fill_constant([1], input.dtype, float(alpha))
    diff = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("center_loss", {"X": input, "Label": label, "Centers": centers,
                                     "CenterUpdateRate": rate},
                     {"SampleCenterDiff": diff, "Loss": loss, "CentersOut": centers},
                     {"cluster_num": int(num_classes), "need_update": bool(update_center)})
    return loss


def npair_loss(anchor, positive, labels, l2_reg=0.002):
    """N-pair loss (Sohn 2016) as Paddle 1.8 computes it: a [1] tensor."""
    for arg, v in (("anchor", anchor), ("positive", positive), ("labels", labels)):
        check_variable("npair_loss", arg, v)
    helper = LayerHelper("npair_loss")
    return _one(helper, "npair_loss", {"Anchor": anchor, "Positive": positive,
                                       "Labels": labels}, "Out", {"l2_reg": float(l2_reg)},
                anchor.dtype)


def mean_iou(input, label, num_classes):
    """(mean IoU [1] float32, wrong counts [num_classes] int32, correct counts int32)."""
    check_variable("mean_iou", "input", input)
    check_variable("mean_iou", "label", label)
    helper = LayerHelper("mean_iou")
    outs = [helper.create_variable_for_type_inference(d, stop_gradient=True)
            for d in ("float32", "int32", "int32")]
    helper.append_op("mean_iou", {"Predictions": input, "Labels": label},
                     dict(zip(("OutMeanIou", "OutWrong", "OutCorrect"), outs)),
                     {"num_classes": int(num_classes)})
    return tuple(outs)


def _padded(x, length, what):
    """A padded [N, L] int tensor and its lengths: a LoD ``x`` is padded here."""
    if length is not None:
        return x, length
    if not getattr(x, "lod_level", 0) and not _demand(x, "edit_distance", width=1):
        raise ProgramError(f"edit_distance: {what} is a padded tensor {list(x.shape)}; pass its "
                           f"lengths ({what}_length) or a LoD value")
    from .sequence import sequence_pad
    from .tensor import fill_constant, reshape
    padded, lengths = sequence_pad(x, fill_constant([1], x.dtype, 0))
    return reshape(padded, [0, -1]), lengths


def edit_distance(input, label, normalized=True, ignored_tokens=None, input_length=None,
                  label_length=None):
    """(distances [N, 1] float32, sequence count [1] int64) between hypotheses and references,
    LoD values or padded [N, L] tensors with their lengths."""
    check_variable("edit_distance", "input", input)
    check_variable("edit_distance", "label", label)
    if (input_length is None) != (label_length is None):
        raise ProgramError("edit_distance: give both input_length and label_length, or neither")
    hyps, hyps_len = _padded(input, input_length, "input")
    refs, refs_len = _padded(label, label_length, "label")
    helper = LayerHelper("edit_distance")
    out = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    num = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("edit_distance", {"Hyps": hyps, "Refs": refs, "HypsLength": hyps_len,
                                       "RefsLength": refs_len},
                     {"Out": out, "SequenceNum": num},
                     {"normalized": bool(normalized),
                      "ignored_tokens": [int(t) for t in ignored_tokens or ()]})
    return out, num


def _pad_lod(x, what, layer):
    """A LoD ``x`` padded to [N, bucket, ...] and its int64 lengths [N]."""
    if not getattr(x, "lod_level", 0) and not _demand(x, layer):
        raise ProgramError(f"{layer}: {what} {list(x.shape)} is neither a LoD value nor given "
                           f"with its lengths")
    from .sequence import sequence_pad
    from .tensor import fill_constant
    return sequence_pad(x, fill_constant([1], x.dtype, 0))


def warpctc(input, label, blank=0, norm_by_times=False, input_length=None, label_length=None):
    """CTC loss [N, 1] of unscaled logits against int labels: LoD values ([T_total, C + 1] and
    [L_total, 1]) or padded [T, N, C + 1] and [N, L] with ``input_length``/``label_length``."""
    check_variable("warpctc", "input", input)
    check_variable("warpctc", "label", label)
    from .tensor import reshape, transpose
    if (input_length is None) != (label_length is None):
        raise ProgramError("warpctc: give both input_length and label_length, or neither")
    if input_length is None:
        padded, input_length = _pad_lod(input, "input", "warpctc")
        input = transpose(padded, [1, 0, 2])
        padded, label_length = _pad_lod(label, "label", "warpctc")
        label = reshape(padded, [0, -1])
    helper = LayerHelper("warpctc")
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("warpctc", {"Logits": input, "Label": label, "LogitsLength": input_length,
                                 "LabelLength": label_length}, {"Loss": loss},
                     {"blank": int(blank), "norm_by_times": bool(norm_by_times)})
    return loss


def ctc_greedy_decoder(input, blank, input_length=None, padding_value=0, name=None):
    """Best path decoding: the arg-max class per step, repeats merged and blanks removed.
    A LoD ``input`` [T, C + 1] gives a LoD int64 [T', 1] of each sequence's kept ids (in the
    input's token buffer: a sequence only shrinks); a padded [N, T, C + 1] with
    ``input_length`` [N, 1] gives (ids [N, T] padded with ``padding_value``, lengths [N, 1])."""
    check_variable("ctc_greedy_decoder", "input", input)
    helper = LayerHelper("ctc_greedy_decoder", name)
    if input_length is None:
        if not getattr(input, "lod_level", 0) and not _demand(input, "ctc_greedy_decoder"):
            raise ProgramError(
                f"ctc_greedy_decoder: input {list(input.shape)} is dense; give a LoD value "
                f"[T, num_classes + 1], or a padded [N, T, num_classes + 1] with input_length")
        from .loss import topk
        _, ids = topk(input, k=1)
        out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
        helper.append_op("ctc_align", {"Input": ids}, {"Output": out},
                         {"blank": int(blank), "merge_repeated": True})
        return out
    from .manipulation import argmax
    ids = argmax(input, axis=-1)
    out = helper.create_variable_for_type_inference(ids.dtype, stop_gradient=True)
    length = helper.create_variable_for_type_inference(input_length.dtype, stop_gradient=True)
    helper.append_op("ctc_align", {"Input": ids, "InputLength": input_length},
                     {"Output": out, "OutputLength": length},
                     {"blank": int(blank), "merge_repeated": True,
                      "padding_value": int(padding_value)})
    return out, length


def sampled_softmax_with_cross_entropy(logits, label, num_samples, num_true=1,
                                       remove_accidental_hits=True, use_customized_samples=False,
                                       customized_samples=None, customized_probabilities=None,
                                       seed=0):
    """Sampled softmax loss [N, 1]: the true classes against ``num_samples`` unique
    log-uniform classes drawn once per batch each step (graphc's seed rule; ``seed`` fixes
    the op's seed), or the given samples and probabilities."""
    check_variable("sampled_softmax_with_cross_entropy", "logits", logits)
    check_variable("sampled_softmax_with_cross_entropy", "label", label)
    if label.shape[1] >= 0 and label.shape[1] != num_true:
        raise ProgramError(f"sampled_softmax_with_cross_entropy: label {list(label.shape)} "
                           f"must have num_true={num_true} columns")
    helper = LayerHelper("sampled_softmax_with_cross_entropy")
    inputs = {"Logits": logits, "Labels": label}
    if use_customized_samples:
        inputs["CustomizedSamples"] = customized_samples
        inputs["CustomizedProbabilities"] = customized_probabilities
    loss = helper.create_variable_for_type_inference(logits.dtype)
    samples = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    probs = helper.create_variable_for_type_inference(logits.dtype, stop_gradient=True)
    helper.append_op("sampled_softmax_with_cross_entropy", inputs,
                     {"Loss": loss, "Samples": samples, "Probabilities": probs},
                     {"num_samples": int(num_samples),
                      "remove_accidental_hits": bool(remove_accidental_hits),
                      "use_customized_samples": bool(use_customized_samples),
                      "seed": int(seed)})
    return loss


def _demand(x, layer: str, width: int | None = None) -> bool:
    """A dense x computed from a feed declared dense, of the LoD form the layer takes (rows
    ``[T, D]``, D = ``width`` where given): typed a LoD value (ir/lod_demand.py). A padded
    ``[N, L, ...]`` value keeps asking for its lengths."""
    from ..ir.lod_demand import demand_lod
    from ..ir.source import user_source
    if not isinstance(x, Variable) or x.shape is None or len(x.shape) != 2 or \
            width is not None and x.shape[1] != width:
        return False
    return demand_lod(x, 1, f"{layer} at {user_source()}")
