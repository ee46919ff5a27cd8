"""Beam-search helper layers that need no control flow (Paddle 1.8's
``fluid.layers.gather_tree``)."""

from __future__ import annotations

from .helper import LayerHelper, check_variable


def gather_tree(ids, parents):
    """The full path of every beam of a finished beam search: ``ids`` and ``parents``
    [max_time, batch, beam] int32/int64 (the selected ids and each one's parent beam per
    step); Out[t, b, k] is the id at step t on the path that ends in beam k, found by
    backtracing from the last step through ``parents``. No gradient."""
    check_variable("gather_tree", "ids", ids)
    check_variable("gather_tree", "parents", parents)
    helper = LayerHelper("gather_tree")
    out = helper.create_variable_for_type_inference(ids.dtype, stop_gradient=True)
    helper.append_op("gather_tree", {"Ids": ids, "Parents": parents}, {"Out": out})
    return out
