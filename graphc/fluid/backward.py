"""``fluid.backward``: ``append_backward`` and the rest of graphc.backward, under Paddle's
module path."""

from ..build import backward as _base
from ..build.backward import append_backward, gradients
from ._missing import delegating_getattr

__all__ = ["append_backward", "gradients"]

__getattr__ = delegating_getattr(__name__, _base)
