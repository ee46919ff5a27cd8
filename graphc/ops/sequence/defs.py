"""Sequence ops over LoD values (sequence_pool, ...) and the LoD rules of the existing ops
that take LoD inputs: the one table saying which ops keep, drop or refuse a LoD (docs/lod.md).
"""

from __future__ import annotations

import math

from ...ir.errors import ShapeError
from ...ir.opdef import InferContext, get_op_def, has_op_def, register, set_lod_rule
from ...ir.shapes import normalize_axis
from ...ir.types import TensorType
from ..fused_elementwise import defs as fused_ops  # noqa: F401  (their ops are registered before their LoD rules are set)
from ..loss import defs as loss_ops  # noqa: F401  (its ops get LoD rules below)
from ..manipulation import defs as manipulation_ops  # noqa: F401  (its ops get LoD rules below)
from ..math import defs as math_ops  # noqa: F401  (its ops get LoD rules below)
from ..math_extra import defs as math_extra_ops  # noqa: F401  (its ops get LoD rules below)
from ..nn import defs as nn_ops  # noqa: F401  (its ops get LoD rules below)
from ..tensor import defs as tensor_ops  # noqa: F401  (its ops get LoD rules below)

POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")


def _sequence_pool(c: InferContext):
    x = c.x("X")
    c.check(x.lod_level >= 1, f"X must be a LoD value (lod_level 1 or 2), got {x}; "
                              "sequence_pool pools variable-length sequences")
    c.check(x.rank >= 1, f"X needs a token dimension, got {x}")
    c.check(c["pooltype"] in POOL_TYPES,
            f"pooltype must be one of {list(POOL_TYPES)}, got {c['pooltype']!r}")
    # level 1: one row per sequence (a dense batch); level 2: one token per sub-sequence
    return {"Out": TensorType((-1, *x.shape[1:]), x.dtype, False, x.lod_level - 1)}


register("sequence_pool", "X", "Out",
         {"pooltype": ("str", "AVERAGE"), "is_test": ("bool", False),
          "pad_value": ("float", 0.0)},
         infer=_sequence_pool, lod_inputs=("X",), lod="aware",
         doc="pool each innermost sequence: SUM, AVERAGE, SQRT, MAX, FIRST or LAST; empty "
             "sequences give pad_value")


# -- LoD rules of existing ops ---------------------------------------------------------------

_ROWWISE_UNARY = ("relu", "sigmoid", "tanh", "exp", "sqrt", "square", "abs", "gelu",
                  "leaky_relu", "scale", "cast", "log", "softplus", "softsign", "relu6",
                  "elu", "hard_sigmoid", "swish", "brelu", "reciprocal", "rsqrt", "sin", "cos",
                  "floor", "ceil", "round", "sign", "logsigmoid", "tanh_shrink",
                  "hard_shrink", "soft_shrink", "thresholded_relu", "stanh", "hard_swish",
                  "pow", "clip", "l2_normalize")
_ROWWISE_BINARY = ("elementwise_add", "elementwise_sub", "elementwise_mul",
                   "elementwise_div", "elementwise_max", "elementwise_min",
                   "elementwise_pow", "elementwise_mod", "elementwise_floordiv")


def _last_axis_only(attrs, ins, levels, out):
    """softmax and friends normalise along an axis: never along the tokens."""
    x = next(t for ts in ins.values() for t in ts)
    axis = attrs.get("axis", -1)
    if x.rank and normalize_axis(axis, x.rank) == 0:
        raise ShapeError("axis 0 of a LoD value runs across the tokens of every sequence; "
                         "use sequence_softmax, or an axis after the token dimension")
    return out


def _reduce_lod(attrs, ins, levels, out):
    """Reducing the token dimension (dim 0, or all) sums every token: a dense result, exact
    because padding rows hold zeros. Other dimensions keep the LoD."""
    x = ins["X"][0]
    dims = set(range(x.rank)) if attrs["reduce_all"] else {
        normalize_axis(d, x.rank, "dim") for d in attrs["dim"]}
    if 0 in dims:
        return {k: [t.with_lod(0) for t in v] for k, v in out.items()}
    return out


def _keeps_token_rows(attrs, ins, levels, out):
    """A shape op on a LoD value must leave dim 0 the tokens, each row whole."""
    x, y = ins["X"][0], out["Out"][0]
    rest_x, rest_y = x.shape[1:], y.shape[1:]
    if not (y.rank and y.shape[0] == x.shape[0] and all(d >= 0 for d in rest_x + rest_y)
            and math.prod(rest_x) == math.prod(rest_y)):
        raise ShapeError(f"reshaping the LoD value {x} to {list(y.shape)} does not keep one "
                         "row per token (dim 0 must stay the tokens and each token's "
                         f"{math.prod(d for d in rest_x if d >= 0)} values together)")
    return out


def _not_along_tokens(attrs, ins, levels, out):
    rank = out["Out"][0].rank
    if rank and normalize_axis(attrs.get("axis", 0), rank) == 0:
        raise ShapeError("concatenating LoD values along axis 0 mixes their tokens; use "
                         "sequence_concat, or an axis after the token dimension")
    return out


for _name in _ROWWISE_UNARY:
    if has_op_def(_name):
        set_lod_rule(_name, "rowwise", ("X",))
for _name in _ROWWISE_BINARY:
    set_lod_rule(_name, "rowwise", ("X", "Y"))
set_lod_rule("sum", "rowwise", ("X",))  # gradient accumulation of a LoD value used twice
set_lod_rule("mul", "rowwise", ("X",))  # fc: tokens times a dense weight
set_lod_rule("dropout", "rowwise", ("X",))
set_lod_rule("lookup_table", "rowwise", ("Ids",))  # one embedding row per token
set_lod_rule("softmax", "rowwise", ("X",), fixup=_last_axis_only)
set_lod_rule("cross_entropy", "rowwise", ("X", "Label"))
set_lod_rule("softmax_with_cross_entropy", "rowwise", ("Logits", "Label"),
             fixup=_last_axis_only)
set_lod_rule("sigmoid_cross_entropy_with_logits", "rowwise", ("X", "Label"))
set_lod_rule("reduce_sum", "rowwise", ("X",), fixup=_reduce_lod)
# fuse-elewise-add-act's fused op (fc's bias add + activation) and its hand-written grad
set_lod_rule("fused_elemwise_activation", "rowwise", ("X", "Y"))
set_lod_rule("fused_elemwise_activation_grad", "rowwise",
             ("X", "Y", "Out", "IntermediateOut", "Out@GRAD", "IntermediateOut@GRAD"),
             {"X@GRAD": ("X",), "Y@GRAD": ("Y",)})
# shape ops that keep one row per token: reshape2 to [0, ...] or [-1, ...] of the same row
# size (fluid.embedding's trailing 1), squeeze/unsqueeze/transpose/flatten after dim 0
for _name in ("reshape2", "squeeze2", "unsqueeze2", "transpose2", "flatten2"):
    set_lod_rule(_name, "rowwise", ("X",), {"Out": ("X",)}, fixup=_keeps_token_rows)
set_lod_rule("concat", "rowwise", ("X",), fixup=_not_along_tokens)  # features side by side
# mean over the real tokens only: its own rule when given a LoD value (rules/sequence.py)
set_lod_rule("mean", "aware", ("X",))
assert get_op_def("mean").lod == "aware"
