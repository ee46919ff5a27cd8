"""``fluid.incubate.fleet.parameter_server``: Paddle's parameter-server fleet, on graphc's
DistributeTranspiler and MPI runtime (docs/parameter_server.md)."""

from . import distribute_transpiler  # noqa: F401
