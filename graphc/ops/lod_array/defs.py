"""Definitions of lod_tensor_to_array, array_to_lod_tensor and shrink_rnn_memory (Paddle 1.8's
slots; ``capacity`` is graphc's: an array's element count must be static on XLA).

Element ``t`` of ``lod_tensor_to_array(x, table)`` is a LoD value of x's own level whose
level 0 has one entry per sequence of x in the table's order, holding that sequence's
``t``-th entry (one row at level 1) while it lasts and nothing after: Paddle's element with
one more level on top, so a step's row count is a device value. Fetching the array drops that
level (docs/control_flow.md, "LoD values as arrays").
"""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import INT_DTYPES, TensorType, array_type
from ..control_flow.arrays import DEFAULT_ARRAY_CAPACITY
from ..lod_control.defs import rank_table_type


def _to_array(c: InferContext):
    x = c.x("X")
    coarse = rank_table_type(c).lod_level  # a table of level k splits x's level-k entries
    c.check(x.lod_level >= 1 + coarse, f"X must be a LoD value of more than the rank table's "
                                       f"level ({coarse}) levels (its entries at that level "
                                       f"are split into steps), got {x}")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    cap = c["capacity"] or DEFAULT_ARRAY_CAPACITY
    c.check(cap >= 1, f"capacity must be positive (the most steps), got {cap}")
    element = TensorType((-1, *x.shape[1:]), x.dtype, False, x.lod_level - coarse)
    return {"Out": array_type(element, cap)}


register("lod_tensor_to_array", "X RankTable", "Out", {"capacity": ("int", 0)},
         infer=_to_array, lod_inputs=("X", "RankTable"), lod="aware", max_lod_level=3,
         doc="an array of X's steps: element t holds the t-th level-1 entry of every sequence "
             "longer than t, in the rank table's order, as a LoD value of X's level whose "
             "level 0 has one entry per sequence (1 while it lasts, then 0); length = the "
             "longest sequence (at most capacity, default 128)")


def _to_tensor(c: InferContext):
    a = c.x("X")
    coarse = rank_table_type(c).lod_level
    c.check(a.array, f"X must be a tensor array (lod_tensor_to_array's or written per step), "
                     f"got {a}")
    e = a.element
    c.check(e.rank >= 1, f"the array's elements need a row dimension, got {e}")
    # a deeper level's table gives back the levels above it (Paddle's coarse LoD)
    level = max(e.lod_level, 1) + coarse
    c.check(level <= 3, f"Out would have {level} LoD levels (graphc's arrays take 3)")
    return {"Out": TensorType((-1, *e.shape[1:]), a.dtype, False, level)}


# X (an array, lod_level 0 as a type) is named a LoD input so that the gradient op takes
# Out's LoD gradient (grad ops treat LoD values as their forward op does)
register("array_to_lod_tensor", "X RankTable", "Out", infer=_to_tensor,
         lod_inputs=("X", "RankTable"),
         lod="aware", max_lod_level=3,
         doc="lod_tensor_to_array's inverse: sequence i (in batch order) gathers, for each "
             "step t below its rank-table length, entry rank(i) of element t (a dense "
             "element: its row rank(i)); Out's level 0 lengths are the table's")


def _shrink(c: InferContext):
    x, i = c.x("X"), c.x("I")
    c.check(not rank_table_type(c).lod_level, "shrinking by the table of a level below 0 is "
                                             "not supported (rank X's level 0)")
    c.check(i.dtype in INT_DTYPES and i.numel() == 1 and not i.lod_level,
            f"I must be an integer tensor of one element (the step), got {i}")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    return {"Out": TensorType((-1, *x.shape[1:]), x.dtype, False, max(x.lod_level, 1))}


register("shrink_rnn_memory", "X RankTable I", "Out", infer=_shrink,
         lod_inputs=("X", "RankTable"),
         lod="aware",
         doc="the first k rows of X (a LoD X: its first k sequences), k = how many rank-table "
             "lengths exceed I; a LoD value whose level 0 keeps the rest as empty entries "
             "(a dense X: one row per entry)")
