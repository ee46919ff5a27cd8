"""Typed programs of parameter-server training: a server's program carries what its loop needs
(``ServerInfo``), and ``exe.run(server_program)`` serves until every trainer completes.

The transpiler makes them (pserver/transpiler.py); the server loop, checkpoints and the
executor read their fields, never attributes stuck onto a plain Program.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..ir.program import Program
from ..runtime.run_as import LoopProgram


@dataclass(frozen=True)
class ServerInfo:
    """What one parameter server needs besides its program: where it is in the cluster, the
    training mode, and what travels as rows."""

    endpoint: str
    endpoints: tuple[str, ...]
    server_id: int
    trainers: int
    sync_mode: bool = True
    geo: bool = False  # GEO-SGD: trainers push parameter deltas every k steps
    dc_asgd: bool = False  # async with delay compensation: per-trainer parameter backups
    # each distributed table's shard spec (pserver.table.RowTable): name, height, width,
    # dtype, padding_idx, lr (its learning rate's name), init (how rows are drawn)
    tables: tuple[dict, ...] = ()
    prefetch_blocks: tuple[str, ...] = ()  # is_sparse blocks trainers pull rows of
    row_grads: tuple[str, ...] = ()  # gradient blocks that arrive as rows


@dataclass(frozen=True)
class LoadedTables:
    """Distributed-table rows a checkpoint holds for this server, read by
    ``pserver.load_checkpoint`` and taken by the server loop when it starts."""

    path: Path
    arrays: dict


class ServerProgram(LoopProgram):
    """One parameter server's program (``DistributeTranspiler.get_pserver_program(ep)``): run
    with feeds it is one update of this server's blocks; ``exe.run(it)`` alone serves."""

    def __init__(self, program: Program, info: ServerInfo):
        super().__init__(program)
        self.info = info
        self.loaded_tables: LoadedTables | None = None

    def run_loop(self, executor, scope) -> dict:
        from .pserver.server import serve
        return serve(self, executor, scope)
