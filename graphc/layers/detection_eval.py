"""Detection evaluation inside the program: ``detection_map`` (Paddle 1.8's
layers.detection.detection_map, which fluid.metrics.DetectionMAP builds on)."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.errors import ProgramError
from ..ops.detection_eval.defs import DEFAULT_CAPACITY
from .helper import LayerHelper, check_variable


def map_state(helper: LayerHelper, suffix: str, shape, dtype: str, value: float):
    """A persistable state tensor ``<helper name>_<suffix>`` set to ``value`` at startup."""
    name = "_".join([unique_name.generate(helper.name), suffix])
    var = helper.main_program.global_block().create_var(
        name, list(shape), dtype, persistable=True, stop_gradient=True)
    sblock = helper.startup_program.global_block()
    svar = sblock.create_var(name, list(shape), dtype, persistable=True)
    sblock.append_op("fill_constant", outputs={"Out": svar},
                     attrs={"shape": list(shape), "dtype": dtype, "value": float(value)})
    return var


def map_states(helper: LayerHelper, class_num: int, dtype: str,
               capacity: int = DEFAULT_CAPACITY):
    """[PosCount int32 [class_num, 1], TruePos, FalsePos [capacity, 3]] (empty rows -1)."""
    return [map_state(helper, "accum_pos_count", [class_num, 1], "int32", 0),
            map_state(helper, "accum_true_pos", [capacity, 3], dtype, -1),
            map_state(helper, "accum_false_pos", [capacity, 3], dtype, -1)]


def detection_map(detect_res, label, class_num, background_label=0, overlap_threshold=0.3,
                  evaluate_difficult=True, has_state=None, input_states=None, out_states=None,
                  ap_version="integral", *, capacity=None):
    """mAP of ``detect_res`` (LoD rows [label, score, x1, y1, x2, y2], as multiclass_nms
    gives) against ``label`` (LoD rows [label, (difficult,) x1, y1, x2, y2]). With
    ``has_state`` ([1] int32, 1 = use them) and ``input_states`` [PosCount, TruePos,
    FalsePos] (see ``map_states``) the records of earlier runs count too; ``out_states``
    receive the accumulated ones. As Paddle 1.8, ``background_label`` is not passed on (the
    op uses its default 0). ``capacity`` (graphc's): rows of the record tables, by default
    the states' (else DEFAULT_CAPACITY); the mAP is NaN once the records fill them."""
    check_variable("detection_map", "detect_res", detect_res)
    check_variable("detection_map", "label", label)
    if isinstance(class_num, bool) or not isinstance(class_num, int) or class_num <= 0:
        raise ProgramError(f"detection_map: class_num must be a positive int, got "
                           f"{class_num!r}")
    if ap_version not in ("integral", "11point"):
        raise ProgramError(f"detection_map: ap_version must be 'integral' or '11point', got "
                           f"{ap_version!r}")
    for arg, states in (("input_states", input_states), ("out_states", out_states)):
        if states is not None and len(states) != 3:
            raise ProgramError(f"detection_map: {arg} must be [pos_count, true_pos, "
                               f"false_pos], got {len(states)} values")
    helper = LayerHelper("detection_map")
    dtype = detect_res.dtype
    map_out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    outs = out_states or [helper.create_variable_for_type_inference(d, stop_gradient=True)
                          for d in ("int32", dtype, dtype)]
    inputs = {"DetectRes": detect_res, "Label": label}
    if has_state is not None:
        inputs["HasState"] = has_state
    attrs = {"overlap_threshold": float(overlap_threshold),
             "evaluate_difficult": bool(evaluate_difficult), "ap_type": ap_version,
             "class_num": class_num}
    if input_states is not None:
        inputs.update(PosCount=input_states[0], TruePos=input_states[1],
                      FalsePos=input_states[2])
    states = input_states or out_states
    if capacity is None and states is not None:
        capacity = int(states[1].shape[0])  # the tables' size is the state's
    if capacity is not None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ProgramError(f"detection_map: capacity must be a positive int, got "
                               f"{capacity!r}")
        attrs["capacity"] = capacity
    helper.append_op("detection_map", inputs,
                     {"MAP": map_out, "AccumPosCount": outs[0], "AccumTruePos": outs[1],
                      "AccumFalsePos": outs[2]}, attrs)
    return map_out
