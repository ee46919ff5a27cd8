"""Regions in random programs: the ops of a run of drawn steps become the body of one
``scan_layers`` or ``while`` op (1-3 iterations), so pass property tests see region ops.

The body reads every outer value as a graph input (an operand of the op); a drawn subset of
the values its steps produced leave it under the same variable names (scan_layers: stacked
``Ys`` with one drawn iteration sliced back; while: carried values of a counter loop), so
the steps after it read them unchanged. The values left out are dead inside the body (what
DCE inside regions removes).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from ..ir import unique_name
from ..ir.regions import BlockMark, body_text, drop_locals, take
from ..ir.types import FLOAT_DTYPES
from .program_builder import _Builder


@dataclass
class RegionStart:
    """Where a region's steps began: the block's mark and the builder's record lengths."""

    mark: BlockMark
    produced: int
    before: tuple  # the block's ops then: a step that inserts an op earlier (an LR
    # schedule's counter increment goes first) shifts the window, and is not wrapped


def open_region(b: _Builder, block) -> RegionStart:
    return RegionStart(BlockMark.of(block), len(b.produced), tuple(map(id, block.ops)))


def _reads_and_writes(ops) -> tuple[list[str], set[str], bool]:
    """Names the ops read before writing them, names they write, and whether one writes
    a name read earlier in the run (an in-place update a body cannot hide)."""
    reads: list[str] = []
    written: set[str] = set()
    in_place = False
    for op in ops:
        for n in op.input_arg_names:
            if n not in written and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            in_place |= n in reads
            written.add(n)
    return reads, written, in_place


def close_region(b: _Builder, start: RegionStart) -> str | None:
    """Move the ops appended since ``start`` into the body of a drawn region op (scan_layers
    or while); returns a description for failure reports, or None when the run is left as it
    was (no ops, ops that update state or write in place: those need carried values, which
    this wrapper does not draw, or a step that put an op before the run)."""
    block = start.mark.block
    ops = block.ops[start.mark.start:]
    reads, written, in_place = _reads_and_writes(ops)
    if tuple(map(id, block.ops[:start.mark.start])) != start.before:
        return None
    if not ops or in_place or any(block.var(n).persistable for n in written):
        return None
    candidates = list({v.name: v for v in b.produced[start.produced:]
                       if v.name in written}.values())
    kind = b.pick(["scan_layers", "while"])
    if kind == "while":  # a loop carries floating-point tensors only
        candidates = [v for v in candidates if v.dtype in FLOAT_DTYPES]
    if not candidates:
        return None
    keep = [v for v in candidates if b.flag()] or candidates[-1:]
    k = b.draw(st.integers(1, 3))
    wrap = _while if kind == "while" else _scan
    captured, kept_names = wrap(b, start, block, reads, keep, k)
    drop_locals(start.mark, captured, keep=[*reads, *(v.name for v in keep), *kept_names])
    # every value the steps produced and the region does not give back is gone, the
    # non-float ones a while cannot carry included (else a later fetch names a body local)
    dropped = {v.name for v in b.produced[start.produced:] if v.name in written} - \
        {v.name for v in keep}
    b.pool = [v for v in b.pool if v.name not in dropped]
    b.produced = [v for v in b.produced if v.name not in dropped]
    return f"{kind}(iterations={k}, {len(captured.ops)} ops, {len(keep)} results)"


def _scan(b: _Builder, start: RegionStart, block, reads, keep, k: int):
    """scan_layers over ``Consts``: each result leaves stacked and one iteration is sliced."""
    captured = take(start.mark)
    body = body_text(block, captured.ops, [block.var(n) for n in reads],
                     [v.name for v in keep], "region", "a random program's region")
    ys = [block.create_var(name=f"{v.name}.steps", shape=(k, *v.shape), dtype=v.dtype)
          for v in keep]
    block.append_op("scan_layers", {"Consts": [block.var(n) for n in reads]}, {"Ys": ys},
                    {"body": body, "iterations": k})
    for v, y in zip(keep, ys):
        i = b.draw(st.integers(0, k - 1))
        block.append_op("slice", {"Input": [y]}, {"Out": [v]},
                        {"axes": [0], "starts": [i], "ends": [i + 1], "decrease_axis": [0]})
    return captured, []


def _while(b: _Builder, start: RegionStart, block, reads, keep, k: int):
    """A counter loop of ``k`` iterations (``i < n``, ``increment(i)`` at the end of the
    body) whose carried values are the results, starting from zeros; every iteration
    computes them afresh from the read-only operands, so the last one is the run's value."""
    counter, limit, cond = (block.create_var(unique_name.generate(f"region_{n}"), [1], dtype)
                            for n, dtype in (("i", "int64"), ("n", "int64"), ("cond", "bool")))
    block.append_op("increment", {"X": [counter]}, {"Out": [counter]}, {"step": 1.0})
    block.append_op("less_than", {"X": [counter], "Y": [limit]}, {"Out": [cond]})
    captured = take(start.mark)
    batch = next((block.var(n) for n in reads if block.var(n).shape[:1] == (-1,)), None)
    inits = []
    for v in keep:
        init = block.create_var(f"{v.name}.init", v.shape, v.dtype)
        if -1 not in v.shape:
            block.append_op("fill_constant", {}, {"Out": [init]},
                            {"shape": list(v.shape), "dtype": v.dtype, "value": 0.0})
        else:  # the batch dimension is the only unknown one (program_builder's pool rule)
            block.append_op("fill_constant_batch_size_like", {"Input": [batch]},
                            {"Out": [init]}, {"shape": list(v.shape), "dtype": v.dtype,
                                              "value": 0.0})
        inits.append(init)
    for var, value in ((counter, 0), (limit, k)):
        block.append_op("fill_constant", {}, {"Out": [var]},
                        {"shape": [1], "dtype": "int64", "value": float(value)})
    block.append_op("less_than", {"X": [counter], "Y": [limit]}, {"Out": [cond]})
    xs = [block.var(n) for n in reads if block.var(n).dtype in FLOAT_DTYPES]
    xaux = [block.var(n) for n in reads if block.var(n).dtype not in FLOAT_DTYPES] + [limit]
    body = body_text(block, captured.ops, [*inits, counter, cond, *xs, *xaux],
                     [*(v.name for v in keep), counter.name, cond.name], "region",
                     "a random program's while region")
    block.append_op("while", {"Carry": inits, "Aux": [counter, cond], "X": xs, "XAux": xaux},
                    {"Out": keep, "AuxOut": [counter, cond]},
                    {"body": body, "cond_index": 1, "max_iterations": k})
    return captured, [counter.name, limit.name, cond.name, *(v.name for v in inits)]
