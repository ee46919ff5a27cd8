"""Metric layers computed inside the program: ``auc`` (Paddle 1.8's layers.auc), whose
histograms are persistable state, zeroed by the startup program and updated every run."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.errors import ProgramError
from ..ops.metric.defs import auc_state_size
from .helper import LayerHelper, check_variable


def _state(helper: LayerHelper, shape):
    """A persistable int64 tensor, zero at startup, named as Paddle names an unnamed global
    variable (``_generated_var_N``): scripts reset the auc states by those names (PaddleRec
    CTR-DNN's infer) and checkpoints carry them."""
    name = unique_name.generate("_generated_var")
    var = helper.main_program.global_block().create_var(
        name, shape, "int64", persistable=True, stop_gradient=True)
    sblock = helper.startup_program.global_block()
    svar = sblock.create_var(name, shape, "int64", persistable=True)
    sblock.append_op("fill_constant", outputs={"Out": svar},
                     attrs={"shape": list(shape), "dtype": "int64", "value": 0.0})
    return var


def auc(input, label, curve: str = "ROC", num_thresholds: int = 2 ** 12 - 1, topk: int = 1,
        slide_steps: int = 1):
    """Area under the ROC curve of ``input`` [N, 2] (column 1: the positive probability)
    for 0/1 ``label`` [N, 1]. Returns (auc over every batch so far, auc over the last
    ``slide_steps`` batches, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]).
    ``topk`` is accepted and unused, as in Paddle 1.8."""
    check_variable("auc", "input", input)
    check_variable("auc", "label", label)
    if curve not in ("ROC", "PR"):
        raise ProgramError(f"auc: curve must be 'ROC' or 'PR', got {curve!r}")
    if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, int) \
            or num_thresholds < 1:
        raise ProgramError(f"auc: num_thresholds must be a positive int, got {num_thresholds!r}")
    if isinstance(slide_steps, bool) or not isinstance(slide_steps, int) or slide_steps < 0:
        raise ProgramError(f"auc: slide_steps must be an int >= 0, got {slide_steps!r}")
    helper = LayerHelper("auc")
    auc_out = helper.create_variable_for_type_inference("float64", stop_gradient=True)
    batch_auc_out = helper.create_variable_for_type_inference("float64", stop_gradient=True)
    batch_stat_pos = _state(helper, [auc_state_size(num_thresholds, slide_steps)])
    batch_stat_neg = _state(helper, [auc_state_size(num_thresholds, slide_steps)])
    stat_pos = _state(helper, [1, num_thresholds + 1])
    stat_neg = _state(helper, [1, num_thresholds + 1])
    attrs = {"curve": curve, "num_thresholds": num_thresholds}
    helper.append_op("auc", {"Predict": input, "Label": label, "StatPos": batch_stat_pos,
                             "StatNeg": batch_stat_neg},
                     {"AUC": batch_auc_out, "StatPosOut": batch_stat_pos,
                      "StatNegOut": batch_stat_neg}, {**attrs, "slide_steps": slide_steps})
    helper.append_op("auc", {"Predict": input, "Label": label, "StatPos": stat_pos,
                             "StatNeg": stat_neg},
                     {"AUC": auc_out, "StatPosOut": stat_pos, "StatNegOut": stat_neg},
                     {**attrs, "slide_steps": 0})
    return auc_out, batch_auc_out, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg]
