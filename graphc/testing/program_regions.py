"""Regions in random programs: the ops of a run of drawn steps become the body of one
``scan_layers`` op (1-3 iterations), so pass property tests see region ops and their bodies.

The body reads every outer value as a graph input (the op's ``Consts``); a drawn subset of
the values its steps produced leave it as stacked ``Ys`` and are sliced back, one drawn
iteration each, into the same variable names, so the steps after it read them unchanged.
The values left out are dead inside the body (what DCE inside regions removes).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from ..ir.regions import BlockMark, body_text, drop_locals, take
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
    """Move the ops appended since ``start`` into a scan_layers body; returns a description
    for failure reports, or None when the run is left as it was (no ops, ops that update
    state or write in place: those need carried values, which this wrapper does not draw,
    or a step that put an op before the run)."""
    block = start.mark.block
    ops = block.ops[start.mark.start:]
    reads, written, in_place = _reads_and_writes(ops)
    if tuple(map(id, block.ops[:start.mark.start])) != start.before:
        return None
    if not ops or in_place or any(block.var(n).persistable for n in written):
        return None
    candidates = list({v.name: v for v in b.produced[start.produced:]
                       if v.name in written}.values())
    if not candidates:
        return None
    keep = [v for v in candidates if b.flag()] or candidates[-1:]
    k = b.draw(st.integers(1, 3))
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
    drop_locals(start.mark, captured, keep=[*reads, *(v.name for v in keep)])
    dropped = {v.name for v in candidates} - {v.name for v in keep}
    b.pool = [v for v in b.pool if v.name not in dropped]
    b.produced = [v for v in b.produced if v.name not in dropped]
    return f"scan_layers(iterations={k}, {len(captured.ops)} ops, {len(keep)} results)"
