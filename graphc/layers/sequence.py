"""Sequence layers over LoD inputs (Fluid's ``layers.sequence_*``): each appends one op of
ir/ops/sequence_ops.py; docs/lod.md says what each does with the LoD."""

from __future__ import annotations

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
