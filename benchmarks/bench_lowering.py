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


def timed(fn: Callable[[], object], clock: Callable[[], float]) -> tuple[float, object]:
    gc.collect()  # garbage left by the previous phase is not charged to this one
    start = clock()
    result = fn()
    return clock() - start, result


def run_once(num_ops: int, clock: Callable[[], float]) -> tuple[dict[str, float], int]:
    """Times of each phase, and the number of ops the startup program got on the way."""
    times = {}
    times["build"], (main, startup) = timed(lambda: build_program(num_ops), clock)
    times["lower"], graph = timed(lambda: graphc.lower(main), clock)
    times["verify"], _ = timed(graph.verify, clock)
    times["print"], text = timed(graph.to_text, clock)
    times["parse"], parsed = timed(lambda: graphc.parse(text), clock)
    if parsed.num_ops != num_ops or text.count(" = ") != num_ops:
        raise AssertionError("the printed or parsed graph lost ops")
    return times, startup.num_ops


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
    for n in sizes:
        runs = [run_once(n, CLOCKS[args.clock]) for _ in range(args.repeat)]
        best[n] = {p: min(times[p] for times, _ in runs) for p in PHASES}
        median = {p: statistics.median(times[p] for times, _ in runs) for p in PHASES}
        print(f"  {n} ops (+ {runs[0][1]} startup ops in the build phase): median "
              f"lower+verify+print {median['lower'] + median['verify'] + median['print']:.2f} s",
              flush=True)

    head = f"{'ops':>8} " + "".join(f"{p:>18}" for p in PHASES) + f"{'lower+verify+print':>22}"
    print()
    print(head)
    print(f"{'':>8} " + "".join(f"{'s   (us/op)':>18}" for _ in PHASES) + f"{'s':>22}")
    for n in sizes:
        cells = "".join(f"{best[n][p]:>9.3f} ({best[n][p] / n * 1e6:>5.1f})" for p in PHASES)
        lvp = best[n]["lower"] + best[n]["verify"] + best[n]["print"]
        print(f"{n:>8} {cells}{lvp:>22.3f}")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        cells = "".join(f"{best[hi][p] / best[lo][p]:>18.2f}" for p in PHASES)
        print(f"{'ratio':>8} {cells}    (t({hi}) / t({lo}); linear = {hi / lo:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
