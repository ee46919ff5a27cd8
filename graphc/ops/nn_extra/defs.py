"""Definitions of hierarchical_sigmoid, row_conv, fsp_matrix, add_position_encoding,
affine_grid and grid_sampler (dense inputs; docs/porting_from_paddle.md says what differs)."""

from __future__ import annotations

from ...ir.opdef import LOSS, NO_GRAD, RANDOM, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, dims_compatible


def _float(c, slot):
    t = c.x(slot)
    c.check(t.dtype in FLOAT_DTYPES, f"{slot} must be floating point, got {t.dtype}")
    return t


def code_length(num_classes: int) -> int:
    """The longest path of Paddle's default tree: the bit length of num_classes - 1."""
    return max(int(num_classes - 1).bit_length(), 1)


def _hsigmoid(c):
    x, w = _float(c, "X"), _float(c, "W")
    c.check(x.rank == 2, f"X must be [N, D], got {list(x.shape)}")
    c.check(w.rank == 2 and dims_compatible(w.shape[1:], x.shape[1:]),
            f"W must be [nodes, D={x.shape[1]}], got {list(w.shape)}")
    lab = c.x("Label")
    # one class per row: Paddle's kernel reads the first N ids of a wider label and ignores
    # the rest (its TestBook feeds [N, 2]); graphc refuses it rather than drop labels
    c.check(lab.dtype in INT_DTYPES and lab.rank in (1, 2)
            and dims_compatible(lab.shape[:1], x.shape[:1])
            and dims_compatible(lab.shape[1:], (1,) * (lab.rank - 1)),
            f"Label must be int [N] or [N, 1] with X's N, got {lab.dtype} {list(lab.shape)}")
    c.check(c["num_classes"] >= 2, f"num_classes must be >= 2, got {c['num_classes']}")
    width = code_length(c["num_classes"])
    if c.has("PathTable"):
        table, code = c.x("PathTable"), c.x("PathCode") if c.has("PathCode") else None
        c.check(code is not None and table.rank == 2 and table.shape == code.shape
                and table.dtype in INT_DTYPES and code.dtype in INT_DTYPES,
                "PathTable and PathCode must be int [N, L] of the same shape")
        width = table.shape[1]
    if c.has("Bias"):
        b = c.x("Bias")
        c.check(b.rank == 2 and dims_compatible(b.shape[:1], w.shape[:1]),
                f"Bias must be [nodes={w.shape[0]}, 1], got {list(b.shape)}")
    return {"Out": TensorType((x.shape[0], 1), x.dtype),
            "PreOut": TensorType((x.shape[0], width), x.dtype)}


register("hierarchical_sigmoid", "X W Label PathTable? PathCode? Bias?", "Out PreOut",
         {"num_classes": "int", "is_sparse": ("bool", False)}, infer=_hsigmoid, traits=(LOSS,),
         doc="sum over the label's tree path of softplus(p) - bit * p, p = clip(W[node] x + "
             "b[node], -40, 40); out-of-path slots of PreOut count log 2 as in Paddle")


def _row_conv(c):
    x, f = _float(c, "X"), _float(c, "Filter")
    c.check(x.rank in (2, 3), f"X must be [T, D] or padded [N, T, D], got {list(x.shape)}")
    c.check(f.rank == 2 and dims_compatible(f.shape[1:], x.shape[-1:]),
            f"Filter must be [future_context_size + 1, D={x.shape[-1]}], got {list(f.shape)}")
    return {"Out": x}


register("row_conv", "X Filter", "Out", infer=_row_conv,
         doc="Out[t] = sum_k X[t + k] * Filter[k] over the steps that exist (lookahead conv)")


def _fsp(c):
    x, y = _float(c, "X"), _float(c, "Y")
    c.check(x.rank == 4 and y.rank == 4 and dims_compatible((x.shape[0], *x.shape[2:]),
                                                            (y.shape[0], *y.shape[2:])),
            f"X {list(x.shape)} and Y {list(y.shape)} must be [N, C, H, W] with the same N, H, "
            f"W")
    return {"Out": TensorType((x.shape[0], x.shape[1], y.shape[1]), x.dtype)}


register("fsp_matrix", "X Y", "Out", infer=_fsp,
         doc="Out[n] = X[n] (C1 x HW) @ Y[n]^T (HW x C2) / (H W)")


def _position(c):
    x = _float(c, "X")
    c.check(x.rank == 3 and (x.shape[2] < 0 or x.shape[2] % 2 == 0),
            f"X must be [N, T, D] with an even D, got {list(x.shape)}")
    return {"Out": x}


register("add_position_encoding", "X", "Out", {"alpha": "float", "beta": "float"},
         infer=_position,
         doc="alpha X + beta [sin(t / 10000^(k / (D/2 - 1))), cos(...)] over D's two halves")


def _affine_grid(c):
    theta = _float(c, "Theta")
    c.check(theta.rank == 3 and theta.shape[1:] in ((2, 3), (-1, 3), (2, -1), (-1, -1)),
            f"Theta must be [N, 2, 3], got {list(theta.shape)}")
    shape = c["output_shape"]
    c.check(len(shape) == 4, f"output_shape must be [N, C, H, W], got {list(shape)}")
    return {"Output": TensorType((theta.shape[0], shape[2], shape[3], 2), theta.dtype)}


register("affine_grid", "Theta", "Output", {"output_shape": "ints"}, infer=_affine_grid,
         doc="the [N, H, W, 2] sampling grid Theta @ (x, y, 1) over x, y in linspace(-1, 1)")


def _grid_sampler(c):
    x, g = _float(c, "X"), _float(c, "Grid")
    c.check(x.rank == 4 and g.rank == 4 and g.shape[3] in (2, -1)
            and dims_compatible(x.shape[:1], g.shape[:1]),
            f"X must be [N, C, H, W] and Grid [N, H', W', 2], got X {list(x.shape)} and Grid "
            f"{list(g.shape)}")
    return {"Output": TensorType((x.shape[0], x.shape[1], g.shape[1], g.shape[2]), x.dtype)}


register("grid_sampler", "X Grid", "Output", infer=_grid_sampler,
         doc="bilinear samples of X at Grid's (x, y) in [-1, 1] (corners aligned), zero outside")


def _nce(c):
    x, w = _float(c, "Input"), _float(c, "Weight")
    c.check(x.rank == 2, f"Input must be [N, D], got {list(x.shape)}")
    n_cls = c["num_total_classes"]
    c.check(w.rank == 2 and w.shape[0] in (n_cls, -1) and dims_compatible(w.shape[1:],
                                                                          x.shape[1:]),
            f"Weight must be [num_total_classes={n_cls}, D={x.shape[1]}], got {list(w.shape)}")
    lab = c.x("Label")
    c.check(lab.dtype in INT_DTYPES and lab.rank == 2
            and dims_compatible(lab.shape[:1], x.shape[:1]),
            f"Label must be int [N, num_true] with Input's N, got {lab.dtype} {list(lab.shape)}")
    c.check(c["sampler"] in (0, 1, 2), f"sampler must be 0 (uniform), 1 (log_uniform) or 2 "
                                       f"(custom_dist), got {c['sampler']}")
    c.check(c["sampler"] != 2 or c.has("CustomDistProbs"),
            "sampler 2 (custom_dist) needs CustomDistProbs")
    negs = len(c["custom_neg_classes"]) or c["num_neg_samples"]
    width = -1 if lab.shape[1] < 0 else lab.shape[1] + negs
    return {"Cost": TensorType((x.shape[0], 1), x.dtype),
            "SampleLogits": TensorType((x.shape[0], width), x.dtype),
            "SampleLabels": TensorType((x.shape[0], width), "int64")}


register("nce", "Input Label Weight Bias? SampleWeight? CustomDistProbs?",
         "Cost SampleLogits SampleLabels",
         {"num_total_classes": "int", "num_neg_samples": ("int", 10), "sampler": ("int", 0),
          "seed": ("int", 0), "is_sparse": ("bool", False), "custom_neg_classes": ("ints", ())},
         infer=_nce, traits=(LOSS, RANDOM),
         # its gradient differentiates the drawn samples, not a fresh draw
         grad_reads=("Input", "Label", "Weight", "Bias", "SampleWeight", "CustomDistProbs",
                     "SampleLabels"),
         doc="noise-contrastive estimation: -log(o / (o + k q)) for the true labels and "
             "-log(k q / (o + k q)) for k sampled ones, o = sigmoid(W x + b), q the sampler's "
             "probability")


def _random_crop(c):
    x, shape = c.x("X"), list(c["shape"])
    c.check(0 < len(shape) <= x.rank, f"shape {shape} must crop 1 to {x.rank} trailing dims of "
                                      f"X {list(x.shape)}")
    tail = x.shape[x.rank - len(shape):]
    c.check(all(0 < s and (d < 0 or s <= d) for s, d in zip(shape, tail)),
            f"shape {shape} must fit within X {list(x.shape)}'s trailing dims")
    c.check(all(d >= 0 for d in tail), f"X {list(x.shape)}'s cropped dims must be known")
    return {"Out": TensorType((*x.shape[:x.rank - len(shape)], *shape), x.dtype)}


register("random_crop", "X", "Out", {"shape": "ints", "seed": ("int", 0)},
         infer=_random_crop, traits=(RANDOM, NO_GRAD),
         doc="a window of `shape` over X's trailing dims at an offset drawn per instance")


def _similarity_focus(c):
    x = _float(c, "X")
    c.check(x.rank == 4, f"X must be 4-D, got {list(x.shape)}")
    axis, idx = c["axis"], list(c["indexes"])
    c.check(axis in (1, 2, 3), f"axis must be 1, 2 or 3, got {axis}")
    c.check(len(idx) > 0 and all(0 <= i and (x.shape[axis] < 0 or i < x.shape[axis])
                                 for i in idx),
            f"indexes {idx} must be in [0, {x.shape[axis]}) along axis {axis}")
    return {"Out": x}


register("similarity_focus", "X", "Out", {"axis": "int", "indexes": "ints"},
         infer=_similarity_focus, traits=(NO_GRAD,),
         doc="a 0/1 mask: per chosen slice along axis, greedily the largest entries with no "
             "row or column taken, OR-ed over the slices and spread along axis")
