"""``fluid.transpiler``: Paddle's DistributeTranspiler for parameter-server training, on graphc's
ps-* passes and MPI runtime (docs/parameter_server.md)."""

from .distribute_transpiler import DistributeTranspiler, DistributeTranspilerConfig
from .ps_dispatcher import HashName, PSDispatcher, RoundRobin

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig", "HashName", "PSDispatcher",
           "RoundRobin"]
