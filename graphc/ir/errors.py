"""Typed errors raised by graphc's IR layer.

Every error names the thing at fault (op, slot, variable, line) and what was expected.
"""

from __future__ import annotations


class GraphcError(Exception):
    """Base class of every error graphc raises on purpose."""


class OpDefinitionError(GraphcError):
    """An op does not match its definition: unknown type, bad slot, bad attribute."""


class UnknownOpError(OpDefinitionError):
    """No op of this type is registered."""


class ShapeError(GraphcError):
    """Shape or dtype inference failed: the inputs do not fit the op."""


class ProgramError(GraphcError):
    """The Program builder was used incorrectly (unknown variable, bad name, ...)."""


class ArgumentTypeError(ProgramError, TypeError):
    """A layer was given an argument of the wrong type or dtype (not a Variable, a float
    condition): a ProgramError, and a TypeError as Paddle raises for it."""


class ArgumentDtypeError(ArgumentTypeError, ShapeError):
    """A layer input of a dtype the layer does not take (Paddle 1.8's check_variable_and_dtype
    list): an ArgumentTypeError (the TypeError Paddle raises) and the ShapeError graphc's op
    inference raises for a dtype that does not fit."""


class ArgumentValueError(ProgramError, ValueError):
    """A layer was given an argument of the right type but a wrong value (an empty list, a
    structure of another length): a ProgramError, and a ValueError as Paddle raises for it."""


class ArgumentAssertionError(ArgumentValueError, AssertionError):
    """A layer argument breaking a rule Paddle 1.8 checks with a bare ``assert`` (a reshape
    shape with two -1s, an empty fill_constant shape): an ArgumentValueError, and an
    AssertionError as Paddle raises for it."""


class DtypeError(ShapeError, TypeError):
    """A dtype that cannot be: a name graphc does not know ('flaot32', 'uint4'), a shape
    tensor that is not int32/int64: a ShapeError, and a TypeError as Paddle raises for it."""


class VerifyError(GraphcError):
    """A graph broke an IR invariant; the message shows the op in context."""

    def __init__(self, message: str, op=None, context: str = ""):
        self.op = op
        self.reason = message
        self.context = context
        super().__init__(message + ("\n" + context if context else ""))


class ParseError(GraphcError):
    """The textual IR could not be parsed; the message gives line and column."""

    def __init__(self, message: str, line: int, col: int = 0, text: str = ""):
        self.line, self.col = line, col
        where = f"line {line}, column {col + 1}"
        snippet = f"\n  {text}\n  {' ' * col}^" if text else ""
        super().__init__(f"{message} ({where}){snippet}")
