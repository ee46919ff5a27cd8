"""``fluid.incubate.fleet``: Paddle 1.8's fleet import paths; collective training runs on
graphc.distributed, parameter-server paths import but refuse to run."""

from . import base, collective  # noqa: F401
