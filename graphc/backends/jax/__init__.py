"""The JAX/XLA backend: a graph becomes one jitted function (state, feeds) -> (state, fetches).

``compile_step`` builds it; the runtime caches it per program version and feed signature.
"""

from .step import CompiledStep, compile_step

__all__ = ["CompiledStep", "compile_step"]
