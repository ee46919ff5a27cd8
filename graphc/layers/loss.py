"""Losses and metrics: softmax_with_cross_entropy, cross_entropy, top_k, accuracy.

Labels are int64 column vectors ``[N, 1]`` unless ``soft_label`` is set, as in Paddle.
"""

from __future__ import annotations

from .helper import LayerHelper, check_variable


def softmax_with_cross_entropy(logits, label, soft_label: bool = False,
                               ignore_index: int = -100, numeric_stable_mode: bool = True,
                               return_softmax: bool = False, axis: int = -1):
    check_variable("softmax_with_cross_entropy", "logits", logits)
    check_variable("softmax_with_cross_entropy", "label", label)
    helper = LayerHelper("softmax_with_cross_entropy")
    softmax = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("softmax_with_cross_entropy", {"Logits": logits, "Label": label},
                     {"Softmax": softmax, "Loss": loss},
                     {"soft_label": soft_label, "ignore_index": ignore_index,
                      "numeric_stable_mode": numeric_stable_mode, "axis": axis})
    return (loss, softmax) if return_softmax else loss


def cross_entropy(input, label, soft_label: bool = False, ignore_index: int = -100):
    check_variable("cross_entropy", "input", input)
    check_variable("cross_entropy", "label", label)
    helper = LayerHelper("cross_entropy")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cross_entropy", {"X": input, "Label": label}, {"Y": out},
                     {"soft_label": soft_label, "ignore_index": ignore_index})
    return out


def topk(input, k: int, name=None):
    check_variable("topk", "input", input)
    helper = LayerHelper("top_k", name)
    values = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", {"X": input}, {"Out": values, "Indices": indices}, {"k": k})
    return values, indices


def accuracy(input, label, k: int = 1, correct=None, total=None):
    """Top-k accuracy over the batch: a [1] float32 tensor."""
    helper = LayerHelper("accuracy")
    values, indices = topk(input, k)
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    correct = correct or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    total = total or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("accuracy", {"Out": values, "Indices": indices, "Label": label},
                     {"Accuracy": acc, "Correct": correct, "Total": total})
    return acc
