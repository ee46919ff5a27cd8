"""``fluid.regularizer``: graphc's weight-decay regularisers under Paddle's names
(``L2Decay`` and ``L2DecayRegularizer``)."""

from ..build import regularizer as _base
from ._missing import delegating_getattr

__getattr__ = delegating_getattr(__name__, _base, {
    "L2DecayRegularizer": "L2Decay", "L1DecayRegularizer": "L1Decay"})
