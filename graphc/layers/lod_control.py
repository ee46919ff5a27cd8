"""LoD layers of Paddle's control-flow programs (``fluid.layers.lod_reset``, ``lod_append``,
``beam_search``, ``reorder_lod_tensor_by_rank``; ``control_flow.lod_rank_table`` and
``max_sequence_len``): each appends one op of ops/lod_control/ or ops/lod_beam/."""

from __future__ import annotations

from collections.abc import Iterable

from ..ir.errors import ArgumentTypeError, ProgramError
from ..ir.program import Variable
from .helper import LayerHelper, check_variable

_DATA_DTYPES = ("float32", "float64", "int32", "int64")


def _check_dtype(layer: str, arg: str, v: Variable, dtypes) -> None:
    if v.dtype not in dtypes:
        raise ProgramError(f"{layer}: '{arg}' ({v.name}) must be one of {list(dtypes)}, got "
                           f"{v.dtype}")


def lod_reset(x, y=None, target_lod=None):
    """``x``'s rows with a new LoD: ``y``'s LoD when ``y`` is a LoD value, else ``y``'s
    values (int32 offsets, Paddle's form: ``[0, 2, 6]``), else ``target_lod`` (offsets).
    The gradient is the identity on the rows."""
    check_variable("lod_reset", "x", x)
    _check_dtype("lod_reset", "x", x, _DATA_DTYPES)
    helper = LayerHelper("lod_reset")
    out = helper.create_variable_for_type_inference(x.dtype)
    if y is not None:
        check_variable("lod_reset", "y", y)
        _check_dtype("lod_reset", "y", y, _DATA_DTYPES if y.lod_level else ("int32",))
        helper.append_op("lod_reset", {"X": x, "Y": y}, {"Out": out})
    elif target_lod is not None:
        helper.append_op("lod_reset", {"X": x}, {"Out": out},
                         {"target_lod": [int(v) for v in target_lod]})
    else:
        raise ProgramError("lod_reset: give y or target_lod (both are None)")
    return out


def lod_append(x, level):
    """``x`` with one more LoD level below its own: ``level`` (a list of offsets, or an int
    Variable holding them), e.g. ``[0, 1, 2, 3]`` makes every row an entry of its own."""
    if x is None:
        raise ProgramError("lod_append: x is None")
    if not isinstance(level, Iterable | Variable):
        raise ProgramError(f"lod_append: level must be a list, a tuple or a Variable, got "
                           f"{type(level).__name__}")
    check_variable("lod_append", "x", x)
    _check_dtype("lod_append", "x", x, _DATA_DTYPES)
    helper = LayerHelper("lod_append")
    out = helper.create_variable_for_type_inference(x.dtype)
    if isinstance(level, Variable):
        helper.append_op("lod_reset", {"X": x, "Y": level}, {"Out": out}, {"append": True})
    else:
        helper.append_op("lod_reset", {"X": x}, {"Out": out},
                         {"target_lod": [int(v) for v in level], "append": True})
    return out


def check_rank_table(layer: str, arg: str, table) -> None:
    """A rank table is an int ``[N, 2]`` value; anything else is refused as the wrong type
    of argument (a TypeError, as Paddle's LOD_RANK_TABLE variable type check)."""
    check_variable(layer, arg, table)
    if table.dtype not in ("int32", "int64") or len(table.shape) != 2 or \
            table.shape[1] not in (2, -1):
        raise ArgumentTypeError(f"{layer}: '{arg}' ({table.name}) must be a rank table "
                                f"(lod_rank_table's int64 [N, 2]), got {table.dtype} "
                                f"{list(table.shape)}")


def lod_rank_table(x, level=0):
    """The rank table of ``x``'s sequences at ``level`` (0): an int64 ``[N, 2]`` value of
    rows (sequence index, length), longest first, ties in batch order. ``x`` may be given
    as a list of one Variable, as Paddle's layer takes it."""
    if isinstance(x, list | tuple) and len(x) == 1:  # arr2lod: Paddle's list form
        x = x[0]
    check_variable("lod_rank_table", "x", x)
    helper = LayerHelper("lod_rank_table")
    table = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("lod_rank_table", {"X": x}, {"Out": table}, {"level": int(level)})
    return table


def max_sequence_len(rank_table):
    """The longest sequence length in ``rank_table`` (int64 ``[1]``)."""
    check_variable("max_sequence_len", "rank_table", rank_table)
    helper = LayerHelper("max_sequence_len")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("max_sequence_len", {"RankTable": rank_table}, {"Out": out})
    return out


def reorder_lod_tensor_by_rank(x, rank_table):
    """``x``'s sequences (rows for a dense ``x``) in ``rank_table``'s order; the gradient
    puts them back."""
    check_variable("reorder_lod_tensor_by_rank", "x", x)
    check_rank_table("reorder_lod_tensor_by_rank", "rank_table", rank_table)
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("reorder_lod_tensor_by_rank", {"X": x, "RankTable": rank_table},
                     {"Out": out})
    return out


def beam_search(pre_ids, pre_scores, ids, scores, beam_size, end_id, level=0,
                is_accumulated=True, name=None, return_parent_idx=False):
    """One beam-search step: per source sentence (level 0 of ``scores``' LoD), the
    ``beam_size`` best candidates over its prefixes (rows). ``scores`` [rows, K] are the
    accumulated scores (``is_accumulated``) or probabilities added to ``pre_scores`` as logs;
    ``ids`` [rows, K] their ids (None: the column index). A prefix whose ``pre_ids`` is
    ``end_id`` carries on as ``end_id`` with its score. Returns ``(selected_ids,
    selected_scores)`` [M, 1] with a 2-level LoD (source -> its prefixes -> their picks),
    and with ``return_parent_idx`` the int32 row of each pick's prefix. At most
    ``beam_size`` picks per source (docs/control_flow.md)."""
    for arg, v in (("pre_ids", pre_ids), ("pre_scores", pre_scores), ("scores", scores)):
        check_variable("beam_search", arg, v)
    _check_dtype("beam_search", "pre_ids", pre_ids, ("int64",))
    _check_dtype("beam_search", "pre_scores", pre_scores, ("float32", "float64"))
    _check_dtype("beam_search", "scores", scores, ("float32", "float64"))
    if ids is not None:
        check_variable("beam_search", "ids", ids)
    helper = LayerHelper("beam_search", name)
    inputs = {"pre_ids": pre_ids, "pre_scores": pre_scores, "scores": scores}
    if ids is not None:
        inputs["ids"] = ids
    selected_scores = helper.create_variable_for_type_inference(pre_scores.dtype, True)
    selected_ids = helper.create_variable_for_type_inference(pre_ids.dtype, True)
    parent_idx = helper.create_variable_for_type_inference("int32", True)
    helper.append_op("beam_search", inputs,
                     {"selected_ids": selected_ids, "selected_scores": selected_scores,
                      "parent_idx": parent_idx},
                     {"level": int(level), "beam_size": int(beam_size), "end_id": int(end_id),
                      "is_accumulated": bool(is_accumulated)})
    if return_parent_idx:
        return selected_ids, selected_scores, parent_idx
    return selected_ids, selected_scores


def beam_search_decode(ids, scores, beam_size, end_id, name=None):
    """The full hypotheses of a beam search: ``ids`` and ``scores`` are tensor arrays holding
    each step's ``beam_search`` picks (2-level LoD values, written with ``array_write``).
    Backtraces each source's ``beam_size`` hypotheses from its last step with picks, best
    final score first; returns ``(sentence_ids, sentence_scores)``, 1-D with a 2-level LoD
    (source -> hypotheses -> tokens)."""
    for arg, v in (("ids", ids), ("scores", scores)):
        check_variable("beam_search_decode", arg, v)
        if not v.is_array:
            raise ProgramError(f"beam_search_decode: '{arg}' ({v.name}) must be a tensor array "
                               "of each step's picks (array_write of beam_search's outputs)")
    helper = LayerHelper("beam_search_decode", name)
    sentence_ids = helper.create_variable_for_type_inference(ids.dtype, True)
    sentence_scores = helper.create_variable_for_type_inference(scores.dtype, True)
    helper.append_op("beam_search_decode", {"Ids": ids, "Scores": scores},
                     {"SentenceIds": sentence_ids, "SentenceScores": sentence_scores},
                     {"beam_size": int(beam_size), "end_id": int(end_id)})
    return sentence_ids, sentence_scores
