"""``fluid.compiler``: CompiledProgram and the strategies that choose its passes
(graphc.runtime.compiled_program, graphc.strategy)."""

from ..runtime.compiled_program import CompiledProgram
from ..strategy import BuildStrategy, ExecutionStrategy
from ._missing import missing

__all__ = ["BuildStrategy", "CompiledProgram", "ExecutionStrategy"]


def __getattr__(name: str):
    raise missing(__name__, name)
