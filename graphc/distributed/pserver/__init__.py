"""Parameter-server training over MPI or ZeroMQ (docs/parameter_server.md): the transpile (ps-*
passes), the wire protocol, the server loop and the trainer's channel.

``Transpiler`` splits a program; ``serve(pserver_program)`` runs a server until every trainer
completed; ``start_trainer(...)`` routes this process's send/recv ops to the servers (the
channel becomes the process's host services' ``channel``, runtime/host_services.py) and
``complete()`` says it takes no more steps (also done at exit).
"""

from __future__ import annotations

from .protocol import PServerError


def __getattr__(name: str):
    # the transpiler and the server loop import graphc's IR and JAX: loaded when first used,
    # so the launcher's wrapper can import .roles cheaply
    if name == "Transpiler":
        from .transpiler import Transpiler
        return Transpiler
    if name == "serve":
        from .server import serve
        return serve
    raise AttributeError(f"module '{__name__}' has no attribute '{name}'")


def start_trainer(trainer_id: int, endpoints: list[str], trainers: int,
                  pipelined: bool = False):
    """Make this process trainer ``trainer_id``: its send/recv ops talk to ``endpoints``.
    ``pipelined`` (async mode): a step takes the parameters the servers returned for the
    previous step's push and does not wait for its own (half-async waits). Idempotent for
    the same role; returns the channel."""
    from .trainer import TrainerChannel
    services = _process_services()
    ch = services.channel
    if ch is not None and (ch.trainer_id, ch.endpoints, ch.trainers) == (
            trainer_id, list(endpoints), trainers):
        ch.pipelined = pipelined
        return ch
    if ch is not None and ch.cluster is not None:
        raise PServerError(f"this process already trains as trainer {ch.trainer_id} of "
                           f"{ch.endpoints}; one process has one role")
    ch = TrainerChannel(trainer_id, endpoints, trainers)
    ch.pipelined = pipelined
    services.channel = ch
    return ch


def trainer_channel():
    """This process's trainer channel (None before ``start_trainer``)."""
    return _process_services().channel


def _process_services():
    from ...runtime.host_services import process_services
    return process_services()


def save_checkpoint(dirname: str) -> None:
    """From a trainer (usually the first), between steps: every server writes its blocks
    and optimizer state to ``dirname`` (``pserver_<id>.safetensors``), this trainer the step
    count (``pserver_checkpoint.json``). Resume: ``load_checkpoint`` on each server after
    its startup program; trainers pull the values with their startup program."""
    ch = trainer_channel()
    if ch is None:
        raise PServerError("save_checkpoint() runs on a trainer (after get_trainer_program)")
    ch.save(dirname)


def load_checkpoint(pserver_program, dirname: str, scope=None) -> dict:
    """On a server, after its startup program: its blocks from ``dirname``; returns the
    checkpoint's metadata (``step``: how many steps the trainers had taken). Everything is
    checked before anything loads (pserver/checkpoint.py): a damaged or foreign file is a
    ``PServerCheckpointError`` naming it."""
    from ...runtime.scope import global_scope
    from ..programs import LoadedTables, ServerProgram
    from .checkpoint import load_meta, load_server
    if not isinstance(pserver_program, ServerProgram):
        raise PServerError("load_checkpoint() takes a server program")
    meta = load_meta(dirname)
    servers = len(pserver_program.info.endpoints)
    if meta["servers"] != servers:
        from .checkpoint import META, PServerCheckpointError
        raise PServerCheckpointError(f"'{dirname}/{META}' was saved by a job of "
                                     f"{meta['servers']} servers, this one has {servers}")
    path, arrays = load_server(dirname, pserver_program,
                               global_scope() if scope is None else scope,
                               pserver_program.info.server_id)
    if pserver_program.info.tables:  # serve() fills its table shards from them
        pserver_program.loaded_tables = LoadedTables(path, arrays)
    return meta


def complete() -> None:
    """This trainer takes no more steps (Paddle's ``exe.close()`` / ``fleet.stop_worker()``)."""
    ch = trainer_channel()
    if ch is not None:
        ch.complete()


__all__ = ["PServerError", "Transpiler", "complete", "load_checkpoint", "save_checkpoint",
           "serve", "start_trainer", "trainer_channel"]
