"""The state guard of a compiled step: checks the scope's arrays against the state types the
step declares, skipping arrays it checked (or the step produced) on the previous run.

Also holds the per-compile facts a run's commit and fetches need (which updated variables
a Reduce-mode step holds as rows, how fetches convert), so a run does not walk Values.
"""

from __future__ import annotations

import operator
import weakref

import jax.numpy as jnp

from ..backends.jax import CompiledStep, DataParallelStep
from ..ir.errors import GraphcError

__all__ = ["StateGuard"]


def _widens(held, declared) -> bool:
    """An integer array the declared integer type holds exactly (int32 into int64)."""
    return held != declared and jnp.issubdtype(held, jnp.integer) and \
        jnp.issubdtype(declared, jnp.integer) and jnp.can_cast(held, declared, "safe")


class StateGuard:
    """Checks the scope's arrays against the state types a compiled step declares.

    jax arrays are immutable, so an array already checked, or produced by the step itself
    (its outputs have the declared types), needs no second check: the guard remembers the
    scope (weakly) and the arrays of the last run and checks only when one has changed (or
    another scope runs the step: then every array is checked).
    For a data-parallel step the changed arrays are also placed on its devices first (whole
    tensors of sharded variables become their rows), so the check sees what the step gets.
    """

    def __init__(self, step: CompiledStep):
        self.step = step
        self.values = step.updated_inputs + step.readonly_inputs
        self.dtypes = [jnp.dtype(v.type.dtype) for v in self.values]
        self.shapes = [step.global_type_shape(v) for v in self.values]
        # A persistable whose last version has another type than its input is checked anew.
        self.outputs_match = all(out.type == v.type for out, v in
                                 zip(step.updated_outputs, step.updated_inputs))
        self.last_scope: weakref.ref | None = None  # the scope of the last run
        self.last: tuple = ()  # the arrays it ran with (or the step left there)
        # Per-compile facts the commit and the fetches need, so a run does not walk Values:
        # the updated variables held as a Reduce-mode step's rows, and how fetches convert.
        self.updated_shards = [(v.var.name, v.var.shard) for v in step.updated_inputs]
        self.any_sharded = any(shard is not None for _, shard in self.updated_shards)
        # the layout each state variable has in this step's arguments (None: whole)
        self.wanted_shards = [(v.var.name, v.var.shard) for v in self.values]
        self.fetch_rows = [v.var.shard[1] if v.var.shard is not None and not (
            isinstance(step, DataParallelStep) and step.num_iterations > 1) else None
            for v in step.fetch_values]
        self.blocks = step.nranks if isinstance(step, DataParallelStep) else 1

    def check(self, scope, arrays: list) -> list:
        """The arrays to run with (placed, for a data-parallel step), after checking."""
        ref = self.last_scope
        if ref is not None and ref() is scope and not any(map(operator.is_not, arrays,
                                                              self.last)):
            return arrays
        if isinstance(self.step, DataParallelStep):
            arrays = self.step.place_state(self.values, arrays)
        widened = []
        for i, (v, dtype, shape, arr) in enumerate(zip(self.values, self.dtypes, self.shapes,
                                                        arrays)):
            if arr.shape == shape and _widens(arr.dtype, dtype):
                widened.append(i)
            elif arr.dtype != dtype or arr.shape != shape:
                raise GraphcError(
                    f"scope variable '{v.var.name}' holds {arr.dtype}{list(arr.shape)} but "
                    f"the program declares {v.type}")
        if widened:
            # ints set into the scope narrower than declared (TDM's int64 tree tables set
            # from int32 arrays): Paddle's kernels read either; the step takes the declared
            # type, so the scope now holds the value widened, exactly
            arrays = list(arrays)
            for i in widened:
                arrays[i] = jnp.asarray(arrays[i]).astype(self.dtypes[i])
            scope.commit([self.values[i].var.name for i in widened],
                         [arrays[i] for i in widened])
        self.last_scope, self.last = weakref.ref(scope), tuple(arrays)
        return arrays

    def ran(self, new_updated: tuple, readonly: tuple) -> None:
        """After a call with the arrays ``check`` passed: remember what the scope now holds."""
        if self.outputs_match:
            self.last = new_updated + readonly
        else:
            self.last_scope = None
