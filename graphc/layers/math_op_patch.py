"""Operators on Variables (``a + b``, ``2 * x``, ``-x``, ``x ** 2``, ``a < b``, ``a == b``),
as Paddle 1.8 patches them: scalars become ``scale`` ops where one suffices, else a constant.

As in Paddle, ``==`` and ``!=`` build ``equal`` / ``not_equal`` ops (a bool Variable), and
Variables stay hashable by identity (dict and set keys); compare Variables themselves with
``is``. A right operand of another dtype is cast to the left one's; a right operand whose
dim 0 is unknown broadcasts from axis 0 (Paddle's ``axis``).
"""

from __future__ import annotations

import math

from ..ir.errors import ProgramError
from ..ir.program import Variable
from .math import _elementwise, scale

_SCALAR = int | float


def _constant_like(x: Variable, value: float) -> Variable:
    """A ``[1]`` tensor of ``x``'s dtype holding ``value`` (broadcast by the elementwise op)."""
    from .tensor import fill_constant
    return fill_constant([1], x.dtype, value)


def _scale_form(op_type: str, x: Variable, value: float, reverse: bool):
    """The ``scale`` op that computes ``x <op> value`` (or ``value <op> x``), or None."""
    if op_type == "elementwise_add":
        return scale(x, 1.0, value)
    if op_type == "elementwise_sub":
        return scale(x, -1.0, value) if reverse else scale(x, 1.0, -value)
    if op_type == "elementwise_mul":
        return scale(x, value)
    if op_type == "elementwise_div" and not reverse:
        if value == 0.0:
            raise ProgramError(f"division of '{x.name}' by the constant 0")
        return scale(x, 1.0 / value)
    return None


def _binary(op_type: str, reverse: bool = False, name: str | None = None):
    def method(self: Variable, other):
        if isinstance(other, bool) or not isinstance(other, _SCALAR | Variable):
            return NotImplemented
        if not isinstance(other, Variable):
            value = float(other)
            if not self.dtype.startswith("float") and not (math.isfinite(value)
                                                           and value == int(value)):
                # Paddle refuses this too: the [1] constant of x's integer dtype would
                # silently truncate it (i * 1.5 computing i * 1)
                raise ProgramError(f"'{self.name}' is {self.dtype}: the constant {other!r} "
                                   "does not convert to it without loss; cast the variable "
                                   "to a float dtype first (layers.cast)")
            if self.dtype.startswith("float"):
                out = _scale_form(op_type, self, value, reverse)
                if out is not None:
                    return out
            other = _constant_like(self, value)
        elif other.dtype != self.dtype:
            from .tensor import cast
            other = cast(other, self.dtype)
        x, y = (other, self) if reverse else (self, other)
        return _elementwise(op_type, x, y, _axis(y), None, None)

    method.__name__ = name or f"__{'r' if reverse else ''}{op_type.split('_')[1]}__"
    return method


def _axis(y: Variable) -> int:
    """Paddle's: a right operand with an unknown dim 0 (a batch) aligns from axis 0."""
    return 0 if y.shape and y.shape[0] == -1 else -1


def _compare(op_type: str, name: str):
    def method(self: Variable, other):
        if isinstance(other, bool) or not isinstance(other, _SCALAR | Variable):
            return NotImplemented  # ``x == None``: Python's identity answer
        if not isinstance(other, Variable):
            other = _constant_like(self, float(other))
        elif other.dtype != self.dtype:
            from .tensor import cast
            other = cast(other, self.dtype)
        from .logic import _bool_op
        return _bool_op(op_type, {"X": self, "Y": other}, None,
                        {"axis": _axis(other), "force_cpu": False})

    method.__name__ = name
    return method


def monkey_patch_variable() -> None:
    from .variable_index import patch_indexing
    patch_indexing()
    Variable.__add__ = _binary("elementwise_add")
    Variable.__radd__ = _binary("elementwise_add", reverse=True)
    Variable.__sub__ = _binary("elementwise_sub")
    Variable.__rsub__ = _binary("elementwise_sub", reverse=True)
    Variable.__mul__ = _binary("elementwise_mul")
    Variable.__rmul__ = _binary("elementwise_mul", reverse=True)
    Variable.__truediv__ = _binary("elementwise_div")
    Variable.__rtruediv__ = _binary("elementwise_div", reverse=True, name="__rtruediv__")
    Variable.__pow__ = _binary("elementwise_pow", name="__pow__")
    Variable.__rpow__ = _binary("elementwise_pow", reverse=True, name="__rpow__")
    Variable.__floordiv__ = _binary("elementwise_floordiv", name="__floordiv__")
    Variable.__mod__ = _binary("elementwise_mod", name="__mod__")
    Variable.__neg__ = lambda self: scale(self, -1.0)
    for name, op_type in (("__eq__", "equal"), ("__ne__", "not_equal"),
                          ("__lt__", "less_than"), ("__le__", "less_equal"),
                          ("__gt__", "greater_than"), ("__ge__", "greater_equal")):
        setattr(Variable, name, _compare(op_type, name))
    Variable.__hash__ = object.__hash__  # keys by identity, as Paddle's Variables stay
