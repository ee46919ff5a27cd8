"""Neural-network ops: convolution, pooling, normalisation, dropout, embedding, losses.

Slots, attributes and defaults are Paddle's, so a Paddle user reads the IR unchanged.
"""

from __future__ import annotations

from ...ir.lod_rules import last_axis_only
from ...ir.opdef import LOSS, RANDOM, STATEFUL, register
from ...ir.shapes import normalize_axis, prod_or_unknown, resolve_pads, window_out
from ...ir.types import INT_DTYPES, TensorType, dims_compatible
from ..conv_pool.defs import window_size

_LAYOUTS = ("NCHW", "NHWC", "AnyLayout")


def _spatial(c, shape, layout):
    c.check(len(shape) == 4, f"expects a 4-D input, got {list(shape)}")
    c.check(layout in _LAYOUTS, f"data format must be NCHW or NHWC, got {layout!r}")
    if layout == "NHWC":
        return shape[0], shape[3], shape[1:3]
    return shape[0], shape[1], shape[2:4]


def _assemble(layout, n, ch, hw):
    return (n, *hw, ch) if layout == "NHWC" else (n, ch, *hw)


def _window_dims(c, hw, ksize, strides, paddings, algo, dilations=(1, 1), ceil_mode=False,
                 pool=False):
    c.check(len(ksize) == 2 and len(strides) == 2, "kernel and strides must have 2 entries")
    c.check(all(s > 0 for s in strides), f"strides must be positive, got {strides}")
    c.check(algo in ("EXPLICIT", "SAME", "VALID"), f"padding_algorithm {algo!r}")
    pads = resolve_pads(algo, paddings, hw, ksize, strides, dilations)
    if pool:  # Paddle's pool size rule: a window past the padded input still gives one output
        return tuple(window_size(c, hw[i], ksize[i], strides[i], *pads[i],
                                 ceil_mode=ceil_mode) for i in range(2))
    return tuple(window_out(hw[i], ksize[i], strides[i], *pads[i], dilations[i], ceil_mode)
                 for i in range(2))


def _conv2d(c):
    x, w = c.x("Input"), c.x("Filter")
    layout = c["data_format"]
    n, ch, hw = _spatial(c, x.shape, layout)
    c.check(w.rank == 4, f"Filter must be 4-D [M, C/groups, kh, kw], got {list(w.shape)}")
    groups = c["groups"]
    c.check(groups >= 1, f"groups must be >= 1, got {groups}")
    c.check(ch < 0 or ch == w.shape[1] * groups,
            f"input has {ch} channels but Filter {list(w.shape)} with groups={groups} "
            f"expects {w.shape[1] * groups}")
    c.check(w.shape[0] % groups == 0, f"{w.shape[0]} filters not divisible by groups={groups}")
    c.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
    out_hw = _window_dims(c, hw, w.shape[2:], c["strides"], c["paddings"],
                          c["padding_algorithm"], c["dilations"])
    return {"Output": TensorType(_assemble(layout, n, w.shape[0], out_hw), x.dtype)}


_CONV_ATTRS = {
    "strides": ("ints", [1, 1]), "paddings": ("ints", [0, 0]), "dilations": ("ints", [1, 1]),
    "groups": ("int", 1), "data_format": ("str", "NCHW"),
    "padding_algorithm": ("str", "EXPLICIT"), "use_cudnn": ("bool", True),
}
register("conv2d", "Input Filter", "Output", _CONV_ATTRS, infer=_conv2d,
         doc="2-D convolution (cross-correlation), Filter [M, C/groups, kh, kw]")
register("depthwise_conv2d", "Input Filter", "Output", dict(_CONV_ATTRS, use_cudnn=("bool", False)),
         infer=_conv2d, doc="conv2d with groups == input channels")


def _pool2d(c):
    x = c.x("X")
    layout = c["data_format"]
    n, ch, hw = _spatial(c, x.shape, layout)
    c.check(c["pooling_type"] in ("max", "avg"), f"pooling_type {c['pooling_type']!r}")
    if c["global_pooling"]:
        out_hw = (1, 1)
    elif c["adaptive"]:
        out_hw = tuple(c["ksize"])
    else:
        out_hw = _window_dims(c, hw, c["ksize"], c["strides"], c["paddings"],
                              c["padding_algorithm"], ceil_mode=c["ceil_mode"], pool=True)
    return {"Out": TensorType(_assemble(layout, n, ch, out_hw), x.dtype)}


register("pool2d", "X", "Out", {
    "pooling_type": ("str", "max"), "ksize": ("ints", [2, 2]), "strides": ("ints", [1, 1]),
    "paddings": ("ints", [0, 0]), "global_pooling": ("bool", False),
    "ceil_mode": ("bool", False), "exclusive": ("bool", True), "adaptive": ("bool", False),
    "data_format": ("str", "NCHW"), "padding_algorithm": ("str", "EXPLICIT"),
}, infer=_pool2d, doc="max or average pooling over 2-D windows")


def _batch_norm(c):
    x = c.x("X")
    layout = c["data_layout"]
    c.check(layout in _LAYOUTS, f"data_layout must be NCHW or NHWC, got {layout!r}")
    c.check(x.rank >= 2, f"X must have rank >= 2, got {list(x.shape)}")
    ch = x.shape[-1] if layout == "NHWC" else x.shape[1]
    stats = c.x("Scale")
    for slot in ("Scale", "Bias", "Mean", "Variance"):
        t = c.x(slot)
        c.check(t.rank == 1 and (ch < 0 or t.shape[0] == ch),
                f"{slot} must be [{ch}] for X {list(x.shape)} ({layout}), got {list(t.shape)}")
    vec = TensorType((ch,), stats.dtype)
    return {"Y": x, "MeanOut": c.x("Mean"), "VarianceOut": c.x("Variance"),
            "SavedMean": vec, "SavedVariance": vec}


register("batch_norm", "X Scale Bias Mean Variance",
         "Y MeanOut VarianceOut SavedMean SavedVariance", {
             "momentum": ("float", 0.9), "epsilon": ("float", 1e-5), "is_test": ("bool", False),
             "data_layout": ("str", "NCHW"), "use_global_stats": ("bool", False),
             "trainable_statistics": ("bool", False),
         }, infer=_batch_norm, traits=(STATEFUL,),
         inplace={"MeanOut": "Mean", "VarianceOut": "Variance"},
         # over a LoD value: statistics of the real tokens (and spatial dims), its rule in
         # lod_lowering.py; Y keeps the LoD, the statistics do not
         lod_inputs=("X",), lod_outputs={"Y": ("X",)},
         grad_reads=("X", "Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance"),
         doc="batch normalisation; MeanOut/VarianceOut update the running statistics")


def _layer_norm(c):
    x = c.x("X")
    axis = c["begin_norm_axis"]
    c.check(0 < axis < x.rank, f"begin_norm_axis {axis} for rank {x.rank}")
    right = prod_or_unknown(x.shape[axis:])
    for slot in ("Scale", "Bias"):
        if c.has(slot):
            t = c.x(slot)
            c.check(t.shape in ((right,), (-1,)) or right < 0,
                    f"{slot} must be [{right}], got {list(t.shape)}")
    left = TensorType((prod_or_unknown(x.shape[:axis]),), x.dtype)
    return {"Y": x, "Mean": left, "Variance": left}


register("layer_norm", "X Scale? Bias?", "Y Mean Variance",
         {"epsilon": ("float", 1e-5), "begin_norm_axis": ("int", 1)}, infer=_layer_norm,
         # per-token normalisation (begin_norm_axis 0 is refused): Y, Mean and Variance (one
         # per token) keep the LoD, and the dense rule on the tokens is exact
         lod_inputs=("X",),
         doc="normalise over dimensions [begin_norm_axis, rank)")


def _dropout(c):
    x = c.x("X")
    c.check(0.0 <= c["dropout_prob"] <= 1.0, f"dropout_prob {c['dropout_prob']} not in [0, 1]")
    c.check(c["dropout_implementation"] in ("downgrade_in_infer", "upscale_in_train"),
            f"dropout_implementation {c['dropout_implementation']!r}")
    return {"Out": x, "Mask": TensorType(x.shape, "uint8")}


register("dropout", "X", "Out Mask", {
    "dropout_prob": ("float", 0.5), "is_test": ("bool", False), "fix_seed": ("bool", False),
    "seed": ("int", 0), "dropout_implementation": ("str", "downgrade_in_infer"),
}, infer=_dropout, traits=(RANDOM,), lod_inputs=("X",),
    # its gradient reads the mask only (Paddle's): X@GRAD takes Out@GRAD's type
    grad_reads=("Mask",), grad_type_from={"X": "Out@GRAD"},
    doc="zero elements with probability dropout_prob; Paddle's two scaling conventions")


def _lookup_table(c):
    w, ids = c.x("W"), c.x("Ids")
    c.check(w.rank == 2, f"W must be [vocab, width], got {list(w.shape)}")
    c.check(ids.dtype in INT_DTYPES, f"Ids must be integer, got {ids.dtype}")
    c.check(ids.rank >= 1 and ids.shape[-1] in (1, -1),
            f"Ids must end in a dimension of 1, got {list(ids.shape)}")
    # Paddle's lookup_table checks the last dimension at build time too: ids declared [None]
    # fail there (its only dimension is the batch, so the lookup would drop it); -1 is let
    # through only where a further dimension may still be a 1 that graphc could not infer
    c.check(ids.rank >= 2 or ids.shape[0] == 1,
            f"Ids {list(ids.shape)} must end in a dimension of 1 (Paddle's lookup_table "
            f"refuses it too): its only dimension is the batch. Declare the ids [None, 1] "
            f"(layers.data(shape=[1]) prepends the batch), or use fluid.embedding, which "
            f"takes ids of any shape")
    return {"Out": TensorType(ids.shape[:-1] + (w.shape[1],), w.dtype)}


register("lookup_table", "W Ids", "Out", {
    "is_sparse": ("bool", False), "is_distributed": ("bool", False),
    "padding_idx": ("int", -1), "remote_prefetch": ("bool", False),
}, infer=_lookup_table,
    lod_inputs=("Ids",),  # one embedding row per token
    # is_sparse: W@GRAD is row-sparse, one row per looked-up id (never the whole table)
    sparse_grad=("W", "is_sparse"),
    doc="embedding lookup: Out[i] = W[Ids[i]] (zeros at padding_idx)")


def _softmax_ce(c):
    logits, label = c.x("Logits"), c.x("Label")
    axis = normalize_axis(c["axis"], logits.rank)
    if c["soft_label"]:
        c.check(dims_compatible(label.shape, logits.shape),
                f"soft Label {list(label.shape)} must match Logits {list(logits.shape)}")
    else:
        c.check(label.dtype in INT_DTYPES, f"hard Label must be integer, got {label.dtype}")
        c.check(label.rank == logits.rank and label.shape[axis] in (1, -1),
                f"Label must be Logits' shape with 1 at axis {axis}, got {list(label.shape)}")
    loss = tuple(1 if i == axis else d for i, d in enumerate(logits.shape))
    return {"Softmax": logits, "Loss": TensorType(loss, logits.dtype)}


register("softmax_with_cross_entropy", "Logits Label", "Softmax Loss", {
    "soft_label": ("bool", False), "ignore_index": ("int", -100),
    "numeric_stable_mode": ("bool", True), "axis": ("int", -1),
}, infer=_softmax_ce, traits=(LOSS,),
    lod_inputs=("Logits", "Label"), lod_fixup=last_axis_only,
    # its gradient reads Softmax, not Logits (Paddle's): Logits@GRAD takes Softmax's type
    grad_reads=("Label", "Softmax"), grad_type_from={"Logits": "Softmax"},
    doc="softmax then cross entropy, per example")


def _cross_entropy(c):
    x, label = c.x("X"), c.x("Label")
    if c["soft_label"]:
        c.check(dims_compatible(label.shape, x.shape),
                f"soft Label {list(label.shape)} must match X {list(x.shape)}")
    else:
        c.check(label.dtype in INT_DTYPES, f"hard Label must be integer, got {label.dtype}")
        # Paddle 1.8 takes a hard Label [..., 1] or without that last dim (X [N, C],
        # Label [N]); Y then has Label's shape
        c.check((label.rank == x.rank and label.shape[-1] in (1, -1))
                or label.rank == x.rank - 1,
                f"Label must be X's shape {list(x.shape)} with the last dim 1 or dropped, "
                f"got {list(label.shape)}")
        c.check(dims_compatible(label.shape[:x.rank - 1], x.shape[:-1]),
                f"Label {list(label.shape)} and X {list(x.shape)} differ before X's last dim")
        if label.rank == x.rank - 1:
            rows = tuple(a if a >= 0 else b for a, b in zip(x.shape[:-1], label.shape))
            return {"Y": TensorType(rows, x.dtype)}
    return {"Y": TensorType(x.shape[:-1] + (1,), x.dtype)}


register("cross_entropy", "X Label", "Y",
         {"soft_label": ("bool", False), "ignore_index": ("int", -100)},
         infer=_cross_entropy, traits=(LOSS,), lod_inputs=("X", "Label"),
         doc="-log X[label] per example (X: probabilities)")
