"""graphc's 64-bit types without touching the user's JAX: x64 mode is switched on only while
graphc itself traces, compiles, runs or places arrays, never for the rest of the process.

Paddle programs use int64 labels and float64 checks, and JAX keeps 64-bit types only in x64
mode. ``jax.enable_x64`` is a thread-local context (it is part of a jitted function's cache
key), so every entry point where graphc creates, converts or runs arrays enters it: the
executor's run and compile, CompiledStep calls and lowering, the interpreter (and its op
threads), scope writes, and the DataLoader's placing thread. A user's own JAX code, in the
same process and thread, keeps whatever setting the user chose (32-bit by default).

Where graphc traces its steps and rules, and around the interpreter's ops, float32 matrix
products (dot, matmul, conv) are fixed at full float32 precision, as Paddle 1.8's cuBLAS and
cuDNN kernels compute them: on a GPU JAX's default lets XLA use TensorFloat-32, whose 10-bit
mantissa changes losses in the third digit. ``GRAPHC_MATMUL_PRECISION`` (JAX's names:
``default``, ``tensorfloat32``, ``bfloat16``, ``highest``, ...) opts graphc's own programs into
another when a step is traced; a precision the user set in JAX for the whole process is
kept. CPUs compute float32 products the same either way.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TypeVar

import jax
import numpy as np

F = TypeVar("F", bound=Callable)
_X64 = jax.enable_x64  # JAX's thread-local jax_enable_x64 setting (a context when called)
# JAX's thread-local default precision of float32 products (a context when called)
_MATMUL = jax.default_matmul_precision
MATMUL_PRECISIONS = ("default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
                     "bfloat16_3x", "tensorfloat32_3x")


def matmul_precision() -> str:
    """The precision graphc's own float32 products use: ``GRAPHC_MATMUL_PRECISION`` or
    ``highest`` (Paddle's float32)."""
    import os
    want = os.environ.get("GRAPHC_MATMUL_PRECISION", "").strip().lower() or "highest"
    if want not in MATMUL_PRECISIONS:
        from ..ir.errors import GraphcError
        raise GraphcError(f"GRAPHC_MATMUL_PRECISION={want!r}: expected one of "
                          f"{', '.join(MATMUL_PRECISIONS)}")
    return want


def graphc_x64():
    """Context: 64-bit types in this thread, for graphc's own arrays and steps."""
    return _X64(True)


def graphc_products():
    """Context: graphc's float32 product precision in this thread. Entered where graphc
    traces a step or rule (JAX fixes a product's precision when it is traced, so a compiled
    step keeps it and its calls pay nothing) and around the interpreter's eager ops."""
    if _MATMUL.value is not None:  # graphc's, entered further out, or the user's own
        return contextlib.nullcontext()
    return _MATMUL(matmul_precision())


def at_graphc_precision(fn: F) -> F:
    """``fn`` run inside ``graphc_products()``, unless a precision is already in effect
    (graphc's, entered further out, or the user's own for the whole process)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _MATMUL.value is not None:
            return fn(*args, **kwargs)
        with graphc_products():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# (swap, put back) of the thread's x64 setting, or (None, None) where JAX's context does
# more than that (an update hook) or has no such methods
_X64_SWAP = ((getattr(_X64, "swap_local", None), getattr(_X64, "set_local", None))
             if getattr(_X64, "_update_thread_local_hook", None) is None and
             hasattr(_X64, "swap_local") and hasattr(_X64, "set_local") else (None, None))


def with_graphc_x64(fn: F) -> F:
    """``fn`` run inside ``graphc_x64()`` (for entry points: run, compile, place, set).
    Nested entry points (Executor.run calling a step) enter it once: reading the
    thread's setting costs far less than entering the context again. The setting is
    swapped and put back directly where JAX's context would do only that (no update hook):
    its context manager is three Python calls around the same two, on every steady
    ``Predictor.run`` and general ``Executor.run``."""
    swap, put_back = _X64_SWAP

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _X64.value:
            return fn(*args, **kwargs)
        if swap is None:
            with _X64(True):
                return fn(*args, **kwargs)
        before = swap(True)
        try:
            return fn(*args, **kwargs)
        finally:
            put_back(before)

    return wrapper  # type: ignore[return-value]


# What JAX without x64 makes of a 64-bit dtype (a user's jnp.asarray(int64 labels) is int32).
_NARROWED = {np.dtype("int64"): np.dtype("int32"), np.dtype("uint64"): np.dtype("uint32"),
             np.dtype("float64"): np.dtype("float32"),
             np.dtype("complex128"): np.dtype("complex64")}


def is_narrowed(have, want) -> bool:
    """Whether ``have`` is the 32-bit dtype JAX without x64 gives for the 64-bit ``want``:
    a jax array a user made in 32-bit mode for a 64-bit feed (widened losslessly)."""
    return _NARROWED.get(np.dtype(want)) == np.dtype(have)
