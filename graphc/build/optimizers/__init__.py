"""Optimizers with Paddle's names, formulas and state (``graphc.optimizer``): the base class
and SGD/Momentum/Adam/AdamW (base.py), the adaptive ones (adaptive.py), parameter averages.

``minimize(loss)`` = append_backward + clipping + regularisation + one update op per parameter.
"""

from . import adaptive as _adaptive
from .adaptive import *  # noqa: F403
from .averaging import ExponentialMovingAverage, ModelAverage
from .base import *  # noqa: F403
from .base import __all__ as _base_all

__all__ = [*_base_all, *_adaptive.__all__, "ModelAverage", "ExponentialMovingAverage"]
