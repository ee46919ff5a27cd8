"""``fluid.wrapped_decorator``: Paddle's signature-keeping decorator helpers
(wrap_decorator, signature_safe_contextmanager), which PaddleCV's utilities import."""

from __future__ import annotations

import contextlib
import functools

__all__ = ["signature_safe_contextmanager", "wrap_decorator"]


def wrap_decorator(decorator_func):
    """A decorator applying ``decorator_func`` whose result keeps the decorated function's
    name, docstring and signature (``inspect.signature`` follows ``__wrapped__``)."""

    def decorate(func):
        wrapped = decorator_func(func)

        @functools.wraps(func)
        def __impl__(*args, **kwargs):
            return wrapped(*args, **kwargs)

        return __impl__

    return decorate


signature_safe_contextmanager = wrap_decorator(contextlib.contextmanager)
