"""Ops on row-sparse values (Paddle's SelectedRows): merging rows, densifying, L2 decay of the
rows touched, squared L2 norm (optimizers, ``sum`` and others declare ``sparse_inputs`` too)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import FLOAT_DTYPES, TensorType, sparse_type


def _sparse_x(c: InferContext, slot: str = "X") -> TensorType:
    t = c.x(slot)
    c.check(t.sparse, f"{slot} must be row-sparse (SelectedRows), got the dense {t}")
    return t


def _merge(c: InferContext):
    return {"Out": _sparse_x(c)}


register("merge_selected_rows", "X", "Out", infer=_merge, traits=(NO_GRAD,),
         sparse_inputs=("X",),
         doc="X with repeated rows summed into one: unique rows ascending, then padding rows "
             "(row = height, zero values) so the row count stays X's")


def _to_dense(c: InferContext):
    return {"Out": _sparse_x(c).dense()}


register("get_tensor_from_selected_rows", "X", "Out", infer=_to_dense, traits=(NO_GRAD,),
         sparse_inputs=("X",),
         doc="the dense tensor X stands for: its rows' values summed in place, zeros elsewhere")


def _l2_decay(c: InferContext):
    grad, param = _sparse_x(c, "Grad"), c.x("Param")
    c.check(not param.sparse and param.shape == grad.shape and param.dtype == grad.dtype,
            f"Param must be the dense {grad.dense()} that Grad is rows of, got {param}")
    c.check(param.dtype in FLOAT_DTYPES, f"Param must be floating point, got {param.dtype}")
    return {"Out": sparse_type(grad.shape, grad.dtype)}


register("sparse_l2_decay", "Grad Param", "Out", {"coeff": "float"}, infer=_l2_decay,
         traits=(NO_GRAD,), sparse_inputs=("Grad",),
         doc="Grad's repeated rows merged, plus coeff * Param[row] on each distinct row: L2 "
             "decay of the rows the batch looked up, once per row (L2Decay on a sparse "
             "gradient; untouched rows are not decayed)")


def _squared_l2_norm(c: InferContext):
    t = c.x("X")
    c.check(t.dtype in FLOAT_DTYPES, f"X must be floating point, got {t.dtype}")
    return {"Out": TensorType((1,), t.dtype)}


# global-norm clipping's per-gradient term: a row-sparse X needs its repeated rows summed
# before squaring, which this op does without building the dense tensor
register("squared_l2_norm", "X", "Out", infer=_squared_l2_norm, sparse_inputs=("X",),
         doc="Out = [sum(X * X)]; a row-sparse X's repeated rows are summed first, so it is "
             "the squared norm of the dense tensor X stands for")
