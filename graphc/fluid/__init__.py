"""The Paddle-shaped surface: ``import graphc.fluid as fluid`` mirrors ``paddle.fluid``'s
module tree and adapts graphc's own IR, passes, backends and runtime to Paddle's spellings."""

from . import clip, data_feeder, metrics  # noqa: F401
