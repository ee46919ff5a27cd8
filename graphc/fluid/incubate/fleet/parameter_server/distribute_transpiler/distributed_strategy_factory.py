"""``DistributedStrategyFactory``: the name the CPU best-practice guide imports the strategy
factory by (``...distribute_transpiler.distributed_strategy_factory``)."""

from .distributed_strategy import StrategyFactory as DistributedStrategyFactory

__all__ = ["DistributedStrategyFactory"]
