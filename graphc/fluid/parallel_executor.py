"""``fluid.parallel_executor``: ParallelExecutor with the seeds' signature
(graphc.runtime.parallel_executor)."""

from ..runtime.parallel_executor import ParallelExecutor
from ._missing import missing

__all__ = ["ParallelExecutor"]


def __getattr__(name: str):
    raise missing(__name__, name)
