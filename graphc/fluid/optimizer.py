"""``fluid.optimizer``: graphc's optimizers under Paddle's names (``SGD`` and
``SGDOptimizer``, ...); optimizers added to graphc.optimizer appear here too."""

from ..build import optimizers as _base
from ..build.regularizer import append_regularization_ops  # noqa: F401  (Paddle 1.8's import)
from ._missing import delegating_getattr

_PADDLE_ALIASES = {f"{n}Optimizer": n for n in (
    "SGD", "Momentum", "Adam", "Adamax", "Adagrad", "DecayedAdagrad", "RMSProp", "Lamb",
    "LarsMomentum", "Ftrl", "Adadelta", "DGCMomentum", "Lookahead", "Dpsgd", "Recompute")}

__getattr__ = delegating_getattr(__name__, _base, _PADDLE_ALIASES)
