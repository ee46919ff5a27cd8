"""CompiledProgram: a Program plus the BuildStrategy and the devices to run it with.

``Executor.run(CompiledProgram(main, build_strategy=bs), ...)`` lowers ``main``, applies the
strategy's pass pipeline, and compiles the result; the pipeline's report stays inspectable.
The ExecutionStrategy says how the executor runs it (executor.py: K iterations per call).
``.with_data_parallel(loss_name=...)`` runs it on several devices (the seeds' ParallelExecutor).
"""

from __future__ import annotations

import copy

import jax

from ..backends.interpreter import resolve_fetch
from ..ir.errors import ArgumentTypeError, ArgumentValueError, GraphcError
from ..ir.graph import Graph, lower
from ..ir.program import Program
from ..passes import PassManager, PipelineReport, pipeline_for
from ..passes.fuse_all_reduce_ops import BucketPlan, buckets_in
from ..strategy import BuildStrategy, ExecutionStrategy
from .devices import DeviceError, cpu_devices, default_cpu_place_count, place_devices
from .host_services import process_services
from .places import CPUPlace, Place


class CompiledProgram:
    """``CompiledProgram(program, build_strategy=None, exec_strategy=None)``; passes run at
    the first Executor.run.

    ``pass_manager`` may replace the strategy's pipeline (for debugging: instrumentation,
    hand-picked passes). ``last_report`` holds the latest pipeline run's timing and stats;
    with ``enable_inplace`` or ``memory_optimize`` the graph also carries ``memory_plan``.
    ``exec_strategy.num_iteration_per_run`` is read at every run, so changing it takes effect
    at the next one (a K-iteration step is compiled once per K and feed shapes).
    """

    def __init__(self, program_or_graph: Program, build_strategy: BuildStrategy | None = None,
                 pass_manager: PassManager | None = None,
                 exec_strategy: ExecutionStrategy | None = None):
        if not isinstance(program_or_graph, Program):
            raise ArgumentTypeError("CompiledProgram expects a Program, got "
                                    f"{type(program_or_graph).__name__}")
        if build_strategy is not None and not isinstance(build_strategy, BuildStrategy):
            raise GraphcError("build_strategy must be a graphc.BuildStrategy, got "
                              f"{type(build_strategy).__name__}")
        if exec_strategy is not None and not isinstance(exec_strategy, ExecutionStrategy):
            raise GraphcError("exec_strategy must be a graphc.ExecutionStrategy, got "
                              f"{type(exec_strategy).__name__}")
        self.program = program_or_graph
        self.build_strategy = build_strategy or BuildStrategy()
        self.exec_strategy = exec_strategy or ExecutionStrategy()
        self._pass_manager = pass_manager
        self._custom_pass_manager = pass_manager is not None
        self.last_report: PipelineReport | None = None
        self.num_devices = 1
        self.devices: list | None = None  # JAX devices of a data-parallel program
        self.loss_name: str | None = None
        self.share_vars_from: CompiledProgram | None = None
        self._is_inference = False  # issue 25: _with_inference_optimize

    def with_data_parallel(self, loss_name: str | None = None,
                           build_strategy: BuildStrategy | None = None,
                           exec_strategy: ExecutionStrategy | None = None,
                           share_vars_from: CompiledProgram | None = None,
                           places=None) -> CompiledProgram:
        """Run on several devices, each on an equal slice of every feed's batch.

        ``loss_name`` given (training): gradients are aggregated across devices by the
        strategy's ``reduce_strategy`` (AllReduce, or Reduce: sharded optimizer). Without it
        (inference) every device runs the program on its slice independently. ``places``:
        a list of Places (default: the ``CUDA_VISIBLE_DEVICES`` GPUs, else ``CPU_NUM`` CPU
        devices, else one per core with a warning, as Paddle: ``default_cpu_place_count``).
        ``share_vars_from``: another
        data-parallel CompiledProgram whose devices this one uses (a test program reading
        the training program's parameters; variables live in the scope both run with).
        Fetches come back concatenated over devices along dim 0. Returns ``self``.
        """
        if build_strategy is not None:
            self._check_strategy("build_strategy", build_strategy, BuildStrategy)
            self.build_strategy = build_strategy
        if exec_strategy is not None:
            self._check_strategy("exec_strategy", exec_strategy, ExecutionStrategy)
            self.exec_strategy = exec_strategy
        if loss_name is not None:
            loss_name = getattr(loss_name, "name", loss_name)
            if not isinstance(loss_name, str) or not self.program.global_block().has_var(
                    loss_name):
                raise GraphcError(f"loss_name {loss_name!r} is not a variable of the program")
        if places is None:  # every device of the job: a trainer of several joins it first
            process_services().joined_job()
        devices = _devices_of(places)
        if share_vars_from is not None:
            if not isinstance(share_vars_from, CompiledProgram) or not share_vars_from.devices:
                raise GraphcError("share_vars_from must be a CompiledProgram that runs with "
                                  "data parallelism (call with_data_parallel on it first)")
            if places is not None and devices != share_vars_from.devices:
                raise GraphcError("share_vars_from runs on other devices than the places "
                                  "given; programs sharing variables must use the same devices")
            devices = share_vars_from.devices
        self.devices, self.num_devices = devices, len(devices)
        self.loss_name, self.share_vars_from = loss_name, share_vars_from
        if self._pass_manager is not None and not self._custom_pass_manager:
            self._pass_manager = None  # rebuilt for the device count
        return self

    # -- issue 25: inference API
    def _with_inference_optimize(self, config) -> CompiledProgram:
        """Paddle's book-test spelling: ``exe.run(this, feed=[PaddleTensor, ...])`` then runs
        the predictor ``config`` describes (it loads the model the config names, as Paddle's
        does) and returns its output PaddleTensors. ``config``: a NativeConfig or an
        AnalysisConfig of graphc.fluid (anything with ``_make_predictor()``)."""
        if getattr(self, "_is_inference", False):
            raise GraphcError("this CompiledProgram is already compiled for inference; "
                              "build another one for another config")
        if self.devices:
            raise GraphcError("a CompiledProgram cannot run both data parallel and as an "
                              "inference predictor")
        if not callable(getattr(config, "_make_predictor", None)):
            raise GraphcError("_with_inference_optimize expects a fluid.core.NativeConfig or "
                              f"AnalysisConfig, got {type(config).__name__}")
        self._is_inference, self._infer_config, self._predictor = True, config, None
        return self

    def _run_inference(self, feed):
        """One predictor run (see ``_with_inference_optimize``); built at the first."""
        if self._predictor is None:
            self._predictor = self._infer_config._make_predictor()
        return self._predictor.run(feed)
    # -- end issue 25: inference API

    @property
    def inter_nranks(self) -> int:
        """Group size of hierarchical all-reduce (0: flat), as the graph's ops expect."""
        bs = self.build_strategy
        return bs.hierarchical_allreduce_inter_nranks if (
            bs.use_hierarchical_allreduce and self.loss_name is not None) else 0

    @staticmethod
    def _check_strategy(name: str, value, cls) -> None:
        if not isinstance(value, cls):
            raise GraphcError(f"{name} must be a graphc.{cls.__name__}, got "
                              f"{type(value).__name__}")

    @property
    def pass_manager(self) -> PassManager:
        if self._pass_manager is None:
            self._pass_manager = pipeline_for(self.build_strategy, self.exec_strategy,
                                              self.num_devices, loss_name=self.loss_name)
        return self._pass_manager

    def _build_graph(self, fetch_names: tuple = ()) -> Graph:
        """Lower and run the pipeline; fetched values are kept alive through every pass."""
        graph = lower(self.program)
        keep = [resolve_fetch(graph, name) for name in fetch_names if name in graph.vars]
        self.last_report = self.pass_manager.run(graph, keep=keep, num_devices=self.num_devices)
        return graph

    def graph(self, fetch_list=()) -> Graph:
        """The graph the executor would compile for this fetch list (for inspection)."""
        return self._build_graph(tuple(getattr(f, "name", f) for f in fetch_list))

    def bucket_plan(self, fetch_list=()) -> BucketPlan:
        """The gradient buckets this data-parallel training program exchanges, one per
        all-reduce (reduce-scatter) collective of its graph after the pipeline: with
        ``fuse_all_reduce_ops``, fuse-all-reduce-ops' buckets. ``print()`` it for a table
        (bucket, collective, dtype, layers, params, bytes, parameter names)."""
        if self.loss_name is None or self.num_devices <= 1:
            raise GraphcError("bucket_plan needs a data-parallel training program: call "
                              "with_data_parallel(loss_name=...) with more than one place")
        return buckets_in(self.graph(fetch_list))

    def _compile(self, scope, place) -> CompiledProgram:
        """Paddle's: bind this program to ``scope`` and ``place`` (graphc compiles when it
        first runs); binding it again to another scope or place is an ArgumentValueError."""
        bound = getattr(self, "_bound", None)
        if bound is not None and bound[0] is not scope:
            raise ArgumentValueError("CompiledProgram._compile: the program is bound to "
                                     "another scope; a CompiledProgram runs in one scope")
        if bound is not None and bound[1] != place:
            raise ArgumentValueError(f"CompiledProgram._compile: the program is bound to "
                                     f"{bound[1]}, not {place}")
        self._bound = (scope, place)
        return self

    def _for_program(self, program: Program) -> CompiledProgram:
        """This compiled program's strategies over ``program`` (a copy re-typed for a
        ``layers.data`` feed of another shape, runtime/feed_shapes.py), kept per copy so its
        compiled steps are reused."""
        copies = self.__dict__.setdefault("_retargeted", {})
        hit = copies.get(id(program))
        if hit is None or hit[0] is not program:
            if len(copies) >= 8:
                copies.clear()
            twin = copy.copy(self)
            twin.program = program
            twin.__dict__.pop("_retargeted", None)
            hit = copies[id(program)] = (program, twin)
        return hit[1]

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program!r} pipeline='{self.pass_manager}'>"


def _devices_of(places) -> list:
    """JAX devices for ``places`` (None: every GPU, or $CPU_NUM CPU devices, else one per
    core as far as XLA has them: ``default_cpu_place_count``)."""
    if places is None:
        devices = list(jax.devices())
        if devices[0].platform != "cpu" or jax.process_count() > 1:
            # several processes: each brought its own CPU_NUM devices when it started, and
            # the job runs on all of them (every process's local devices)
            return devices
        # CPU_NUM larger than the devices XLA started with: places mapped onto one device
        return cpu_devices(default_cpu_place_count())
    if isinstance(places, Place):
        places = [places]
    places = list(places)
    if not places:
        raise DeviceError("places is empty; give at least one place")
    bad = [p for p in places if not isinstance(p, Place)]
    if bad:
        raise DeviceError(f"places must be graphc Places (CPUPlace(i), CUDAPlace(i)), got "
                          f"{type(bad[0]).__name__}")
    if len(set(places)) != len(places) and all(isinstance(p, CPUPlace) for p in places):
        # Paddle's CPUPlace() has no id: [CPUPlace()] * n asks for n CPU replicas, as
        # CPU_NUM=n does (Paddle's own tests write it so)
        return cpu_devices(len(places))
    # cpu_places(n) after XLA's CPU backend started with fewer: n places on one device
    devices = place_devices(places)
    if len(set(devices)) != len(devices) and len(set(places)) != len(places):
        raise DeviceError(f"places name a device twice: {places}")
    return devices
