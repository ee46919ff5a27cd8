"""ParallelExecutor: the seeds' data-parallel executor, kept for users porting Paddle scripts;
a thin front end over ``CompiledProgram(...).with_data_parallel(...)`` and an Executor."""

from __future__ import annotations

import logging

from ..ir.default_programs import default_main_program
from ..ir.errors import GraphcError
from ..ir.program import Program
from ..strategy import BuildStrategy, ExecutionStrategy
from .compiled_program import CompiledProgram
from .devices import cpu_places, cuda_places, default_cpu_place_count
from .executor import Executor
from .host_services import process_services
from .places import is_compiled_with_cuda
from .scope import Scope, global_scope

log = logging.getLogger("graphc.runtime")


class ParallelExecutor:
    """``ParallelExecutor(use_cuda, loss_name=None, main_program=None, share_vars_from=None,
    exec_strategy=None, build_strategy=None, num_trainers=1, trainer_id=0, scope=None)``.

    Runs ``main_program`` on every GPU (``use_cuda=True``) or on ``CPU_NUM`` CPU devices
    (unset: one per core, with a warning, as Paddle), each on an equal slice of the batch;
    ``run(fetch_list, feed=...)`` returns the fetches
    concatenated over devices. ``share_vars_from`` (another ParallelExecutor) makes this one
    run on its devices and scope, so a test executor reads the trained parameters.
    """

    def __init__(self, use_cuda: bool, loss_name: str | None = None,
                 main_program: Program | None = None,
                 share_vars_from: ParallelExecutor | None = None,
                 exec_strategy: ExecutionStrategy | None = None,
                 build_strategy: BuildStrategy | None = None, num_trainers: int = 1,
                 trainer_id: int = 0, scope: Scope | None = None):
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise GraphcError("share_vars_from must be a ParallelExecutor, got "
                              f"{type(share_vars_from).__name__}")
        job_size = 1
        if num_trainers != 1 or trainer_id != 0:  # a trainer of several: join them first
            env = process_services().joined_job()
            size, rank, launcher = ((1, 0, "no job") if env is None
                                    else (env.size, env.rank, env.launcher))
            if (size, rank) != (num_trainers, trainer_id):
                raise GraphcError(
                    f"ParallelExecutor(num_trainers={num_trainers}, trainer_id={trainer_id}) "
                    f"but this process is trainer {rank} of {size} ({launcher}): "
                    "start each trainer with Paddle's variables (PADDLE_TRAINER_ID, "
                    "PADDLE_TRAINER_ENDPOINTS, ...) or under graphc launch")
            job_size = size
        program = main_program if main_program is not None else default_main_program()
        shared = share_vars_from._compiled if share_vars_from is not None else None
        if shared is not None:
            places = None  # the shared executor's devices (variables live on them)
            if use_cuda != share_vars_from.use_cuda:
                log.warning("use_cuda=%s differs from the executor shared from; running on "
                            "its devices", use_cuda)
            use_cuda = share_vars_from.use_cuda
        elif job_size > 1:
            places = None  # every device of every trainer
        elif use_cuda:
            if not is_compiled_with_cuda():
                raise GraphcError("use_cuda=True but JAX sees no GPU on this machine; use "
                                  "use_cuda=False (CPU_NUM sets the CPU devices)")
            places = cuda_places()
        else:
            places = cpu_places(default_cpu_place_count())  # $CPU_NUM, else every core
        self.use_cuda = use_cuda
        self._compiled = CompiledProgram(program, build_strategy=build_strategy,
                                         exec_strategy=exec_strategy).with_data_parallel(
            loss_name=loss_name, places=places, share_vars_from=shared)
        self._scope = share_vars_from._scope if share_vars_from is not None else (
            scope if scope is not None else global_scope())
        self._exe = Executor(places[0] if places else None)

    @property
    def device_count(self) -> int:
        return self._compiled.num_devices

    def run(self, fetch_list, feed=None, feed_dict=None, return_numpy: bool = True):
        """One step on every device; ``feed`` is one dict (split over the devices) or a list
        of one dict per device."""
        if feed is None and feed_dict is not None:
            feed = feed_dict
        return self._exe.run(self._compiled, feed=feed, fetch_list=fetch_list,
                             scope=self._scope, return_numpy=return_numpy)

    def drop_local_exe_scopes(self) -> None:
        """Paddle frees per-device temporaries here; graphc keeps none between runs."""
