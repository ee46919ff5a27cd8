"""The sequence ops beyond sequence_pool (softmax, conv, expand, concat, pad, slice, ...) with
Paddle 1.8's slots and attributes.

Static capacities (docs/lod.md, "Output capacities"): every LoD output's token buffer has a
size fixed by its inputs' buffers, so no op here compiles a new step for new lengths.
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import INT_DTYPES, TensorType


def _lod(c: InferContext, slot: str, levels=(1,)) -> TensorType:
    x = c.x(slot)
    c.check(x.lod_level in levels, f"{slot} must be a LoD value of lod_level "
                                   f"{' or '.join(map(str, levels))}, got {x}")
    c.check(x.rank >= 1, f"{slot} needs a token dimension, got {x}")
    return x


def _dense(c: InferContext, slot: str) -> TensorType:
    x = c.x(slot)
    c.check(not x.lod_level, f"{slot} must be a dense tensor, got the LoD value {x}")
    return x


def _seq_type(shape, dtype, level=1) -> TensorType:
    return TensorType((-1, *shape), dtype, False, level)


# -- sequence_softmax ---------------------------------------------------------------------------

def _sequence_softmax(c):
    x = _lod(c, "X", (1, 2))
    c.check(all(d == 1 for d in x.shape[1:]), f"X must hold one value per token ([T, 1] or "
                                              f"[T]), got {x}")
    return {"Out": x}


register("sequence_softmax", "X", "Out", {"use_cudnn": ("bool", False)},
         infer=_sequence_softmax, lod_inputs=("X",), lod="aware",
         doc="softmax over the tokens of each innermost sequence (one value per token)")


# -- sequence_conv ------------------------------------------------------------------------------

def _sequence_conv(c):
    x = _lod(c, "X")
    f = _dense(c, "Filter")
    c.check(x.rank == 2, f"X must be [T, D], got {x}")
    n = c["contextLength"]
    c.check(n >= 1, f"contextLength must be >= 1, got {n}")
    c.check(c["contextStride"] == 1, f"only contextStride 1 is supported (as Paddle), got "
                                     f"{c['contextStride']}")
    c.check(not c["paddingTrainable"] and not c.has("PaddingData"),
            "trainable padding (paddingTrainable, PaddingData) is not supported")
    c.check(f.rank == 2 and (x.shape[1] < 0 or f.shape[0] < 0 or f.shape[0] == n * x.shape[1]),
            f"Filter must be [contextLength * D, num_filters] = [{n} * {x.shape[1]}, M], "
            f"got {f}")
    c.check(f.dtype == x.dtype, f"Filter is {f.dtype} but X is {x.dtype}")
    return {"Out": _seq_type((f.shape[1],), x.dtype)}


register("sequence_conv", "X Filter PaddingData?", "Out",
         {"contextLength": "int", "contextStart": ("int", 0), "contextStride": ("int", 1),
          "paddingTrainable": ("bool", False)},
         infer=_sequence_conv, lod_inputs=("X",), lod="aware",
         doc="Out[t] = concat(X[t + contextStart + j] for j < contextLength, zero outside the "
             "sequence) @ Filter")


# -- sequence_expand / sequence_expand_as ----------------------------------------------------------

def _sequence_expand(c):
    x = c.x("X")
    y = _lod(c, "Y", (1, 2))
    ref = c["ref_level"]
    c.check(-1 <= ref < y.lod_level, f"ref_level {ref} is not a level of Y ({y}): expected "
                                     f"-1 or 0..{y.lod_level - 1}")
    # Paddle refuses an X of two LoD levels: such an X is graphc's LoD form of Paddle's
    # plain rows (an expanded state, an element of a mixed array), expanded as rows
    c.check(x.lod_level != 1,
            f"X is the LoD value {x}; repeating LoD sequences makes a number of sequences "
            "that depends on the data, which graphc's LoD values cannot hold. Expand a dense "
            "X (one row per sequence of Y's ref_level), e.g. a pooled sequence")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    level = y.lod_level if ref == -1 else ref + 1
    return {"Out": _seq_type(x.shape[1:], x.dtype, level)}


register("sequence_expand", "X Y", "Out", {"ref_level": ("int", -1)},
         infer=_sequence_expand, lod_inputs=("X", "Y"), lod="aware",  # X: to explain
         doc="repeat row i of X as often as sequence i of Y's ref_level is long; Out takes "
             "Y's LoD down to ref_level (an X of 2+ LoD levels: its tokens are the rows)")


def _sequence_expand_as(c):
    x = _dense(c, "X")
    _lod(c, "Y")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    return {"Out": _seq_type(x.shape[1:], x.dtype)}


register("sequence_expand_as", "X Y", "Out", infer=_sequence_expand_as, lod_inputs=("Y",),
         lod="aware", doc="repeat row i of X as often as sequence i of Y is long; Out takes "
                          "Y's LoD")


# -- sequence_concat / sequence_reshape ------------------------------------------------------------

def _sequence_concat(c):
    xs = c.xs("X")
    c.check(len(xs) >= 1, "X needs at least one LoD value")
    for i, x in enumerate(xs):
        c.check(x.lod_level == 1, f"X[{i}] must be a LoD value of lod_level 1, got {x}")
        c.check(x.shape[1:] == xs[0].shape[1:] and x.dtype == xs[0].dtype,
                f"X[{i}] ({x}) differs from X[0] ({xs[0]}) beyond the token dimension")
    return {"Out": _seq_type(xs[0].shape[1:], xs[0].dtype)}


register("sequence_concat", "X*", "Out", infer=_sequence_concat, lod_inputs=("X",),
         lod="aware", doc="sequence i of Out = sequence i of every X, one after the other")


def _sequence_reshape(c):
    x = _lod(c, "X")
    c.check(x.rank == 2 and x.shape[1] > 0, f"X must be [T, D] with D known, got {x}")
    c.check(c["new_dim"] >= 1, f"new_dim must be >= 1, got {c['new_dim']}")
    return {"Out": _seq_type((c["new_dim"],), x.dtype)}


register("sequence_reshape", "X", "Out", {"new_dim": "int"}, infer=_sequence_reshape,
         lod_inputs=("X",), lod="aware",
         doc="each sequence's L x D values as rows of new_dim (L * D must divide by it)")


# -- sequence_pad / sequence_unpad / sequence_mask ----------------------------------------------

def _sequence_pad(c):
    x = _lod(c, "X")
    pad = _dense(c, "PadValue")
    c.check(pad.dtype == x.dtype, f"PadValue is {pad.dtype} but X is {x.dtype}")
    c.check(pad.shape in ((1,), ()) or pad.shape == x.shape[1:],
            f"PadValue must be [1] or one token's shape {list(x.shape[1:])}, got {pad}")
    n = c["padded_length"]
    c.check(n == -1 or n >= 1, f"padded_length must be -1 or >= 1, got {n}")
    return {"Out": TensorType((-1, n, *x.shape[1:]), x.dtype),
            "Length": TensorType((-1,), "int64")}


register("sequence_pad", "X PadValue", "Out Length", {"padded_length": ("int", -1)},
         infer=_sequence_pad, lod_inputs=("X",), lod="aware",
         doc="sequences as rows of [N, padded_length, ...] filled with PadValue, and their "
             "lengths; padded_length -1: the token bucket (docs/lod.md)")


def _sequence_unpad(c):
    # Paddle ignores X's LoD (a padded batch fed to a lod_level=1 variable): its rows are
    # the N sequences, their lengths come from Length alone
    x = c.x("X").with_lod(0)
    n = _dense(c, "Length")
    c.check(x.rank >= 2, f"X must be [N, M, ...], got {x}")
    c.check(n.rank == 1 or (n.rank == 2 and n.shape[1] == 1), f"Length must be [N], got {n}")
    c.check(n.dtype in INT_DTYPES, f"Length must be integers, got {n.dtype}")
    # Paddle's Out is [T, 1] for a 2-D X (one value per token), else [T, X's dims past 1]
    return {"Out": _seq_type(x.shape[2:] or (1,), x.dtype)}


register("sequence_unpad", "X Length", "Out", infer=_sequence_unpad, lod_inputs=("X",),
         lod="aware", doc="the first Length[i] rows of X[i] as sequence i of a LoD value")


def _sequence_mask(c):
    x = _dense(c, "X")
    c.check(x.dtype in INT_DTYPES, f"X must hold integer lengths, got {x.dtype}")
    if c.has("MaxLenTensor"):
        m = c.x("MaxLenTensor")
        c.check(m.dtype in INT_DTYPES and m.numel() in (1, -1) and not m.lod_level,
                f"MaxLenTensor must be an integer tensor of one element, got {m}")
        return {"Y": TensorType((*x.shape, -1), c["out_dtype"])}
    c.check(c["maxlen"] >= 1, f"maxlen must be given (>= 1): graphc needs the mask's width "
                              f"before the lengths are known, got {c['maxlen']}")
    return {"Y": TensorType((*x.shape, c["maxlen"]), c["out_dtype"])}


register("sequence_mask", "X MaxLenTensor?", "Y",
         {"maxlen": ("int", -1), "out_dtype": ("dtype", "int64")},
         infer=_sequence_mask, traits=(NO_GRAD,),
         doc="Y[..., j] = j < X[...]: a mask of maxlen columns per length (MaxLenTensor: a "
             "width known when the step is traced, such as a shape, not data)")


# -- sequence_reverse / sequence_slice / sequence_enumerate / sequence_scatter ---------------------

def _sequence_reverse(c):
    return {"Y": _lod(c, "X", (1, 2))}


register("sequence_reverse", "X", "Y", infer=_sequence_reverse, lod_inputs=("X",),
         lod="aware", doc="each innermost sequence's tokens in reverse order")


def _sequence_slice(c):
    x = _lod(c, "X")
    for slot in ("Offset", "Length"):
        t = _dense(c, slot)
        c.check(t.dtype in INT_DTYPES and (t.rank == 1 or (t.rank == 2 and t.shape[1] == 1)),
                f"{slot} must be integers of shape [N, 1], got {t}")
    return {"Out": x}


register("sequence_slice", "X Offset Length", "Out", infer=_sequence_slice,
         lod_inputs=("X",), lod="aware",
         doc="sequence i of Out = X's sequence i [Offset[i], Offset[i] + Length[i])")


def _sequence_enumerate(c):
    x = _lod(c, "X")
    c.check(x.dtype in INT_DTYPES, f"X must hold integer ids, got {x.dtype}")
    c.check(x.rank == 1 or (x.rank == 2 and x.shape[1] == 1), f"X must be [T, 1], got {x}")
    c.check(c["win_size"] >= 1, f"win_size must be >= 1, got {c['win_size']}")
    return {"Out": _seq_type((c["win_size"],), x.dtype)}


register("sequence_enumerate", "X", "Out", {"win_size": "int", "pad_value": ("int", 0)},
         infer=_sequence_enumerate, lod_inputs=("X",), lod="aware", traits=(NO_GRAD,),
         doc="row t of Out: X's tokens t .. t + win_size - 1 of its sequence, pad_value past "
             "the end")


def _sequence_scatter(c):
    x = _dense(c, "X")
    ids = _lod(c, "Ids")
    upd = _lod(c, "Updates")
    c.check(x.rank == 2, f"X must be [N, D], got {x}")
    c.check(ids.dtype in INT_DTYPES, f"Ids must be integers, got {ids.dtype}")
    c.check(upd.dtype == x.dtype, f"Updates is {upd.dtype} but X is {x.dtype}")
    c.check(upd.shape[1:] in ((), (1,)) and ids.shape[1:] in ((), (1,)),
            f"Ids and Updates must be [T, 1], got {ids} and {upd}")
    return {"Out": x}


register("sequence_scatter", "X Ids Updates", "Out", infer=_sequence_scatter,
         lod_inputs=("Ids", "Updates"), lod="aware",
         doc="Out = X; Out[i, Ids[t]] += Updates[t] for each token t of sequence i")
