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


def _as_lodtensor(data, place, dtype=None):
    """Paddle's conversion of a fed value to a LoDTensor: a numpy array as it is; a Python
    scalar, list or tuple needs ``dtype`` (AssertionError without) and becomes an array of
    it (a scalar of shape [1]); ragged lists and other types are TypeErrors."""
    from ..runtime.lod_tensor import LoDTensor
    if not isinstance(data, np.ndarray):
        assert dtype is not None, ("_as_lodtensor: give a dtype to convert a "
                                   f"{type(data).__name__} that is not a numpy array")
        if np.isscalar(data):
            data = np.array([data])
        elif isinstance(data, list | tuple):
            from .reader import regular_array
            data = regular_array(data, "_as_lodtensor: nested lists of different lengths are "
                                       "not a regular array")
        else:
            raise TypeError(f"_as_lodtensor: cannot convert a {type(data).__name__} to a "
                            "tensor")
        data = data.astype(np.dtype(dtype))
    tensor = LoDTensor()
    tensor.set(data, place)
    return tensor


def __getattr__(name: str):
    raise missing(__name__, name)
