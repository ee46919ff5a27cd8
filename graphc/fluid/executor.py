"""``fluid.executor``: Executor and the scope functions (graphc.runtime.executor and
graphc.runtime.scope)."""

from ..runtime.executor import Executor
from ..runtime.scope import Scope, global_scope, scope_guard
from ._missing import missing

__all__ = ["Executor", "Scope", "global_scope", "scope_guard"]


def __getattr__(name: str):
    raise missing(__name__, name)
