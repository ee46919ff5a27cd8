"""Optimizers with Paddle's names, formulas and state (``graphc.optimizer``): base.py, adaptive.py,
averaging.py, wrappers.py (Dpsgd, Lookahead, Recompute) and pipeline.py, re-exported here.

``minimize(loss)`` = append_backward + clipping + regularisation + one update op per parameter.
"""

from . import adaptive as _adaptive
from .adaptive import *  # noqa: F403
from .averaging import ExponentialMovingAverage, ModelAverage
from .base import *  # noqa: F403
from .base import __all__ as _base_all
from .dgc import DGCMomentum, DGCMomentumOptimizer
from .pipeline import PipelineOptimizer
from .wrappers import *  # noqa: F403
from .wrappers import __all__ as _wrappers_all

__all__ = [*_base_all, *_adaptive.__all__, *_wrappers_all, "ModelAverage",
           "ExponentialMovingAverage", "DGCMomentum", "DGCMomentumOptimizer",
           "PipelineOptimizer"]
