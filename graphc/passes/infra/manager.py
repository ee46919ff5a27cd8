"""PassManager: runs passes in order with instrumentation (print IR before/after, only on
change, unified diffs, verify after each pass, timing, statistics, numbered dumps) and turns
a failure into an error naming the pass, the passes before it, and a reproducer file."""

from __future__ import annotations

import difflib
import os
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from ...ir.errors import GraphcError, VerifyError
from ...ir.graph import Graph, Value, gc_paused
from .base import Pass, PassContext, PassResult, parse_pipeline
from .regions import apply_in_regions


class PassFailure(GraphcError):
    """A pass raised, or left a graph that does not verify."""

    def __init__(self, message: str, pass_name: str, before: list[str],
                 reproducer: str | None):
        self.pass_name, self.before, self.reproducer = pass_name, before, reproducer
        super().__init__(message)


def _selected(spec, name: str) -> bool:
    return spec == "all" or (spec is not None and name in spec)


@dataclass
class PipelineReport:
    """What a run did: one PassResult per pass, in order."""

    passes: list[PassResult] = field(default_factory=list)
    verify_seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.passes)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes) + self.verify_seconds

    def stats(self) -> dict[str, dict[str, int]]:
        return {p.name: dict(p.stats) for p in self.passes}

    def table(self) -> str:
        """Per-pass timing and statistics, MLIR ``-mlir-timing`` style."""
        width = max([len(p.spec) for p in self.passes] + [4])
        lines = [f"{'pass':<{width}}  {'changed':<7}  {'ms':>9}  statistics"]
        for p in self.passes:
            lines.append(f"{p.spec:<{width}}  {'yes' if p.changed else 'no':<7}  "
                         f"{p.seconds * 1e3:>9.2f}  {p.stats_text()}")
        if self.verify_seconds:
            lines.append(f"{'(verify)':<{width}}  {'':<7}  {self.verify_seconds * 1e3:>9.2f}")
        lines.append(f"{'total':<{width}}  {'':<7}  {self.seconds * 1e3:>9.2f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class PassManager:
    """An ordered pipeline of passes plus instrumentation.

    ``print_ir_before`` / ``print_ir_after``: ``"all"`` or a list of pass names.
    ``print_after_change``: print after a pass only if it changed the graph.
    ``print_diff``: print a unified diff of the IR instead of the whole IR after a pass.
    ``verify_each``: verify after every pass (the input is verified first).
    ``dump_dir``: write ``00-input.ir``, ``01-<pass>.ir``, ... there.
    ``reproducer_dir``: on failure write ``reproducer.ir`` (pipeline + the failing pass's
    input IR) there; without it the error still names the pass and its predecessors.
    """

    def __init__(self, passes: Sequence[Pass] = (), *, verify_each: bool = False,
                 print_ir_before=None, print_ir_after=None, print_after_change: bool = False,
                 print_diff: bool = False, show_source: bool = False,
                 dump_dir: str | None = None, reproducer_dir: str | None = None,
                 stream: TextIO | None = None):
        self.passes = list(passes)
        self.verify_each = verify_each
        self.print_ir_before, self.print_ir_after = print_ir_before, print_ir_after
        self.print_after_change, self.print_diff = print_after_change, print_diff
        self.show_source = show_source
        self.dump_dir, self.reproducer_dir = dump_dir, reproducer_dir
        self.stream = stream
        self.last_report: PipelineReport | None = None

    # -- text form -------------------------------------------------------------------
    def __str__(self) -> str:
        return ",".join(p.spec() for p in self.passes)

    def __repr__(self) -> str:
        return f"PassManager('{self}')"

    @classmethod
    def parse(cls, text: str, **instrumentation) -> PassManager:
        return cls(parse_pipeline(text), **instrumentation)

    def add(self, p: Pass) -> PassManager:
        self.passes.append(p)
        return self

    # -- running ---------------------------------------------------------------------
    def _out(self) -> TextIO:
        return self.stream or sys.stderr

    def _text(self, graph: Graph) -> str:
        return graph.to_text(show_source=self.show_source)

    @gc_paused  # passes allocate many small objects, none garbage; see graph.gc_paused
    def run(self, graph: Graph, keep: Iterable[Value] = (), num_devices: int = 1
            ) -> PipelineReport:
        """Apply every pass to ``graph`` in place; returns the report (also ``last_report``)."""
        keep = list(keep)
        report = PipelineReport()
        self.last_report = report
        need_text = bool(self.print_diff or self.dump_dir or self.reproducer_dir)
        if self.verify_each:
            t0 = time.perf_counter()
            self._verify(graph, None, [], None)
            report.verify_seconds += time.perf_counter() - t0
        text = self._text(graph) if need_text else None
        if self.dump_dir:
            os.makedirs(self.dump_dir, exist_ok=True)
            self._write(os.path.join(self.dump_dir, "00-input.ir"), f"// pipeline: {self}\n"
                        + text)
        done: list[str] = []
        for index, p in enumerate(self.passes, 1):
            if _selected(self.print_ir_before, p.name):
                print(f"// ----- IR before {p.spec()} -----\n{self._text(graph)}",
                      file=self._out())
            ctx = PassContext(graph, p.name, keep, num_devices)
            outputs = _output_vars(graph)
            t0 = time.perf_counter()
            try:
                p.run(graph, ctx)
                apply_in_regions(p, graph, ctx)  # the bodies of region ops, or why not
            except GraphcError as exc:
                self._fail(p, done, text, exc)
            except Exception as exc:  # a bug in the pass: keep its traceback in the message
                self._fail(p, done, text, exc, traceback.format_exc())
            dropped = outputs - _output_vars(graph)
            if dropped:  # what the step returns or writes back: checked with or without verify
                self._fail(p, done, text, VerifyError(
                    f"the graph no longer outputs {sorted(dropped)}; a pass may give an output "
                    "a new value, never drop it"), what="dropped graph outputs")
            seconds = time.perf_counter() - t0
            result = PassResult(p.name, p.spec(), ctx.changed, seconds, dict(ctx.stats))
            report.passes.append(result)
            if self.verify_each:
                t0 = time.perf_counter()
                self._verify(graph, p, done, text)
                report.verify_seconds += time.perf_counter() - t0
            new_text = self._text(graph) if need_text else None
            self._after(p, graph, result, text, new_text, index)
            text = new_text
            done.append(p.spec())
        return report

    def _after(self, p: Pass, graph: Graph, result: PassResult, old: str | None,
               new: str | None, index: int) -> None:
        wants = _selected(self.print_ir_after, p.name) or self.print_after_change
        if wants and (result.changed or not self.print_after_change):
            if self.print_diff and old is not None:
                diff = difflib.unified_diff(old.splitlines(), new.splitlines(),
                                            f"before {p.spec()}", f"after {p.spec()}",
                                            lineterm="")
                print("\n".join(diff), file=self._out())
            else:
                print(f"// ----- IR after {p.spec()} -----\n{self._text(graph)}",
                      file=self._out())
        if self.dump_dir:
            self._write(os.path.join(self.dump_dir, f"{index:02d}-{p.name}.ir"),
                        f"// after {p.spec()} ({'changed' if result.changed else 'unchanged'})"
                        f"\n{new}")

    def _verify(self, graph: Graph, p: Pass | None, done: list[str], text: str | None):
        try:
            graph.verify()
        except GraphcError as exc:
            if p is None:
                raise PassFailure(f"the pipeline's input graph does not verify: {exc}",
                                  "(input)", [], None) from exc
            self._fail(p, done, text, exc, what="left a graph that does not verify")

    def _fail(self, p: Pass, done: list[str], text: str | None, exc: Exception,
              tb: str | None = None, what: str = "failed") -> None:
        reproducer = None
        if self.reproducer_dir and text is not None:
            os.makedirs(self.reproducer_dir, exist_ok=True)
            reproducer = os.path.join(self.reproducer_dir, "reproducer.ir")
            self._write(reproducer, f"// graphc reproducer: run `{p.spec()}` on this graph\n"
                        f"// pipeline: {self}\n// passes before it: {', '.join(done) or '-'}\n"
                        + text)
        position = f"pass {len(done) + 1} of {len(self.passes)}"
        before = f"after {', '.join(done)}" if done else "first in the pipeline"
        message = (f"pass '{p.spec()}' ({position}, {before}) {what}: "
                   f"{type(exc).__name__}: {exc}")
        message += (f"\nreproducer: {reproducer}" if reproducer else
                    "\n(set reproducer_dir to save the input IR of the failing pass)")
        if tb:
            message += "\n" + tb
        raise PassFailure(message, p.name, list(done), reproducer) from exc

    @staticmethod
    def _write(path: str, text: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)


def _output_vars(graph: Graph) -> set[str]:
    try:  # a stacked variable (roll-repeated-layers) returns its members by name
        return {n for v in graph.outputs for n in v.var.extra.get("stack_of") or (v.var.name,)}
    except AttributeError:  # a pass broke the list itself: verify reports it
        return set()
