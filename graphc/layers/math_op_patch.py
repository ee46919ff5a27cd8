"""Arithmetic operators on Variables (``a + b``, ``2 * x``, ``-x``), as Paddle patches them.

Scalars become ``scale`` ops; Variables become elementwise ops with numpy-style broadcasting.
"""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .math import _elementwise, scale


def _binary(op_type: str, reverse: bool = False):
    def method(self: Variable, other):
        if isinstance(other, bool) or not isinstance(other, int | float | Variable):
            return NotImplemented
        if isinstance(other, Variable):
            x, y = (other, self) if reverse else (self, other)
            return _elementwise(op_type, x, y, -1, None, None)
        other = float(other)
        if op_type == "elementwise_add":
            return scale(self, 1.0, other)
        if op_type == "elementwise_sub":
            return scale(self, -1.0, other) if reverse else scale(self, 1.0, -other)
        if op_type == "elementwise_mul":
            return scale(self, other)
        if op_type == "elementwise_div" and not reverse:
            if other == 0.0:
                raise ProgramError(f"division of '{self.name}' by the constant 0")
            return scale(self, 1.0 / other)
        return NotImplemented  # scalar / Variable needs a reciprocal op graphc lacks

    method.__name__ = f"__{'r' if reverse else ''}{op_type.split('_')[1]}__"
    return method


def monkey_patch_variable() -> None:
    Variable.__add__ = _binary("elementwise_add")
    Variable.__radd__ = _binary("elementwise_add", reverse=True)
    Variable.__sub__ = _binary("elementwise_sub")
    Variable.__rsub__ = _binary("elementwise_sub", reverse=True)
    Variable.__mul__ = _binary("elementwise_mul")
    Variable.__rmul__ = _binary("elementwise_mul", reverse=True)
    Variable.__truediv__ = _binary("elementwise_div")
    Variable.__neg__ = lambda self: scale(self, -1.0)
