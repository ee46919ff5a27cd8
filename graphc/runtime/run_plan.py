"""The run plan of one compiled step: what each ``Executor.run`` of it does after the feeds
are checked (gather the state, call the step, commit, read the data checks, convert the
fetches), with every fact that depends only on the step worked out once, at compile time.

The scope changes only as a successful run allows: donated buffers are replaced by the
step's outputs (which equal the old values when the data checks refused the step), and the
run counter and created state are committed only after the checks passed (docs/errors.md).
"""

from __future__ import annotations

import math
import operator
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ..backends.data_checks import COUNT, HostChecks
from ..backends.jax import CompiledStep
from ..backends.lod import LoDArray
from ..ir.errors import GraphcError
from ..ir.variable import Variable
from .data_refusal import raise_if_refused
from .feeds import FeedError
from .fetches import convert_fetches, writable
from .lod_pack import PackedFeeds
from .run_as import DATA_PARALLEL
from .state_guard import StateGuard

__all__ = ["RunPlan"]

_UNTRACED = object()  # a RunPlan's host checks before its step is traced
_LISTS = (list, tuple)


def _taker(names) -> object:
    """``fn(mapping)``: the values of ``names`` as a tuple (KeyError for a missing one)."""
    names = tuple(names)
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        one = operator.itemgetter(names[0])
        return lambda mapping: (one(mapping),)
    return lambda mapping: ()


class RunPlan:
    """Runs one compiled ``step`` of a prepared program whose lowered graph is ``graph``."""

    __slots__ = ("step", "graph", "guard", "state_names", "updated_names", "feed_names",
                 "split", "iterations", "dense", "host", "direct")

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
        # the checks of fed arrays made here (data_checks.HostChecks): known once the step is
        # traced, which its first run does before calling it
        self.host: HostChecks | None | object = _UNTRACED if step.host_feeds else None
        self.direct = type(step) is CompiledStep  # called as its jitted function (see execute)

    def execute(self, program, feeds: dict, scope, return_numpy: bool, device=None) -> list:
        """One run with checked ``feeds`` ({name: array}); ``device``: the jax device to run
        on when it is not the default one. Called inside ``graphc_x64`` (Executor.run)."""
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
        host = self.host
        if host is not None:  # before the call: a refused feed changes nothing
            if host is _UNTRACED:
                step.trace(updated, readonly, feed_arrays, count)
                host = self.host = step.host_checker
            if host is not None:
                host(feeds)
        rows = self._rows(feeds) if type(feeds) is PackedFeeds and device is None and \
            self.direct and self.iterations == 1 and step._jitted is step._traceable else None
        if rows is not None:  # the LoD feeds as one token buffer (lod_pack.PackedFeeds)
            new_updated, created, fetched, checks = step.call_lod_rows(
                updated, readonly, *rows, count)
        elif device is None and self.direct:  # its jitted function (run() holds x64 on)
            new_updated, created, fetched, checks = step._jitted(
                updated, readonly, feed_arrays, count if step.uses_step_counter else None)
        elif device is None:
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
            return [writable(a) for a in fetched]
        if self.dense is None:
            self.dense = guard.blocks == 1 and self.iterations == 1 and all(
                r is None and isinstance(a, jax.Array) for a, r in zip(fetched, guard.fetch_rows))
        return convert_fetches(fetched, guard.fetch_rows, guard.blocks, self.iterations,
                               return_numpy)

    def steady(self, program, fetch_names: tuple, feed_spec: tuple):
        """``execute`` for repeated runs with fewer calls: ``fn(program, feeds, fetch_list,
        scope)`` runs the same steps (state gathered and guarded, host checks, one call, the
        data checks read before anything is committed) for a plain one-device step whose
        state and fetches are whole dense arrays, with numpy fetches, when the run matches
        what this plan was accepted for: ``program`` at its current version, not bound to a
        CompiledProgram, fetch entries naming ``fetch_names`` and a feed dict of
        ``feed_spec`` (``feed_plan.feed_key``'s (name, type, dtype, shape) per feed). ``fn``
        returns None, having changed nothing, where the run needs the general path (another
        key, stacked or sharded state, a variable the scope lacks). This returns None while
        its first run has not shown the fetches, False for a plan that always takes
        ``execute``.

        Why: in a training loop each Python call beside the step's dispatch costs several
        times what it costs alone (measured with benchmarks/bench_step_overhead.py), so the
        steady path is one function over local names; the run's key is matched field by
        field rather than built and hashed (numpy hashes a dtype anew each time), x64 is
        entered for the call alone, and the run counter is read and written in the
        scope's weak dict by a weak reference made once."""
        step, guard = self.step, self.guard
        if self.dense is None or self.host is _UNTRACED:
            return None
        if not (self.direct and self.dense and self.iterations == 1) or guard.any_sharded \
                or step.created_names:
            return False
        split, updated_names, host = self.split, tuple(self.updated_names), self.host
        # each a tuple in one C call (operator.itemgetter), not a comprehension and slices
        take_updated, take_readonly = _taker(updated_names), _taker(self.state_names[split:])
        take_fed = _taker(self.feed_names)
        counted, checked, is_not = step.uses_step_counter, bool(step.check_sites), operator.is_not
        matched = guard.outputs_match
        version, nfetch, nfeed = program.version, len(fetch_names), len(feed_spec)
        fetch_pairs = tuple(enumerate(fetch_names))
        one_fetch = fetch_names[0] if nfetch == 1 else None
        if host is not None and all(kind is np.ndarray for _, kind, _, _ in feed_spec):
            host = host.for_sizes({n: math.prod(shape) for n, _, _, shape in feed_spec})
        ref, bound = weakref.ref(program), DATA_PARALLEL
        # x64 for the call alone (backends/precision.py), set and put back directly: JAX's
        # context manager is three Python calls around the same two
        x64 = jax.enable_x64
        swap, put_back = getattr(x64, "swap_local", None), getattr(x64, "set_local", None)

        def run(program, feeds: dict, fetch_list, scope):
            # the key this plan was accepted for, matched field by field
            if program.version != version or bound.by_id and id(program) in bound.by_id:
                return None
            if fetch_list:
                if type(fetch_list) not in _LISTS or len(fetch_list) != nfetch:
                    return None
                if one_fetch is not None:
                    f = fetch_list[0]
                    if f is not one_fetch and (f.name if type(f) is Variable else f
                                               if type(f) is str else None) != one_fetch:
                        return None
                else:
                    for i, name in fetch_pairs:
                        f = fetch_list[i]
                        if f is not name and (f.name if type(f) is Variable else f
                                              if type(f) is str else None) != name:
                            return None
            elif nfetch:
                return None
            if len(feeds) != nfeed:
                return None
            for name, kind, dtype, shape in feed_spec:
                v = feeds.get(name)
                if type(v) is not kind or v.shape != shape or (
                        v.dtype is not dtype and v.dtype != dtype):
                    return None
            held = scope.steady_state()
            if held is None:
                return None
            arrays, counts = held
            count = counts.get(ref)  # (None: no run of it in this scope yet)
            if count is None:
                return None
            try:
                updated, readonly = take_updated(arrays), take_readonly(arrays)
            except KeyError:
                return None
            fed = take_fed(feeds)  # (the names matched the key: all there)
            inputs = updated + readonly
            last = guard.last_scope
            if last is None or last() is not scope or any(map(is_not, inputs, guard.last)):
                if guard.check(scope, inputs) is not inputs:
                    return None  # arrays it placed or widened: the full run takes them
            if host is not None:
                host(feeds)
            if swap is None:
                with x64(True):
                    new, _, fetched, checks = step._jitted(updated, readonly, fed,
                                                           count if counted else None)
            else:
                before = swap(True)
                try:
                    new, _, fetched, checks = step._jitted(updated, readonly, fed,
                                                           count if counted else None)
                finally:
                    put_back(before)
            # (the donated buffers are gone; no stacked rows: steady_state said so)
            dict.update(arrays, zip(updated_names, new))
            if matched:  # guard.ran, inline
                guard.last = new + readonly
            else:
                guard.last_scope = None
            if checked:
                summary = np.asarray(checks)
                if any(summary[:, COUNT].tolist()):
                    raise_if_refused(step, self, summary)
            counts[ref] = count + 1  # (the key is there: its entry keeps the scope's ref)
            return [writable(a) for a in fetched]

        return run

    def _rows(self, feeds: PackedFeeds) -> tuple | None:
        """(the other feeds, tokens, lengths, layout) for ``CompiledStep.call_lod_rows``
        when every LoD feed of the step is a row of ``feeds.stack``; None otherwise."""
        names, tokens, lengths = feeds.stack
        row = {n: i for i, n in enumerate(names)}
        layout, dense = [], []
        for i, name in enumerate(self.feed_names):
            j = row.get(name)
            if j is not None:
                layout.append((i, j))
            elif type(feeds[name]) is LoDArray:  # (a LoD feed packed on its own)
                return None
            else:
                dense.append(feeds[name])
        return (tuple(dense), tokens, lengths, tuple(layout)) if layout else None

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
