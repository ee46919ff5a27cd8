"""``fluid.incubate.fleet.collective``: Paddle 1.8's collective ``fleet`` and
``DistributedStrategy``, run by graphc.distributed's fleet (data parallel over every device
of every process)."""

from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr

from .....distributed import fleet as _fleet
from .....distributed.strategy import DistributedStrategy as _FleetStrategy
from .....strategy import StrategyError
from ...._missing import missing

__all__ = ["Collective", "DistributedStrategy", "fleet"]


# Paddle 1.8's incubate-only fields: name -> (default, values graphc runs); others refused
_INCUBATE_FIELDS: dict[str, tuple[Any, tuple]] = {
    "mode": ("nccl2", ("nccl2", "collective")),  # both are all-reduce data parallelism here
    "collective_mode": (None, (None, "grad_allreduce")),
    "use_local_sgd": (False, (False,)),
    "use_dgc": (False, (False,)),
    "use_dist_fc": (False, (False,)),
    "forward_recompute": (False, (False,)),
    "dist_fc_config": (None, None),  # None: any value (only read with use_dist_fc)
    "recompute_checkpoints": ([], None),
}


class DistributedStrategy(_FleetStrategy):
    """Paddle 1.8's ``incubate.fleet.collective.DistributedStrategy``: a BuildStrategy (its
    fields go to ``build_strategy``) with collective fields. ``use_amp`` and
    ``amp_loss_scaling`` are graphc's ``amp`` / ``amp_configs.init_loss_scaling``,
    ``exec_strategy`` is ``execution_strategy``; local SGD, DGC, distributed fc and recompute
    are refused (StrategyError) rather than ignored."""

    _incubate: dict = PrivateAttr(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "use_amp":
            super().__setattr__("amp", value)
        elif name == "amp_loss_scaling":
            self.amp_configs.init_loss_scaling = value
        elif name == "exec_strategy":
            super().__setattr__("execution_strategy", value)
        elif name in _INCUBATE_FIELDS:
            allowed = _INCUBATE_FIELDS[name][1]
            if allowed is not None and value not in allowed:
                raise StrategyError(f"DistributedStrategy.{name} = {value!r} is not supported "
                                    "by graphc, which runs all-reduce data parallelism; "
                                    f"accepted: {', '.join(map(repr, allowed))}")
            self._incubate[name] = value
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        if name == "use_amp":
            return self.amp
        if name == "amp_loss_scaling":
            return self.amp_configs.init_loss_scaling
        if name == "exec_strategy":
            return self.execution_strategy
        if name in _INCUBATE_FIELDS:
            return self.__pydantic_private__["_incubate"].get(name, _INCUBATE_FIELDS[name][0])
        return super().__getattr__(name)


class Collective:
    """The object Paddle 1.8 scripts call ``fleet``: ``fleet.init(role)``,
    ``fleet.distributed_optimizer(opt, strategy).minimize(loss)``, ``fleet.main_program``."""

    def init(self, role_maker=None) -> None:
        from ..base.role_maker import RoleMakerBase
        if role_maker is not None and not isinstance(role_maker, RoleMakerBase):
            raise _fleet.FleetError(f"fleet.init: role_maker must be a role maker (e.g. "
                                    "role_maker.PaddleCloudRoleMaker(is_collective=True)), "
                                    f"got {type(role_maker).__name__}")
        if role_maker is not None and not getattr(role_maker, "_is_collective", True):
            raise _fleet.FleetError(
                f"fleet.init({type(role_maker).__name__}(is_collective=False)): a "
                "parameter-server role; this is the collective fleet: use the "
                "parameter-server fleet (fluid.incubate.fleet.parameter_server."
                "distribute_transpiler.fleet) or fluid.DistributeTranspiler "
                "(docs/parameter_server.md)")
        _fleet.init(role_maker, is_collective=True)

    def distributed_optimizer(self, optimizer, strategy=None):
        return _fleet.distributed_optimizer(optimizer, strategy)

    @property
    def main_program(self):
        return _fleet.main_program

    @property
    def startup_program(self):
        return _fleet.startup_program

    def worker_index(self) -> int:
        return _fleet.worker_index()

    def worker_num(self) -> int:
        return _fleet.worker_num()

    def is_first_worker(self) -> bool:
        return _fleet.is_first_worker()

    def is_worker(self) -> bool:
        return True

    def is_server(self) -> bool:
        return False

    def barrier_worker(self) -> None:
        _fleet.barrier_worker()

    def init_worker(self) -> None:
        """Nothing to start: collective workers need no servers."""

    def stop_worker(self) -> None:
        """Nothing to stop: collective workers need no servers."""

    def save_persistables(self, executor, dirname, main_program=None, filename=None):
        """As ``fluid.io.save_persistables`` (``filename``: the ``dirname/filename``
        sub-checkpoint), of the fleet's main program by default."""
        from .....dataio.saving import save_persistables
        return save_persistables(executor, dirname, main_program or self.main_program,
                                 filename=filename)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise missing("graphc.fluid.incubate.fleet.collective.fleet", name)


fleet = Collective()


def __getattr__(name: str):
    raise missing(__name__, name)
