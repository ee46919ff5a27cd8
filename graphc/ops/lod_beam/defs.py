"""Definition of beam_search with Paddle 1.8's slots and attributes.

Static capacity: a source keeps at most ``beam_size`` candidates, so the selected values
hold at most ``N * beam_size`` tokens; their buffer holds ``max(N * beam_size, R_cap)``
rows (``R_cap`` the candidates' row buffer), so feeding a step's result to the next step
keeps the buffer size fixed (a loop carries it unchanged). ``parent_idx`` is dense, one
entry per buffer row, 0 past the selected tokens (a valid row index for ``gather``).
"""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType


def _beam_search(c: InferContext):
    scores = c.x("scores")
    c.check(scores.lod_level in (1, 2), f"scores must be a LoD value (level 0: source "
                                        f"sentences, rows: prefixes), got {scores}")
    c.check(scores.rank == 2, f"scores must be [rows, candidates], got {scores}")
    c.check(scores.dtype in FLOAT_DTYPES, f"scores must be floats, got {scores.dtype}")
    if c.has("ids"):
        ids = c.x("ids")
        c.check(ids.dtype in INT_DTYPES and ids.rank == 2,
                f"ids must be integers of the shape of scores {scores}, got {ids}")
        c.check(ids.shape[1] in (-1, scores.shape[1]) or scores.shape[1] == -1,
                f"ids {ids} and scores {scores} must have as many candidates per row")
    pre_ids, pre_scores = c.x("pre_ids"), c.x("pre_scores")
    c.check(pre_ids.dtype in INT_DTYPES and pre_ids.rank in (1, 2),
            f"pre_ids must be integers [rows, 1], got {pre_ids}")
    c.check(pre_scores.dtype in FLOAT_DTYPES and pre_scores.rank in (1, 2),
            f"pre_scores must be floats [rows, 1], got {pre_scores}")
    c.check(c["level"] == 0, f"graphc searches over level 0 (the source sentences), got "
                             f"level {c['level']}")
    c.check(c["beam_size"] >= 1, f"beam_size must be >= 1, got {c['beam_size']}")
    return {"selected_ids": TensorType((-1, 1), "int64", False, 2),
            "selected_scores": TensorType((-1, 1), pre_scores.dtype, False, 2),
            "parent_idx": TensorType((-1,), "int32")}


register("beam_search", "pre_ids pre_scores ids? scores",
         "selected_ids selected_scores parent_idx?",
         {"level": ("int", 0), "beam_size": "int", "end_id": "int",
          "is_accumulated": ("bool", True)},
         infer=_beam_search, traits=(NO_GRAD,),
         lod_inputs=("pre_ids", "pre_scores", "ids", "scores"), lod="aware",
         doc="per source sentence, the beam_size best (prefix, id) candidates; ended prefixes "
             "(pre_id == end_id) carry on with end_id and their score; a source whose every "
             "pick is such a carry-on is dropped")


# -- beam_search_decode ----------------------------------------------------------------------------

def _step_array(c: InferContext, slot: str, dtypes) -> TensorType:
    a = c.x(slot)
    c.check(a.array and a.element_lod == 2,
            f"{slot} must be a tensor array of 2-level LoD values (each step's beam_search "
            f"picks, written with array_write), got {a}")
    c.check(a.dtype in dtypes, f"{slot} must hold {' or '.join(sorted(dtypes))}, got {a.dtype}")
    return a


def _beam_search_decode(c: InferContext):
    ids = _step_array(c, "Ids", INT_DTYPES)
    scores = _step_array(c, "Scores", FLOAT_DTYPES)
    c.check(ids.capacity == scores.capacity, f"Ids ({ids}) and Scores ({scores}) must have "
                                             "one capacity: one element per step each")
    c.check(c["beam_size"] >= 1, f"beam_size must be >= 1, got {c['beam_size']}")
    return {"SentenceIds": TensorType((-1,), "int64", False, 2),
            "SentenceScores": TensorType((-1,), scores.dtype, False, 2)}


register("beam_search_decode", "Ids Scores", "SentenceIds SentenceScores",
         {"beam_size": "int", "end_id": "int"}, infer=_beam_search_decode, traits=(NO_GRAD,),
         doc="each source's beam_size hypotheses backtraced through the steps' picks, best "
             "final score first (source -> hypotheses -> tokens); repeated end_ids dropped")
