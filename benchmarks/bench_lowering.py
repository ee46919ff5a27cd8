"""How long graphc's IR layer takes on large programs: build, lower, verify, print, parse.

Run ``python benchmarks/bench_lowering.py [--sizes 10000 30000 100000] [--repeat 3]``;
see benchmarks/README.md for what each phase covers and the targets.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import graphc
from graphc import layers

WIDTH = 32  # feature width: shapes do not change the cost of the IR layer
PHASES = ("build", "lower", "verify", "print", "parse")


def _training_program(blocks: int, padding: int = 0) -> tuple[graphc.Program, graphc.Program]:
    """``blocks`` x (fc -> batch_norm -> relu), a softmax cross-entropy loss, backward and
    SGD updates; ``padding`` scale ops on the (stop-gradient) input add one op each."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = layers.data("x", [-1, WIDTH])
        label = layers.data("label", [-1, 1], dtype="int64")
        h = x
        for _ in range(padding):
            h = layers.scale(h, 0.5)
        for _ in range(blocks):
            h = layers.fc(h, WIDTH)
            h = layers.batch_norm(h)
            h = layers.relu(h)
        logits = layers.fc(h, 10)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        graphc.optimizer.SGD(learning_rate=0.01).minimize(loss)
    return main, startup


def build_program(num_ops: int) -> tuple[graphc.Program, graphc.Program]:
    """A training program (forward, backward, optimizer) of exactly ``num_ops`` ops.

    The ops per block and the fixed ops are measured on one- and two-block programs, so
    the count stays exact whatever backward and the optimizer emit.
    """
    fixed_plus_one = _training_program(1)[0].num_ops
    per_block = _training_program(2)[0].num_ops - fixed_plus_one
    fixed = fixed_plus_one - per_block
    if num_ops < fixed + per_block:
        raise ValueError(f"num_ops must be at least {fixed + per_block}")
    blocks, padding = divmod(num_ops - fixed, per_block)
    main, startup = _training_program(blocks, padding)
    if main.num_ops != num_ops:
        raise AssertionError(f"built {main.num_ops} ops, wanted {num_ops}")
    return main, startup


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


class PhaseTimer:
    """Times phases run back to back, and how much of each went to cyclic GC collections.

    Collections are left to happen where they fall: a phase that pauses the collector
    leaves young objects that the next collection must walk, and that cost is real.
    """

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.times: dict[str, float] = {}
        self.gc_times: dict[str, float] = {}
        self._phase = ""
        self._gc_start = 0.0

    def _on_gc(self, event: str, info: dict) -> None:
        if event == "start":
            self._gc_start = self.clock()
        elif self._phase:
            self.gc_times[self._phase] += self.clock() - self._gc_start

    def __enter__(self) -> PhaseTimer:
        gc.collect()  # start clean: the previous run's garbage is not charged to this one
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._on_gc)

    def run(self, phase: str, fn: Callable[[], object]) -> object:
        self._phase, self.gc_times[phase] = phase, 0.0
        start = self.clock()
        result = fn()
        self.times[phase] = self.clock() - start
        self._phase = ""
        return result


def run_once(num_ops: int, clock: Callable[[], float]) -> tuple[PhaseTimer, int]:
    """Each phase's time, and the number of ops the startup program got on the way."""
    with PhaseTimer(clock) as timer:
        main, startup = timer.run("build", lambda: build_program(num_ops))
        graph = timer.run("lower", lambda: graphc.lower(main))
        timer.run("verify", graph.verify)
        text = timer.run("print", graph.to_text)
        # CPython runs a full collection once long-lived objects grow by a quarter; the one
        # the new graph brings on may fall after the timed phases, so time it here.
        timer.run("full gc", gc.collect)
        parsed = timer.run("parse", lambda: graphc.parse(text))
    if parsed.num_ops != num_ops or text.count(" = ") != num_ops:
        raise AssertionError("the printed or parsed graph lost ops")
    return timer, startup.num_ops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 30_000, 100_000],
                    help="numbers of ops in the main program (default: 10000 30000 100000)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per size; the fastest run of each phase is reported (default 3)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall-clock time (default) or this process's CPU time, steadier "
                         "on a machine shared with other jobs")
    args = ap.parse_args(argv)
    sizes = sorted(args.sizes)

    print(f"graphc {graphc.__version__}, Python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs; {args.clock} time, "
          f"fastest of {args.repeat} run(s)")
    best: dict[int, dict[str, float]] = {}
    gc_share: dict[int, dict[str, float]] = {}
    full_gc: dict[int, float] = {}
    for n in sizes:
        runs = [run_once(n, CLOCKS[args.clock]) for _ in range(args.repeat)]
        best[n] = {p: min(timer.times[p] for timer, _ in runs) for p in PHASES}
        gc_share[n] = {p: statistics.median(timer.gc_times[p] for timer, _ in runs)
                       for p in PHASES}
        full_gc[n] = statistics.median(timer.times["full gc"] for timer, _ in runs)
        median = {p: statistics.median(timer.times[p] for timer, _ in runs) for p in PHASES}
        print(f"  {n} ops (+ {runs[0][1]} startup ops in the build phase): median "
              f"lower+verify+print {median['lower'] + median['verify'] + median['print']:.2f} s",
              flush=True)

    print()
    print(f"{'ops':>8} " + "".join(f"{p:>18}" for p in PHASES) + f"{'lower+verify+print':>22}")
    print(f"{'':>8} " + "".join(f"{'s   (us/op)':>18}" for _ in PHASES) + f"{'s':>22}")
    for n in sizes:
        cells = "".join(f"{best[n][p]:>9.3f} ({best[n][p] / n * 1e6:>5.1f})" for p in PHASES)
        lvp = best[n]["lower"] + best[n]["verify"] + best[n]["print"]
        print(f"{n:>8} {cells}{lvp:>22.3f}")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        cells = "".join(f"{best[hi][p] / best[lo][p]:>18.2f}" for p in PHASES)
        print(f"{'ratio':>8} {cells}    (t({hi}) / t({lo}); linear = {hi / lo:.2f})")
    print("\nof which in cyclic garbage collections (s, median), and a full collection run "
          "after print:")
    print(f"{'ops':>8} " + "".join(f"{p:>18}" for p in PHASES) + f"{'full gc':>22}")
    for n in sizes:
        print(f"{n:>8} " + "".join(f"{gc_share[n][p]:>18.3f}" for p in PHASES)
              + f"{full_gc[n]:>22.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
