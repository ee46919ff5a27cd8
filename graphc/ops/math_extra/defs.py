"""More elementwise and reduction ops of Paddle 1.8 (names and slots as Paddle's), e.g. log, clip,
comparisons, reduce_min, argsort, prelu, maxout, cumsum, size, isinf/isnan/isfinite.
The elementwise ones, prelu and reduce_min take LoD values as math's do (docs/lod.md)."""

from __future__ import annotations

from ...ir.lod_rules import reduce_lod
from ...ir.opdef import NO_GRAD, register
from ...ir.shapes import broadcast_shapes, normalize_axis, prod_or_unknown
from ...ir.types import FLOAT_DTYPES, TensorType
from ..math.defs import _elementwise, _reduce


def _float_like_x(c):
    x = c.x("X")
    c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
    return {"Out": x}


def _same_as_x(c):
    return {"Out": c.x("X")}


register("log", "X", "Out", infer=_float_like_x, lod_inputs=("X",), doc="Out = ln(X)")
register("sign", "X", "Out", infer=_same_as_x, lod_inputs=("X",),
         doc="Out = -1, 0 or 1 (gradient zero)")
def _pow(c):
    # Paddle 1.8's pow also takes int32/int64 X (its kernel casts factor to X's type)
    x = c.x("X")
    if x.dtype in ("int32", "int64"):
        c.check(c["factor"] >= 0, f"an integer X needs a factor >= 0, got {c['factor']}")
        return {"Out": x}
    return _float_like_x(c)


register("pow", "X", "Out", {"factor": ("float", 1.0)}, infer=_pow, lod_inputs=("X",),
         doc="Out = X ** factor; an int32/int64 X raised to int(factor) (Paddle's int kernel)")


def _clip(c):
    c.check(c["min"] <= c["max"], f"min {c['min']} must not exceed max {c['max']}")
    return _float_like_x(c)


register("clip", "X", "Out", {"min": "float", "max": "float"}, infer=_clip, lod_inputs=("X",),
         sparse_inputs=("X",),
         doc="Out = min(max(X, min), max); the gradient passes where min < X < max. A "
             "row-sparse X (an is_sparse embedding's gradient) has its repeated rows summed "
             "first, then its values clipped (Paddle's SelectedRows kernel)")


def _clip_by_norm(c):
    c.check(c["max_norm"] > 0, f"max_norm {c['max_norm']} must be positive")
    return _float_like_x(c)


register("clip_by_norm", "X", "Out", {"max_norm": "float"}, infer=_clip_by_norm,
         sparse_inputs=("X",),
         doc="Out = X * max_norm / ||X||_2 when ||X||_2 > max_norm, else X. A row-sparse X "
             "has its repeated rows summed first: the norm is the dense tensor's")


def _ranked_x(c) -> TensorType:
    x = c.x("X")
    c.check(x.rank >= 1, f"X must have at least one dimension, got {list(x.shape)}")
    return x


def _norm(c):
    x = _float_like_x(c)["Out"]
    _ranked_x(c)
    axis = normalize_axis(c["axis"], x.rank)
    norm = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    return {"Out": x, "Norm": TensorType(norm, x.dtype)}


register("norm", "X", "Out Norm", {"axis": ("int", 1), "epsilon": ("float", 1e-10)},
         infer=_norm, doc="Out = X / sqrt(sum(X^2, axis) + epsilon); Norm = that root")

_REDUCE_ATTRS = {"dim": ("ints", [0]), "keep_dim": ("bool", False),
                 "reduce_all": ("bool", False)}
# over a LoD value: as math's reduce_max (its rule in math/lod_lowering.py)
register("reduce_min", "X", "Out", dict(_REDUCE_ATTRS), infer=_reduce, lod_inputs=("X",),
         lod_fixup=reduce_lod)
register("reduce_prod", "X", "Out", dict(_REDUCE_ATTRS), infer=_reduce)


def _bool_reduce(c):
    c.check(c.x("X").dtype == "bool", f"X must be bool, got {c.x('X').dtype}")
    return _reduce(c)


for _name in ("reduce_all", "reduce_any"):
    register(_name, "X", "Out",
             {"dim": ("ints", [0]), "keep_dim": ("bool", False), "reduce_all": ("bool", False)},
             infer=_bool_reduce, traits=(NO_GRAD,))

# integer arithmetic (Paddle has no gradient for these)
for _name in ("elementwise_mod", "elementwise_floordiv"):
    register(_name, "X Y", "Out", {"axis": ("int", -1)}, infer=_elementwise,
             traits=(NO_GRAD,), lod_inputs=("X", "Y"),
             doc="Out = X op Y with Paddle's axis broadcasting")


def _compare(c):
    x, y = c.x("X"), c.x("Y")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    return {"Out": TensorType(broadcast_shapes(x.shape, y.shape, c["axis"]), "bool")}


COMPARISONS = ("equal", "not_equal", "less_than", "less_equal", "greater_than",
               "greater_equal")
for _name in COMPARISONS:
    register(_name, "X Y", "Out", {"axis": ("int", -1), "force_cpu": ("bool", False)},
             infer=_compare, traits=(NO_GRAD,), lod_inputs=("X", "Y"),
             doc="Out = X cmp Y (bool), broadcast (token by token for LoD values)")


def _logical(c):
    x = c.x("X")
    y = c.x("Y") if c.has("Y") else x
    c.check(x.dtype == "bool" and y.dtype == "bool",
            f"inputs must be bool, got {x.dtype}" + (f" and {y.dtype}" if c.has("Y") else ""))
    return {"Out": TensorType(broadcast_shapes(x.shape, y.shape), "bool")}


for _name in ("logical_and", "logical_or", "logical_xor"):
    register(_name, "X Y", "Out", infer=_logical, traits=(NO_GRAD,), lod_inputs=("X", "Y"),
             doc="Out = X op Y (bool)")
register("logical_not", "X", "Out", infer=_logical, traits=(NO_GRAD,), lod_inputs=("X",),
         doc="Out = not X")


def _arg(c):
    x = _ranked_x(c)
    if c["flatten"]:
        return {"Out": TensorType((1,), "int64")}
    axis = normalize_axis(c["axis"], x.rank)
    if c["keepdims"]:
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    else:
        shape = x.shape[:axis] + x.shape[axis + 1:]
    return {"Out": TensorType(shape or (1,), "int64")}


for _name in ("arg_max", "arg_min"):
    register(_name, "X", "Out",
             {"axis": ("int", -1), "keepdims": ("bool", False), "flatten": ("bool", False)},
             infer=_arg, traits=(NO_GRAD,), doc="Out = index (int64) of the extreme along axis")


def _argsort(c):
    x = _ranked_x(c)
    normalize_axis(c["axis"], x.rank)
    return {"Out": x, "Indices": TensorType(x.shape, "int64")}


register("argsort", "X", "Out Indices", {"axis": ("int", -1), "descending": ("bool", False)},
         infer=_argsort, doc="Out = X sorted along axis; Indices = where each came from")


# -- issue 24: math activations (prelu, maxout, cumsum, size, isinf/isnan/isfinite) -----------
def _prelu(c):
    x, alpha = _float_like_x(c)["Out"], c.x("Alpha")
    mode = c["mode"]
    c.check(mode in ("all", "channel", "element"),
            f"mode must be 'all', 'channel' or 'element', got {mode!r}")
    c.check(alpha.dtype == x.dtype, f"Alpha is {alpha.dtype} but X is {x.dtype}")
    c.check(x.rank >= 2 or mode == "all", f"mode {mode!r} needs X of rank >= 2, got "
            f"{list(x.shape)}")
    want = {"all": 1, "channel": x.shape[1] if x.rank >= 2 else 1,
            "element": prod_or_unknown(x.shape[1:])}[mode]
    have = prod_or_unknown(alpha.shape)
    c.check(want < 0 or have < 0 or want == have,
            f"mode {mode!r} with X {list(x.shape)} needs {want} alpha values, Alpha is "
            f"{list(alpha.shape)}")
    return {"Out": x}


register("prelu", "X Alpha", "Out", {"mode": ("str", "all")}, infer=_prelu,
         lod_inputs=("X",),
         doc="Out = X where X > 0 else Alpha * X; one Alpha, one per channel (dim 1) or one "
             "per element of a sample")


def _maxout(c):
    x = _float_like_x(c)["Out"]
    groups = c["groups"]
    c.check(x.rank == 4, f"X must be 4-D (NCHW or NHWC), got {list(x.shape)}")
    c.check(c["axis"] in (1, -1, 3), f"axis must be 1, -1 or 3, got {c['axis']}")
    axis = normalize_axis(c["axis"], x.rank)
    ch = x.shape[axis]
    c.check(groups >= 1 and (ch < 0 or ch % groups == 0),
            f"channels {ch} of X {list(x.shape)} must divide by groups {groups}")
    shape = list(x.shape)
    shape[axis] = ch // groups if ch >= 0 else -1
    return {"Out": TensorType(tuple(shape), x.dtype)}


register("maxout", "X", "Out", {"groups": "int", "axis": ("int", 1)}, infer=_maxout,
         doc="Out[.., i, ..] = max over k < groups of X[.., i * groups + k, ..] along axis")


def _cumsum(c):
    x = _ranked_x(c)
    normalize_axis(c["axis"], x.rank)
    return {"Out": x}


register("cumsum", "X", "Out",
         {"axis": ("int", -1), "exclusive": ("bool", False), "reverse": ("bool", False)},
         infer=_cumsum,
         doc="Out = running sum of X along axis (exclusive: without the element itself; "
             "reverse: from the end)")


def _size(c):
    c.x("Input")
    return {"Out": TensorType((1,), "int64")}


register("size", "Input", "Out", infer=_size, traits=(NO_GRAD,),
         doc="Out = the number of elements of Input (int64, shape [1])")


def _overflow(c):
    c.x("X")
    return {"Out": TensorType((1,), "bool")}


for _name, _what in (("isinf", "any element of X is infinite"),
                     ("isnan", "any element of X is NaN"),
                     ("isfinite", "every element of X is finite")):
    register(_name, "X", "Out", infer=_overflow, traits=(NO_GRAD,),
             doc=f"Out = [{_what}] (bool, shape [1])")
# -- end issue 24: math activations
