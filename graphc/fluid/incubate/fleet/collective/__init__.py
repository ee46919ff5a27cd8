"""``fluid.incubate.fleet.collective``: Paddle 1.8's collective ``fleet`` and
``DistributedStrategy``, run by graphc.distributed's fleet (data parallel over every device
of every process)."""

from __future__ import annotations

from .....distributed import fleet as _fleet
from .....distributed.strategy import DistributedStrategy
from ...._missing import advice_for, missing

__all__ = ["Collective", "DistributedStrategy", "fleet"]


class Collective:
    """The object Paddle 1.8 scripts call ``fleet``: ``fleet.init(role)``,
    ``fleet.distributed_optimizer(opt, strategy).minimize(loss)``, ``fleet.main_program``."""

    def init(self, role_maker=None) -> None:
        if role_maker is not None and not getattr(role_maker, "_is_collective", True):
            raise _fleet.FleetError(
                f"fleet.init({type(role_maker).__name__}(is_collective=False)): "
                f"{advice_for('transpiler')}")
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
        from .....runtime.checkpoint import save_persistables
        return save_persistables(executor, dirname, main_program or self.main_program)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise missing("graphc.fluid.incubate.fleet.collective.fleet", name)


fleet = Collective()


def __getattr__(name: str):
    raise missing(__name__, name)
