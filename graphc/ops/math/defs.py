"""Elementwise arithmetic, activations, matrix products and reductions (Paddle semantics).

Formulas and defaults follow Paddle's operator definitions of the same names. Row-wise ops
take LoD values token by token (docs/lod.md); reductions over the tokens drop the LoD.
"""

from __future__ import annotations

from ...ir.errors import ShapeError
from ...ir.lod_rules import last_axis_only, reduce_lod
from ...ir.opdef import ACTIVATION, ELEMENTWISE, LOSS, NO_GRAD, register
from ...ir.shapes import broadcast_dim, broadcast_shapes, normalize_axis, prod_or_unknown
from ...ir.types import FLOAT_DTYPES, TensorType


def _same_as_x(c):
    return {"Out": c.x("X")}


def _elementwise(c):
    x, y = c.x("X"), c.x("Y")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    return {"Out": TensorType(broadcast_shapes(x.shape, y.shape, c["axis"]), x.dtype)}


def _elementwise_mul(c):
    x, y = c.x("X"), c.x("Y")
    if not x.sparse:
        return _elementwise(c)
    # Paddle's kernel scales a SelectedRows X's values by a one-element Y (global-norm clip)
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    c.check(not y.sparse and y.shape is not None and prod_or_unknown(y.shape) == 1,
            f"a row-sparse X is scaled by a one-element Y only, got Y {y}")
    return {"Out": x}


for _name in ("elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
              "elementwise_max", "elementwise_min", "elementwise_pow"):
    _mul = _name == "elementwise_mul"
    register(_name, "X Y", "Out", {"axis": ("int", -1)},
             infer=_elementwise_mul if _mul else _elementwise, traits=(ELEMENTWISE,),
             inplace={"Out": "X"}, lod_inputs=("X", "Y"), sparse_inputs=("X",) if _mul else (),
             doc="Out = X op Y with Paddle's axis broadcasting" + (
                 " (a row-sparse X: its values times a one-element Y)" if _mul else ""))

# relu, sigmoid and tanh's gradients read Out, not X (Paddle's choice): X@GRAD takes Out's type
for _name in ("relu", "sigmoid", "tanh"):
    register(_name, "X", "Out", infer=_same_as_x, traits=(ELEMENTWISE, ACTIVATION),
             inplace={"Out": "X"}, lod_inputs=("X",), grad_reads=("Out",),
             grad_type_from={"X": "Out"})
for _name in ("exp", "sqrt", "square", "abs"):
    register(_name, "X", "Out", infer=_same_as_x, traits=(ELEMENTWISE, ACTIVATION),
             inplace={"Out": "X"}, lod_inputs=("X",))
register("gelu", "X", "Out", {"approximate": ("bool", False)}, infer=_same_as_x,
         traits=(ELEMENTWISE, ACTIVATION), lod_inputs=("X",))
register("softsign", "X", "Out", infer=_same_as_x, traits=(ELEMENTWISE, ACTIVATION),
         lod_inputs=("X",), doc="Out = X / (1 + |X|)")
register("leaky_relu", "X", "Out", {"alpha": ("float", 0.02)}, infer=_same_as_x,
         traits=(ELEMENTWISE, ACTIVATION), inplace={"Out": "X"}, lod_inputs=("X",))
# -- issue 24: math activations. Paddle 1.8's activation ops: float X, Out of X's shape, the
# attribute names and defaults of Paddle's op makers; round/ceil/floor differentiate to zero
# (as Paddle's grad kernels do)
def _float_x(c):
    x = c.x("X")
    c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
    return {"Out": x}


SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
ACTIVATION_ATTRS: dict[str, dict] = {
    "selu": {"scale": ("float", SELU_SCALE), "alpha": ("float", SELU_ALPHA)},
    "elu": {"alpha": ("float", 1.0)},
    "relu6": {"threshold": ("float", 6.0)},
    "stanh": {"scale_a": ("float", 0.67), "scale_b": ("float", 1.7159)},
    "hard_sigmoid": {"slope": ("float", 0.2), "offset": ("float", 0.5)},
    "swish": {"beta": ("float", 1.0)},
    "brelu": {"t_min": ("float", 0.0), "t_max": ("float", 24.0)},
    "soft_relu": {"threshold": ("float", 40.0)},
    "hard_swish": {"threshold": ("float", 6.0), "scale": ("float", 6.0),
                   "offset": ("float", 3.0)},
    "thresholded_relu": {"threshold": ("float", 1.0)},
    "softshrink": {"lambda": ("float", 0.5)},
    "hard_shrink": {"threshold": ("float", 0.5)},
}
PLAIN_ACTIVATIONS = ("logsigmoid", "softplus", "tanh_shrink", "erf", "atan", "rsqrt", "ceil",
                     "floor", "cos", "acos", "asin", "sin", "round", "reciprocal")
_ACTIVATION_DOCS = {
    "selu": "Out = scale * (X if X > 0 else alpha * (e^X - 1))",
    "elu": "Out = max(0, X) + min(0, alpha * (e^X - 1))",
    "relu6": "Out = min(max(0, X), threshold)",
    "stanh": "Out = scale_b * tanh(scale_a * X)",
    "hard_sigmoid": "Out = max(0, min(1, slope * X + offset))",
    "swish": "Out = X * sigmoid(beta * X)",
    "brelu": "Out = min(max(X, t_min), t_max)",
    "soft_relu": "Out = ln(1 + e^clip(X, -threshold, threshold))",
    "hard_swish": "Out = X * min(max(0, X + offset), threshold) / scale",
    "thresholded_relu": "Out = X if X > threshold else 0",
    "softshrink": "Out = X - lambda if X > lambda, X + lambda if X < -lambda, else 0",
    "hard_shrink": "Out = X if |X| > threshold else 0",
    "logsigmoid": "Out = ln(sigmoid(X))", "softplus": "Out = ln(1 + e^X)",
    "tanh_shrink": "Out = X - tanh(X)", "rsqrt": "Out = 1 / sqrt(X)",
    "reciprocal": "Out = 1 / X",
    "round": "Out = X rounded, halves away from zero (gradient zero)",
    "ceil": "Out = ceil(X) (gradient zero)", "floor": "Out = floor(X) (gradient zero)",
}
for _name in (*ACTIVATION_ATTRS, *PLAIN_ACTIVATIONS):
    register(_name, "X", "Out", ACTIVATION_ATTRS.get(_name, {}), infer=_float_x,
             traits=(ELEMENTWISE, ACTIVATION), lod_inputs=("X",),
             doc=_ACTIVATION_DOCS.get(_name, f"Out = {_name}(X), elementwise"))
# -- end issue 24: math activations

register("scale", "X", "Out",
         {"scale": ("float", 1.0), "bias": ("float", 0.0), "bias_after_scale": ("bool", True)},
         infer=_same_as_x, traits=(ELEMENTWISE, ACTIVATION), inplace={"Out": "X"},
         lod_inputs=("X",),
         doc="Out = scale * X + bias (or scale * (X + bias) when bias_after_scale is false)")


def _softmax(c):
    x = c.x("X")
    normalize_axis(c["axis"], x.rank)
    return {"Out": x}


register("softmax", "X", "Out", {"axis": ("int", -1)}, infer=_softmax, lod_inputs=("X",),
         lod_fixup=last_axis_only)


def _sum(c):
    xs = c.xs("X")
    shape = xs[0].shape
    for t in xs[1:]:
        c.check(t.dtype == xs[0].dtype, f"inputs mix {xs[0].dtype} and {t.dtype}")
        c.check(t.array == xs[0].array, "inputs mix tensor arrays and tensors")
        c.check(len(t.shape) == len(shape), f"inputs have ranks {len(shape)} and {t.rank}")
        shape = tuple(a if a >= 0 else b for a, b in zip(shape, t.shape))
        c.check(all(a == b or b < 0 for a, b in zip(shape, t.shape)),
                f"inputs have shapes {list(xs[0].shape)} and {list(t.shape)}")
    # Paddle's sum of SelectedRows: row-sparse when every input is (their rows, concatenated),
    # else dense (the sparse inputs' rows added into the dense sum)
    if xs[0].array:  # the gradient accumulation of a tensor array read twice
        return {"Out": TensorType(shape, xs[0].dtype, array=True)}
    return {"Out": TensorType(shape, xs[0].dtype, all(t.sparse for t in xs))}


# LoD: the gradient accumulation of a LoD value used twice
register("sum", "X*", "Out", infer=_sum, inplace={"Out": "X"}, sparse_inputs=("X",),
         lod_inputs=("X",),
         doc="Out = sum of all X; row-sparse X: their rows concatenated when all are, else "
             "added into the dense sum")
register("assign", "X", "Out", infer=_same_as_x, lod_inputs=("X",),  # ifelse26: LoD rows too
         doc="Out = X (a copy; a LoD X keeps its LoD)")


def _mul(c):
    x, y = c.x("X"), c.x("Y")
    xn, yn = c["x_num_col_dims"], c["y_num_col_dims"]
    c.check(0 < xn < x.rank or (xn == x.rank == 1), f"x_num_col_dims {xn} for rank {x.rank}")
    c.check(0 < yn < y.rank, f"y_num_col_dims {yn} for rank {y.rank}")
    k_x, k_y = prod_or_unknown(x.shape[xn:]), prod_or_unknown(y.shape[:yn])
    c.check(k_x == k_y or k_x < 0 or k_y < 0,
            f"X {list(x.shape)} flattens to width {k_x} but Y {list(y.shape)} to height {k_y}")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    return {"Out": TensorType(x.shape[:xn] + y.shape[yn:], x.dtype)}


# LoD: fc, the tokens times a dense weight
register("mul", "X Y", "Out", {"x_num_col_dims": ("int", 1), "y_num_col_dims": ("int", 1)},
         infer=_mul, lod_inputs=("X",),
         doc="Out = flatten(X, x_num_col_dims) @ flatten(Y, y_num_col_dims)")


def _matmul(c):
    x, y = c.x("X"), c.x("Y")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    xs, ys = list(x.shape), list(y.shape)
    x_vec, y_vec = len(xs) == 1, len(ys) == 1
    # Paddle's rule: a 1-D X is the row [1, K], a 1-D Y the column [K, 1], and the transpose
    # flags then apply to them too (a transposed 1-D X is a column: an outer product)
    if x_vec:
        xs = [1, xs[0]]
    if y_vec:
        ys = [ys[0], 1]
    if c["transpose_X"]:
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if c["transpose_Y"]:
        ys[-2], ys[-1] = ys[-1], ys[-2]
    k1, k2 = xs[-1], ys[-2]
    c.check(k1 == k2 or k1 < 0 or k2 < 0,
            f"contracting dimensions differ: X {list(x.shape)} and Y {list(y.shape)}")
    bx, by = xs[:-2], ys[:-2]
    n = max(len(bx), len(by))
    bx, by = [1] * (n - len(bx)) + bx, [1] * (n - len(by)) + by
    batch = [broadcast_dim(a, b) for a, b in zip(bx, by)]
    return {"Out": TensorType(matmul_out_dims(batch, xs[-2], ys[-1], x_vec, y_vec), x.dtype)}


def matmul_out_dims(batch, rows, cols, x_vec: bool, y_vec: bool) -> tuple:
    """Paddle's matmul output: batch + [rows, cols], the rows dropped when X was 1-D and
    they are 1, the columns when Y was 1-D and they are 1, and [1] for nothing left."""
    out = [*batch, rows, cols]
    if x_vec and out[-2] == 1:
        del out[-2]
    if y_vec and out[-1] == 1:
        del out[-1]
    return tuple(out) or (1,)


def _matmul_lod(attrs, ins, levels, out):
    """A LoD X multiplies token by token (Paddle's matmul shares X's LoD with Out: gru4rec
    scores every token against all items): dim 0 must stay the tokens."""
    x, y, o = ins["X"][0], ins["Y"][0], out["Out"][0]
    if "Y" in levels:
        # both LoD (NeXtVLAD's [T, clusters, groups] @ [T, groups, D]): a batch of one
        # product per token, the batch dimension the tokens they share
        if levels.get("X") != levels["Y"] or min(x.rank, y.rank) < 3 or x.rank != y.rank:
            raise ShapeError(f"matmul of the LoD value {y} as Y needs X a LoD value of the "
                             f"same LoD and rank (one product per token), got X {x}")
        return out
    if x.rank < 2 or (attrs["transpose_X"] and x.rank == 2) or y.rank > 2 or \
            o.shape[0] != x.shape[0]:
        raise ShapeError(f"matmul of the LoD value {x} by {y} must keep one row per token "
                         "(X [tokens, ..., K] not transposed across its tokens, Y a dense "
                         "matrix)")
    return out


register("matmul", "X Y", "Out",
         {"transpose_X": ("bool", False), "transpose_Y": ("bool", False), "alpha": ("float", 1.0)},
         infer=_matmul, lod_inputs=("X", "Y"), lod_outputs={"Out": ("X",)},
         lod_fixup=_matmul_lod,
         doc="Out = alpha * op(X) @ op(Y), batched with broadcasting")


def _mean(c):
    return {"Out": TensorType((1,), c.x("X").dtype)}


# over a LoD value: the mean of its real tokens only (its rule in lod_lowering.py)
register("mean", "X", "Out", infer=_mean, traits=(LOSS,), lod_inputs=("X",), lod="aware",
         doc="Out = mean of all of X, shape [1]")


def _reduce(c):
    x = c.x("X")
    if c["reduce_all"]:
        dims = set(range(x.rank))
    else:
        dims = {normalize_axis(d, x.rank, "dim") for d in c["dim"]}
    if c["keep_dim"]:
        shape = tuple(1 if i in dims else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in dims) or (1,)
    return {"Out": TensorType(shape, x.dtype)}


# LoD: over dims after the tokens row-wise; over the tokens a dense result, of the real tokens
# only (reduce_mean/max's rules in lod_lowering.py; reduce_sum's padding rows add zero)
for _name in ("reduce_sum", "reduce_mean", "reduce_max"):
    register(_name, "X", "Out",
             {"dim": ("ints", [0]), "keep_dim": ("bool", False), "reduce_all": ("bool", False)},
             infer=_reduce, lod_inputs=("X",), lod_fixup=reduce_lod)


def _top_k(c):
    x = c.x("X")
    k = c["k"]
    c.check(k >= 1 and (x.shape[-1] < 0 or k <= x.shape[-1]),
            f"k={k} for last dimension {x.shape[-1]}")
    shape = x.shape[:-1] + (k,)
    return {"Out": TensorType(shape, x.dtype), "Indices": TensorType(shape, "int64")}


# Out is differentiable (its gradient lands at Indices, as Paddle's top_k_grad); Indices not
# row-wise on a LoD input: each token's row is ranked alone (top_k runs along the last axis)
register("top_k", "X", "Out Indices", {"k": ("int", 1)}, infer=_top_k, lod_inputs=("X",),
         lod_fixup=last_axis_only)


def _accuracy(c):
    out, idx, label = c.x("Out"), c.x("Indices"), c.x("Label")
    c.check(out.shape == idx.shape, f"Out {list(out.shape)} and Indices {list(idx.shape)}")
    c.check(label.rank == 2 and label.shape[1] in (1, -1),
            f"Label must be [N, 1], got {list(label.shape)}")
    return {"Accuracy": TensorType((1,), "float32"), "Correct": TensorType((1,), "int32"),
            "Total": TensorType((1,), "int32")}


# a LoD input (top_k of token rows, one label per token) counts the real tokens (aware: the
# packed buffer's padding rows are not rows); the counts are dense
register("accuracy", "Out Indices Label", "Accuracy Correct Total", infer=_accuracy,
         lod_inputs=("Out", "Indices", "Label"), lod="aware", lod_outputs={"Accuracy": ()},
         traits=(NO_GRAD,), doc="fraction of rows whose label is among the top-k indices")
