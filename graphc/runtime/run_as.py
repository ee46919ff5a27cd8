"""How the Executor runs a Program it is given bare, besides one step on one device: a
LoopProgram runs its own loop; a Program bound to a data-parallel CompiledProgram runs as it.

Both are typed here so that neither the IR's Program nor the executor learns who uses them
(graphc.distributed's server programs, fleet's and the nccl2 transpile's bindings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir.program import Block, Program

if TYPE_CHECKING:
    from .compiled_program import CompiledProgram


class LoopProgram(Program):
    """A program that is a loop of its own: ``exe.run(it)`` without feeds or fetches hands
    the loop the executor and scope (a parameter server serves until its trainers complete);
    run with feeds it is one step of that loop, as any Program.

    ``LoopProgram(program)`` takes over ``program``'s blocks (a program just converted from a
    graph, which is left empty)."""

    def __init__(self, program: Program):
        super().__init__()
        self.blocks, program.blocks = program.blocks, [Block(program, 0)]
        for block in self.blocks:
            block.program = self
        self.random_seed = program.random_seed
        program._bump()

    def run_loop(self, executor, scope):
        raise NotImplementedError(f"{type(self).__name__} does not define its loop")


class DataParallelBindings:
    """Programs that run data-parallel when given bare to ``Executor.run``: fleet's
    ``distributed_optimizer(...).minimize`` and the nccl2 transpile bind a CompiledProgram
    to the user's Program, which the user goes on running as is (Paddle's spelling).

    A bound program lives until ``unbind`` (its CompiledProgram refers to it): a process
    binds the one program it trains. Keyed by ``id``: one dict lookup per run (the executor
    asks at every step), and a bound program cannot die, so its id is not reused.
    """

    def __init__(self):
        # id(program) -> its CompiledProgram. Read it freely (the executor reads it inline at
        # every step: empty, that costs one truth test); change it by bind / unbind only.
        self.by_id: dict[int, CompiledProgram] = {}

    def bind(self, program: Program, compiled: CompiledProgram) -> None:
        if compiled.program is not program:
            raise ValueError("bind(program, compiled): compiled must be a CompiledProgram "
                             "of that program")
        self.by_id[id(program)] = compiled

    def unbind(self, program: Program) -> None:
        self.by_id.pop(id(program), None)

    def compiled_for(self, program) -> CompiledProgram | None:
        """The CompiledProgram ``program`` runs as, or None (one device)."""
        return self.by_id.get(id(program)) if self.by_id else None


# process: the runtime's one registry of bindings (the executor reads it; fleet and the
# nccl2 transpile bind the program this process trains, as Paddle's fleet does).
DATA_PARALLEL = DataParallelBindings()
