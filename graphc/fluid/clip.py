"""``fluid.clip``: Paddle's gradient-clipping spellings, which are graphc's own names; the
implementation is build/clip.py (the optimizers apply it)."""

from ..build.clip import *  # noqa: F403
from ..build.clip import __all__  # noqa: F401
