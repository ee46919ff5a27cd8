"""Transposed convolutions (2-D, 3-D), conv3d and pool3d: slots, attributes, shape rules.

Output sizes follow Paddle 1.8: conv/pool (in + pads - k_eff) / stride + 1, transposed
(in - 1) * stride - pads + k_eff, or the output_size attribute when given.
"""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.shapes import same_pads
from ...ir.types import TensorType


def spatial_nd(c, shape, layout, nd):
    """(batch, channels, spatial dims) of an N-d input in channel-first or -last layout."""
    c.check(len(shape) == nd + 2, f"expects a {nd + 2}-D input, got {list(shape)}")
    # a 3-D op also reads Paddle's NCHW/NHWC spelling (channels first/last)
    c.check(layout in (_FIRST[nd], _LAST[nd], _FIRST[2], _LAST[2], "AnyLayout"),
            f"data format must be {_FIRST[nd]} or {_LAST[nd]}, got {layout!r}")
    if layout in _LAST.values():
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


_FIRST = {2: "NCHW", 3: "NCDHW"}
_LAST = {2: "NHWC", 3: "NDHWC"}


def assemble_nd(layout, n, ch, dims):
    return (n, *dims, ch) if layout in _LAST.values() else (n, ch, *dims)


def pads_nd(c, paddings, nd):
    """Paddle paddings: [p], one per dim (symmetric) or (before, after) per dim."""
    p = list(paddings)
    if len(p) == 1:
        p = p * nd
    if len(p) == nd:
        return [(v, v) for v in p]
    c.check(len(p) == 2 * nd, f"paddings must have 1, {nd} or {2 * nd} entries, got {p}")
    return [(p[2 * i], p[2 * i + 1]) for i in range(nd)]


def resolve_pads_nd(c, algo, paddings, dims, ksize, strides, dilations):
    c.check(algo in ("EXPLICIT", "SAME", "VALID"), f"padding_algorithm {algo!r}")
    if algo == "SAME":
        return [same_pads(dims[i], ksize[i], strides[i], dilations[i]) for i in range(len(dims))]
    if algo == "VALID":
        return [(0, 0)] * len(dims)
    return pads_nd(c, paddings, len(dims))


def window_size(c, size, k, stride, lo, hi, dilation=1, ceil_mode=False):
    """Paddle's output size of a window op: C division (truncating) and a positive result."""
    if size < 0:
        return -1
    num = size + lo + hi - (dilation * (k - 1) + 1) + (stride - 1 if ceil_mode else 0)
    out = int(num / stride) + 1
    c.check(out > 0, f"window {dilation * (k - 1) + 1} larger than padded input "
                     f"{size + lo + hi}")
    return out


def _check_lists(c, nd, **lists):
    for name, v in lists.items():
        c.check(len(v) == nd, f"{name} must have {nd} entries, got {list(v)}")
    c.check(all(s > 0 for s in lists.get("strides", [1])),
            f"strides must be positive, got {lists.get('strides')}")


def _conv_nd(nd):
    def infer(c):
        x, w = c.x("Input"), c.x("Filter")
        layout = c["data_format"]
        n, ch, dims = spatial_nd(c, x.shape, layout, nd)
        c.check(w.rank == nd + 2, f"Filter must be {nd + 2}-D, got {list(w.shape)}")
        g = c["groups"]
        c.check(g >= 1, f"groups must be >= 1, got {g}")
        c.check(ch < 0 or ch == w.shape[1] * g,
                f"input has {ch} channels but Filter {list(w.shape)} with groups={g} "
                f"expects {w.shape[1] * g}")
        c.check(w.shape[0] % g == 0, f"{w.shape[0]} filters not divisible by groups={g}")
        c.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
        k, s, d = w.shape[2:], c["strides"], c["dilations"]
        _check_lists(c, nd, strides=s, dilations=d)
        pads = resolve_pads_nd(c, c["padding_algorithm"], c["paddings"], dims, k, s, d)
        out = tuple(window_size(c, dims[i], k[i], s[i], *pads[i], d[i]) for i in range(nd))
        return {"Output": TensorType(assemble_nd(layout, n, w.shape[0], out), x.dtype)}
    return infer


def transpose_out_dims(c, dims, ksize, nd):
    """Spatial output dims of a transposed convolution (output_size wins when given)."""
    s, d = c["strides"], c["dilations"]
    _check_lists(c, nd, strides=s, dilations=d)
    pads = resolve_pads_nd(c, c["padding_algorithm"], c["paddings"], dims, ksize, s, d)
    out = []
    for i in range(nd):
        size = -1 if dims[i] < 0 else \
            (dims[i] - 1) * s[i] - sum(pads[i]) + d[i] * (ksize[i] - 1) + 1
        out.append(size)
    given = list(c["output_size"])
    if given:
        c.check(len(given) == nd, f"output_size must have {nd} entries, got {given}")
        for i in range(nd):
            c.check(out[i] < 0 or out[i] <= given[i] < out[i] + s[i],
                    f"output_size {given} must lie in [{out}, {out} + strides {s})")
        out = given
    c.check(all(v < 0 or v > 0 for v in out), f"transposed output {out} must be positive")
    return tuple(out), pads


def _conv_transpose_nd(nd):
    def infer(c):
        x, w = c.x("Input"), c.x("Filter")
        layout = c["data_format"]
        n, ch, dims = spatial_nd(c, x.shape, layout, nd)
        c.check(w.rank == nd + 2,
                f"Filter must be {nd + 2}-D [C, M/groups, k...], got {list(w.shape)}")
        g = c["groups"]
        c.check(g >= 1, f"groups must be >= 1, got {g}")
        c.check(ch < 0 or ch == w.shape[0],
                f"input has {ch} channels but Filter {list(w.shape)} expects {w.shape[0]}")
        c.check(w.shape[0] % g == 0, f"{w.shape[0]} input channels not divisible by groups={g}")
        c.check(x.dtype == w.dtype, f"Input is {x.dtype} but Filter is {w.dtype}")
        out, _ = transpose_out_dims(c, dims, w.shape[2:], nd)
        return {"Output": TensorType(assemble_nd(layout, n, w.shape[1] * g, out), x.dtype)}
    return infer


def _attrs(nd, transpose=False):
    a = {"strides": ("ints", [1] * nd), "paddings": ("ints", [0] * nd),
         "dilations": ("ints", [1] * nd), "groups": ("int", 1),
         "data_format": ("str", _FIRST[nd]), "padding_algorithm": ("str", "EXPLICIT"),
         "use_cudnn": ("bool", True)}
    if transpose:
        a["output_size"] = ("ints", [])
    return a


register("conv3d", "Input Filter", "Output", _attrs(3), infer=_conv_nd(3),
         doc="3-D convolution (cross-correlation), Filter [M, C/groups, kd, kh, kw]")
register("conv2d_transpose", "Input Filter", "Output", _attrs(2, True),
         infer=_conv_transpose_nd(2),
         doc="2-D transposed convolution (conv2d's input gradient), Filter [C, M/groups, kh, kw]")
register("depthwise_conv2d_transpose", "Input Filter", "Output", _attrs(2, True),
         infer=_conv_transpose_nd(2), doc="conv2d_transpose with groups == input channels")
register("conv3d_transpose", "Input Filter", "Output", _attrs(3, True),
         infer=_conv_transpose_nd(3),
         doc="3-D transposed convolution, Filter [C, M/groups, kd, kh, kw]")


def _pool3d(c):
    x = c.x("X")
    layout = c["data_format"]
    n, ch, dims = spatial_nd(c, x.shape, layout, 3)
    c.check(c["pooling_type"] in ("max", "avg"), f"pooling_type {c['pooling_type']!r}")
    k, s = c["ksize"], c["strides"]
    if c["global_pooling"]:
        out = (1, 1, 1)
    elif c["adaptive"]:
        _check_lists(c, 3, ksize=k)
        out = tuple(k)
    else:
        _check_lists(c, 3, ksize=k, strides=s)
        pads = resolve_pads_nd(c, c["padding_algorithm"], c["paddings"], dims, k, s, (1,) * 3)
        out = tuple(window_size(c, dims[i], k[i], s[i], *pads[i], ceil_mode=c["ceil_mode"])
                    for i in range(3))
    return {"Out": TensorType(assemble_nd(layout, n, ch, out), x.dtype)}


register("pool3d", "X", "Out", {
    "pooling_type": ("str", "max"), "ksize": ("ints", [2, 2, 2]),
    "strides": ("ints", [1, 1, 1]), "paddings": ("ints", [0, 0, 0]),
    "global_pooling": ("bool", False), "ceil_mode": ("bool", False),
    "exclusive": ("bool", True), "adaptive": ("bool", False),
    "data_format": ("str", "NCDHW"), "padding_algorithm": ("str", "EXPLICIT"),
}, infer=_pool3d, doc="max or average pooling over 3-D windows")


def _max_pool_with_index(nd):
    def infer(c):
        x = c.x("X")
        c.check(x.rank == nd + 2, f"X must be {nd + 2}-D (channels first), got {list(x.shape)}")
        k, s, p = c["ksize"], c["strides"], c["paddings"]
        _check_lists(c, nd, ksize=k)
        dims = tuple(x.shape[2:])
        if c["global_pooling"]:
            out = (1,) * nd
        elif c["adaptive"]:
            out = tuple(k)
        else:
            _check_lists(c, nd, strides=s, paddings=p)
            out = tuple(window_size(c, dims[i], k[i], s[i], p[i], p[i]) for i in range(nd))
        shape = x.shape[:2] + out
        return {"Out": TensorType(shape, x.dtype), "Mask": TensorType(shape, "int32")}
    return infer


def _with_index_attrs(nd):
    return {"ksize": "ints", "strides": ("ints", [1] * nd), "paddings": ("ints", [0] * nd),
            "global_pooling": ("bool", False), "adaptive": ("bool", False)}


register("max_pool2d_with_index", "X", "Out Mask", _with_index_attrs(2),
         infer=_max_pool_with_index(2),
         doc="2-D max pooling; Mask the argmax's flat index in its input plane (h * W + w)")
register("max_pool3d_with_index", "X", "Out Mask", _with_index_attrs(3),
         infer=_max_pool_with_index(3),
         doc="3-D max pooling; Mask the argmax's flat index in its input volume")
