"""``fluid.incubate``: Paddle 1.8's incubating APIs graphc carries: the fleet import paths
(``fluid.incubate.fleet.collective``, ``...fleet.base.role_maker``) and ``data_generator``."""

# -- issue 25: datasets
from . import (
    data_generator,  # noqa: F401,E402
    fleet,  # noqa: F401
)
# -- end issue 25: datasets
