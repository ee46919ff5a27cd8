"""The seeds' fleet API for collective training: ``fleet.init(is_collective=True)``,
``fleet.distributed_optimizer(opt, strategy).minimize(loss)``, then ``Executor.run`` of the
main program trains across every process and device, each process feeding its own batch.

``minimize`` attaches a data-parallel CompiledProgram (the strategy's BuildStrategy, every
device of every process) to the program, so ``exe.run(main_program, ...)`` as the seeds write
it runs that; ``fleet.main_program`` is that program.
"""

from __future__ import annotations

import logging

from ...ir.default_programs import default_main_program, default_startup_program
from ...ir.errors import GraphcError
from ..strategy import PARAMETER_SERVER, DistributedStrategy

log = logging.getLogger("graphc.distributed")

# (main_program and startup_program are module attributes too: see __getattr__ below)
__all__ = ["DistributedStrategy", "distributed_optimizer", "init", "is_first_worker",
           "worker_index", "worker_num", "barrier_worker"]

# process: Paddle's fleet is one object per process (fleet.init, then fleet.main_program)
_FLEET: dict = {"initialized": False, "main": None, "startup": None}


class FleetError(GraphcError):
    """The fleet API was used in an order or mode graphc does not support."""


def init(role_maker=None, is_collective: bool = False, strategy=None) -> None:
    """Join the job (graphc.distributed.init): collective when ``is_collective`` or the role
    maker says so (``PaddleCloudRoleMaker(is_collective=True)``). This is the collective
    fleet: parameter-server training is the parameter-server fleet's."""
    is_collective = is_collective or bool(getattr(role_maker, "_is_collective", False))
    if not is_collective:
        raise FleetError("fleet.init(is_collective=False) asks for parameter-server training: "
                         "use the parameter-server fleet (graphc.fluid.incubate.fleet."
                         "parameter_server.distribute_transpiler.fleet, "
                         "docs/parameter_server.md) or fleet.init(is_collective=True)")
    from .. import init as init_distributed
    init_distributed()
    _FLEET["initialized"] = True


def _require_init() -> None:
    if not _FLEET["initialized"]:
        raise FleetError("call fleet.init(is_collective=True) first")


def worker_index() -> int:
    from .. import worker_index as index
    return index()


def worker_num() -> int:
    from .. import worker_num as num
    return num()


def is_first_worker() -> bool:
    return worker_index() == 0


def barrier_worker() -> None:
    from .. import barrier
    barrier()


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
    explicit = [f for f in PARAMETER_SERVER if f in strategy.model_fields_set
                and getattr(strategy, f)]
    if explicit:
        raise FleetError(f"DistributedStrategy.{explicit[0]} is a parameter-server option; "
                         "graphc runs collective training only (leave it unset)")
    if strategy.auto:
        log.warning("DistributedStrategy.auto: graphc does not tune strategies; the fields "
                    "are used as given")
    return DistributedOptimizer(optimizer, strategy)


def __getattr__(name: str):
    # fleet.main_program / fleet.startup_program, as module attributes (Paddle spells them so)
    if name == "main_program":
        return _FLEET["main"] if _FLEET["main"] is not None else default_main_program()
    if name == "startup_program":
        return _FLEET["startup"] if _FLEET["startup"] is not None \
            else default_startup_program()
    if name in ("PaddleCloudRoleMaker", "UserDefinedRoleMaker", "Role"):
        from .base import role_maker  # Paddle 2.0 exports them from fleet too
        return getattr(role_maker, name)
    raise AttributeError(f"module 'graphc.distributed.fleet' has no attribute '{name}'")
