"""``fluid.DistributeTranspiler`` and ``DistributeTranspilerConfig`` with Paddle 1.8's fields and
defaults, adapting graphc.distributed.pserver (the ps-* passes, the MPI runtime)."""

from __future__ import annotations

import logging

from ...distributed.pserver import PServerError, Transpiler, start_trainer
from ...ir.default_programs import default_main_program, default_startup_program
from ...ir.program import Program
from .ps_dispatcher import PSDispatcher, RoundRobin

log = logging.getLogger("graphc.fluid.transpiler")
MODES = ("pserver", "nccl2", "collective")


class DistributeTranspilerConfig:
    """Paddle's fields, defaults and checks. ``sync_mode`` and ``runtime_split_send_recv``
    exclude each other (setting one True while the other is True raises ValueError)."""

    slice_var_up = True
    split_method = None  # RoundRobin
    min_block_size = 8192
    enable_dc_asgd = False
    mode = "pserver"
    print_log = False
    wait_port = True
    half_async = False
    completely_not_async = False
    geo_sgd_mode = False
    geo_sgd_need_push_nums = 100
    nccl_comm_num = 1
    use_hierarchical_allreduce = False
    hierarchical_allreduce_inter_nranks = 0
    collective_mode = None

    def __init__(self):
        self._runtime_split_send_recv = False
        self._sync_mode = True

    @property
    def runtime_split_send_recv(self) -> bool:
        return self._runtime_split_send_recv

    @runtime_split_send_recv.setter
    def runtime_split_send_recv(self, value: bool) -> None:
        if value is None:
            raise ValueError("runtime_split_send_recv can not be None")
        if value and self._sync_mode:
            raise ValueError("if you want to set runtime_split_send_recv to be true, make "
                             "ensure config.sync_mode is false at first")
        self._runtime_split_send_recv = bool(value)

    @property
    def sync_mode(self) -> bool:
        return self._sync_mode

    @sync_mode.setter
    def sync_mode(self, value: bool) -> None:
        if value is None:
            raise ValueError("sync_mode can not be None")
        if value and self._runtime_split_send_recv:
            raise ValueError("if you want to set sync_mode to be true, make ensure "
                             "config.runtime_split_send_recv is false at first")
        self._sync_mode = bool(value)


def _check_config(config: DistributeTranspilerConfig) -> type[PSDispatcher]:
    if config.min_block_size < 8192:
        raise ValueError(f"DistributeTranspilerConfig.min_block_size must be >= 8192, got "
                         f"{config.min_block_size}")
    method = config.split_method or RoundRobin
    if not (isinstance(method, type) and issubclass(method, PSDispatcher)):
        raise TypeError("DistributeTranspilerConfig.split_method must be RoundRobin or "
                        f"HashName (a PSDispatcher class), got {method!r}")
    if config.mode not in MODES:
        raise ValueError(f"DistributeTranspilerConfig.mode must be one of {list(MODES)}, got "
                         f"{config.mode!r}")
    return method


def _loss_name(program: Program) -> str | None:
    """The loss ``minimize`` differentiated: the variable whose gradient the backward pass
    seeds with ones (data-parallel scales that seed by 1/replicas)."""
    for op in program.global_block().ops:
        if op.type == "fill_constant" and op.role == "backward":
            out = op.output_arg_names[0]
            if out.endswith("@GRAD"):
                return out[:-len("@GRAD")]
    return None


class DistributeTranspiler:
    """``DistributeTranspiler(config).transpile(trainer_id, program=, pservers=, trainers=,
    sync_mode=, startup_program=, current_endpoint=)``, then ``get_trainer_program()`` on a
    trainer and ``get_pserver_programs(endpoint)`` on a server."""

    def __init__(self, config: DistributeTranspilerConfig | None = None):
        self.config = config if config is not None else DistributeTranspilerConfig()
        self._method = _check_config(self.config)
        self._impl: Transpiler | None = None

    def transpile(self, trainer_id, program=None, pservers="127.0.0.1:6174", trainers=1,
                  sync_mode=True, startup_program=None, current_endpoint="127.0.0.1:6174"):
        cfg = self.config
        self._method = _check_config(cfg)
        program = program if program is not None else default_main_program()
        startup = startup_program if startup_program is not None else default_startup_program()
        if not isinstance(program, Program):
            raise TypeError(f"program must be a Program, got {type(program).__name__}")
        self.origin_program, self.startup_program = program, startup
        self.trainer_id = int(trainer_id)
        if cfg.mode in ("nccl2", "collective"):
            return self._transpile_collective(trainers, current_endpoint)
        # Paddle's mode selection: SYNC if sync_mode or completely_not_async, else ASYNC
        # (HALF_ASYNC with half_async: trainers never wait for each other, each waits for its
        # own update)
        sync = bool(sync_mode and cfg.sync_mode) or bool(cfg.completely_not_async)
        if cfg.enable_dc_asgd and (sync or cfg.geo_sgd_mode):
            raise PServerError("enable_dc_asgd needs async training (sync_mode=False, "
                               "geo_sgd_mode=False), as in Paddle")
        geo = None
        if cfg.geo_sgd_mode:
            geo = int(cfg.geo_sgd_need_push_nums)
            if geo < 1:
                raise ValueError(f"geo_sgd_need_push_nums must be >= 1, got {geo}")
        endpoints = [e.strip() for e in str(pservers).split(",") if e.strip()]
        if not isinstance(trainers, int):
            raise TypeError(f"in pserver mode trainers is the number of trainers (an int), "
                            f"got {trainers!r}")
        self.pserver_endpoints, self.trainer_num = endpoints, trainers
        self.sync_mode = sync
        # async trainers do not wait for the update of their own gradients (Paddle's
        # communicator); half-async ones do (each step sends, then takes the new blocks)
        self._pipelined = not sync and geo is None and not cfg.half_async
        self._impl = Transpiler(endpoints, trainers, self.trainer_id, sync_mode=sync,
                                slice_var_up=cfg.slice_var_up,
                                min_block_size=cfg.min_block_size,
                                split_method=self._method.method,
                                geo_push_nums=geo,
                                dc_asgd=bool(cfg.enable_dc_asgd)).transpile(program, startup)
        if cfg.print_log:
            log.warning("trainer graph:\n%s", self._impl.trainer_graph)

    def _transpile_collective(self, trainers, current_endpoint):
        """nccl2 / collective: every trainer keeps the whole model and all-reduces gradients:
        graphc's collective path (data-parallel over every device of every process). A
        trainer of several joins their job here (graphc.distributed.join_trainers), at
        the first of ``trainers``' endpoints unless a launcher (mpirun) started it."""
        from ...distributed import join_trainers
        from ...runtime.compiled_program import CompiledProgram
        from ...runtime.run_as import DATA_PARALLEL
        from ...strategy import BuildStrategy
        eps = trainers.split(",") if isinstance(trainers, str) else None
        self.trainer_endpoints, self.current_endpoint = eps, current_endpoint
        env = join_trainers(self.trainer_id, trainers, current_endpoint)
        bs = BuildStrategy()
        bs.num_trainers = env.size
        bs.trainer_id = self.trainer_id
        bs.use_hierarchical_allreduce = self.config.use_hierarchical_allreduce
        bs.hierarchical_allreduce_inter_nranks = self.config.hierarchical_allreduce_inter_nranks
        compiled = CompiledProgram(self.origin_program, build_strategy=bs)
        compiled.with_data_parallel(loss_name=_loss_name(self.origin_program), places=None)
        DATA_PARALLEL.bind(self.origin_program, compiled)  # exe.run(program) runs this

    def _require(self) -> Transpiler:
        if self._impl is None:
            raise PServerError("call transpile(...) in pserver mode first")
        return self._impl

    def get_trainer_program(self, wait_port: bool = True) -> Program:
        """The trainer program; running it exchanges blocks with the servers (over MPI)."""
        impl = self._require()
        start_trainer(impl.trainer_id, impl.endpoints, impl.trainers, self._pipelined)
        return impl.trainer_program()

    def get_trainer_startup_program(self) -> Program:
        """graphc's addition: the startup program that pulls the initial parameters from the
        servers (Paddle appends these ops to the default startup program in place; graphc
        leaves the user's program alone, whose local values equal the servers' anyway)."""
        impl = self._require()
        start_trainer(impl.trainer_id, impl.endpoints, impl.trainers, self._pipelined)
        return impl.trainer_startup()

    def get_pserver_program(self, endpoint: str) -> Program:
        """The server program of ``endpoint``: run it with graphc.distributed.pserver.serve
        (or fleet.run_server)."""
        return self._require().server_program(endpoint)

    def get_startup_program(self, endpoint: str, pserver_program: Program | None = None,
                            startup_program: Program | None = None) -> Program:
        return self._require().server_startup(endpoint)

    def get_pserver_programs(self, endpoint: str) -> tuple[Program, Program]:
        return self.get_pserver_program(endpoint), self.get_startup_program(endpoint)
