"""Optimizers with Paddle's names, formulas and state (``graphc.optimizer``): base.py, adaptive.py,
averaging.py, wrappers.py (Dpsgd, Lookahead, Recompute) and pipeline.py, re-exported here.

``minimize(loss)`` = append_backward + clipping + regularisation + one update op per parameter.
"""

from . import adaptive as _adaptive
from .adaptive import *  # noqa: F403
from .adaptive import Adadelta, Adagrad, Adamax, DecayedAdagrad, Ftrl, Lamb, LarsMomentum, RMSProp
from .averaging import ExponentialMovingAverage, ModelAverage
from .base import *  # noqa: F403
from .base import SGD, Adam, Momentum
from .base import __all__ as _base_all
from .base import paddle16_positional as _p16
from .dgc import DGCMomentum, DGCMomentumOptimizer
from .pipeline import PipelineOptimizer
from .wrappers import *  # noqa: F403
from .wrappers import __all__ as _wrappers_all

# Paddle 1.6's arguments after the hyper-parameters, where 1.8 put parameter_list (the
# porting guide's table); a 1.6 positional call is served by these names
for _cls, _tail in [
        (SGD, ("regularization", "name")),
        (Momentum, ("use_nesterov", "regularization", "name")),
        (Adagrad, ("regularization", "name", "initial_accumulator_value")),
        (Adam, ("regularization", "name", "lazy_mode")),
        (Adamax, ("regularization", "name")),
        (DecayedAdagrad, ("regularization", "name")),
        (Ftrl, ("regularization", "name")),
        (RMSProp, ("regularization", "name")),
        (Adadelta, ("regularization", "name")),
        (LarsMomentum, ("regularization", "name")),
        (Lamb, ("regularization", "exclude_from_weight_decay_fn", "name")),
        (DGCMomentum, ("use_nesterov", "-local_grad_clip_norm", "num_trainers",
                       "regularization", "name"))]:
    _p16(*_tail)(_cls)

__all__ = [*_base_all, *_adaptive.__all__, *_wrappers_all, "ModelAverage",
           "ExponentialMovingAverage", "DGCMomentum", "DGCMomentumOptimizer",
           "PipelineOptimizer"]
