"""``fluid.incubate.fleet.base``: the role makers that tell fleet which worker this process
is (``role_maker``)."""

from . import role_maker  # noqa: F401
