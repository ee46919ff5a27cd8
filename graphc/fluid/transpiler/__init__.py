"""``fluid.transpiler``: Paddle's DistributeTranspiler for parameter-server training, on graphc's
ps-* passes and MPI runtime (docs/parameter_server.md)."""

from .distribute_transpiler import DistributeTranspiler, DistributeTranspilerConfig
from .memory_optimization_transpiler import memory_optimize, release_memory
from .ps_dispatcher import HashName, PSDispatcher, RoundRobin

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig", "HashName", "PSDispatcher",
           "RoundRobin", "memory_optimize", "release_memory"]
