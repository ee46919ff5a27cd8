"""``fluid.executor``: Executor and the scope functions (graphc.runtime.executor and
graphc.runtime.scope)."""

import numpy as np

from ..runtime.executor import Executor
from ..runtime.scope import Scope, global_scope, scope_guard
from ._missing import missing

__all__ = ["Executor", "Scope", "global_scope", "scope_guard"]


def _fetch_var(name, scope=None, return_numpy: bool = True):
    """The value of variable ``name`` (a name or a Variable) in ``scope`` (the global one by
    default), as Paddle's ``executor._fetch_var``: a numpy array, or the scope's tensor."""
    name = getattr(name, "name", name)
    scope = global_scope() if scope is None else scope
    var = scope.find_var(name)
    if var is None:
        from ..runtime.scope import ScopeError
        raise ScopeError(f"_fetch_var: the scope has no variable '{name}' (is it persistable, "
                         "and did a run compute it?)")
    tensor = var.get_tensor()
    return np.array(tensor) if return_numpy else tensor


def __getattr__(name: str):
    raise missing(__name__, name)
