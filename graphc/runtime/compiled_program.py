"""CompiledProgram: a Program plus the BuildStrategy (and later the devices) to run it with.

``Executor.run(CompiledProgram(main, build_strategy=bs), ...)`` lowers ``main``, applies the
strategy's pass pipeline, and compiles the result; the pipeline's report stays inspectable.
The ExecutionStrategy says how the executor runs it (executor.py: K iterations per call).
"""

from __future__ import annotations

from ..backends.interpreter import resolve_fetch
from ..ir.errors import GraphcError
from ..ir.graph import Graph, lower
from ..ir.program import Program
from ..passes import PassManager, PipelineReport, pipeline_for
from ..strategy import BuildStrategy, ExecutionStrategy


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
            raise GraphcError("CompiledProgram expects a Program, got "
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
        self.last_report: PipelineReport | None = None
        self.num_devices = 1

    @property
    def pass_manager(self) -> PassManager:
        if self._pass_manager is None:
            self._pass_manager = pipeline_for(self.build_strategy, self.exec_strategy,
                                              self.num_devices)
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

    def __repr__(self) -> str:
        return f"<CompiledProgram {self.program!r} pipeline='{self.pass_manager}'>"
