"""Regions from Program ops: the ops a ``with`` block appended (a loop's body, a branch) taken
out of their block and made a nested graph in the text form, with explicit inputs and outputs.

A region is isolated from above (as MLIR's ``IsolatedFromAbove``): every outer value its ops
read enters as a graph input, and only its graph outputs leave it, through the op holding it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ProgramError
from .graph import Graph, VarInfo


@dataclass
class BlockMark:
    """Where a ``with`` block started appending: the op count and the variables known then."""

    block: object
    start: int
    names: frozenset

    @classmethod
    def of(cls, block) -> BlockMark:
        return cls(block, len(block.ops), frozenset(block.vars))


@dataclass
class Captured:
    """The ops a block appended, removed from it, and how they touch outer variables:
    ``reads``: outer names read before any op of the block writes them (in first-read order);
    ``writes``: outer names the block writes (in first-write order)."""

    ops: list
    reads: list[str]
    writes: list[str]
    local: set[str]


def take(mark: BlockMark) -> Captured:
    """Remove the ops appended since ``mark`` and say which outer variables they touch."""
    block = mark.block
    ops = block.ops[mark.start:]
    del block.ops[mark.start:]
    block.program._bump()
    # parameters (and other persistables) made inside the block live outside it: the region
    # reads them as inputs, and the startup program initialises them
    local = {n for n in set(block.vars) - mark.names if not block.vars[n].persistable}
    written: set[str] = set()
    reads: list[str] = []
    writes: list[str] = []
    for op in ops:
        for n in op.input_arg_names:
            if n not in written and n not in local and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            if n not in local and n not in writes:
                writes.append(n)
            written.add(n)
    return Captured(ops, reads, writes, local)


def drop_locals(mark: BlockMark, captured: Captured, keep=()) -> None:
    """Forget the variables only the region's ops used (parameters stay: the startup program
    initialises them and the region reads them as inputs)."""
    from .program import Parameter
    block, keep = mark.block, set(keep)
    for name in captured.local - keep:
        var = block.vars.get(name)
        if var is not None and not isinstance(var, Parameter) and not var.persistable:
            del block.vars[name]


def body_text(block, ops, inputs: list, outputs: list[str], name: str = "body",
              where: str = "region") -> str:
    """The ops as a graph in the text form: ``inputs`` (Variables) are its inputs in order,
    ``outputs`` (names) its outputs: each one's last value in the ops (an input passes
    through when no op writes it)."""
    g = Graph(name)
    latest = {}

    def value(var, kind="temp"):
        info = g.vars.get(var.name) or g._new_var(
            VarInfo(var.name, kind, var.stop_gradient, lod_level=var.lod_level))
        version = len(g._versions.get(var.name, {}))
        v = g._new_value(info, version, var.type)
        latest[var.name] = v
        return v

    seen = set()
    for var in inputs:
        if var.name in seen:
            raise ProgramError(f"{where}: input '{var.name}' given twice")
        seen.add(var.name)
    g.inputs = [value(var, "feed") for var in inputs]
    for i, op in enumerate(ops):
        missing = [n for n in op.input_arg_names if n not in latest]
        if missing:
            raise ProgramError(f"{where}: {op.where} reads {missing}, which the region "
                               "neither computes nor takes as an input")
        ins = {s: [latest[n] for n in names] for s, names in op.inputs.items()}
        outs = {s: [value(block.var(n)) for n in names] for s, names in op.outputs.items()}
        gop = g._new_op(op.type, dict(op.attrs), None, op.role, (i,))
        g._connect(gop, ins, outs)
    missing = [n for n in outputs if n not in latest]
    if missing:
        raise ProgramError(f"{where}: {missing} are neither computed in the region nor its "
                           "inputs")
    g.outputs = [latest[n] for n in outputs]
    g._outputs_version += 1
    return g.to_text()
