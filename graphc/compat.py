"""``paddle.compat`` (Paddle 1.8): the text, number and exception helpers Paddle's own code
and unit tests use, for Python 3 only (graphc has no Python 2 path)."""

from __future__ import annotations

import math

__all__ = ["long_type", "int_type", "to_text", "to_bytes", "round", "floor_division",
           "get_exception_message"]

long_type = int
int_type = int


def _convert(obj, conv, inplace: bool):
    if isinstance(obj, list):
        out = [conv(item) for item in obj]
        if inplace:
            obj[:] = out
            return obj
        return out
    if isinstance(obj, set):
        out = {conv(item) for item in obj}
        if inplace:
            obj.clear()
            obj.update(out)
            return obj
        return out
    return conv(obj)


def to_text(obj, encoding: str = "utf-8", inplace: bool = False):
    """``obj`` (bytes, str, or a list/set of them) as str; other values as they are."""
    def conv(item):
        return item.decode(encoding) if isinstance(item, bytes) else item
    return None if obj is None else _convert(obj, conv, inplace)


def to_bytes(obj, encoding: str = "utf-8", inplace: bool = False):
    """``obj`` (str, bytes, or a list/set of them) as bytes; other values as they are."""
    def conv(item):
        return item.encode(encoding) if isinstance(item, str) else item
    return None if obj is None else _convert(obj, conv, inplace)


def round(x, d: int = 0):  # noqa: A001 - Paddle's name
    """Half away from zero, as Python 2 rounded (Paddle keeps that rule)."""
    p = 10 ** d
    if x > 0:
        return float(math.floor((x * p) + 0.5)) / p
    if x < 0:
        return float(math.ceil((x * p) - 0.5)) / p
    return math.copysign(0.0, x)


def floor_division(x, y):
    return x // y


def get_exception_message(exc) -> str:
    """The message an exception was raised with."""
    if exc is None:
        raise ValueError("get_exception_message: exc is None")
    return str(exc)
