"""Paddle 1.8's ``lod_tensor_to_array``, ``array_to_lod_tensor`` and ``shrink_memory``
(fluid.layers.control_flow): LoD values split into steps and back; ops/lod_array/ builds them."""

from __future__ import annotations

from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable
from .lod_control import check_rank_table


def lod_tensor_to_array(x, table, capacity=None):
    """A tensor array of ``x``'s steps by the rank ``table`` (``lod_rank_table(x)``): element
    t holds the t-th step (level-1 entry) of every sequence longer than t, longest first.
    ``capacity`` (graphc's) bounds the steps, 128 when not given (XLA's static shapes);
    fetched, the array is Paddle's list of LoDTensors (docs/control_flow.md)."""
    check_variable("lod_tensor_to_array", "x", x)
    check_rank_table("lod_tensor_to_array", "table", table)
    if capacity is not None and not (isinstance(capacity, int) and capacity >= 1):
        raise ProgramError(f"lod_tensor_to_array: capacity must be a positive int, got "
                           f"{capacity!r}")
    helper = LayerHelper("lod_tensor_to_array")
    array = helper.create_variable_for_type_inference(x.dtype)
    array.is_array = True
    helper.append_op("lod_tensor_to_array", {"X": x, "RankTable": table}, {"Out": array},
                     {"capacity": capacity or 0})
    return array


def array_to_lod_tensor(x, table):
    """The LoD value whose steps the array ``x`` holds, sequences back in batch order with the
    lengths of the rank ``table``: ``lod_tensor_to_array``'s inverse."""
    check_variable("array_to_lod_tensor", "x", x)
    check_rank_table("array_to_lod_tensor", "table", table)
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("array_to_lod_tensor", {"X": x, "RankTable": table}, {"Out": out})
    return out


def shrink_memory(x, i, table):
    """``x``'s first k rows (a LoD ``x``: sequences), k = how many sequences of the rank
    ``table`` are longer than step ``i``: a DynamicRNN memory kept for the sequences that
    last. A LoD value whose other entries are empty (docs/control_flow.md)."""
    check_variable("shrink_memory", "x", x)
    check_variable("shrink_memory", "i", i)
    check_rank_table("shrink_memory", "table", table)
    helper = LayerHelper("shrink_memory")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("shrink_rnn_memory", {"X": x, "RankTable": table, "I": i}, {"Out": out})
    return out
