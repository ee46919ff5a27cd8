"""Sequence layers over LoD inputs (Fluid's ``layers.sequence_*``): each appends one op of
ops/sequence/; docs/lod.md says what each does with the LoD."""

from __future__ import annotations

from ..ir.program import Variable
from .helper import LayerHelper, check_variable

_POOL_TYPES = {"sum": "SUM", "average": "AVERAGE", "avg": "AVERAGE", "sqrt": "SQRT",
               "max": "MAX", "first": "FIRST", "last": "LAST"}


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0):
    """Pool each sequence of a LoD ``input`` (lod_level 1: one row per sequence, a dense
    ``[num_sequences, ...]``; lod_level 2: one token per sub-sequence, lod_level 1).
    ``pool_type``: sum, average, sqrt (sum / sqrt(length)), max, first, last; an empty
    sequence gives ``pad_value``."""
    check_variable("sequence_pool", "input", input)
    key = str(pool_type).lower()
    if key not in _POOL_TYPES:
        from ..ir.errors import ProgramError
        raise ProgramError(f"sequence_pool: pool_type {pool_type!r} is not one of "
                           f"{sorted(set(_POOL_TYPES) - {'avg'})}")
    helper = LayerHelper("sequence_pool")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("sequence_pool", {"X": input}, {"Out": out},
                     {"pooltype": _POOL_TYPES[key], "is_test": bool(is_test),
                      "pad_value": float(pad_value)})
    return out


def sequence_first_step(input):
    """The first token of each sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input, "first")


def sequence_last_step(input):
    """The last token of each sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input, "last")


# -- the other sequence layers (ops/sequence_more/; Paddle 1.8's signatures) ----------

def _out(helper, dtype, stop_gradient=False):
    return helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)


def sequence_softmax(input, use_cudnn=False, name=None):
    """Softmax over the tokens of each sequence of a ``[T, 1]`` LoD ``input``."""
    check_variable("sequence_softmax", "input", input)
    helper = LayerHelper("sequence_softmax", name)
    out = _out(helper, input.dtype)
    helper.append_op("sequence_softmax", {"X": input}, {"Out": out},
                     {"use_cudnn": bool(use_cudnn)})
    return out


def sequence_conv(input, num_filters, filter_size=3, filter_stride=1, padding=True,
                  padding_start=None, bias_attr=None, param_attr=None, act=None, name=None):
    """A 1-D convolution over the tokens of each sequence (zeros outside it): the window of
    ``filter_size`` tokens starting ``padding_start`` (default ``-(filter_size // 2)``) from
    each token, times a ``[filter_size * D, num_filters]`` filter; then bias and ``act``."""
    check_variable("sequence_conv", "input", input)
    helper = LayerHelper("sequence_conv", name)
    w = helper.create_parameter(param_attr, [filter_size * input.shape[1], num_filters],
                                input.dtype)
    pre_bias = _out(helper, input.dtype)
    start = -int(filter_size // 2) if padding_start is None else int(padding_start)
    helper.append_op("sequence_conv", {"X": input, "Filter": w}, {"Out": pre_bias},
                     {"contextStride": int(filter_stride), "contextStart": start,
                      "contextLength": int(filter_size)})
    return helper.append_activation(helper.append_bias_op(pre_bias, bias_attr), act)


def sequence_expand(x, y, ref_level=-1, name=None):
    """Row i of the dense ``x`` repeated as often as sequence i of ``y``'s ``ref_level`` is
    long; the result takes ``y``'s LoD down to that level (docs/lod.md)."""
    check_variable("sequence_expand", "x", x)
    check_variable("sequence_expand", "y", y)
    helper = LayerHelper("sequence_expand", name)
    out = _out(helper, x.dtype)
    helper.append_op("sequence_expand", {"X": x, "Y": y}, {"Out": out},
                     {"ref_level": int(ref_level)})
    return out


def sequence_expand_as(x, y, name=None):
    """Row i of the dense ``x`` repeated as often as sequence i of ``y`` is long, with
    ``y``'s LoD."""
    check_variable("sequence_expand_as", "x", x)
    check_variable("sequence_expand_as", "y", y)
    helper = LayerHelper("sequence_expand_as", name)
    out = _out(helper, x.dtype)
    helper.append_op("sequence_expand_as", {"X": x, "Y": y}, {"Out": out})
    return out


def sequence_concat(input, name=None):
    """Sequence i of the result: sequence i of each LoD value in ``input``, in turn."""
    if not isinstance(input, list | tuple) or not input:
        from ..ir.errors import ProgramError
        raise ProgramError("sequence_concat: input must be a non-empty list of LoD Variables")
    for v in input:
        check_variable("sequence_concat", "input", v)
    helper = LayerHelper("sequence_concat", name)
    out = _out(helper, input[0].dtype)
    helper.append_op("sequence_concat", {"X": list(input)}, {"Out": out})
    return out


def sequence_reshape(input, new_dim):
    """Each sequence's ``L x D`` values as ``L * D / new_dim`` rows of ``new_dim``."""
    check_variable("sequence_reshape", "input", input)
    helper = LayerHelper("sequence_reshape")
    out = _out(helper, input.dtype)
    helper.append_op("sequence_reshape", {"X": input}, {"Out": out}, {"new_dim": int(new_dim)})
    return out


def sequence_pad(x, pad_value, maxlen=None, name=None):
    """(``[N, maxlen, ...]`` padded with the Variable ``pad_value``, int64 lengths ``[N]``).
    Without ``maxlen`` the width is the token bucket of ``x`` (a static bound on every
    sequence's length; Paddle uses the longest sequence, docs/lod.md)."""
    check_variable("sequence_pad", "x", x)
    check_variable("sequence_pad", "pad_value", pad_value)
    helper = LayerHelper("sequence_pad", name)
    out = _out(helper, x.dtype)
    length = _out(helper, "int64", stop_gradient=True)
    helper.append_op("sequence_pad", {"X": x, "PadValue": pad_value},
                     {"Out": out, "Length": length},
                     {"padded_length": -1 if maxlen is None else int(maxlen)})
    return out, length


def sequence_unpad(x, length, name=None):
    """The first ``length[i]`` rows of ``x[i]`` as sequence i of a LoD value."""
    check_variable("sequence_unpad", "x", x)
    check_variable("sequence_unpad", "length", length)
    helper = LayerHelper("sequence_unpad", name)
    out = _out(helper, x.dtype)
    helper.append_op("sequence_unpad", {"X": x, "Length": length}, {"Out": out})
    return out


def sequence_mask(x, maxlen=None, dtype="int64", name=None):
    """``y[..., j] = j < x[...]`` with ``maxlen`` columns. graphc needs ``maxlen``: an int,
    or a Variable known when the step is traced (``layers.shape(x)[1]``); Paddle's default,
    ``max(x)``, depends on the data."""
    check_variable("sequence_mask", "x", x)
    from ..ir.types import normalize_dtype
    if isinstance(maxlen, Variable):
        helper = LayerHelper("sequence_mask", name)
        dtype = normalize_dtype(dtype)
        out = _out(helper, dtype, stop_gradient=True)
        helper.append_op("sequence_mask", {"X": x, "MaxLenTensor": maxlen}, {"Y": out},
                         {"out_dtype": dtype})
        return out
    if maxlen is None or not isinstance(maxlen, int):
        from ..ir.errors import ProgramError
        raise ProgramError(f"sequence_mask({x.name}): give maxlen as an int; graphc needs the "
                           "mask's width before the lengths are known (Paddle's default, "
                           "max(x), depends on the data)")
    helper = LayerHelper("sequence_mask", name)
    dtype = normalize_dtype(dtype)
    out = _out(helper, dtype, stop_gradient=True)
    helper.append_op("sequence_mask", {"X": x}, {"Y": out},
                     {"maxlen": int(maxlen), "out_dtype": dtype})
    return out


def sequence_reverse(x, name=None):
    """Each sequence's tokens in reverse order (same LoD)."""
    check_variable("sequence_reverse", "x", x)
    helper = LayerHelper("sequence_reverse", name)
    out = _out(helper, x.dtype)
    helper.append_op("sequence_reverse", {"X": x}, {"Y": out})
    return out


def sequence_slice(input, offset, length, name=None):
    """Sequence i of the result: tokens ``[offset[i], offset[i] + length[i])`` of sequence i
    (``offset``, ``length``: int64 ``[N, 1]`` Variables)."""
    for arg, v in (("input", input), ("offset", offset), ("length", length)):
        check_variable("sequence_slice", arg, v)
    helper = LayerHelper("sequence_slice", name)
    out = _out(helper, input.dtype)
    offset.stop_gradient = True
    length.stop_gradient = True
    helper.append_op("sequence_slice", {"X": input, "Offset": offset, "Length": length},
                     {"Out": out})
    return out


def sequence_enumerate(input, win_size, pad_value=0, name=None):
    """Row t: the ``win_size`` ids of ``input``'s sequence from token t, ``pad_value`` past
    its end (same LoD, ``[T, win_size]``)."""
    check_variable("sequence_enumerate", "input", input)
    helper = LayerHelper("sequence_enumerate", name)
    out = _out(helper, input.dtype, stop_gradient=True)
    helper.append_op("sequence_enumerate", {"X": input}, {"Out": out},
                     {"win_size": int(win_size), "pad_value": int(pad_value)})
    return out


def sequence_scatter(input, index, updates, name=None):
    """``out = input``; ``out[i, index[t]] += updates[t]`` for each token t of sequence i of
    the LoD ``index`` (``updates`` shares its LoD)."""
    for arg, v in (("input", input), ("index", index), ("updates", updates)):
        check_variable("sequence_scatter", arg, v)
    helper = LayerHelper("sequence_scatter", name)
    out = _out(helper, input.dtype)
    helper.append_op("sequence_scatter", {"X": input, "Ids": index, "Updates": updates},
                     {"Out": out})
    return out
