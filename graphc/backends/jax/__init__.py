"""The JAX/XLA backend: a graph becomes one jitted function (state, feeds) -> (state, fetches).

``compile_step`` builds it for one device, ``DataParallelStep`` maps it over several; the
runtime caches steps per program version and feed signature.
"""

from .data_parallel import DataParallelStep, from_rows, to_rows
from .step import CompiledStep, compile_step

__all__ = ["CompiledStep", "DataParallelStep", "compile_step", "from_rows", "to_rows"]
