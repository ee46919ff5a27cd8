"""Executor.run(use_prune=True) as Paddle 1.8: run only the ops the fetch targets need, and
the optimizer ops named in fetch_list; ops computing a fed variable are cut off too."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from ..ir.errors import GraphcError
from ..ir.program import Operator, Program, Variable


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


def _kept_indices(block, feeds: set[str], targets: set[str], ops: list[Operator]) -> tuple:
    chosen = {id(op) for op in ops}
    needed, kept = set(targets) - feeds, []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        if id(op) in chosen or needed.intersection(op.output_arg_names):
            kept.append(i)
            needed.update(n for n in op.input_arg_names if n not in feeds)
    return tuple(reversed(kept))


class Pruner:
    """The pruned programs an Executor made, per program (held weakly) and per
    (program version, feeds, targets, kept ops): a pruned program is built and compiled once."""

    def __init__(self):
        self._cache: WeakKeyDictionary = WeakKeyDictionary()

    def prune(self, program: Program, feed_names, fetch, ops: list[Operator]) -> Program:
        if not isinstance(program, Program):
            raise GraphcError("Executor.run(use_prune=True) prunes a Program; prune before "
                              "compiling a CompiledProgram (graphc compiles the pruned one)")
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
        feeds = set(feed_names)
        kept = _kept_indices(block, feeds, targets, ops)
        key = (program.version, tuple(sorted(feeds)), tuple(sorted(targets)), kept)
        entries = self._cache.setdefault(program, {})
        pruned = entries.get(key)
        if pruned is None:
            pruned = program.clone()
            pblock = pruned.global_block()
            pblock.ops = [pblock.ops[i] for i in kept]
            for name in feeds:  # a fed intermediate is data now: its producers are gone
                var = pblock.vars.get(name)
                if var is not None and not var.is_data:
                    var.is_data = var.need_check_feed = True
            pruned._bump()
            entries.clear()  # one pruned form per program at a time: the latest asked
            entries[key] = pruned
        return pruned
