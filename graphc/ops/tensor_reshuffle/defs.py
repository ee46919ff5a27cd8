"""Padding, cropping and rearranging ops with Paddle 1.8's names, slots and attributes: pad,
pad2d, pad_constant_like, crop, crop_tensor, label_smooth, multiplex, scatter_nd_add,
space_to_depth, pixel_shuffle, shuffle_channel, shuffle_batch. Every size they take is an
attribute."""

from __future__ import annotations

from ...ir.opdef import RANDOM, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType


def _pad(c):
    x, pads = c.x("X"), list(c["paddings"])
    c.check(len(pads) == 2 * x.rank,
            f"paddings {pads} must hold 2 entries (before, after) per dimension of X "
            f"{list(x.shape)}")
    c.check(all(p >= 0 for p in pads), f"paddings {pads} must be non-negative")
    shape = tuple(-1 if d < 0 else d + pads[2 * i] + pads[2 * i + 1]
                  for i, d in enumerate(x.shape))
    return {"Out": TensorType(shape, x.dtype)}


register("pad", "X", "Out", {"paddings": "ints", "pad_value": ("float", 0.0)}, infer=_pad,
         doc="Out = X with paddings[2i] values before and paddings[2i+1] after along dim i, "
             "all pad_value")


def _nchw(c, x, layout):
    c.check(x.rank == 4, f"X must be 4-D, got {list(x.shape)}")
    c.check(layout in ("NCHW", "NHWC"), f"data_format must be NCHW or NHWC, got {layout!r}")
    return (2, 3) if layout == "NCHW" else (1, 2)


def _pad2d(c):
    x, pads = c.x("X"), list(c["paddings"])
    hw = _nchw(c, x, c["data_format"])
    c.check(len(pads) == 4 and all(p >= 0 for p in pads),
            f"paddings {pads} must be 4 non-negative entries [top, bottom, left, right]")
    c.check(c["mode"] in ("constant", "reflect", "edge"),
            f"mode {c['mode']!r} must be constant, reflect or edge")
    shape = list(x.shape)
    for k, axis in enumerate(hw):
        if c["mode"] == "reflect" and shape[axis] >= 0:
            c.check(max(pads[2 * k:2 * k + 2]) < shape[axis],
                    f"reflect paddings {pads} must be smaller than X's dimension {axis} "
                    f"({shape[axis]})")
        if shape[axis] >= 0:
            shape[axis] += pads[2 * k] + pads[2 * k + 1]
    return {"Out": TensorType(tuple(shape), x.dtype)}


register("pad2d", "X", "Out", {"paddings": ("ints", [0, 0, 0, 0]), "mode": ("str", "constant"),
                               "pad_value": ("float", 0.0), "data_format": ("str", "NCHW")},
         infer=_pad2d,
         doc="Out = X padded in height and width ([top, bottom, left, right]) with pad_value, "
             "a mirror image (reflect) or the edge values (edge)")


def _pad_constant_like(c):
    x, y = c.x("X"), c.x("Y")
    c.check(x.rank == y.rank and all(a < 0 or b < 0 or a >= b for a, b in zip(x.shape, y.shape)),
            f"Y {list(y.shape)} must have X's rank and no dimension larger than X's "
            f"{list(x.shape)}")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    return {"Out": x}


register("pad_constant_like", "X Y", "Out", {"pad_value": ("float", 0.0)},
         infer=_pad_constant_like,
         doc="Out = Y padded at the end of each dimension with pad_value to X's shape")


def crop_shape(c, x, shape, offsets) -> tuple[int, ...]:
    """The cropped shape: an entry -1 keeps X's dimension less its offset."""
    c.check(len(shape) == x.rank, f"shape {shape} must have one entry per dimension of X "
                                  f"{list(x.shape)}")
    c.check(len(offsets) == x.rank, f"offsets {offsets} must have one entry per dimension of X "
                                    f"{list(x.shape)}")
    c.check(all(o >= 0 for o in offsets), f"offsets {offsets} must be non-negative")
    out = []
    for d, s, o in zip(x.shape, shape, offsets):
        c.check(s == -1 or s > 0, f"shape {shape} must be positive (or -1: the rest)")
        size = s if s != -1 else (d - o if d >= 0 else -1)
        c.check(d < 0 or size < 0 or o + size <= d,
                f"shape {shape} at offsets {offsets} goes past X {list(x.shape)}")
        out.append(size)
    return tuple(out)


def _crop(c):
    x = c.x("X")
    shape = list(c.x("Y").shape) if c.has("Y") else list(c["shape"])
    offsets = list(c["offsets"]) or [0] * x.rank
    return {"Out": TensorType(crop_shape(c, x, shape, offsets), x.dtype)}


register("crop", "X Y?", "Out", {"offsets": ("ints", []), "shape": ("ints", [])}, infer=_crop,
         doc="Out = the block of X of shape (or Y's shape) at offsets")
register("crop_tensor", "X", "Out", {"offsets": ("ints", []), "shape": ("ints", [])},
         infer=_crop, doc="Out = the block of X of shape at offsets (-1: to X's end)")


def _label_smooth(c):
    x = c.x("X")
    c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
    c.check(x.rank >= 1, f"X must have a class dimension, got {list(x.shape)}")
    c.check(0.0 <= c["epsilon"] <= 1.0, f"epsilon {c['epsilon']} must be in [0, 1]")
    if c.has("PriorDist"):
        p, k = c.x("PriorDist"), x.shape[-1]
        c.check(p.shape in ((1, k), (k,)) or k < 0,
                f"PriorDist {list(p.shape)} must be [1, {k}] (one weight per class)")
    return {"Out": x}


register("label_smooth", "X PriorDist?", "Out", {"epsilon": ("float", 0.0)},
         infer=_label_smooth, lod_inputs=("X",),
         doc="Out = (1 - epsilon) X + epsilon PriorDist (uniform 1/K without one)")


def _multiplex(c):
    xs, ids = c.xs("X"), c.x("Ids")
    c.check(ids.dtype in INT_DTYPES, f"Ids must be an integer tensor, got {ids.dtype}")
    c.check(ids.rank == 2 and ids.shape[1] in (1, -1), f"Ids must be [N, 1], got "
                                                      f"{list(ids.shape)}")
    first = xs[0]
    c.check(first.rank >= 1, f"X must have a row dimension, got {list(first.shape)}")
    for t in xs:
        c.check(t.dtype == first.dtype and t.rank == first.rank and all(
            a == b or a < 0 or b < 0 for a, b in zip(t.shape, first.shape)),
            f"inputs {first} and {t} differ")
    n = ids.shape[0]
    c.check(n < 0 or first.shape[0] < 0 or n == first.shape[0],
            f"Ids {list(ids.shape)} must have one row per row of X {list(first.shape)}")
    return {"Out": first}


register("multiplex", "X* Ids", "Out", infer=_multiplex,
         doc="Out[i] = X[Ids[i]][i]: row i taken from the input Ids[i] names")


def _scatter_nd_add(c):
    x, idx, upd = c.x("X"), c.x("Index"), c.x("Updates")
    c.check(idx.dtype in INT_DTYPES, f"Index must be an integer tensor, got {idx.dtype}")
    c.check(idx.rank >= 1 and 0 <= idx.shape[-1] <= x.rank,
            f"Index {list(idx.shape)}: its last dimension must be at most X's rank {x.rank}")
    want = idx.shape[:-1] + x.shape[idx.shape[-1]:]
    c.check(upd.dtype == x.dtype, f"Updates is {upd.dtype} but X is {x.dtype}")
    c.check(upd.rank == len(want) and all(
        a == b or a < 0 or b < 0 for a, b in zip(upd.shape, want)),
        f"Updates {list(upd.shape)} must be Index's leading dims + X's trailing ones "
        f"{list(want)}")
    return {"Out": x}


register("scatter_nd_add", "X Index Updates", "Out", infer=_scatter_nd_add,
         doc="Out = X with each Updates slice added at the X position its Index row names "
             "(repeated positions add up)")


def _block_rearranged(c):
    x = c.x("X")
    c.check(x.rank == 4, f"X must be 4-D [N, C, H, W], got {list(x.shape)}")
    n, ch, h, w = x.shape
    if c.op_type == "space_to_depth":
        b = c["blocksize"]
        c.check(b >= 1, f"blocksize {b} must be positive")
        for what, d in (("channels", ch), ("height", h), ("width", w)):
            step = b * b if what == "channels" else b
            c.check(d < 0 or d % step == 0, f"X {list(x.shape)}: {what} {d} must be a "
                                            f"multiple of {step} (blocksize {b})")
        shape = (n, ch * b * b if ch >= 0 else -1, h // b if h >= 0 else -1,
                 w // b if w >= 0 else -1)
    elif c.op_type == "pixel_shuffle":
        r = c["upscale_factor"]
        c.check(r >= 1, f"upscale_factor {r} must be positive")
        c.check(ch < 0 or ch % (r * r) == 0,
                f"X {list(x.shape)}: channels {ch} must be a multiple of {r * r}")
        shape = (n, ch // (r * r) if ch >= 0 else -1, h * r if h >= 0 else -1,
                 w * r if w >= 0 else -1)
    else:
        g = c["group"]
        c.check(g >= 1 and (ch < 0 or ch % g == 0),
                f"X {list(x.shape)}: channels {ch} must be a multiple of group {g}")
        shape = x.shape
    return {"Out": TensorType(shape, x.dtype)}


register("space_to_depth", "X", "Out", {"blocksize": "int"}, infer=_block_rearranged,
         doc="Out [N, C*b*b, H/b, W/b] = X's elements moved as Paddle's kernel (Darknet's "
             "reorg) moves them")
register("pixel_shuffle", "X", "Out", {"upscale_factor": ("int", 1)}, infer=_block_rearranged,
         doc="Out [N, C/r^2, H*r, W*r]: each channel group of r^2 becomes an r x r block")
register("shuffle_channel", "X", "Out", {"group": ("int", 1)}, infer=_block_rearranged,
         doc="Out = X's channels viewed as [group, C/group], transposed")


# -- port24: shuffle_batch (Paddle 1.8's fluid.contrib.layers.shuffle_batch)
def _shuffle_batch(c):
    x = c.x("X")
    c.check(x.rank >= 2, f"X must be [..., D] with at least one row dimension, got "
                         f"{list(x.shape)}")
    rows = -1 if any(d < 0 for d in x.shape[:-1]) else _prod(x.shape[:-1])
    return {"Out": x, "ShuffleIdx": TensorType((rows,), "int64")}


def _prod(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


# The rows (every dimension but the last, flattened) are permuted at random, a new permutation
# each step; ShuffleIdx[i] is the row of X that Out's row i holds, and the gradient reads it
# only (dX[ShuffleIdx[i]] = dOut[i]) rather than drawing the permutation again.
register("shuffle_batch", "X", "Out ShuffleIdx", {"startup_seed": ("int", 0)},
         infer=_shuffle_batch, traits=(RANDOM,), grad_reads=("ShuffleIdx",),
         grad_type_from={"X": "Out@GRAD"},
         doc="Out = X's rows (all dims but the last) in a random order; ShuffleIdx the order")
