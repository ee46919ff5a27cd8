"""Losses and metrics: softmax_with_cross_entropy, cross_entropy, top_k, accuracy,
square_error_cost, sigmoid_cross_entropy_with_logits, cos_sim and Paddle 1.8's other losses."""

from __future__ import annotations

from .helper import FLOATS, LayerHelper, check_dtype, check_variable


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
    check_dtype("cross_entropy", "input", input, FLOATS)
    check_variable("cross_entropy", "label", label)
    helper = LayerHelper("cross_entropy")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cross_entropy", {"X": input, "Label": label}, {"Y": out},
                     {"soft_label": soft_label, "ignore_index": ignore_index})
    return out


def topk(input, k: int, name=None):
    check_variable("topk", "input", input)
    helper = LayerHelper("top_k", name)
    # values carry a gradient back to input (Paddle's top_k_grad); indices do not
    values = helper.create_variable_for_type_inference(input.dtype)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", {"X": input}, {"Out": values, "Indices": indices}, {"k": k})
    return values, indices


def accuracy(input, label, k: int = 1, correct=None, total=None):
    """Top-k accuracy over the batch: a [1] float32 tensor."""
    helper = LayerHelper("accuracy")
    values, indices = topk(input, k)
    values.stop_gradient = True  # only a metric reads them: nothing to differentiate
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    correct = correct or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    total = total or helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("accuracy", {"Out": values, "Indices": indices, "Label": label},
                     {"Accuracy": acc, "Correct": correct, "Total": total})
    return acc


def square_error_cost(input, label):
    """(input - label) ** 2 per element, as Paddle builds it (elementwise_sub, square)."""
    check_variable("square_error_cost", "input", input)
    check_variable("square_error_cost", "label", label)
    helper = LayerHelper("square_error_cost")
    minus = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("elementwise_sub", {"X": input, "Y": label}, {"Out": minus})
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("square", {"X": minus}, {"Out": out})
    return out


def mse_loss(input, label):
    """The mean of square_error_cost over every element: a [1] tensor."""
    from .math import reduce_mean
    return reduce_mean(square_error_cost(input, label))


def _loss(layer, op_type, inputs: dict, outputs, attrs=None, name=None):
    """Append ``op_type``; ``outputs``: slot -> dtype or None (the first input's dtype)."""
    first = next(iter(inputs.values()))
    for arg, var in inputs.items():
        if var is not None:
            check_variable(layer, arg, var)
    helper = LayerHelper(layer, name)
    outs = {slot: helper.create_variable_for_type_inference(dtype or first.dtype)
            for slot, dtype in outputs.items()}
    helper.append_op(op_type, {k: v for k, v in inputs.items() if v is not None}, outs,
                     attrs or {})
    return outs


def sigmoid_cross_entropy_with_logits(x, label, ignore_index: int = -100, name=None,
                                      normalize: bool = False):
    """Element-wise logistic loss of logits ``x`` against probabilities ``label``."""
    return _loss("sigmoid_cross_entropy_with_logits", "sigmoid_cross_entropy_with_logits",
                 {"X": x, "Label": label}, {"Out": None},
                 {"ignore_index": ignore_index, "normalize": normalize}, name)["Out"]


def cos_sim(X, Y):
    """Cosine similarity of each row of X with Y's row (Y may have a single row): [N, 1]."""
    return _loss("cos_sim", "cos_sim", {"X": X, "Y": Y},
                 {"Out": None, "XNorm": None, "YNorm": None})["Out"]


def log_loss(input, label, epsilon: float = 1e-4, name=None):
    """Negative log likelihood of probabilities ``input`` [N, 1] for 0/1 ``label``."""
    return _loss("log_loss", "log_loss", {"Predicted": input, "Labels": label}, {"Loss": None},
                 {"epsilon": epsilon}, name)["Loss"]


def huber_loss(input, label, delta):
    """Quadratic within ``delta`` of the label, linear beyond."""
    check_dtype("huber_loss", "input", input, ("float32", "float64"))  # Paddle 1.8's lists
    check_dtype("huber_loss", "label", label, ("float32", "float64"))
    return _loss("huber_loss", "huber_loss", {"X": input, "Y": label},
                 {"Out": None, "Residual": None}, {"delta": delta})["Out"]


def smooth_l1(x, y, inside_weight=None, outside_weight=None, sigma=None):
    """Smooth L1 (Fast R-CNN) loss summed per row: [N, 1]."""
    return _loss("smooth_l1_loss", "smooth_l1_loss",
                 {"X": x, "Y": y, "InsideWeight": inside_weight,
                  "OutsideWeight": outside_weight}, {"Diff": None, "Out": None},
                 {"sigma": 1.0 if sigma is None else sigma})["Out"]


def bpr_loss(input, label, name=None):
    """Bayesian personalised ranking loss of scores [N, C] for positive items [N, 1]."""
    return _loss("bpr_loss", "bpr_loss", {"X": input, "Label": label}, {"Y": None},
                 name=name)["Y"]


def margin_rank_loss(label, left, right, margin: float = 0.1, name=None):
    """max(0, -label * (left - right) + margin), all [N, 1]."""
    return _loss("margin_rank_loss", "margin_rank_loss",
                 {"X1": left, "X2": right, "Label": label}, {"Out": None, "Activated": None},
                 {"margin": margin}, name)["Out"]


def rank_loss(label, left, right, name=None):
    """RankNet's loss of scores ``left``/``right`` for target probabilities ``label``."""
    return _loss("rank_loss", "rank_loss", {"Label": label, "Left": left, "Right": right},
                 {"Out": None}, name=name)["Out"]


def kldiv_loss(x, target, reduction: str = "mean", name=None):
    """KL divergence of ``target`` from log-probabilities ``x``."""
    return _loss("kldiv_loss", "kldiv_loss", {"X": x, "Target": target}, {"Loss": None},
                 {"reduction": reduction}, name)["Loss"]
