"""Which ops IfElse's branches may apply to the batch's rows: row r of every output must
depend on row r of the row inputs only (ops/cond/lowering.py runs both branches on every row
and selects each row, exact for such ops only). JAX-free; the IfElse layer asks it."""

from __future__ import annotations

import math

from ...ir.opdef import ACTIVATION, ELEMENTWISE, get_op_def
from ...ir.shapes import normalize_axis

# ops whose every output row reads the same row of every input, whatever their attributes
_PER_ROW = frozenset((
    "cast", "assign", "clip", "sign", "log", "pow", "dropout", "logical_and", "logical_or",
    "logical_not", "logical_xor", "equal", "not_equal", "less_than", "less_equal",
    "greater_than", "greater_equal", "softmax_with_cross_entropy", "cross_entropy",
    "sigmoid_cross_entropy_with_logits", "fill_zeros_like", "fill_any_like", "log_loss",
    "huber_loss", "smooth_l1_loss", "one_hot", "one_hot_v2", "label_smooth", "prelu", "sum",
    "top_k", "elementwise_floordiv", "elementwise_mod", "isfinite"))


def _axis_not_rows(name, default=-1):
    def check(attrs, rows, ins, outs):
        x = ins["X"][0]
        if x.rank and normalize_axis(attrs.get(name, default), x.rank) == 0:
            return f"its {name} is the row axis"
    return check


def _params_only(*slots):
    def check(attrs, rows, ins, outs):
        bad = [s for s in slots if s in rows]
        if bad:
            return f"its {bad[0]} input holds rows (the contraction mixes them)"
    return check


def _reduce(attrs, rows, ins, outs):
    x = ins["X"][0]
    if attrs["reduce_all"] or 0 in {normalize_axis(d, x.rank) for d in attrs["dim"]}:
        return "it reduces over the rows"


def _keeps_rows(attrs, rows, ins, outs):
    x, y = ins["X"][0], outs["Out"][0]
    rest_x, rest_y = x.shape[1:], y.shape[1:]
    if not (y.rank and y.shape[0] == x.shape[0] and all(d >= 0 for d in rest_x + rest_y)
            and math.prod(rest_x) == math.prod(rest_y)):
        return f"it reshapes {list(x.shape)} to {list(y.shape)}, not one row per row"


def _matmul(attrs, rows, ins, outs):
    if "Y" in rows:
        return "its Y input holds rows (the contraction mixes them)"
    if ins["X"][0].rank <= 2 and attrs.get("transpose_X"):
        return "it transposes the rows of X"


def _slice(attrs, rows, ins, outs):
    x = ins["Input"][0]
    if 0 in {normalize_axis(a, x.rank) for a in attrs["axes"]}:
        return "it slices the rows"


def _perm(attrs, rows, ins, outs):
    if attrs["axis"] and attrs["axis"][0] != 0:
        return "it moves the row axis"


def _batch_like(attrs, rows, ins, outs):
    if attrs.get("input_dim_idx", 0) != 0 or attrs.get("output_dim_idx", 0) != 0:
        return "its batch dimension is not the rows"


def _layer_norm(attrs, rows, ins, outs):
    if attrs["begin_norm_axis"] < 1:
        return "it normalises over the rows"


def _gather(attrs, rows, ins, outs):
    if "X" in rows:
        return "it gathers rows of its X"


_CHECKED = {
    "mul": _params_only("Y"), "matmul": _matmul, "lookup_table": _params_only("W"),
    "softmax": _axis_not_rows("axis"), "concat": _axis_not_rows("axis", 0),
    "split": _axis_not_rows("axis", 0), "stack": _axis_not_rows("axis", 0),
    "arg_max": _axis_not_rows("axis", 0), "arg_min": _axis_not_rows("axis", 0),
    "reduce_sum": _reduce, "reduce_mean": _reduce, "reduce_max": _reduce,
    "reduce_min": _reduce, "reduce_prod": _reduce, "reduce_all": _reduce, "reduce_any": _reduce,
    "reshape2": _keeps_rows, "squeeze2": _keeps_rows, "unsqueeze2": _keeps_rows,
    "flatten2": _keeps_rows, "transpose2": _perm, "slice": _slice,
    "layer_norm": _layer_norm, "fill_constant_batch_size_like": _batch_like, "gather": _gather,
}


def row_wise_refusal(op_type: str, attrs: dict, rows: set[str], ins: dict, outs: dict):
    """None when the op keeps rows apart given which input slots hold rows (``rows``), else
    why not. ``ins``/``outs``: {slot: [TensorType]}."""
    if op_type in _CHECKED:
        return _CHECKED[op_type](attrs, rows, ins, outs)
    opdef = get_op_def(op_type)
    if op_type in _PER_ROW or opdef.has_trait(ELEMENTWISE) or opdef.has_trait(ACTIVATION):
        return None
    return "it is not known to keep the rows apart (it may mix them, as mean or batch_norm do)"
