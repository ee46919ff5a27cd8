"""Executor.run(use_prune=True) as Paddle 1.8: run only the ops the fetch targets need, and
the optimizer ops named in fetch_list; ops computing a fed variable are cut off too."""

from __future__ import annotations

import copy
from weakref import WeakKeyDictionary

from ..ir.errors import GraphcError
from ..ir.program import Operator, Program, Variable
from ..ir.program_compat import kept_op_indices, pruned_copy


def split_fetch_list(fetch_list) -> tuple[list, list[Operator]]:
    """(what to fetch, ops to keep): Paddle's fetch_list may hold Operators and the
    ``(optimize_ops, params_grads)`` pair minimize returns, besides Variables and names."""
    fetch, ops = [], []
    for item in fetch_list or ():
        if isinstance(item, Operator):
            ops.append(item)
        elif isinstance(item, tuple) and item and isinstance(item[0], list | tuple) and all(
                isinstance(op, Operator) for op in item[0]):
            ops.extend(item[0])  # minimize's (optimize ops, params_grads)
        elif isinstance(item, Variable | str):
            fetch.append(item)
        else:
            raise GraphcError("Executor.run(use_prune=True): fetch_list entries must be "
                              "Variables, names, Operators or minimize()'s result, got "
                              f"{type(item).__name__}")
    return fetch, ops


class Pruner:
    """The pruned programs an Executor made, per program (held weakly) and per
    (program version, feeds, targets, kept ops): a pruned program is built and compiled once."""

    def __init__(self):
        self._cache: WeakKeyDictionary = WeakKeyDictionary()

    def prune(self, program, feed_names, fetch, ops: list[Operator]):
        from .compiled_program import CompiledProgram
        if isinstance(program, CompiledProgram):
            # Paddle prunes the program a CompiledProgram holds: a copy holding the pruned
            # one is compiled (kept per pruned program, as the pruned programs are)
            pruned = self.prune(program.program, feed_names, fetch, ops)
            copies = self._cache.setdefault(program, {})
            hit = copies.get(id(pruned))
            if hit is None or hit.program is not pruned:
                hit = copy.copy(program)
                hit.program, hit._pass_manager = pruned, (
                    program._pass_manager if program._custom_pass_manager else None)
                copies.clear()
                copies[id(pruned)] = hit
            return hit
        if not isinstance(program, Program):
            raise GraphcError("Executor.run(use_prune=True) prunes a Program or a "
                              f"CompiledProgram, got {type(program).__name__}")
        if program.num_blocks > 1:
            raise GraphcError("Executor.run(use_prune=True): a program with sub-blocks "
                              "(control flow) is not pruned by graphc; run it unpruned")
        block = program.global_block()
        foreign = [op for op in ops if op.block is not block]
        if foreign:
            raise GraphcError(f"Executor.run(use_prune=True): the {foreign[0].type} op in "
                              "fetch_list is not an op of this program")
        targets = {v.name if isinstance(v, Variable) else v for v in fetch}
        unknown = sorted(n for n in targets if not block.has_var(n))
        if unknown:
            raise GraphcError(f"Executor.run(use_prune=True): fetch {unknown} is not a "
                              "variable of the program")
        if not ops:  # Paddle's rule: no optimizer op named, every one of the program runs
            ops = [op for op in block.ops if op.role == "optimize"]
        feeds = set(feed_names)
        kept = kept_op_indices(block, feeds, targets, ops)
        key = (program.version, tuple(sorted(feeds)), tuple(sorted(targets)), kept)
        entries = self._cache.setdefault(program, {})
        pruned = entries.get(key)
        if pruned is None:
            pruned = pruned_copy(program, kept, feeds)
            pruned._bump()
            entries.clear()  # one pruned form per program at a time: the latest asked
            entries[key] = pruned
        return pruned
