"""``fluid.incubate``: Paddle 1.8's incubating APIs graphc carries, which are the fleet
import paths (``fluid.incubate.fleet.collective``, ``...fleet.base.role_maker``)."""

from . import fleet  # noqa: F401
