"""Definitions of the LoD-side control-flow ops (Paddle 1.8's slots and attributes): LoD levels
set or appended, the rank table ordering sequences by length, IfElse's split/merge of rows.

The rank table is a graphc value, not a special variable type: an int64 ``[N, 2]`` tensor of
rows (sequence index, length) sorted by length, longest first, ties in the batch's order
(Paddle's stable sort). docs/control_flow.md ("LoD rank tables") says more.
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import INT_DTYPES, TensorType

_DATA_DTYPES = ("float32", "float64", "int32", "int64")


# -- lod_reset (lod_append is lod_reset with append=True) ----------------------------------------

def _check_offsets(c: InferContext, offsets: list[int], rows: int) -> None:
    c.check(len(offsets) > 1, f"target_lod must hold at least two offsets (0 and the row "
                              f"count), got {offsets}")
    c.check(offsets[0] == 0, f"target_lod must start at 0 (offsets, not lengths), got "
                             f"{offsets}")
    c.check(all(a <= b for a, b in zip(offsets, offsets[1:])),
            f"target_lod must be ascending offsets, got {offsets}")
    c.check(rows < 0 or offsets[-1] == rows,
            f"target_lod ends at {offsets[-1]} but X has {rows} rows (the last offset is the "
            "row count)")


def _lod_reset(c: InferContext):
    x = c.x("X")
    c.check(x.dtype in _DATA_DTYPES, f"X must be one of {list(_DATA_DTYPES)}, got {x.dtype}")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    rows = -1 if x.lod_level else x.shape[0]
    if c.has("Y") and c.x("Y").lod_level:
        level = c.x("Y").lod_level  # Y's whole LoD replaces X's (append or not, as Paddle)
    else:
        if c.has("Y"):
            y = c.x("Y")
            c.check(y.dtype in INT_DTYPES, f"Y without a LoD holds the target offsets and "
                                           f"must be integers, got {y}")
            size = 1
            for d in y.shape:
                size = -1 if d < 0 or size < 0 else size * d
            c.check(size == -1 or size > 1, f"Y must hold at least two offsets, got {y}")
        else:
            _check_offsets(c, list(c["target_lod"]), rows)
        level = x.lod_level + 1 if c["append"] else 1
    c.check(level <= 2, f"the result would have {level} LoD levels; graphc's LoD ops take "
                        "at most 2 (docs/lod.md)")
    return {"Out": TensorType((-1, *x.shape[1:]), x.dtype, False, level)}


register("lod_reset", "X Y?", "Out", {"target_lod": ("ints", []), "append": ("bool", False)},
         infer=_lod_reset, lod_inputs=("X", "Y"), lod="aware",
         doc="Out = X's rows with a new LoD: Y's LoD, else Y's values or target_lod as "
             "offsets (one level; appended below X's levels when append)")


# -- the rank table --------------------------------------------------------------------------------

def _lod_rank_table(c: InferContext):
    x = c.x("X")
    c.check(x.lod_level >= 1, f"X must be a LoD value (the table ranks its sequences), got {x}")
    level = c["level"]
    c.check(0 <= level < x.lod_level, f"level must name one of X's {x.lod_level} LoD levels "
                                      f"(0 to {x.lod_level - 1}), got {level}")
    # a deeper level's table carries the levels above it as its own LoD (Paddle's coarse
    # LoD), which array_to_lod_tensor puts back
    return {"Out": TensorType((-1, 2), "int64", False, level)}


register("lod_rank_table", "X", "Out", {"level": ("int", 0)}, infer=_lod_rank_table,
         traits=(NO_GRAD,), lod_inputs=("X",), lod="aware", max_lod_level=3,  # arr2lod
         doc="rows (index, length) of X's entries at level (over the whole batch; length: "
             "their entries one level down, or rows), longest first, ties in batch order; "
             "at level >= 1 the buffer's unused entries follow as rows of length -1")


def rank_table_type(c: InferContext, slot: str = "RankTable") -> TensorType:
    t = c.x(slot)
    c.check(t.dtype in INT_DTYPES and t.rank == 2
            and t.shape[1] in (2, -1),
            f"{slot} must be a rank table (int [N, 2] rows of index and length, made by "
            f"lod_rank_table), got {t}")
    return t


def _max_sequence_len(c: InferContext):
    rank_table_type(c)
    return {"Out": TensorType((1,), "int64")}


register("max_sequence_len", "RankTable", "Out", infer=_max_sequence_len, traits=(NO_GRAD,),
         lod_inputs=("RankTable",), lod="aware",
         doc="the longest length in a rank table (0 for no sequences), int64 [1]")


def _reorder(c: InferContext):
    x = c.x("X")
    c.check(not rank_table_type(c).lod_level, "reordering by the table of a level below 0 "
                                             "is not supported (rank X's level 0)")
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    return {"Out": x}


register("reorder_lod_tensor_by_rank", "X RankTable", "Out", infer=_reorder,
         lod_inputs=("X", "RankTable"), lod="aware",
         doc="X's sequences (dense: rows) in the rank table's order; the gradient takes "
             "them back")


# -- split_lod_tensor / merge_lod_tensor (ifelse26) ---------------------------------------------
# Paddle's split gives each side a data-dependent number of rows; graphc gives each side X's
# static capacity as a LoD value: the rows (level-0 sequences) taken, in order, then empty
# sequences (zero rows), so every output keeps one shape and fetches give Paddle's rows.

def _split_mask(c: InferContext, op: str, rows: int) -> None:
    m = c.x("Mask")
    c.check(not m.lod_level and (m.rank == 1 or m.rank == 2 and m.shape[1] in (1, -1)),
            f"Mask must be a dense [N, 1] tensor (one flag per {op}), got {m}")
    c.check(rows < 0 or m.shape[0] < 0 or m.shape[0] == rows,
            f"Mask {m} has {m.shape[0]} flags but X has {rows} {op}s")


def _split_level(c: InferContext, x: TensorType) -> int:
    c.check(x.rank >= 1, f"X needs a row dimension, got {x}")
    c.check(c["level"] == 0, f"graphc splits level 0 only (rows of a dense X, top-level "
                             f"sequences of a LoD X), got level {c['level']}")
    return -1 if x.lod_level else x.shape[0]


def _split_lod_tensor(c: InferContext):
    x = c.x("X")
    _split_mask(c, "row or sequence", _split_level(c, x))
    side = TensorType((-1, *x.shape[1:]), x.dtype, False, max(x.lod_level, 1))
    return {"OutTrue": side, "OutFalse": side}


register("split_lod_tensor", "X Mask", "OutTrue OutFalse", {"level": ("int", 0)},
         infer=_split_lod_tensor, lod_inputs=("X",), lod="aware",
         doc="OutTrue = X's rows (a LoD X: level-0 sequences) whose Mask is true, in order, "
             "OutFalse the others; each a LoD value of X's capacity whose trailing sequences "
             "are empty (a dense X: one row per sequence)")


def _merge_lod_tensor(c: InferContext):
    x, t, f = c.x("X"), c.x("InTrue"), c.x("InFalse")
    _split_mask(c, "row or sequence", _split_level(c, x))
    c.check(t.dtype == f.dtype and t.rank == f.rank and all(
        a == b or -1 in (a, b) for a, b in zip(t.shape[1:], f.shape[1:])),
        f"InTrue {t} and InFalse {f} must have one dtype and one row shape")
    c.check(t.rank >= 1, f"InTrue needs a row dimension, got {t}")
    tail = tuple(a if a == b else -1 for a, b in zip(t.shape[1:], f.shape[1:]))
    rows = -1 if x.lod_level else x.shape[0]
    return {"Out": TensorType((rows, *tail), t.dtype, False, x.lod_level)}


register("merge_lod_tensor", "X Mask InTrue InFalse", "Out", {"level": ("int", 0)},
         infer=_merge_lod_tensor, lod_inputs=("X", "InTrue", "InFalse"), lod="aware",
         doc="Out has X's rows and LoD: row (a LoD X: level-0 sequence) r is the next unused "
             "one of InTrue where Mask[r], else of InFalse (split_lod_tensor's inverse)")
register("merge_lod_tensor_infer", "X Mask InTrue InFalse", "Out", {"level": ("int", 0)},
         infer=_merge_lod_tensor, traits=(NO_GRAD,), lod_inputs=("X", "InTrue", "InFalse"),
         lod="aware", doc="merge_lod_tensor without a gradient (Paddle's inference form)")
