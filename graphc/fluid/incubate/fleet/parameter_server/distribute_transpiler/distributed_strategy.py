"""Paddle 1.8's parameter-server strategies: ``StrategyFactory.create_sync_strategy()`` & co.,
each a DistributeTranspilerConfig (``get_program_config``) plus runtime configs."""

from __future__ import annotations

import os

from ......fluid.transpiler import DistributeTranspilerConfig
from ......strategy import (  # noqa: F401  StrategyError: Paddle scripts import it from here
    BuildStrategy,
    ExecutionStrategy,
    ReduceStrategy,
    StrategyError,
)


def _cpu_num() -> int:
    try:
        return int(os.environ.get("CPU_NUM", "1"))
    except ValueError:
        return 1


class TrainerRuntimeConfig:
    """The trainer communicator's flags (``FLAGS_communicator_*``), as Paddle 1.8 reads them.
    graphc's trainers send one packed buffer per server per step, so the queue / merge /
    thread fields are kept for inspection and do not change how graphc runs."""

    def __init__(self):
        n = str(_cpu_num())
        self.mode = None
        self.runtime_configs = {
            "communicator_max_merge_var_num": os.getenv("FLAGS_communicator_max_merge_var_num", n),
            "communicator_send_queue_size": os.getenv("FLAGS_communicator_send_queue_size", n),
            "communicator_independent_recv_thread": os.getenv(
                "FLAGS_communicator_independent_recv_thread", "1"),
            "communicator_min_send_grad_num_before_recv": os.getenv(
                "FLAGS_communicator_min_send_grad_num_before_recv", n),
            "communicator_thread_pool_size": os.getenv("FLAGS_communicator_thread_pool_size",
                                                       "5"),
            "communicator_send_wait_times": os.getenv("FLAGS_communicator_send_wait_times", "5"),
            "communicator_is_sgd_optimizer": os.getenv("FLAGS_communicator_is_sgd_optimizer",
                                                       "1"),
            "rpc_deadline": os.getenv("FLAGS_rpc_deadline", "180000"),
            "rpc_retry_times": os.getenv("FLAGS_rpc_retry_times", "3"),
        }

    def get_communicator_flags(self) -> dict:
        return dict(self.runtime_configs)

    def display(self, configs) -> str:
        return "\n".join(f"{k}: {v}" for k, v in configs.items())

    def __repr__(self) -> str:
        return self.display(self.get_communicator_flags())


class ServerRuntimeConfig:
    """The server's RPC thread counts (``FLAGS_rpc_*_thread_num``, default 12); graphc's
    servers are single MPI ranks, so these are kept for inspection only."""

    def __init__(self):
        self._rpc_send_thread_num = int(os.getenv("FLAGS_rpc_send_thread_num", "12"))
        self._rpc_get_thread_num = int(os.getenv("FLAGS_rpc_get_thread_num", "12"))
        self._rpc_prefetch_thread_num = int(os.getenv("FLAGS_rpc_prefetch_thread_num", "12"))


class DistributedStrategy:
    """A program config, trainer/server runtime configs, a BuildStrategy and an
    ExecutionStrategy; the subclasses set Paddle's values."""

    def __init__(self):
        self._program_config = DistributeTranspilerConfig()
        self._trainer_runtime_config = TrainerRuntimeConfig()
        self._server_runtime_config = ServerRuntimeConfig()
        self._execute_strategy = ExecutionStrategy()
        self._build_strategy = BuildStrategy()
        self._execute_strategy.num_threads = _cpu_num()
        if _cpu_num() > 1:
            self._build_strategy.reduce_strategy = ReduceStrategy.Reduce

    def get_program_config(self) -> DistributeTranspilerConfig:
        return self._program_config

    def set_program_config(self, config) -> None:
        """A DistributeTranspilerConfig, or a dict of its fields."""
        if isinstance(config, DistributeTranspilerConfig):
            self._program_config = config
        elif isinstance(config, dict):
            for key, value in config.items():
                if not hasattr(self._program_config, key):
                    raise StrategyError(f"DistributeTranspilerConfig has no field '{key}'")
                setattr(self._program_config, key, value)
        else:
            raise StrategyError("set_program_config takes a DistributeTranspilerConfig or a "
                                f"dict, got {type(config).__name__}")
        self.check_program_config()

    def check_program_config(self) -> None:
        """Each strategy re-asserts its own fields (as Paddle does)."""

    def get_trainer_runtime_config(self) -> TrainerRuntimeConfig:
        return self._trainer_runtime_config

    def set_trainer_runtime_config(self, config) -> None:
        if isinstance(config, TrainerRuntimeConfig):
            self._trainer_runtime_config = config
        elif isinstance(config, dict):
            self._trainer_runtime_config.runtime_configs.update(config)
        else:
            raise StrategyError("set_trainer_runtime_config takes a TrainerRuntimeConfig or a "
                                f"dict, got {type(config).__name__}")

    def get_server_runtime_config(self) -> ServerRuntimeConfig:
        return self._server_runtime_config

    def get_build_strategy(self) -> BuildStrategy:
        return self._build_strategy

    def get_execute_strategy(self) -> ExecutionStrategy:
        return self._execute_strategy


class SyncStrategy(DistributedStrategy):
    """Synchronous training: every step applies the mean of every trainer's gradients."""

    def __init__(self):
        super().__init__()
        self.check_program_config()

    def check_program_config(self) -> None:
        c = self._program_config
        c.runtime_split_send_recv = False
        c.sync_mode = True
        c.geo_sgd_mode = False


class AsyncStrategy(DistributedStrategy):
    def __init__(self):
        super().__init__()
        self.check_program_config()

    def check_program_config(self) -> None:
        c = self._program_config
        c.sync_mode = False
        c.runtime_split_send_recv = True
        c.geo_sgd_mode = False


class HalfAsyncStrategy(AsyncStrategy):
    def check_program_config(self) -> None:
        super().check_program_config()
        self._program_config.half_async = True


class GeoStrategy(DistributedStrategy):
    def __init__(self, update_frequency: int = 100):
        super().__init__()
        self._program_config.geo_sgd_need_push_nums = int(update_frequency)
        self.check_program_config()

    def check_program_config(self) -> None:
        c = self._program_config
        c.sync_mode = False
        c.runtime_split_send_recv = True
        c.geo_sgd_mode = True


class StrategyFactory:
    @staticmethod
    def create_sync_strategy() -> SyncStrategy:
        return SyncStrategy()

    @staticmethod
    def create_half_async_strategy() -> HalfAsyncStrategy:
        return HalfAsyncStrategy()

    @staticmethod
    def create_async_strategy() -> AsyncStrategy:
        return AsyncStrategy()

    @staticmethod
    def create_geo_strategy(update_frequency: int = 100) -> GeoStrategy:
        return GeoStrategy(update_frequency)
