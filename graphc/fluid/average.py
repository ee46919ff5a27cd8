"""``fluid.average.WeightedAverage``: a running weighted mean of fetched values (numbers or
NumPy arrays) on the Python side, as Fluid 1.x training loops keep one per metric."""

from __future__ import annotations

import numbers

import numpy as np

from ..ir.errors import GraphcError

__all__ = ["WeightedAverage"]


class AverageError(GraphcError, ValueError):
    """WeightedAverage was given a non-numeric value or weight, or asked for an empty mean."""


class WeightedAverage:
    """``add(value, weight)`` accumulates sum(value * weight) and sum(weight); ``eval()``
    returns their ratio; ``reset()`` forgets everything."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.numerator = None
        self.denominator = None

    def add(self, value, weight) -> None:
        if not (isinstance(value, numbers.Number | np.ndarray | np.number)
                and not isinstance(value, bool)):
            raise AverageError("WeightedAverage.add: value must be a number or a NumPy array, "
                               f"got {type(value).__name__}")
        if isinstance(weight, bool) or not isinstance(weight, numbers.Number | np.number):
            raise AverageError("WeightedAverage.add: weight must be a number, got "
                               f"{type(weight).__name__}")
        if self.numerator is None:
            self.numerator, self.denominator = value * weight, weight
        else:
            self.numerator = self.numerator + value * weight
            self.denominator = self.denominator + weight

    def eval(self):
        if self.numerator is None:
            raise AverageError("WeightedAverage.eval: nothing was added since the last reset")
        return self.numerator / self.denominator
