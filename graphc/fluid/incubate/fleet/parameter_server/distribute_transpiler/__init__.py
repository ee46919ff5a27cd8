"""Paddle 1.8's parameter-server ``fleet`` (``...parameter_server.distribute_transpiler``): one
script for servers and workers, on graphc's DistributeTranspiler and MPI runtime."""

from __future__ import annotations

from ......distributed import pserver
from ......distributed.fleet import FleetError  # noqa: F401  importable from here, as before
from ......fluid.transpiler import DistributeTranspiler
from ......ir.default_programs import default_main_program, default_startup_program
from ...base.role_maker import RoleMakerBase
from . import distributed_strategy, distributed_strategy_factory  # noqa: F401
from .distributed_strategy import DistributedStrategy, StrategyFactory


class FleetTranspiler:
    """``fleet`` for parameter servers: ``init(role)``, ``distributed_optimizer``, then
    ``init_server``/``run_server`` on a server and ``init_worker``/``stop_worker`` around
    training on a worker."""

    def __init__(self):
        self._role: RoleMakerBase | None = None
        self._transpiler: DistributeTranspiler | None = None
        self.main_program = None
        self.startup_program = None
        self._origin_main = self._origin_startup = None

    # -- roles -----------------------------------------------------------------------
    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        if role_maker is None:
            from ...base.role_maker import PaddleCloudRoleMaker
            role_maker = PaddleCloudRoleMaker()
        if not isinstance(role_maker, RoleMakerBase):
            raise FleetError(f"fleet.init takes a role maker, got {type(role_maker).__name__}")
        if getattr(role_maker, "_is_collective", False):
            raise FleetError("this is the parameter-server fleet; a collective role maker "
                             "goes to graphc.fluid.incubate.fleet.collective.fleet")
        role_maker.generate_role()
        self._role = role_maker

    def _need_role(self) -> RoleMakerBase:
        if self._role is None:
            raise FleetError("call fleet.init(role) first")
        return self._role

    def is_worker(self) -> bool:
        return self._need_role().is_worker()

    def is_server(self) -> bool:
        return self._need_role().is_server()

    def is_first_worker(self) -> bool:
        return self.is_worker() and self.worker_index() == 0

    def worker_index(self) -> int:
        return self._need_role().worker_index()

    def server_index(self) -> int:
        return self._need_role().server_index()

    def worker_num(self) -> int:
        return self._need_role().worker_num()

    def server_num(self) -> int:
        return self._need_role().server_num()

    def server_endpoints(self, to_string: bool = False):
        eps = self._need_role().get_pserver_endpoints()
        return ",".join(eps) if to_string else eps

    # -- building ------------------------------------------------------------------------
    def distributed_optimizer(self, optimizer, strategy=None) -> ParameterServerOptimizer:
        self._need_role()
        strategy = strategy if strategy is not None else StrategyFactory.create_sync_strategy()
        if not isinstance(strategy, DistributedStrategy):
            raise FleetError("strategy must come from StrategyFactory (a parameter-server "
                             f"DistributedStrategy), got {type(strategy).__name__}")
        return ParameterServerOptimizer(self, optimizer, strategy)

    def _transpile(self, strategy: DistributedStrategy, main, startup) -> None:
        role = self._need_role()
        config = strategy.get_program_config()
        t = DistributeTranspiler(config)
        t.transpile(max(role.worker_index(), 0), program=main, startup_program=startup,
                    pservers=self.server_endpoints(to_string=True), trainers=role.worker_num(),
                    sync_mode=config.sync_mode)
        self._transpiler, self._origin_main, self._origin_startup = t, main, startup
        if role.is_server():
            ep = self.server_endpoints()[role.server_index()]
            self.main_program, self.startup_program = t.get_pserver_programs(ep)
        else:
            self.main_program = t.get_trainer_program()
            # GEO keeps optimizer state on the trainer: its startup initialises it; every
            # mode pulls the parameters' initial values from the servers
            self.startup_program = t.get_trainer_startup_program()

    # -- running ------------------------------------------------------------------------
    def init_worker(self) -> None:
        """Trainers start their channel when the trainer program is made; nothing to wait for
        (MPI connects every rank at the first exchange)."""
        if not self.is_worker():
            raise FleetError("init_worker() is for workers; this process is a server")

    def init_server(self, model_dir=None) -> None:
        from ......runtime.executor import Executor
        if not self.is_server():
            raise FleetError("init_server() is for servers; this process is a worker")
        if self.startup_program is None:
            raise FleetError("call distributed_optimizer(...).minimize(loss) first")
        Executor().run(self.startup_program)
        if model_dir is not None:  # a checkpoint fleet.save_persistables wrote
            pserver.load_checkpoint(self.main_program, model_dir)

    def run_server(self) -> dict:
        if not self.is_server():
            raise FleetError("run_server() is for servers; this process is a worker")
        return pserver.serve(self.main_program)

    def stop_worker(self) -> None:
        """This worker takes no more steps: the servers stop waiting for it."""
        pserver.complete()

    # -- saving -------------------------------------------------------------------------
    def save_inference_model(self, executor, dirname, feeded_var_names, target_vars,
                             main_program=None, export_for_deployment=True):
        """On a worker: the parameters it holds are the servers' latest (sync mode: after
        every step), so the origin program exports as a local one would."""
        from ......dataio.saving import save_inference_model
        if not self.is_worker():
            raise FleetError("save_inference_model is for workers (they hold every "
                             "parameter); this process is a server")
        return save_inference_model(dirname, feeded_var_names, target_vars, executor,
                                    main_program or self._origin_main,
                                    export_for_deployment=export_for_deployment)

    def save_persistables(self, executor, dirname, main_program=None, **kwargs):
        """From a worker, between steps: every server writes its blocks and optimizer state
        to ``dirname`` (the shard owners' checkpoint); ``init_server(dirname)`` resumes."""
        if not self.is_worker():
            raise FleetError("save_persistables is called on a worker (usually the first); "
                             "the servers then write their own blocks")
        pserver.save_checkpoint(dirname)


class ParameterServerOptimizer:
    """``minimize`` adds backward and update ops as usual, then transpiles the program for
    this process's role (fleet.main_program / fleet.startup_program)."""

    def __init__(self, fleet_: FleetTranspiler, optimizer, strategy: DistributedStrategy):
        self._fleet, self._optimizer, self._strategy = fleet_, optimizer, strategy

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        result = self._optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        main = loss.block.program
        startup = startup_program or default_startup_program()
        self._fleet._transpile(self._strategy, main, startup)
        return result

    def __getattr__(self, name):
        return getattr(self._optimizer, name)


fleet = FleetTranspiler()

__all__ = ["FleetError", "FleetTranspiler", "ParameterServerOptimizer", "default_main_program",
           "fleet"]
