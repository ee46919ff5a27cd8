"""Tensor arrays that mix dense rows and LoD values: a LoD write into an array of dense
elements makes it an array of LoD values, retyping what was built from it (control_flow.md)."""

from __future__ import annotations

from ..ir.errors import ShapeError
from ..ir.retype import ReinferError, apply, lod_only, reinfer
from ..ir.types import dims_compatible

# ops whose output is the array itself: their types follow the array's
_ARRAY_WRITERS = ("write_to_array",)


def mixes(array, x) -> bool:
    """Whether writing ``x`` into ``array`` (of dense elements) makes it an array of LoD
    values: ``x`` is a LoD value whose rows (shape past the first dimension) and dtype are
    the elements'."""
    if not (array.shape is not None and array.is_array and not array.element_lod
            and x.lod_level and x.shape is not None and x.dtype == array.dtype):
        return False
    element = tuple(array.shape[1:])
    return len(element) == len(x.shape) and dims_compatible(tuple(x.shape[1:]), element[1:])


def _family(program, name: str) -> set[str]:
    """``name`` and the variables holding the same array before or after a write or a copy
    (an array written outside a region gets a new name per value, control_flow.py
    _rename_before; Paddle's format copies a loop's carried arrays)."""
    family, grew = {name}, True
    while grew:
        grew = False
        for block in program.blocks:
            for op in block.ops:
                if op.type in _ARRAY_WRITERS or op.type == "assign":  # a copy: one array
                    linked = set(op.input("Array") if op.type in _ARRAY_WRITERS else
                                 op.input("X")) | set(op.output("Out"))
                    if linked & family and not linked <= family:
                        family |= linked
                        grew = True
    return family


def promote(block, array, level: int, where: str) -> None:
    """Make ``array`` (and its other names) an array of level-``level`` LoD values: its
    dense elements are stored as one-row sequences, its reads give LoD values, and the ops
    built on those reads are inferred again. An op that takes a dense value but refuses the
    LoD one, or whose outputs would change more than their LoD level, is a ShapeError."""
    program = block.program
    family = _family(program, array.name)
    retyped = {}
    for b in program.blocks:
        for name in family:
            var = b.vars.get(name)
            if var is not None and var.is_array:
                retyped[name] = var.type._replace(element_lod=level)
    try:  # a read gives the element: now a LoD value, and what is built on it follows
        types = reinfer(program, retyped, skip=_ARRAY_WRITERS, keep=lod_only)
    except ReinferError as exc:
        why = (f"{where}: writing a LoD value makes the array {array.name} (whose first "
               f"elements were dense rows) an array of LoD values, so its reads become LoD "
               f"values")
        if exc.output:
            raise ShapeError(f"{why}; {exc}") from None
        raise ShapeError(f"{why}; {exc.op.where} does not take that: {exc}") from None
    apply(program, types)
