"""Paddle 1.8's ``split_lod_tensor`` / ``merge_lod_tensor`` (fluid.layers.control_flow): the rows
(level-0 sequences) of a tensor split by a mask and merged back; ops/lod_control/ builds them."""

from __future__ import annotations

from ..ir.errors import ArgumentTypeError
from .helper import LayerHelper, check_variable


def _check(layer: str, level) -> None:
    if isinstance(level, bool) or not isinstance(level, int):
        raise ArgumentTypeError(f"{layer}: 'level' must be an int, got {type(level).__name__}")


def split_lod_tensor(input, mask, level=0):
    """``(out_true, out_false)``: the rows of ``input`` (a LoD input: its level-0 sequences)
    whose ``mask`` ([N, 1] bool) is true, in order, and the others. XLA needs static shapes,
    so each is a LoD value of ``input``'s capacity holding those rows (sequences) first and
    empty sequences after them (a dense input: one row per sequence); fetched, they hold
    Paddle's rows (docs/control_flow.md, "split_lod_tensor / merge_lod_tensor")."""
    check_variable("split_lod_tensor", "input", input)
    check_variable("split_lod_tensor", "mask", mask)
    _check("split_lod_tensor", level)
    helper = LayerHelper("split_lod_tensor")
    out_true = helper.create_variable_for_type_inference(input.dtype)
    out_false = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("split_lod_tensor", {"X": input, "Mask": mask},
                     {"OutTrue": out_true, "OutFalse": out_false}, {"level": level})
    return out_true, out_false


def merge_lod_tensor(in_true, in_false, x, mask, level=0):
    """``x``'s rows (sequences) and LoD, row r taken in order from ``in_true`` where
    ``mask[r]``, else from ``in_false``: the inverse of ``split_lod_tensor``. Gradients go
    to ``in_true`` / ``in_false`` row by row."""
    for arg, v in (("in_true", in_true), ("in_false", in_false), ("x", x), ("mask", mask)):
        check_variable("merge_lod_tensor", arg, v)
    _check("merge_lod_tensor", level)
    helper = LayerHelper("merge_lod_tensor")
    out = helper.create_variable_for_type_inference(in_true.dtype)
    helper.append_op("merge_lod_tensor", {"X": x, "Mask": mask, "InTrue": in_true,
                                          "InFalse": in_false}, {"Out": out}, {"level": level})
    return out


__all__ = ["merge_lod_tensor", "split_lod_tensor"]
