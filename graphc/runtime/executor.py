"""The Executor: lowers a Program once, compiles one XLA step per feed signature, and runs
it against a Scope. Feeds are checked first; the scope changes only when a run succeeds.

A CompiledProgram's ExecutionStrategy is honoured as follows on this (XLA) path:
``num_iteration_per_run = K`` runs K steps in one XLA call (feeds: a list of K dicts, or
arrays stacked on a new leading K axis; fetches come back stacked ``[K, ...]``).
``num_iteration_per_drop_scope`` has nothing to do: a step's temporaries live inside the
one XLA call and are freed when it returns, so none are kept between runs (as Paddle with
``num_iteration_per_drop_scope = 1``); only persistables stay in the scope.
``num_threads`` sizes the interpreter's op-level thread pool
(``backends.interpreter.run_graph(..., num_threads=N)``); XLA's CPU runtime schedules its
own threads inside the one call.

Data checks: a step whose rules found data they must refuse (a label outside [0, classes),
an embedding id outside the table: backends.data_checks) raises DataError naming the
variable, the op and one offending value, and commits nothing. Reading the check waits for
the step to finish (as fetching does); ``Executor(check_data=False)`` or the environment
variable ``GRAPHC_CHECK_DATA=0`` builds steps without them (see docs/errors.md).

Per-step cost: a run whose feed dict holds arrays of a (names, types, dtypes, shapes) already
accepted for the program's current version takes a cached plan: the feed checks are
functions of exactly that key, so their verdict and the compiled step are looked up, not
recomputed (benchmarks/bench_step_overhead.py). Hooks for other layers (registered by them,
never imported from here): ``add_feed_provider`` (a run with ``feed=None`` asks them for a
feed: graphc.io's non-iterable DataLoaders) and ``set_collective_wait`` (a context every
run enters, for graphc.distributed's collective deadline in multi-process jobs).
"""

from __future__ import annotations

import operator
import os
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

import jax
import jax.numpy as jnp
import numpy as np

from ..backends.data_checks import COUNT, ITERATION, POSITION, VALUE, DataError
from ..backends.jax import CompiledStep, DataParallelStep, from_rows
from ..backends.precision import is_narrowed, with_graphc_x64
from ..backends.selected_rows import SelectedRows
from ..ir.default_programs import default_main_program
from ..ir.errors import GraphcError
from ..ir.graph import Graph
from ..ir.program import Program, Variable
from ..ir.types import dims_compatible
from .compile_cache import ensure_compilation_cache
from .feeds import FeedError, convert_feed
from .lod import (
    LoDArray,
    PackedLoD,
    concat_lod,
    feed_signature,
    pack_feed,
    pack_stacked,
    unpack_fetch,
)
from .places import CPUPlace, Place
from .run_as import DATA_PARALLEL, LoopProgram
from .scope import Scope, global_scope
from .stacked_state import prepare_for_step as prepare_stacked_state
from .startup import run_grouped_startup

__all__ = ["DataError", "Executor", "FeedError", "FetchError", "add_feed_provider",
           "set_collective_wait"]


class FetchError(GraphcError):
    """A fetch target is not computed by the program."""


_ARRAY_TYPES = (np.ndarray, jax.Array)
_PLANS_PER_PROGRAM = 64  # cached feed keys per prepared program (cleared when exceeded)


# -- hooks: other layers register here (the runtime imports none of them) ----------------
# ``provider(program_or_compiled) -> feed or None``, asked in order by a run given feed=None.
_FEED_PROVIDERS: list[Callable] = []
# ``wait(label) -> context manager`` entered around every run; None: nothing to enter.
_COLLECTIVE_WAIT: list[Callable | None] = [None]


def add_feed_provider(provider: Callable) -> None:
    """Register ``provider(program_or_compiled)``: ``Executor.run(program)`` with
    ``feed=None`` takes the first feed a provider returns (None: it has nothing for that
    program). graphc.io registers its non-iterable DataLoaders (Paddle's reader ops) here."""
    if provider not in _FEED_PROVIDERS:
        _FEED_PROVIDERS.append(provider)


def set_collective_wait(wait: Callable | None) -> None:
    """Every ``Executor.run`` runs inside ``wait("Executor.run")`` (a context manager;
    None: no context). graphc.distributed sets its collective-deadline watchdog here when a
    process joins a job of several, since a step's collectives may be waited on anywhere in
    a run (the call, the data checks, the fetches); a single process pays nothing."""
    _COLLECTIVE_WAIT[0] = wait


def _provided_feed(program):
    for provider in _FEED_PROVIDERS:
        feed = provider(program)
        if feed is not None:
            return feed
    return None


def _feed_key(feed: dict) -> tuple | None:
    """What the feed checks of a dict of arrays depend on: each feed's name, type, dtype and
    shape (None when a value is not array-like: it takes the full checks every time)."""
    try:
        return tuple([(name, type(v), v.dtype, v.shape) for name, v in feed.items()])
    except AttributeError:
        return None


class _StateGuard:
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
        self._scope_ref: weakref.ref | None = None  # the scope of the last run
        self._last: tuple = ()  # the arrays it ran with (or the step left there)
        # Per-compile facts the commit and the fetches need, so a run does not walk Values:
        # the updated variables held as a Reduce-mode step's rows, and how fetches convert.
        self.updated_shards = [(v.var.name, v.var.shard) for v in step.updated_inputs]
        self.any_sharded = any(shard is not None for _, shard in self.updated_shards)
        self.fetch_rows = [v.var.shard[1] if v.var.shard is not None and not (
            isinstance(step, DataParallelStep) and step.num_iterations > 1) else None
            for v in step.fetch_values]
        self.blocks = step.nranks if isinstance(step, DataParallelStep) else 1

    def check(self, scope: Scope, arrays: list) -> list:
        """The arrays to run with (placed, for a data-parallel step), after checking."""
        ref = self._scope_ref
        if ref is not None and ref() is scope and not any(map(operator.is_not, arrays,
                                                              self._last)):
            return arrays
        if isinstance(self.step, DataParallelStep):
            arrays = self.step.place_state(self.values, arrays)
        for v, dtype, shape, arr in zip(self.values, self.dtypes, self.shapes, arrays):
            if arr.dtype != dtype or arr.shape != shape:
                raise GraphcError(
                    f"scope variable '{v.var.name}' holds {arr.dtype}{list(arr.shape)} but "
                    f"the program declares {v.type}")
        self._scope_ref, self._last = weakref.ref(scope), tuple(arrays)
        return arrays

    def ran(self, new_updated: tuple, readonly: tuple) -> None:
        """After a call with the arrays ``check`` passed: remember what the scope now holds."""
        if self.outputs_match:
            self._last = new_updated + readonly
        else:
            self._scope_ref = None


@dataclass
class _Prepared:
    """A lowered program and its compiled steps, valid while the program's version holds."""

    version: int
    graph: Graph
    feeds: dict[str, object]  # feed var name -> graph input Value (used ones)
    steps: dict[tuple, CompiledStep] = field(default_factory=dict)
    state_guards: dict[CompiledStep, _StateGuard] = field(default_factory=dict)
    # (fetch names, _feed_key) -> (feed signature, step): feed dicts already accepted
    plans: dict[tuple, tuple] = field(default_factory=dict)

    devices: list | None = None  # data-parallel devices (None: this executor's one device)
    inter_nranks: int = 0  # hierarchical all-reduce group size (0: flat)
    feed_parts: int = 1  # devices this process feeds (its batch splits over them)

    def __post_init__(self):
        self.feed_dtypes = {n: jnp.dtype(v.type.dtype) for n, v in self.feeds.items()}
        self.read_feeds = [n for n, v in self.feeds.items() if self.graph.nx.succ[v]]


def _iterations(compiled) -> int:
    return 1 if compiled is None else compiled.exec_strategy.num_iteration_per_run


def _sig_text(sig: tuple) -> str:
    return ", ".join(f"'{n}' {list(shape)}" for n, shape in sig) or "no feeds"


def _fetched(value, iterations: int, numpy: bool):
    """A fetched value, as numpy arrays when ``numpy``. A row-sparse one stays a SelectedRows,
    one per iteration when a call ran several (its rows and values came back stacked)."""
    if not isinstance(value, SelectedRows):
        return np.asarray(value) if numpy else value
    if numpy:
        value = value.numpy()
    if iterations > 1:
        return [SelectedRows(value.rows[k], value.values[k], value.height)
                for k in range(iterations)]
    return value


def _fetch_name(item) -> str:
    if isinstance(item, Variable):
        return item.name
    if isinstance(item, str):
        return item
    raise FetchError(f"fetch_list entries must be Variables or names, got {type(item).__name__}")


def _raise_if_refused(step: CompiledStep, prep: _Prepared, checks: np.ndarray) -> None:
    """DataError for the first data check that found a bad value (see backends.data_checks):
    names the feed it came from, or the op's input variable and the op's source line."""
    bad = np.flatnonzero(checks[:, COUNT])
    if not bad.size:
        return
    i = int(bad[0])
    site, row = step.check_sites[i], checks[i]
    op = site.op
    value = op.input(site.slot) if op is not None else None
    shape = list(site.bad)
    if isinstance(step, DataParallelStep) and shape:
        shape[0] *= step.nranks  # positions count in the global batch
    index = [int(k) for k in np.unravel_index(int(row[POSITION]), shape)] if shape else []
    if value is not None and value.var.kind == "feed" and value in prep.graph.inputs:
        culprit = f"feed '{value.var.name}'"
    elif value is not None:
        culprit = f"variable '{value.var.name}' (input {site.slot} of {site.where})"
    else:
        culprit = f"input {site.slot} of {site.where}"
    where = f" in iteration {int(row[ITERATION])}" if step.num_iterations > 1 else ""
    more = f" ({int(row[COUNT])} such values)" if row[COUNT] > 1 else ""
    raise DataError(f"{culprit} holds {int(row[VALUE])} at {index}{where}{more}: "
                    f"{site.where} expects {site.expected}. The step was "
                    "refused: nothing in the scope changed")


def _one_device(program: Program):
    """The CompiledProgram a plain Program runs as: the default strategies, one device."""
    from .compiled_program import CompiledProgram
    return CompiledProgram(program)


class Executor:
    """``Executor(place).run(program, feed={...}, fetch_list=[...], scope=None)``."""

    def __init__(self, place: Place | None = None, check_data: bool | None = None):
        self.place = place or CPUPlace()
        # Data checks (see the module doc): on unless turned off here or by the environment.
        if check_data is None:
            check_data = os.environ.get("GRAPHC_CHECK_DATA", "1").strip().lower() not in (
                "0", "false", "off", "no")
        self.check_data = bool(check_data)
        self._device = self.place.jax_device()
        # Run where the place says; only a non-default device needs the (small) context cost.
        self._on_default_device = self._device == jax.devices()[0]
        # Held weakly: a program the user drops is freed with its compiled steps. For a
        # CompiledProgram the passes depend on the fetch list (fetched values are kept
        # alive), so entries are per fetch list there: {key: (version, {fetch: _Prepared})}.
        self._prepared: WeakKeyDictionary = WeakKeyDictionary()

    # -- preparation (cached) ----------------------------------------------------------
    def _prepare(self, program: Program, compiled=None, fetch_names: tuple = ()) -> _Prepared:
        owner = compiled if compiled is not None else program
        entry = self._prepared.get(owner)
        if entry is None or entry[0] != program.version:
            entry = (program.version, {})
            self._prepared[owner] = entry
        key = fetch_names
        prep = entry[1].get(key)
        if prep is None:
            # a plain Program compiles as CompiledProgram(program) would on one device: the
            # default BuildStrategy's passes, all exact (dce, roll-repeated-layers: a deep
            # stack compiles as one loop), keeping the fetched values
            graph = (compiled or _one_device(program))._build_graph(fetch_names)
            feeds = {v.var.name: v for v in graph.inputs if v.var.kind == "feed"}
            prep = _Prepared(program.version, graph, feeds)
            if compiled is not None and compiled.devices:
                prep.devices, prep.inter_nranks = compiled.devices, compiled.inter_nranks
                # a process feeds only its own devices (all of them in one process)
                me = jax.process_index()
                prep.feed_parts = sum(d.process_index == me for d in compiled.devices)
            entry[1][key] = prep
        return prep

    def _step(self, prep: _Prepared, fetch_names: tuple, feed_sig: tuple,
              iterations: int = 1) -> CompiledStep:
        key = (fetch_names, feed_sig) if iterations == 1 else (fetch_names, feed_sig, iterations)
        step = prep.steps.get(key)
        if step is None:
            ensure_compilation_cache()  # graphc's one global JAX setting (compile_cache.py)
            for name in fetch_names:
                if name not in prep.graph.vars:
                    raise FetchError(f"cannot fetch '{name}': it is not a variable computed or "
                                     "read by this program")
            devices = prep.devices
            if devices:
                step = DataParallelStep(prep.graph, fetch_names, devices, prep.inter_nranks,
                                        donate=True, num_iterations=iterations,
                                        check_data=self.check_data)
            else:
                step = CompiledStep(prep.graph, fetch_names, donate=True,
                                    num_iterations=iterations, check_data=self.check_data)
            step.feed_shapes = dict(feed_sig)
            prep.steps[key] = step
            prep.state_guards[step] = _StateGuard(step)
        return step

    # -- feeds ---------------------------------------------------------------------------
    def _check_feeds(self, prep: _Prepared, program: Program, feed,
                     iterations: int = 1) -> tuple[dict, tuple]:
        """Checked feed arrays and their signature; with ``iterations = K > 1`` every array
        carries K steps on a new leading axis (a list of K dicts is stacked into that)."""
        if isinstance(feed, list | tuple) and any(isinstance(f, dict) for f in feed):
            if iterations == 1 and prep.devices:
                return self._check_per_device(prep, program, feed)
            if iterations == 1:
                raise FeedError(f"got a list of {len(feed)} feed dicts, but this program runs "
                                "one iteration per call; give one dict, or run a "
                                "CompiledProgram whose exec_strategy.num_iteration_per_run "
                                f"is {len(feed)}")
            return self._stack_feeds(prep, program, feed, iterations)
        if iterations > 1 and feed is not None and not isinstance(feed, Mapping):
            raise FeedError(f"num_iteration_per_run is {iterations}: feed must be a list of "
                            f"{iterations} feed dicts or a dict of arrays stacked on a new "
                            f"leading axis of {iterations}, got {type(feed).__name__}")
        return self._check_feed_dict(prep, program, dict(feed or {}),
                                     iterations if iterations > 1 else None)

    def _check_per_device(self, prep: _Prepared, program: Program, feeds):
        """Paddle's per-device feed list: one dict per device, joined into one global batch
        (device i gets dict i's samples)."""
        n = prep.feed_parts
        if len(feeds) != n:
            raise FeedError(f"got a list of {len(feeds)} feed dicts for {n} devices; give one "
                            "dict per device, or one dict whose batch splits evenly")
        checked = []
        for i, feed in enumerate(feeds):
            if not isinstance(feed, dict):
                raise FeedError(f"feed list item {i} is a {type(feed).__name__}, not a dict")
        # LoD feeds: the devices' sequences joined, then packed with device i's in block i
        lod = {n: concat_lod(n, [f[n] for f in feeds]) for n in feeds[0]
               if n in prep.feeds and prep.feeds[n].type.lod_level}
        for i, feed in enumerate(feeds):
            dense = {n: v for n, v in feed.items() if n not in lod} if lod else feed
            try:
                checked.append(self._check_feed_dict(prep, program, dense, None, split=False,
                                                     elsewhere=tuple(lod)))
            except FeedError as exc:
                raise FeedError(f"feed dict of device {i}: {exc}") from None
        first = checked[0][1]
        for i, (_, sig) in enumerate(checked[1:], 1):
            if sig != first:
                raise FeedError(f"the feed dicts of devices 0 and {i} differ in names or shapes "
                                f"({_sig_text(first)} vs {_sig_text(sig)}); every device must "
                                "get the same amount of data")
        arrays = {name: np.concatenate([np.asarray(c[0][name]) for c in checked])
                  for name in checked[0][0]}
        for name, tensor in lod.items():
            arrays[name] = pack_feed(name, tensor, prep.feeds[name].type,
                                     prep.feed_dtypes[name], n)
        sig = tuple((n_, feed_signature(a)) for n_, a in sorted(arrays.items()))
        return arrays, sig

    def _stack_feeds(self, prep: _Prepared, program: Program, feeds, iterations: int):
        if len(feeds) != iterations:
            raise FeedError(f"num_iteration_per_run is {iterations} but {len(feeds)} feed "
                            "dicts were given")
        checked = []
        for i, feed in enumerate(feeds):
            if not isinstance(feed, dict):
                raise FeedError(f"feed list item {i} is a {type(feed).__name__}, not a dict")
        # LoD feeds: the K batches packed into one common bucket and stacked (runtime/lod.py)
        lod = [n for n in feeds[0] if n in prep.feeds and prep.feeds[n].type.lod_level]
        for i, feed in enumerate(feeds):
            dense = {n: v for n, v in feed.items() if n not in lod} if lod else feed
            try:
                checked.append(self._check_feed_dict(prep, program, dense, None,
                                                     elsewhere=tuple(lod)))
            except FeedError as exc:
                raise FeedError(f"feed dict {i} of {iterations}: {exc}") from None
        first = checked[0][1]
        for i, (_, sig) in enumerate(checked[1:], 1):
            if sig != first:
                raise FeedError(f"feed dicts 0 and {i} differ in names or shapes "
                                f"({_sig_text(first)} vs {_sig_text(sig)}); the {iterations} "
                                "iterations of one call are stacked, so they must agree")
        arrays = {}
        for name in checked[0][0]:
            items = [c[0][name] for c in checked]
            stack = jnp.stack if any(isinstance(a, jax.Array) for a in items) else np.stack
            arrays[name] = stack(items)
        sig = [(n, (iterations, *shape)) for n, shape in first]
        for name in lod:
            if any(name not in f for f in feeds):
                raise FeedError(f"feed '{name}' is missing from some of the {iterations} "
                                "feed dicts of one call")
            arrays[name] = self._lod_feed(prep, name, [f[name] for f in feeds],
                                          prep.feeds[name].type, True, iterations)
            sig.append((name, feed_signature(arrays[name])))
        return arrays, tuple(sorted(sig))

    def _check_feed_dict(self, prep: _Prepared, program: Program, feed: dict,
                         iterations: int | None, split: bool = True,
                         elsewhere: tuple = ()) -> tuple[dict, tuple]:
        arrays = {}
        for name, value in feed.items():
            target = prep.feeds.get(name)
            if target is None:
                if name in prep.graph.vars or program.global_block().has_var(name):
                    raise FeedError(f"feed '{name}' is not a data variable of the program "
                                    "(only variables declared with graphc.data are fed)")
                raise FeedError(f"feed '{name}' is not a variable of the program; data "
                                f"variables are: {sorted(prep.feeds) or 'none'}")
            want = target.type
            if want.lod_level:  # packed into a size bucket here (runtime/lod.py)
                arrays[name] = self._lod_feed(prep, name, value, want, split, iterations)
                continue
            if isinstance(value, _ARRAY_TYPES):
                arr = value
                if arr.dtype != prep.feed_dtypes[name] and isinstance(arr, jax.Array) and \
                        is_narrowed(arr.dtype, prep.feed_dtypes[name]):
                    arr = arr.astype(prep.feed_dtypes[name])  # made by JAX without x64
                if arr.dtype != prep.feed_dtypes[name]:
                    raise FeedError(f"feed '{name}' has dtype {arr.dtype} but the program "
                                    f"declares {want.dtype}")
            else:
                arr = convert_feed(name, value, prep.feed_dtypes[name])
            shape = arr.shape
            if iterations:
                if not shape or shape[0] != iterations:
                    raise FeedError(
                        f"feed '{name}' has shape {list(shape)} but num_iteration_per_run is "
                        f"{iterations}: stack the iterations on a new leading axis, shape "
                        f"[{iterations}, {', '.join(map(str, want.shape))}], or give a list "
                        f"of {iterations} feed dicts")
                shape = shape[1:]
            if not dims_compatible(shape, want.shape):
                per = " per iteration" if iterations is not None else ""
                raise FeedError(f"feed '{name}' has shape {list(shape)}{per} but the program "
                                f"declares {list(want.shape)} (-1 matches any size)")
            if split and prep.devices and (not shape or shape[0] % prep.feed_parts):
                n = prep.feed_parts
                raise FeedError(f"feed '{name}' has batch {shape[0] if shape else '(scalar)'}, "
                                f"which does not split evenly over {n} devices; every device "
                                f"must get the same amount of data (a multiple of {n}), or "
                                f"give a list of {n} feed dicts, one per device")
            if 0 in shape:
                raise FeedError(f"feed '{name}' has shape {list(shape)}: an empty batch; a step "
                                "needs at least one sample (skip empty batches)")
            arrays[name] = arr
        for name in prep.read_feeds:
            if name not in arrays and name not in elsewhere:  # (LoD feeds of a feed list)
                raise FeedError(f"missing feed '{name}' ({prep.feeds[name].type}); the "
                                "program reads it")
        sig = tuple((n, feed_signature(a)) for n, a in sorted(arrays.items()))
        return arrays, sig

    @staticmethod
    def _lod_feed(prep: _Prepared, name: str, value, want, split: bool,
                  iterations: int | None = None) -> LoDArray:
        """A LoD feed as the step's LoDArray; under data parallelism each device gets whole
        sequences; with K iterations per call, K batches share one bucket (docs/lod.md)."""
        if prep.devices and prep.feed_parts != len(prep.devices):
            raise FeedError(f"feed '{name}' is a LoD feed: multi-process data-parallel runs "
                            "do not take LoD feeds yet (the processes would have to agree on "
                            "a bucket every step); run LoD programs in one process")
        parts = prep.feed_parts if prep.devices else 1
        dtype = prep.feed_dtypes[name]
        if isinstance(value, PackedLoD):  # packed ahead of time by a DataLoader
            packed = value.check(name, want, dtype, parts, iterations or 1)
            if packed is not None:
                return packed
            value = value.source  # packed for another placement: pack its batches again
        if iterations:
            if not isinstance(value, list | tuple) or len(value) != iterations:
                raise FeedError(f"feed '{name}' is a LoD feed and num_iteration_per_run is "
                                f"{iterations}: give a list of {iterations} LoDTensors (or a "
                                f"list of {iterations} feed dicts), got "
                                f"{type(value).__name__}")
            return pack_stacked(name, list(value), want, dtype, parts)
        return pack_feed(name, value, want, dtype, parts)

    # -- run -------------------------------------------------------------------------------
    @with_graphc_x64  # graphc's 64-bit types, in graphc's own work only (backends/precision)
    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed",
            fetch_var_name="fetch", scope: Scope | None = None, return_numpy: bool = True,
            use_program_cache: bool = True):
        """Run one step; returns the fetched values (numpy arrays unless return_numpy=False).
        A row-sparse value (an is_sparse embedding's gradient) comes back as a
        ``graphc.SelectedRows`` (rows, values, height); ``np.asarray`` of it is dense.

        For a CompiledProgram whose ``exec_strategy.num_iteration_per_run`` is K > 1, one
        call runs K steps: ``feed`` is a list of K dicts or a dict of arrays with a new
        leading axis of K, and each fetched value comes back stacked per step, ``[K, ...]``.
        The result equals K single runs (state, fetches and dropout masks alike).
        """
        if isinstance(program, LoopProgram) and feed is None and not fetch_list:
            # a program that is a loop of its own: exe.run(pserver_program) serves until the
            # trainers complete (the loop runs the same program with feeds: its update step)
            return program.run_loop(self, scope)
        if feed is None and _FEED_PROVIDERS:
            feed = _provided_feed(program)
        wait = _COLLECTIVE_WAIT[0]
        if wait is not None:
            with wait("Executor.run"):
                return self._run(program, feed, fetch_list, scope, return_numpy)
        return self._run(program, feed, fetch_list, scope, return_numpy)

    def _run(self, program, feed, fetch_list, scope, return_numpy):
        program, compiled = self._unpack(program)
        scope = global_scope() if scope is None else scope
        fetch_names = tuple([_fetch_name(f) for f in fetch_list]) if fetch_list else ()
        if compiled is None and not fetch_names and (feed is None or type(feed) is dict and
                                                     not feed):
            if run_grouped_startup(self, program, scope):  # initialisers by kind (startup.py)
                return []
        prep = self._prepare(program, compiled, fetch_names)
        iterations = 1 if compiled is None else compiled.exec_strategy.num_iteration_per_run
        if iterations == 1 and type(feed) is dict:  # the common case, kept lean
            # A dict of arrays whose names, types, dtypes and shapes were accepted before
            # passes the same checks again: look the verdict and the step up (module doc).
            key = (fetch_names, _feed_key(feed))
            try:
                sig, step = prep.plans[key]
                arrays = feed
            except (KeyError, TypeError):  # new key, or an unhashable one
                arrays, sig = self._check_feed_dict(prep, program, feed, None)
                step = self._step(prep, fetch_names, sig)
                if key[1] is not None and all(arrays[n] is v for n, v in feed.items()):
                    if len(prep.plans) >= _PLANS_PER_PROGRAM:
                        prep.plans.clear()
                    prep.plans[key] = (sig, step)
        else:
            arrays, sig = self._check_feeds(prep, program, feed, iterations)
            step = self._step(prep, fetch_names, sig, iterations)
        return self._execute(step, prep, program, arrays, scope, return_numpy)

    def _execute(self, step: CompiledStep, prep: _Prepared, program: Program, feeds: dict,
                 scope: Scope, return_numpy: bool):
        state = scope._vars
        try:
            inputs = [state[name] for name in step.state_names]
        except KeyError:
            self._initialise_created_state(step, scope)
            prepare_stacked_state(step, scope)  # stack or split rolled parameters
            try:
                inputs = [state[name] for name in step.state_names]
            except KeyError as exc:
                raise GraphcError(f"variable {exc} is not initialised in the scope; run the "
                                  "startup program first (exe.run(startup_program))") from None
        if scope._shards:
            inputs = self._whole_or_rows(step, scope, inputs)
        guard = prep.state_guards[step]
        placed = guard.check(scope, inputs)
        if placed is not inputs:  # moved onto a data-parallel step's devices: keep them there
            state.update(zip(step.state_names, placed))
            inputs = placed
        split = len(step.updated_names)
        updated, readonly = tuple(inputs[:split]), tuple(inputs[split:])
        try:
            feed_arrays = tuple([feeds[name] for name in step.feed_names])
        except KeyError as exc:  # a feed that no op reads but the fetch list names
            raise FeedError(f"missing feed {exc}; it is fetched") from None
        count = scope._run_counters.get(program, 0)
        if self._on_default_device:
            new_updated, created, fetched, checks = step(updated, readonly, feed_arrays, count)
        else:
            with jax.default_device(self._device):
                new_updated, created, fetched, checks = step(updated, readonly, feed_arrays,
                                                             count)
        # The old buffers were donated: the new ones take their place even when the data
        # checks refuse the step (it then returned the old values unchanged).
        state.update(zip(step.updated_names, new_updated))
        shards = scope._shards
        if guard.any_sharded or shards:
            for name, shard in guard.updated_shards:
                if shard is not None:
                    shards[name] = shard
                else:
                    shards.pop(name, None)
        guard.ran(new_updated, readonly)
        # one small read-back; a list of rows is cheaper to scan than numpy slicing
        if step.check_sites and any(row[COUNT] for row in np.asarray(checks).tolist()):
            _raise_if_refused(step, prep, np.asarray(checks))
        # Only now, after the step succeeded, does the scope change.
        scope._run_counters[program] = count + step.num_iterations
        if step.created_names:
            state.update(zip(step.created_names, created))
        iterations, blocks = step.num_iterations, guard.blocks
        return [unpack_fetch(a, blocks, iterations, return_numpy) if isinstance(a, LoDArray)
                else _fetched(a, iterations, return_numpy) if rows is None else
                _fetched(from_rows(a, rows), iterations, return_numpy)
                for a, rows in zip(fetched, guard.fetch_rows)]

    @staticmethod
    def _initialise_created_state(step: CompiledStep, scope: Scope) -> None:
        """State a pass created with a recorded initial value (amp's loss scale and step
        counters) starts at that value in a scope that lacks it."""
        for v in step.updated_inputs + step.readonly_inputs:
            init = v.var.extra.get("initial_value")
            if init is not None and v.var.name not in scope._vars:
                scope._vars[v.var.name] = jnp.full(v.type.shape, init, v.type.dtype)

    @staticmethod
    def _whole_or_rows(step: CompiledStep, scope: Scope, inputs: list) -> list:
        """The scope holds some variables as a Reduce-mode step's rows: give a step that
        wants another layout (one device, all-reduce, or another device count) the whole
        tensors, which it places as it needs."""
        values = step.updated_inputs + step.readonly_inputs
        shards = scope._shards
        return [scope.whole(v.var.name) if v.var.name in shards
                and shards[v.var.name] != v.var.shard else arr
                for v, arr in zip(values, inputs)]

    @staticmethod
    def _unpack(program):
        """(Program, CompiledProgram or None) for whatever run() was given."""
        if type(program) is Program:  # the common case, without the import below
            bound = DATA_PARALLEL.by_id  # DATA_PARALLEL.compiled_for, inline: every step asks
            return program, bound.get(id(program)) if bound else None
        from .compiled_program import CompiledProgram
        program = default_main_program() if program is None else program
        if isinstance(program, CompiledProgram):
            return program.program, program
        if not isinstance(program, Program):
            raise GraphcError(f"Executor.run expects a Program or CompiledProgram, got "
                              f"{type(program).__name__}")
        return program, DATA_PARALLEL.compiled_for(program)

    @with_graphc_x64
    def compile(self, program=None, feed=None, fetch_list=None) -> CompiledStep:
        """The compiled step ``run`` would use for these feeds, for inspection:
        ``lowered_text()``, ``compiled_text()``, ``cost_analysis()``, ``memory_analysis()``."""
        program, compiled = self._unpack(program)
        fetch_names = tuple(_fetch_name(f) for f in (fetch_list or []))
        prep = self._prepare(program, compiled, fetch_names)
        iterations = _iterations(compiled)
        _, sig = self._check_feeds(prep, program, feed, iterations)
        return self._step(prep, fetch_names, sig, iterations)

    def close(self) -> None:
        self._prepared.clear()

    # -- datasets (graphc.dataset does the work) ------------------------------------------
    def train_from_dataset(self, program=None, dataset=None, scope=None, thread=0,
                           debug=False, fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """One step per batch of a graphc.dataset dataset, fed ahead of time by a DataLoader,
        with a progress bar and the fetches printed every ``print_period`` steps; returns the
        last step's fetches. See graphc.dataset."""
        from ..dataio.dataset import train_from_dataset
        return train_from_dataset(self, program, dataset, scope, thread, debug, fetch_list,
                                  fetch_info, print_period, fetch_handler)

    def infer_from_dataset(self, program=None, dataset=None, scope=None, thread=0,
                           debug=False, fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """Like train_from_dataset, for a test/inference program."""
        from ..dataio.dataset import infer_from_dataset
        return infer_from_dataset(self, program, dataset, scope, thread, debug, fetch_list,
                                  fetch_info, print_period, fetch_handler)
