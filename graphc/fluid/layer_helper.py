"""``fluid.layer_helper``: graphc's LayerHelper under Paddle's module path (scripts and Paddle's
tests append ops with it: ``LayerHelper(type).append_op(type=..., inputs=..., ...)``)."""

from ..layers.helper import LayerHelper

__all__ = ["LayerHelper"]
