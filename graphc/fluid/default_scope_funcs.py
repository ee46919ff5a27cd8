"""``fluid.default_scope_funcs``: Paddle 1.8's stack of local scopes (a root scope per
context, ``enter_local_scope`` pushes a child of the current one, ``leave`` pops it)."""

from __future__ import annotations

import contextvars

from ..runtime.scope import Scope

__all__ = ["get_cur_scope", "enter_local_scope", "leave_local_scope", "var", "find_var",
           "scoped_function"]

# the scope stack of this context (thread), made on first use: Paddle keeps one per thread
_STACK: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "graphc_default_scope_stack", default=None)


def _stack() -> tuple:
    stack = _STACK.get()
    if stack is None:
        stack = (Scope(),)
        _STACK.set(stack)
    return stack


def get_cur_scope() -> Scope:
    """The innermost scope of this context's stack."""
    return _stack()[-1]


def enter_local_scope() -> None:
    """Push a child of the current scope (it sees its parents' variables)."""
    stack = _stack()
    _STACK.set(stack + (stack[-1].new_scope(),))


def leave_local_scope() -> None:
    """Pop the innermost scope; the root stays."""
    stack = _stack()
    if len(stack) > 1:
        stack[-2].drop_kids()
        _STACK.set(stack[:-1])


def var(name: str):
    """Create (or find) ``name`` in the current scope."""
    return get_cur_scope().var(name)


def find_var(name: str):
    """``name`` in the current scope or its parents; None if absent."""
    return get_cur_scope().find_var(name)


def scoped_function(func) -> None:
    """Run ``func()`` in a new local scope, left afterwards."""
    enter_local_scope()
    try:
        func()
    finally:
        leave_local_scope()
