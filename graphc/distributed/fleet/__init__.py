"""The seeds' fleet API for collective training: ``fleet.init(is_collective=True)``,
``fleet.distributed_optimizer(opt, strategy).minimize(loss)``, then ``Executor.run`` of the
main program trains across every process and device, each process feeding its own batch.

``minimize`` attaches a data-parallel CompiledProgram (the strategy's BuildStrategy, every
device of every process) to the program, so ``exe.run(main_program, ...)`` as the seeds write
it runs that; ``fleet.main_program`` is that program. ``fleet.init()`` without
``is_collective`` is Paddle 2.0's parameter-server mode (parameter_server.py).
"""

from __future__ import annotations

import logging

from ...ir.default_programs import default_main_program, default_startup_program
from ...ir.errors import GraphcError
from ..strategy import PARAMETER_SERVER, DistributedStrategy

log = logging.getLogger("graphc.distributed")

# (main_program and startup_program are module attributes too: see __getattr__ below)
__all__ = ["DistributedStrategy", "barrier_worker", "distributed_optimizer", "init",
           "init_server", "init_worker", "is_first_worker", "is_server", "is_worker",
           "run_server", "server_index", "server_num", "stop_worker", "worker_index",
           "worker_num"]

# process: Paddle's fleet is one object per process (fleet.init, then fleet.main_program);
# "ps": the parameter-server fleet this process runs in 2.0's parameter-server mode
_FLEET: dict = {"initialized": False, "main": None, "startup": None, "ps": None}


class FleetError(GraphcError):
    """The fleet API was used in an order or mode graphc does not support."""


def init(role_maker=None, is_collective: bool = False, strategy=None) -> None:
    """Join the job (graphc.distributed.init) when ``is_collective`` or the role maker says so
    (``PaddleCloudRoleMaker(is_collective=True)``); otherwise this process is a server or a
    worker of a parameter-server job (Paddle 2.0's default), its role from ``role_maker``
    (default: ``PaddleCloudRoleMaker()``, Paddle's variables, as fleetrun sets them)."""
    is_collective = is_collective or bool(getattr(role_maker, "_is_collective", False))
    if not is_collective:
        from ...fluid.incubate.fleet.parameter_server.distribute_transpiler import (
            FleetTranspiler,
        )
        from .base.role_maker import PaddleCloudRoleMaker
        ps = FleetTranspiler()
        ps.init(role_maker if role_maker is not None else PaddleCloudRoleMaker())
        _FLEET.update(initialized=True, ps=ps)
        return
    from .. import init as init_distributed
    init_distributed()
    _FLEET.update(initialized=True, ps=None)


def _require_init() -> None:
    if not _FLEET["initialized"]:
        raise FleetError("call fleet.init(is_collective=True) first")


def worker_index() -> int:
    if _FLEET["ps"] is not None:
        return _FLEET["ps"].worker_index()
    from .. import worker_index as index
    return index()


def worker_num() -> int:
    if _FLEET["ps"] is not None:
        return _FLEET["ps"].worker_num()
    from .. import worker_num as num
    return num()


def is_first_worker() -> bool:
    return is_worker() and worker_index() == 0


def barrier_worker() -> None:
    if _FLEET["ps"] is not None:
        return _FLEET["ps"]._need_role().barrier_worker()
    from .. import barrier
    barrier()


# -- parameter-server mode (collective: every process is a worker, no server) ---------------
def _ps(call: str):
    if _FLEET["ps"] is None:
        raise FleetError(f"fleet.{call}() is for parameter-server jobs: call fleet.init() "
                         "without is_collective first")
    return _FLEET["ps"]


def is_worker() -> bool:
    return True if _FLEET["ps"] is None else _FLEET["ps"].is_worker()


def is_server() -> bool:
    return False if _FLEET["ps"] is None else _FLEET["ps"].is_server()


def server_num() -> int:
    return 0 if _FLEET["ps"] is None else _FLEET["ps"].server_num()


def server_index() -> int:
    return _ps("server_index").server_index()


def init_worker() -> None:
    """A parameter-server worker's; nothing to start in a collective job."""
    if _FLEET["ps"] is not None:
        _FLEET["ps"].init_worker()


def stop_worker() -> None:
    """This worker takes no more steps (the servers stop waiting for it)."""
    if _FLEET["ps"] is not None:
        _FLEET["ps"].stop_worker()


def init_server(*args, **kwargs) -> None:
    """Run the server's startup program (``init_server(model_dir)``: then load a checkpoint
    ``save_persistables`` wrote)."""
    _ps("init_server").init_server(*args, **kwargs)


def run_server():
    """Serve until every worker stopped."""
    return _ps("run_server").run_server()


def save_persistables(executor, dirname, main_program=None, **kwargs):
    """Parameter-server mode: every server writes its blocks to ``dirname``."""
    return _ps("save_persistables").save_persistables(executor, dirname, main_program,
                                                      **kwargs)


class DistributedOptimizer:
    """Wraps an optimizer: ``minimize`` adds backward and update ops as usual, then makes the
    program data-parallel over every device of every process with the strategy."""

    def __init__(self, optimizer, strategy: DistributedStrategy):
        self.inner_opt, self.user_defined_strategy = optimizer, strategy

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        import jax

        from ...runtime.compiled_program import CompiledProgram
        from ...runtime.run_as import DATA_PARALLEL
        _require_init()
        result = self.inner_opt.minimize(loss, startup_program, parameter_list, no_grad_set)
        program = loss.block.program
        s = self.user_defined_strategy
        bs = s.to_build_strategy(num_trainers=worker_num(),
                                 local_devices=jax.local_device_count())
        compiled = CompiledProgram(program, build_strategy=bs,
                                   exec_strategy=s.execution_strategy)
        compiled.with_data_parallel(loss_name=loss.name, places=None)
        DATA_PARALLEL.bind(program, compiled)  # Executor.run(program) runs this
        _FLEET["main"] = program
        _FLEET["startup"] = startup_program or default_startup_program()
        return result

    def __getattr__(self, name):
        return getattr(self.inner_opt, name)


def distributed_optimizer(optimizer, strategy: DistributedStrategy | None = None
                          ) -> DistributedOptimizer:
    _require_init()
    if not callable(getattr(optimizer, "minimize", None)):
        raise FleetError("distributed_optimizer: optimizer must be an optimizer (e.g. "
                         f"fluid.optimizer.SGD(0.1)), got {type(optimizer).__name__}")
    strategy = strategy if strategy is not None else DistributedStrategy()
    if not isinstance(strategy, DistributedStrategy):
        raise FleetError("strategy must be a fleet.DistributedStrategy, got "
                         f"{type(strategy).__name__}")
    if _FLEET["ps"] is not None:
        from .parameter_server import ParameterServerOptimizer, transpiler_strategy
        ps = _FLEET["ps"]
        return ParameterServerOptimizer(
            ps, ps.distributed_optimizer(optimizer, transpiler_strategy(strategy, FleetError)))
    explicit = [f for f in PARAMETER_SERVER if f in strategy.model_fields_set
                and getattr(strategy, f)]
    if explicit:
        raise FleetError(f"DistributedStrategy.{explicit[0]} is a parameter-server option; "
                         "this job is collective (fleet.init(is_collective=True)): leave it "
                         "unset, or call fleet.init() for parameter-server training")
    if strategy.auto:
        log.warning("DistributedStrategy.auto: graphc does not tune strategies; the fields "
                    "are used as given")
    return DistributedOptimizer(optimizer, strategy)


def __getattr__(name: str):
    # fleet.main_program / fleet.startup_program, as module attributes (Paddle spells them so)
    if name in ("main_program", "startup_program") and _FLEET["ps"] is not None:
        ps_program = getattr(_FLEET["ps"], name)
        if ps_program is not None:
            return ps_program
    if name == "main_program":
        return _FLEET["main"] if _FLEET["main"] is not None else default_main_program()
    if name == "startup_program":
        return _FLEET["startup"] if _FLEET["startup"] is not None \
            else default_startup_program()
    if name in ("PaddleCloudRoleMaker", "UserDefinedRoleMaker", "Role"):
        from .base import role_maker  # Paddle 2.0 exports them from fleet too
        return getattr(role_maker, name)
    raise AttributeError(f"module 'graphc.distributed.fleet' has no attribute '{name}'")
