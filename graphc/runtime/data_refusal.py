"""The DataError a refused step raises: which data check found a bad value (its feed, or the
op's input and source line), the value and where it sits (backends.data_checks)."""

from __future__ import annotations

import numpy as np

from ..backends.data_checks import COUNT, ITERATION, POSITION, VALUE, refusal
from ..backends.jax import CompiledStep, DataParallelStep

__all__ = ["raise_if_refused", "refusal"]


def raise_if_refused(step: CompiledStep, prep, checks: np.ndarray) -> None:
    """DataError for the first data check that found a bad value (see backends.data_checks):
    names the feed it came from, or the op's input variable and the op's source line.
    ``prep``: the prepared program the step belongs to (its ``graph``)."""
    bad = np.flatnonzero(checks[:, COUNT])
    if not bad.size:
        return
    i = int(bad[0])
    site, row = step.check_sites[i], checks[i]
    op = site.op
    shape = list(site.bad)
    if isinstance(step, DataParallelStep) and shape:
        shape[0] *= step.nranks  # positions count in the global batch
    index = [int(k) for k in np.unravel_index(int(row[POSITION]), shape)] if shape else []
    value, index = _checked_input(op, site.slot, index) if op is not None else (None, index)
    if value is not None and value.var.kind == "feed" and value in prep.graph.inputs:
        culprit = f"feed '{value.var.name}'"
    elif value is not None:
        culprit = f"variable '{value.var.name}' (input {site.slot} of {site.where})"
    else:
        culprit = f"input {site.slot} of {site.where}"
    where = f" in iteration {int(row[ITERATION])}" if step.num_iterations > 1 else ""
    raise refusal(culprit, site, row[VALUE], index, int(row[COUNT]), where)


def _checked_input(op, slot: str, index: list) -> tuple:
    """(the value a data check's ``slot`` names, the position in it): ``"Ids"``, or
    ``"Ids[*]"`` for a check over every value of a duplicable slot stacked on a last axis
    (a fused op checking all its slots at once: the last index picks the value)."""
    if slot.endswith("[*]") and index:
        values = op.inputs.get(slot[:-3]) or []
        return (values[index[-1]] if index[-1] < len(values) else None), index[:-1]
    return op.input(slot), index
