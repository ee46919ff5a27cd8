"""Tensor manipulation and creation ops: reshape, transpose, concat, split, cast, fill,
random initialisers. XShape outputs follow Paddle (shape [0] + X.shape, for grads).

On LoD values (docs/lod.md) reshape2/transpose2 must keep one row per token (fluid.embedding's
trailing 1), concat joins features side by side and cast converts each token."""

from __future__ import annotations

from ...ir.lod_rules import keeps_token_rows, not_along_tokens
from ...ir.opdef import INITIALIZER, NO_GRAD, RANDOM, register
from ...ir.shapes import normalize_axis, prod_or_unknown
from ...ir.types import DTYPES, TensorType


def _xshape(x: TensorType) -> TensorType:
    return TensorType((0,) + x.shape, x.dtype)


def _reshape2(c):
    x = c.x("X")
    target = list(c["shape"])
    if c.has("Shape") or c.has("ShapeTensor"):  # folded when the step is traced
        out = tuple(x.shape[i] if d == 0 and i < x.rank else d if d > 0 else -1
                    for i, d in enumerate(target))
        return {"Out": TensorType(out, x.dtype), "XShape": _xshape(x)}
    c.check(target.count(-1) <= 1, f"shape {target} has more than one -1")
    out = []
    for i, d in enumerate(target):
        if d == 0:
            c.check(i < x.rank, f"shape {target} copies dim {i} of rank-{x.rank} input")
            out.append(x.shape[i])
        else:
            c.check(d >= -1, f"shape {target} has a negative entry other than -1")
            out.append(d)
    total, known = prod_or_unknown(x.shape), prod_or_unknown(d for d in out if d != -1)
    if -1 in target:
        i = target.index(-1)
        if total >= 0 and known > 0:
            c.check(total % known == 0, f"cannot reshape {list(x.shape)} to {target}")
            out[i] = total // known
    elif total >= 0 and known >= 0:
        c.check(total == known, f"cannot reshape {list(x.shape)} ({total} elements) to {target}")
    return {"Out": TensorType(tuple(out), x.dtype), "XShape": _xshape(x)}


# Out keeps X's LoD, XShape does not
_KEEP_ROWS = {"lod_inputs": ("X",), "lod_outputs": {"Out": ("X",)},
              "lod_fixup": keeps_token_rows}
register("reshape2", "X Shape? ShapeTensor*?", "Out XShape?", {"shape": "ints"},
         infer=_reshape2, **_KEEP_ROWS,
         doc="reshape; 0 copies the input dimension, one -1 is inferred; Shape (or the [1] "
             "tensors of ShapeTensor), folded when the step is traced, win over the attr")


def _transpose2(c):
    x = c.x("X")
    perm = c["axis"]
    c.check(sorted(perm) == list(range(x.rank)), f"axis {perm} is not a permutation of {x.rank}")
    return {"Out": TensorType(tuple(x.shape[p] for p in perm), x.dtype), "XShape": _xshape(x)}


register("transpose2", "X", "Out XShape?", {"axis": "ints"}, infer=_transpose2, **_KEEP_ROWS)


def _check_concat_rank(c, first, t, axis):
    """An input of another rank than the first (Paddle's kernel views every input as rows by
    columns, rows the first input's dimensions before axis): it concatenates as the first
    input's rank when its dimensions after axis hold as many elements as the first's."""
    mine = prod_or_unknown(t.shape[axis + 1:])
    theirs = prod_or_unknown(first.shape[axis + 1:])
    c.check(t.rank > axis and mine >= 0 and mine == theirs,
            f"inputs {list(first.shape)} and {list(t.shape)} differ in rank, and the second's "
            f"dimensions after axis {axis} do not hold the first's {list(first.shape[axis + 1:])}")


def _concat(c):
    xs = c.xs("X")
    first = xs[0]
    axis = normalize_axis(c["axis"], first.rank)
    total = 0
    for t in xs:
        c.check(t.dtype == first.dtype, f"inputs mix {first.dtype} and {t.dtype}")
        if t.rank != first.rank:
            _check_concat_rank(c, first, t, axis)
        pairs = enumerate(zip(t.shape, first.shape))
        c.check(all(i == axis or a == b or a < 0 or b < 0 for i, (a, b) in pairs
                    if i <= axis or t.rank == first.rank),
                f"inputs {list(first.shape)} and {list(t.shape)} differ off axis {axis}")
        total = -1 if total < 0 or t.shape[axis] < 0 else total + t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return {"Out": TensorType(tuple(shape), first.dtype)}


register("concat", "X*", "Out", {"axis": ("int", 0)}, infer=_concat, lod_inputs=("X",),
         lod_fixup=not_along_tokens)


def _split(c):
    x = c.x("X")
    axis = normalize_axis(c["axis"], x.rank)
    size, num, sections = x.shape[axis], c["num"], list(c["sections"])
    if num > 0:
        c.check(not sections, "give either num or sections, not both")
        c.check(size < 0 or size % num == 0, f"dimension {size} not divisible into {num} parts")
        sections = [size // num if size >= 0 else -1] * num
    else:
        c.check(bool(sections), "split needs num > 0 or sections")
        c.check(sections.count(-1) <= 1, f"sections {sections} has more than one -1")
        c.check(all(s >= -1 for s in sections),
                f"sections {sections} has a negative entry other than -1")
        if -1 in sections and size >= 0:
            rest = size - sum(s for s in sections if s != -1)
            c.check(rest >= 0, f"sections {sections} exceed dimension {size}")
            sections[sections.index(-1)] = rest
        c.check(size < 0 or -1 in sections or sum(sections) == size,
                f"sections {c['sections']} do not add up to {size}")
    outs = []
    for s in sections:
        shape = list(x.shape)
        shape[axis] = s
        outs.append(TensorType(tuple(shape), x.dtype))
    return {"Out": outs}


register("split", "X", "Out*", {"num": ("int", 0), "sections": ("ints", []), "axis": ("int", 0)},
         infer=_split)


def _cast(c):
    x = c.x("X")
    c.check(c["in_dtype"] == x.dtype, f"in_dtype {c['in_dtype']} but X is {x.dtype}")
    return {"Out": TensorType(x.shape, c["out_dtype"])}


register("cast", "X", "Out", {"in_dtype": "dtype", "out_dtype": "dtype"}, infer=_cast,
         lod_inputs=("X",))


def _filled(c):
    shape = tuple(c["shape"])
    # a shape tensor (ir/shape_values.py) leaves dims unknown until the step is traced
    tensor = c.has("ShapeTensor") or c.has("ShapeTensorList")
    c.check(tensor or all(d >= 0 for d in shape), f"shape {list(shape)} must be fully known")
    if c.has("ShapeTensor"):
        st = c.x("ShapeTensor")
        c.check(st.rank == 1 and st.shape[0] == len(shape) and st.dtype in ("int32", "int64"),
                f"ShapeTensor {st} must be int32/int64 [{len(shape)}]")
    if c.has("ShapeTensorList"):
        c.check(len(c.xs("ShapeTensorList")) == len(shape),
                f"ShapeTensorList holds {len(c.xs('ShapeTensorList'))} tensors for shape "
                f"{list(shape)}")
    c.check(c["dtype"] in DTYPES, f"dtype {c['dtype']!r}")
    return {"Out": TensorType(shape, c["dtype"])}


register("fill_constant", "ShapeTensor? ShapeTensorList*?", "Out", {
    "shape": "ints", "dtype": ("dtype", "float32"), "value": ("float", 0.0),
    "force_cpu": ("bool", False),
}, infer=_filled, traits=(INITIALIZER, NO_GRAD), doc="Out = a tensor filled with value")
register("fill_zeros_like", "X", "Out", infer=lambda c: {"Out": c.x("X")},
         traits=(NO_GRAD,), doc="Out = zeros of X's shape and dtype (known at run time)")
register("uniform_random", "ShapeTensor? ShapeTensorList*?", "Out", {
    "shape": "ints", "dtype": ("dtype", "float32"), "min": ("float", -1.0), "max": ("float", 1.0),
    "seed": ("int", 0), "row_keyed": ("bool", False),
}, infer=_filled, traits=(INITIALIZER, RANDOM, NO_GRAD),
    doc="Out ~ U[min, max); row_keyed: row i drawn from the op's key folded with i (a "
        "distributed table's rows, drawn alike wherever they are needed)")
register("gaussian_random", "ShapeTensor? ShapeTensorList*?", "Out", {
    "shape": "ints", "dtype": ("dtype", "float32"), "mean": ("float", 0.0), "std": ("float", 1.0),
    "seed": ("int", 0), "row_keyed": ("bool", False),
}, infer=_filled, traits=(INITIALIZER, RANDOM, NO_GRAD),
    doc="Out ~ N(mean, std^2); row_keyed as for uniform_random")


# -- issue 24: initializers (truncated_gaussian_random)
register("truncated_gaussian_random", "", "Out", {
    "shape": "ints", "dtype": ("dtype", "float32"), "mean": ("float", 0.0), "std": ("float", 1.0),
    "seed": ("int", 0),
}, infer=_filled, traits=(INITIALIZER, RANDOM, NO_GRAD),
    doc="Out ~ N(mean, std^2) truncated to mean +- 2 std (Paddle redraws values beyond it)")
