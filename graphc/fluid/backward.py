"""``fluid.backward``: ``append_backward`` and the rest of graphc.backward, under Paddle's
module path."""

from ..build import backward as _base
from ..build.backward import append_backward, gradients
from ._missing import delegating_getattr

__all__ = ["append_backward", "gradients", "calc_gradient"]


def calc_gradient(targets, inputs, target_gradients=None, no_grad_set=None):
    """Paddle 1.8's ``calc_gradient``: ``gradients`` of the same arguments, but one input's
    gradient comes back as the Variable itself rather than a one-item list."""
    grads = gradients(targets, inputs, target_gradients, no_grad_set)
    return grads[0] if len(grads) == 1 else grads

__getattr__ = delegating_getattr(__name__, _base)
