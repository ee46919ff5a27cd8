"""Tiered compilation: a step's first call runs on a quickly compiled executable while the
fully optimised one compiles on a background thread, and later calls switch to it.

Opt-in (``GRAPHC_TIERED=1`` or ``Executor.tiered = True``): on XLA CPU in JAX 0.10 every
option that cuts compile time (an LLVM optimisation level below 3) changes float bits, so
the steps run before the switch differ from the optimised step's in their last bits
(docs/tiered_compilation.md has the measurement). The quick executable is
compiled with ``QUICK_OPTIONS`` (per compile: JAX's global configuration is never touched).
The first call compiles the quick executable, runs on it and starts the optimised compile
on a daemon thread; a later call takes the optimised one once it is ready. A failed
optimised compile leaves the step on the quick executable with a warning; a failed quick
compile waits for the optimised one. ``close()`` (``Executor.close``) and the interpreter's
exit join the threads, so none outlives its Executor or the process.
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings

from ..backends.precision import graphc_x64

__all__ = ["QUICK_OPTIONS", "TieredCall", "tier", "tiered_from_env"]

# XLA's LLVM codegen at -O0: about half the CPU compile time of the default (-O3) on
# ResNet-20; steps run slower until the switch (docs/tiered_compilation.md)
QUICK_OPTIONS = {"xla_backend_optimization_level": 0}
_ON = ("1", "on", "true", "yes")


def tiered_from_env() -> bool:
    """``GRAPHC_TIERED``: ``1``/``on``/``true``/``yes`` turns tiering on (default off)."""
    return os.environ.get("GRAPHC_TIERED", "0").strip().lower() in _ON


class TieredCall:
    """Stands in for a step's jitted function (``CompiledStep._jitted``): called with the
    same arguments, it runs the quick executable until the optimised one is ready.

    ``tier``: which executable ran the last call (``"quick"``, ``"full"`` or ``"jit"``
    after a fallback); ``switched_at``: the call count at which the optimised one took
    over (None before). ``quick_steps``: at most that many calls run on the quick
    executable; the next one waits for the optimised one. ``full_options``: compiler
    options of the optimised executable (tests pass one XLA refuses, for the fallback).
    """

    def __init__(self, jitted, quick_options: dict | None = None,
                 full_options: dict | None = None, quick_steps: int | None = None):
        self._jitted = jitted
        self.quick_options = dict(QUICK_OPTIONS if quick_options is None else quick_options)
        self.full_options = full_options
        self.quick_steps = quick_steps  # at most this many calls on the quick one (None: any)
        self._full = None  # the optimised Compiled, set by its thread when it succeeds
        self._quick = None
        self._threads: list[threading.Thread] = []
        self._plain = False  # fall back to the jitted function for good
        self.tier = None
        self.calls = 0
        self.switched_at = None

    # jax.jit's inspection API (CompiledStep.lower and friends)
    def lower(self, *args, **kwargs):
        return self._jitted.lower(*args, **kwargs)

    def _cache_size(self) -> int:
        """Signatures compiled (as jax.jit's): the tiered one counts once, both tiers."""
        return self._jitted._cache_size() + (1 if self._threads else 0)

    def __call__(self, *args):
        self.calls += 1
        full = self._full
        if full is not None:
            if self.tier != "full":
                self.tier, self.switched_at = "full", self.calls
            return full(*args)
        if self._plain:
            self.tier = "jit"
            return self._jitted(*args)
        if not self._threads:
            self._start(args)
            self.calls -= 1
            return self(*args)
        if self.quick_steps is not None and self.calls > self.quick_steps:
            self._join()  # quick steps used up: wait for the optimised executable
            if self._full is not None:
                self.calls -= 1
                return self(*args)
        self.tier = "quick"
        return self._quick(*args)

    def _start(self, args) -> None:
        """Trace and lower once (as jit would), compile the quick executable here, then the
        optimised one on a thread. One after the other: on a 2-core CPU two concurrent
        compiles slowed the quick one 3x (ResNet-20, docs/tiered_compilation.md)."""
        lowered = self._jitted.lower(*args)
        try:
            with graphc_x64():
                self._quick = lowered.compile(compiler_options=self.quick_options)
        except Exception:  # noqa: BLE001 (the optimised executable still comes)
            self._quick = None
        thread = threading.Thread(target=self._compile_full, args=(lowered,), daemon=True,
                                  name="graphc-tiered-compile")
        self._threads.append(thread)
        atexit.register(self._join)
        thread.start()
        if self._quick is None:
            self._join()  # the quick compile failed: wait for the optimised one
            # both failed: jit compiles (and raises) as it would without tiers
            self._plain = self._full is None

    def _compile_full(self, lowered) -> None:
        try:
            with graphc_x64():  # thread-local: the user's threads keep their setting
                if self.full_options:
                    compiled = lowered.compile(compiler_options=self.full_options)
                else:
                    compiled = lowered.compile()
            self._full = compiled
        except Exception as exc:  # the quick executable keeps the run going
            warnings.warn(f"graphc: the optimised compile of a step failed ({exc}); it keeps "
                          "running on the quickly compiled executable "
                          "(GRAPHC_TIERED=0 turns tiered compilation off)", stacklevel=1)
        finally:  # nothing left to join: let the step (and its graph) be freed with it
            atexit.unregister(self._join)

    @property
    def compiling(self) -> bool:
        """Whether a compile thread is still running."""
        return any(t.is_alive() for t in self._threads)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the compile threads; True when none is left running."""
        self._join(timeout)
        return not self.compiling

    def _join(self, timeout: float | None = None) -> None:
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(timeout)

    def close(self) -> None:
        """Join the compile threads (they cannot be interrupted inside XLA)."""
        self._join()
        atexit.unregister(self._join)


def tier(step, setting: bool | int = True,
         quick_options: dict | None = None) -> TieredCall | None:
    """Make ``step`` (a one-device CompiledStep) compile in tiers; returns its TieredCall,
    or None for a step kind that keeps plain jit (data-parallel steps). ``setting``:
    ``Executor.tiered``: True (quick steps until the switch) or N (at most N quick steps)."""
    from ..backends.jax import CompiledStep
    if type(step) is not CompiledStep:
        return None
    quick_steps = None if setting is True else int(setting)
    call = TieredCall(step._jitted, quick_options, quick_steps=quick_steps)
    step._jitted = call
    return call
