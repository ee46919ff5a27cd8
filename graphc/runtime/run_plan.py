"""The run plan of one compiled step: what each ``Executor.run`` of it does after the feeds
are checked (gather the state, call the step, commit, read the data checks, convert the
fetches), with every fact that depends only on the step worked out once, at compile time.

The scope changes only as a successful run allows: donated buffers are replaced by the
step's outputs (which equal the old values when the data checks refused the step), and the
run counter and created state are committed only after the checks passed (docs/errors.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..backends.data_checks import COUNT
from ..backends.jax import CompiledStep
from ..ir.errors import GraphcError
from .data_refusal import raise_if_refused
from .feeds import FeedError
from .fetches import convert_fetches
from .state_guard import StateGuard

__all__ = ["RunPlan"]


class RunPlan:
    """Runs one compiled ``step`` of a prepared program whose lowered graph is ``graph``."""

    __slots__ = ("step", "graph", "guard", "state_names", "updated_names", "feed_names",
                 "split", "iterations", "dense")

    def __init__(self, step: CompiledStep, graph):
        self.step, self.graph = step, graph
        self.guard = StateGuard(step)
        self.state_names = step.state_names
        self.updated_names = step.updated_names
        self.feed_names = step.feed_names
        self.split = len(step.updated_names)
        self.iterations = step.num_iterations
        # whether every fetch is a whole dense array (one type per compiled step: None until
        # its first run shows it), so a numpy fetch is one np.asarray
        self.dense: bool | None = None

    def execute(self, program, feeds: dict, scope, return_numpy: bool, device=None) -> list:
        """One run with checked ``feeds`` ({name: array}); ``device``: the jax device to run
        on when it is not the default one."""
        step, guard = self.step, self.guard
        names = self.state_names
        # (a variable held as a Reduce-mode step's rows comes whole if this step wants that)
        try:
            inputs = scope.gather(names, guard.wanted_shards)
        except KeyError:
            inputs = self._gather_first(scope)
        placed = guard.check(scope, inputs)
        if placed is not inputs:  # moved onto a data-parallel step's devices: keep them there
            scope.commit(names, placed)
            inputs = placed
        split = self.split
        updated, readonly = tuple(inputs[:split]), tuple(inputs[split:])
        try:
            feed_arrays = tuple([feeds[name] for name in self.feed_names])
        except KeyError as exc:  # a feed that no op reads but the fetch list names
            raise FeedError(f"missing feed {exc}; it is fetched") from None
        count = scope.run_count(program)
        if device is None:
            new_updated, created, fetched, checks = step(updated, readonly, feed_arrays, count)
        else:
            with jax.default_device(device):
                new_updated, created, fetched, checks = step(updated, readonly, feed_arrays,
                                                             count)
        # The old buffers were donated: the new ones take their place even when the data
        # checks refuse the step (it then returned the old values unchanged).
        scope.commit(self.updated_names, new_updated)
        if guard.any_sharded or scope.has_shards():
            scope.set_shards(guard.updated_shards)
        guard.ran(new_updated, readonly)
        if step.check_sites:  # one small read-back, before anything else is committed
            host = np.asarray(checks)
            if any(host[:, COUNT].tolist()):  # (a list scans faster than numpy's any)
                raise_if_refused(step, self, host)
        # Only now, after the step succeeded, does the scope change.
        scope.set_run_count(program, count + self.iterations)
        if step.created_names:
            scope.commit_new(step.created_names, created)
        if return_numpy and self.dense:  # every fetch a whole dense array (known after a run)
            return [np.asarray(a) for a in fetched]
        if self.dense is None:
            self.dense = guard.blocks == 1 and self.iterations == 1 and all(
                r is None and isinstance(a, jax.Array) for a, r in zip(fetched, guard.fetch_rows))
        return convert_fetches(fetched, guard.fetch_rows, guard.blocks, self.iterations,
                               return_numpy)

    def _gather_first(self, scope) -> list:
        """The state of a first run: state a pass created starts at its recorded value, and
        rolled parameters are stacked or split as this step reads them."""
        step = self.step
        for v in step.updated_inputs + step.readonly_inputs:
            init = v.var.extra.get("initial_value")  # amp's loss scale and step counters
            if init is not None and not scope.holds(v.var.name):
                scope.commit_new((v.var.name,), (jnp.full(v.type.shape, init, v.type.dtype),))
        scope.prepare_stacked(step)
        try:
            return scope.gather(self.state_names, self.guard.wanted_shards)
        except KeyError as exc:
            raise GraphcError(f"variable {exc} is not initialised in the scope; run the "
                              "startup program first (exe.run(startup_program))") from None
