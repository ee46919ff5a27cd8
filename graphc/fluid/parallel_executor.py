"""``fluid.parallel_executor``: ParallelExecutor with the seeds' signature
(graphc.runtime.parallel_executor)."""

from ..runtime.parallel_executor import ParallelExecutor
from ._missing import missing

# Paddle's module binds the two strategy classes too (ELMo's train.py builds
# ``fluid.parallel_executor.ExecutionStrategy()``); they are the compiler's
from .compiler import BuildStrategy, ExecutionStrategy  # noqa: F401

__all__ = ["ParallelExecutor"]


def __getattr__(name: str):
    raise missing(__name__, name)
