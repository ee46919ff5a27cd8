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
functions of exactly that key, so their verdict and the step's run plan are looked up, not
recomputed (benchmarks/bench_step_overhead.py; the feed plan: runtime/feed_plan.py; the run
itself: runtime/run_plan.py; the state checks: runtime/state_guard.py). A plain Program's
repeated run (same fetch names and feed key) runs its steady function (``RunPlan.steady``),
which ``run`` tries first for the program's last repeated key (the function matches the key
itself); the range checks of fed numpy arrays are made on the host before the dispatch
(backends/data_checks.py's HostChecks), not in the step. LoD feeds are checked and packed
every run, many slots in one vectorised pass (runtime/lod_pack.py) into one buffer that the
step takes as two host arrays (CompiledStep.call_lod_rows).
What other layers provide comes in through the Executor's host services
(runtime/host_services.py, ``Executor(services=...)``, by default the process's): feeds
for a run given ``feed=None`` (graphc.io's non-iterable DataLoaders), a context every run
enters (graphc.distributed's collective deadline), a parameter server's channel; the steps
it builds hand the same services to their lowering rules.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary, WeakSet

import jax
import numpy as np

from ..backends.data_checks import DataError
from ..backends.jax import CompiledStep, DataParallelStep
from ..backends.precision import with_graphc_x64
from ..ir.default_programs import default_main_program
from ..ir.errors import GraphcError, ProgramError
from ..ir.graph import Graph
from ..ir.program import Program, Variable
from .compile_cache import ensure_compilation_cache
from .data_refusal import raise_if_refused
from .fed_state import feed_plain_variables, restore_state, write_fed_state
from .feed_plan import FeedPlan, feed_key
from .feed_shapes import unchecked_run
from .feeds import FeedError
from .fetches import FetchError, fetch_name
from .host_services import HostServices, process_services
from .lod import LoDTensor
from .places import CPUPlace, Place
from .prune import Pruner, split_fetch_list
from .run_as import DATA_PARALLEL, LoopProgram
from .run_plan import RunPlan
from .scope import Scope, global_scope
from .startup import run_grouped_startup
from .state_guard import StateGuard
from .tiered import tier, tiered_from_env  # -- tier28

__all__ = ["DataError", "Executor", "FeedError", "FetchError", "HostServices"]

_REPEATS_PER_PROGRAM = 64  # fast-path entries per program (cleared when exceeded)
_SEQUENCES = (list, tuple, type(None))  # fetch lists the fast path takes
_NOT_A_NAME = object()


def _fetch_key(fetch_list) -> tuple:
    """A fetch list as the fast path keys it: its names (an entry that is neither a name nor
    a Variable becomes a key no run registers, so the checked path names the error)."""
    return tuple([f if type(f) is str else f.name if isinstance(f, Variable) else _NOT_A_NAME
                  for f in fetch_list]) if fetch_list else ()


def _forget(repeats: dict, fast: dict, key: int) -> None:
    """A freed program's fast-path entries leave (weakref.finalize's callback)."""
    repeats.pop(key, None)
    fast.pop(key, None)


@dataclass
class _Prepared:
    """A lowered program and its compiled steps, valid while the program's version holds."""

    version: int
    graph: Graph
    feed: FeedPlan  # its feeds: checks, stacking, per-device split, LoD, accepted keys
    steps: dict[tuple, CompiledStep] = field(default_factory=dict)
    state_guards: dict[CompiledStep, StateGuard] = field(default_factory=dict)
    runs: dict[CompiledStep, RunPlan] = field(default_factory=dict)  # each step's run plan
    devices: list | None = None  # data-parallel devices (None: this executor's one device)
    inter_nranks: int = 0  # hierarchical all-reduce group size (0: flat)

    @property
    def read_feeds(self) -> list[str]:
        return self.feed.read_feeds


def _iterations(compiled) -> int:
    return 1 if compiled is None else compiled.exec_strategy.num_iteration_per_run


def _raise_if_refused(step: CompiledStep, prep: _Prepared, checks: np.ndarray) -> None:
    """DataError for the first data check that found a bad value (runtime/data_refusal.py);
    kept here for the predictor, which reads a step's checks itself."""
    raise_if_refused(step, prep, checks)


def _host_feeds(prep: _Prepared, arrays: dict) -> frozenset:
    """The feeds of a one-device step whose range checks the host makes (CompiledStep's
    ``host_feeds``) when every feed is a numpy array; none when one is a jax array (whose
    checks stay on its device) or a LoD feed (the predictor takes those steps as they are)."""
    if prep.devices or any(type(a) is not np.ndarray for a in arrays.values()):
        return frozenset()
    return frozenset(arrays)


def _one_device(program: Program):
    """The CompiledProgram a plain Program runs as: the default strategies, one device."""
    from .compiled_program import CompiledProgram
    return CompiledProgram(program)


class Executor:
    """``Executor(place).run(program, feed={...}, fetch_list=[...], scope=None)``.
    ``services``: the HostServices its runs and steps use (default: the process's)."""

    def __init__(self, place: Place | None = None, check_data: bool | None = None,
                 services: HostServices | None = None):
        self.place = place or CPUPlace()
        # What steps talk to outside XLA (runtime/host_services.py): the process's unless given
        self.services = process_services() if services is None else services
        # Data checks (see the module doc): on unless turned off here or by the environment.
        if check_data is None:
            check_data = os.environ.get("GRAPHC_CHECK_DATA", "1").strip().lower() not in (
                "0", "false", "off", "no")
        self.check_data = bool(check_data)
        self._device = self.place.jax_device()
        # Run where the place says; only a non-default device needs the (small) context cost.
        self._on_default_device = self._device == jax.devices()[0]
        self._run_device = None if self._on_default_device else self._device
        # Held weakly: a program the user drops is freed with its compiled steps. For a
        # CompiledProgram the passes depend on the fetch list (fetched values are kept
        # alive), so entries are per fetch list there: {key: (version, {fetch: _Prepared})}.
        self._prepared: WeakKeyDictionary = WeakKeyDictionary()
        # A plain Program's repeated runs: {id(program): {(_fetch_key, feed_key): [version,
        # run plan, its steady function]}}, filled by _run once a key is accepted, so such a
        # run looks one plan up and runs it (run's fast path). By id, a plain dict lookup;
        # an entry leaves when its program is freed (``_repeat``).
        self._repeats: dict[int, dict] = {}
        # {id(program): the steady function of its last repeated run}: run tries it first
        # (RunPlan.steady checks the key itself); leaves with the program, as _repeats
        self._fast: dict[int, object] = {}
        self._pruner = Pruner()  # use_prune=True's programs (runtime/prune.py)
        # -- tier28: tiered compilation (runtime/tiered.py): opt-in, GRAPHC_TIERED=1
        self.tiered = tiered_from_env()
        self._tiered_calls: WeakSet = WeakSet()  # a running compile thread keeps its own

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
            devices, inter_nranks, parts = None, 0, 1
            if compiled is not None and compiled.devices:
                devices, inter_nranks = compiled.devices, compiled.inter_nranks
                # a process feeds only its own devices (all of them in one process)
                me = jax.process_index()
                parts = sum(d.process_index == me for d in compiled.devices)
            prep = _Prepared(program.version, graph, FeedPlan(graph, devices, parts),
                             devices=devices, inter_nranks=inter_nranks)
            entry[1][key] = prep
        return prep

    def _step(self, prep: _Prepared, fetch_names: tuple, feed_sig: tuple,
              iterations: int = 1, host_feeds: frozenset = frozenset()) -> CompiledStep:
        # (one step a call, fed no numpy arrays: the key the predictor looks steps up by)
        key = (fetch_names, feed_sig) if iterations == 1 and not host_feeds else \
            (fetch_names, feed_sig, iterations, host_feeds)
        step = prep.steps.get(key)
        if step is None:
            ensure_compilation_cache()  # graphc's one global JAX setting (compile_cache.py)
            for name in fetch_names:
                if name not in prep.graph.vars:
                    # -- issue 24: a value PipelineOptimizer's loop keeps to itself
                    if any(op.type == "microbatch_loop" and f"%{name}:" in op.attrs["body"]
                           for op in prep.graph.ops()):
                        raise FetchError(
                            f"cannot fetch '{name}': it is computed inside PipelineOptimizer's "
                            "loop over microbatches, which gives back the parameter gradients, "
                            "the loss and other float values of fixed shape (their mean) and "
                            "values whose first dimension is the batch (docs/porting_from_"
                            "paddle.md)")
                    raise FetchError(f"cannot fetch '{name}': it is not a variable computed or "
                                     "read by this program")
            devices = prep.devices
            if devices:
                step = DataParallelStep(prep.graph, fetch_names, devices, prep.inter_nranks,
                                        donate=True, num_iterations=iterations,
                                        check_data=self.check_data, services=self.services)
            else:
                step = CompiledStep(prep.graph, fetch_names, donate=True,
                                    num_iterations=iterations, check_data=self.check_data,
                                    services=self.services, host_feeds=host_feeds)
            step.feed_shapes = dict(feed_sig)
            if self.tiered and (call := tier(step, self.tiered)) is not None:  # -- tier28
                self._tiered_calls.add(call)
            prep.steps[key] = step
            run = prep.runs[step] = RunPlan(step, prep.graph)
            prep.state_guards[step] = run.guard
        return step

    # -- run -------------------------------------------------------------------------------
    def run(self, program=None, feed=None, fetch_list=None, feed_var_name="feed",
            fetch_var_name="fetch", scope: Scope | None = None, return_numpy: bool = True,
            use_program_cache: bool = True, return_merged: bool = True,
            use_prune: bool = False):
        """Run one step; returns the fetched values (numpy arrays unless return_numpy=False).
        A row-sparse value (an is_sparse embedding's gradient) comes back as a
        ``graphc.SelectedRows`` (rows, values, height); ``np.asarray`` of it is dense.

        For a CompiledProgram whose ``exec_strategy.num_iteration_per_run`` is K > 1, one
        call runs K steps: ``feed`` is a list of K dicts or a dict of arrays with a new
        leading axis of K, and each fetched value comes back stacked per step, ``[K, ...]``.
        The result equals K single runs (state, fetches and dropout masks alike).

        ``return_merged=False`` with a data-parallel CompiledProgram: each fetch comes back
        per device, stacked on a new leading axis ``[num_devices, ...]`` (after the ``[K]``
        axis of K > 1), as Paddle; otherwise it changes nothing. ``use_prune=True`` (a
        Program): only the ops the fetched variables need run, plus the Operators (or
        minimize()'s result) in ``fetch_list`` and what they need; ops computing a fed
        variable are cut off (runtime/prune.py). Without it every op runs, as Paddle.
        """
        fast = self._fast.get(id(program))
        if fast is not None and type(feed) is dict and return_numpy and return_merged and \
                not use_prune:
            # The steady run of this program's last repeated key (RunPlan.steady): it
            # matches the key itself and enters x64 for the call alone; None: not this key
            services = self.services
            if services.collective_wait is None and services.run_timer is None:
                out = fast(program, feed, fetch_list, global_scope() if scope is None else scope)
                if out is not None:
                    return out
        return self._run_any(program, feed, fetch_list, scope, return_numpy, return_merged,
                             use_prune)

    @with_graphc_x64  # graphc's 64-bit types, in graphc's own work only (backends/precision)
    def _run_any(self, program, feed, fetch_list, scope, return_numpy, return_merged,
                 use_prune):
        """``run`` for every run its steady function did not take."""
        services = self.services
        if type(feed) is dict and type(program) is Program and not use_prune and \
                return_merged and services.collective_wait is None and \
                services.run_timer is None and type(fetch_list) in _SEQUENCES:
            # A repeated run: the program, fetch entries and feed key of an accepted run
            # (same version, not bound to a CompiledProgram) take its plan at once.
            repeats = self._repeats.get(id(program))
            if repeats is not None:
                key = (_fetch_key(fetch_list), feed_key(feed))
                hit = repeats.get(key)
                if hit is not None and hit[0] == program.version and \
                        id(program) not in DATA_PARALLEL.by_id:
                    scope = global_scope() if scope is None else scope
                    steady = hit[2]
                    if steady is None:  # known once the plan ran (RunPlan.steady)
                        steady = hit[2] = hit[1].steady(program, *key)
                    if steady and return_numpy and self._run_device is None:
                        out = steady(program, feed, fetch_list, scope)
                        if out is not None:
                            self._fast[id(program)] = steady  # run's first try next time
                            return out
                    return hit[1].execute(program, feed, scope, return_numpy, self._run_device)
        if type(fetch_list) in (list, tuple) and any(type(f) is list for f in fetch_list):
            # Paddle takes a list entry (gradients() returns one) as its items, in order
            fetch_list = [g for f in fetch_list for g in (f if type(f) is list else (f,))]
        if use_prune:
            fetch_list, keep_ops = split_fetch_list(fetch_list)
            if program is None:
                program = default_main_program()
            feeds = feed[0] if isinstance(feed, list | tuple) and feed else feed
            program = self._pruner.prune(program, list(feeds or ()), fetch_list, keep_ops)
        if not return_merged:
            return self._unmerged(program, self.run(program, feed, fetch_list, scope=scope,
                                                    return_numpy=return_numpy))
        if type(program) is not Program and getattr(program, "_is_inference", False):
            return program._run_inference(feed)  # issue 25: CompiledProgram + a predictor
        if isinstance(program, LoopProgram) and feed is None and not fetch_list:
            # a program that is a loop of its own: exe.run(pserver_program) serves until the
            # trainers complete (the loop runs the same program with feeds: its update step)
            return program.run_loop(self, scope)
        if feed is None and services.feed_providers:
            feed = services.provided_feed(program)
        if services.collective_wait is None and services.run_timer is None:
            return self._run(program, feed, fetch_list, scope, return_numpy)
        with services.waiting("Executor.run"), services.timing("Executor.run"):
            return self._run(program, feed, fetch_list, scope, return_numpy)

    def _unmerged(self, program, results):
        """``results`` split per device (see run's ``return_merged``)."""
        _, compiled = self._unpack(program)
        ndev = compiled.num_devices if compiled is not None and compiled.devices else 1
        if ndev == 1 or not results:
            return results
        axis = 1 if compiled.exec_strategy.num_iteration_per_run > 1 else 0
        out = []
        for value in results:
            dense = isinstance(value, LoDTensor) and value._device is not None and \
                not value.recursive_sequence_lengths()
            if dense:  # return_numpy=False: the per-device stack is a LoDTensor too
                value = value._device
            if not isinstance(value, np.ndarray | jax.Array):
                raise GraphcError(f"Executor.run(return_merged=False): a {type(value).__name__} "
                                  "fetch (LoD or row-sparse) has no per-device form in graphc; "
                                  "fetch it merged")
            shape = tuple(value.shape)
            if len(shape) <= axis or shape[axis] % ndev:
                raise GraphcError(f"Executor.run(return_merged=False): a fetch of shape "
                                  f"{list(shape)} does not split over {ndev} devices")
            value = value.reshape(shape[:axis] + (ndev, shape[axis] // ndev) + shape[axis + 1:])
            out.append(LoDTensor.of_fetch(value) if dense else value)
        return out

    def _run(self, program, feed, fetch_list, scope, return_numpy):
        given = program
        program, compiled = self._unpack(program)
        if feed:  # layers.data feeds: Paddle's rule (feed_shapes.py)
            program, compiled, feed = unchecked_run(program, compiled, feed)
        scope = global_scope() if scope is None else scope
        fetch_names = tuple([fetch_name(f) for f in fetch_list]) if fetch_list else ()
        if compiled is None and not fetch_names and (feed is None or type(feed) is dict and
                                                     not feed):
            if run_grouped_startup(self, program, scope):  # initialisers by kind (startup.py)
                return []
        try:
            prep = self._prepare(program, compiled, fetch_names)
        except ProgramError:
            # a fed variable that is neither data nor state (Paddle feeds any): a feed now
            if not feed_plain_variables(program, feed):
                raise
            prep = self._prepare(program, compiled, fetch_names)
        iterations = 1 if compiled is None else compiled.exec_strategy.num_iteration_per_run
        plan = prep.feed
        key = None
        if type(feed) is dict:
            if iterations == 1:  # the common case, kept lean
                # A dict of arrays whose names, types, dtypes and shapes were accepted before
                # passes the same checks again: look the verdict and the run plan up
                # (feed_plan.py); such a dict holds only data variables (no fed state).
                key = (fetch_names, feed_key(feed))
                try:
                    run = plan.plans[key][2]
                except (KeyError, TypeError):  # new key, or an unhashable one
                    run = None
                if run is not None:
                    if compiled is None and feed and type(fetch_list) in _SEQUENCES:
                        self._repeat(program, fetch_list, key[1], run)
                    return run.execute(program, feed, scope, return_numpy, self._run_device)
            if not all(n in plan.feeds for n in feed):
                rest, old = write_fed_state(program, feed, scope)
                if len(rest) < len(feed):
                    try:  # run with the state written; a failed run puts the old values back
                        return self._run(given, rest, fetch_list, scope, return_numpy)
                    except BaseException:
                        restore_state(scope, old)
                        raise
        if key is not None:
            arrays, sig = plan.check_dict(program, feed, None)
            step = self._step(prep, fetch_names, sig, 1, _host_feeds(prep, arrays))
            run = prep.runs[step]
            plan.remember(key, feed, arrays, (sig, step, run))
        else:
            arrays, sig = plan.check(program, feed, iterations)
            run = prep.runs[self._step(prep, fetch_names, sig, iterations)]
        return run.execute(program, arrays, scope, return_numpy, self._run_device)

    def _repeat(self, program: Program, fetch_list, feed_sig: tuple, run: RunPlan) -> None:
        """Remember an accepted run for run's fast path. Nothing in the entry refers to the
        program (a fetched Variable would), so the program can still be freed."""
        key = id(program)
        repeats = self._repeats.get(key)
        if repeats is None or len(repeats) >= _REPEATS_PER_PROGRAM:
            if repeats is None:  # (the callback holds the dicts, not the executor)
                weakref.finalize(program, _forget, self._repeats, self._fast, key)
            repeats = self._repeats[key] = {}
        # [version, run plan, its steady function (None: not known yet)]
        repeats[(_fetch_key(fetch_list), feed_sig)] = [program.version, run, None]

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
        fetch_names = tuple(fetch_name(f) for f in (fetch_list or []))
        prep = self._prepare(program, compiled, fetch_names)
        iterations = _iterations(compiled)
        arrays, sig = prep.feed.check(program, feed, iterations)
        # the step run() takes for the same feeds (a dict of arrays: its host checks too)
        host = _host_feeds(prep, arrays) if type(feed) is dict and iterations == 1 else \
            frozenset()
        return self._step(prep, fetch_names, sig, iterations, host)

    def close(self) -> None:
        self._prepared.clear()
        self._repeats.clear()
        self._fast.clear()
        for call in list(self._tiered_calls):  # -- tier28: no compile thread outlives it
            call.close()

    # -- datasets (the dataset does the work: the runtime never imports graphc.dataio) ------
    def train_from_dataset(self, program=None, dataset=None, scope=None, thread=0,
                           debug=False, fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """One step per batch of a graphc.dataset dataset, fed ahead of time by a DataLoader,
        with a progress bar and the fetches printed every ``print_period`` steps; returns the
        last step's fetches. See graphc.dataset."""
        return _dataset_runner(dataset)(self, program, scope, thread, debug, fetch_list,
                                        fetch_info, print_period, fetch_handler, "train")

    def infer_from_dataset(self, program=None, dataset=None, scope=None, thread=0,
                           debug=False, fetch_list=None, fetch_info=None, print_period=100,
                           fetch_handler=None):
        """Like train_from_dataset, for a test/inference program."""
        return _dataset_runner(dataset)(self, program, scope, thread, debug, fetch_list,
                                        fetch_info, print_period, fetch_handler, "infer")


class DatasetTypeError(GraphcError):
    """``train_from_dataset`` / ``infer_from_dataset`` was given something not a dataset."""


def _dataset_runner(dataset):
    """The dataset's own loop (graphc.dataset's ``DatasetBase.run_with_executor``): the
    dataset side dispatches, so this layer needs no import of it."""
    runner = getattr(dataset, "run_with_executor", None)
    if runner is None:
        raise DatasetTypeError(f"dataset must be an InMemoryDataset or QueueDataset, got "
                               f"{type(dataset).__name__}")
    return runner
