"""The encoder step (bench_encoder.py) with some lowering rules as they were at a git revision
("before") against the working tree's ("after") and hand-written JAX, in one process.

Run ``python benchmarks/bench_encoder_ab.py --rev 708d789 --rules graphc/ops/nn/lowering.py:dropout
graphc/ops/scan/lowering.py:scan_layers [--dropout 0.1] [--steps 24] [--hlo-only]``. Each
``--rules FILE:OP[,OP]`` takes those ops' rules from FILE at ``--rev`` (loaded as a module of
its package, so its imports resolve to today's code); the "before" runner is traced with them
swapped into the rule table. Timed steps alternate one by one (before, after, hand), so a
change in the machine's speed hits all three alike; medians of process CPU and wall time.
Also prints each step's HLO counts and its trace + lower + compile time (the before step is
compiled first; set GRAPHC_COMPILATION_CACHE=0 for cold compiles).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_encoder as be
import jax
import numpy as np

from graphc.backends import lowering as rules_table

ROOT = Path(__file__).resolve().parent.parent


def module_at(rev: str, path: str):
    """``path`` as it was at ``rev``, executed as a sibling module of today's (relative
    imports work) with the rule tables emptied for the while (they get their own contents
    back), and the rules it registered: (module, {op: rule})."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    package = ".".join(Path(path).with_suffix("").parts[:-1])
    spec = importlib.util.spec_from_loader(f"{package}._at_{rev}", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[spec.name] = module  # dataclasses look their module up there
    tables = (rules_table._RULES, rules_table._LOD_RULES, rules_table._REFERENCES)
    saved = [dict(t) for t in tables]
    for t in tables:
        t.clear()
    try:
        exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
        found = dict(rules_table._RULES)
    finally:
        for t, s in zip(tables, saved):
            t.clear()
            t.update(s)
    return module, found


def rules_at(rev: str, path: str, ops: list[str]) -> dict:
    """The rules of ``ops`` that ``path`` registered at ``rev``."""
    found = module_at(rev, path)[1]
    return {op: found[op] for op in ops}


def attrs_at(rev: str, path: str, names: list[str], into: str) -> list:
    """(module ``into``, name, the value ``names`` had in ``path`` at ``rev``): functions a
    step looks up in ``into`` as it is traced (``summarise`` in backends.jax.step)."""
    old = module_at(rev, path)[0]
    target = importlib.import_module(into)
    return [(target, name, getattr(old, name)) for name in names]


@contextlib.contextmanager
def swapped(rules: dict, attrs: list = ()):
    saved = {op: rules_table._RULES[op] for op in rules}
    saved_attrs = [(m, n, getattr(m, n)) for m, n, _ in attrs]
    rules_table._RULES.update(rules)
    for m, n, v in attrs:
        setattr(m, n, v)
    try:
        yield
    finally:
        rules_table._RULES.update(saved)
        for m, n, v in saved_attrs:
            setattr(m, n, v)


def timed_compile(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True)
    ap.add_argument("--rules", nargs="*", default=[], metavar="FILE:OP[,OP]")
    for name, default in vars(be.Config()).items():
        ap.add_argument(f"--{name}", type=type(default), default=default)
    ap.add_argument("--attrs", nargs="*", default=[], metavar="FILE:NAME[,NAME]@MODULE",
                    help="module attributes the before step is traced with, from FILE at "
                         "--rev (e.g. graphc/backends/data_checks.py:summarise@"
                         "graphc.backends.jax.step)")
    ap.add_argument("--strategy", action="append", default=[], metavar="KEY=VALUE",
                    help="BuildStrategy settings of the before runner (e.g. "
                         "roll_repeated_layers=false: rolled after against unrolled before)")
    ap.add_argument("--steps", type=int, default=24, help="timed steps of each")
    ap.add_argument("--hlo-only", action="store_true")
    args = ap.parse_args(argv)
    old = {}
    for spec in args.rules:
        path, ops = spec.rsplit(":", 1)
        old.update(rules_at(args.rev, path, ops.split(",")))
    attrs = []
    for spec in args.attrs:
        where, into = spec.rsplit("@", 1)
        path, names = where.rsplit(":", 1)
        attrs += attrs_at(args.rev, path, names.split(","), into)
    strategy = {k: v.lower() in ("1", "true", "yes") for k, v in
                (kv.split("=", 1) for kv in args.strategy)}
    cfg = be.Config(**{k: getattr(args, k) for k in vars(be.Config())})
    print(f"{cfg}, jax {jax.__version__}, before = {sorted(old)} "
          f"{[f'{m.__name__}.{n}' for m, n, _ in attrs]} at {args.rev}, strategy {strategy}",
          flush=True)
    batches = be.make_batches(cfg)
    before, after = be.GraphcRunner(cfg, strategy=strategy), be.GraphcRunner(cfg)
    hand = be.HandRunner(cfg, after)
    runs = {"before": before, "after": after, "hand": hand}
    texts, losses = {}, {}
    for name, run in runs.items():
        with swapped(old, attrs) if name == "before" else contextlib.nullcontext():
            texts[name], wall, cpu = timed_compile(lambda r=run: r.compiled_text(batches[0]))
            losses[name] = [run(b) for b in batches]
        print(f"{name:<7} trace + lower + compile: {wall:.1f} s wall, {cpu:.1f} s CPU; "
              f"first losses {np.round(losses[name], 5).tolist()}", flush=True)
    counts = {n: be.hlo_counts(t) for n, t in texts.items()}
    print(f"{'step':<8}" + "".join(f"{k:>14}" for k in counts["hand"]) + f"{'/ hand':>9}")
    for n, c in counts.items():
        ratio = c["instructions"] / counts["hand"]["instructions"]
        print(f"{n:<8}" + "".join(f"{v:>14}" for v in c.values()) + f"{ratio:>9.3f}")
    if args.hlo_only:
        return 0
    times = {n: [] for n in runs}
    for i in range(args.steps):  # one step of each in turn
        for n, run in runs.items():
            times[n].append(be.timed(run, batches[i % 3]))
    med = {n: [statistics.median(t[k] for t in ts) for k in (0, 1)] for n, ts in times.items()}
    for n, (wall, cpu) in med.items():
        print(f"{n:<8} steady step: CPU {cpu * 1e3:8.1f} ms ({cpu / med['hand'][1]:.3f} of hand),"
              f" wall {wall * 1e3:8.1f} ms ({wall / med['hand'][0]:.3f} of hand)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
