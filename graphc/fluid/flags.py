"""``fluid.set_flags`` / ``get_flags``: Paddle 1.8's public ``FLAGS_*`` switches, kept for
``get_flags`` but without effect on XLA; a misspelt flag is an error naming the nearest one."""

from __future__ import annotations

import difflib
import logging

from ..ir.errors import GraphcError

_log = logging.getLogger("graphc.fluid")


class FlagError(GraphcError, ValueError):
    """``set_flags`` / ``get_flags`` with a name that is not one of Paddle 1.8's public
    flags (a misspelling), or arguments of the wrong type."""


class FlagTypeError(FlagError, TypeError):
    """``set_flags`` given no dict, ``get_flags`` no name or list of names: a TypeError, as
    Paddle 1.8 raises (a FlagError too)."""


# Paddle 1.8's public flags (those its set_flags accepts) and their defaults
PUBLIC_FLAGS: dict[str, object] = {
    "FLAGS_eager_delete_tensor_gb": 0.0, "FLAGS_enable_parallel_graph": False,
    "FLAGS_allocator_strategy": "auto_growth", "FLAGS_use_system_allocator": False,
    "FLAGS_check_nan_inf": False, "FLAGS_cpu_deterministic": False,
    "FLAGS_enable_rpc_profiler": False, "FLAGS_multiple_of_cupti_buffer_size": 1,
    "FLAGS_reader_queue_speed_test_mode": False, "FLAGS_pe_profile_fname": "",
    "FLAGS_print_sub_graph_dir": "", "FLAGS_fraction_of_cpu_memory_to_use": 1.0,
    "FLAGS_fuse_parameter_groups_size": 3, "FLAGS_fuse_parameter_memory_size": -1.0,
    "FLAGS_init_allocated_mem": False, "FLAGS_initial_cpu_memory_in_mb": 500,
    "FLAGS_memory_fraction_of_eager_deletion": 1.0, "FLAGS_use_pinned_memory": True,
    "FLAGS_benchmark": False, "FLAGS_inner_op_parallelism": 0,
    "FLAGS_tracer_profile_fname": "xxgperf", "FLAGS_paddle_num_threads": 1,
    "FLAGS_gpu_memory_limit_mb": 0, "FLAGS_cudnn_deterministic": False,
    "FLAGS_conv_workspace_size_limit": 512, "FLAGS_cudnn_batchnorm_spatial_persistent": False,
    "FLAGS_cudnn_exhaustive_search": False, "FLAGS_eager_delete_scope": True,
    "FLAGS_fast_eager_deletion_mode": True, "FLAGS_fraction_of_cuda_pinned_memory_to_use": 0.5,
    "FLAGS_fraction_of_gpu_memory_to_use": 0.92, "FLAGS_initial_gpu_memory_in_mb": 0,
    "FLAGS_reallocate_gpu_memory_in_mb": 0, "FLAGS_enable_cublas_tensor_op_math": False,
    "FLAGS_selected_gpus": "", "FLAGS_sync_nccl_allreduce": True,
}


class Flags:
    """The values set_flags was given (one per process, as Paddle's are global)."""

    def __init__(self):
        self.values: dict[str, object] = {}


# process: Paddle's global FLAGS_* (set_flags)
FLAGS = Flags()


def _check_name(name, caller: str) -> str:
    if not isinstance(name, str) or not name.startswith("FLAGS_"):
        raise FlagError(f"{caller}: {name!r} is not a Paddle flag name (FLAGS_...)")
    if name not in PUBLIC_FLAGS:
        near = difflib.get_close_matches(name, PUBLIC_FLAGS, n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise FlagError(f"{caller}: {name} is not one of Paddle 1.8's public flags: it "
                        f"cannot be set, so it was never set{hint}")
    return name


def set_flags(flags: dict) -> None:
    """Keep Paddle's global ``FLAGS_*`` switches (``get_flags`` returns them); they have no
    effect on XLA, which is logged once per flag. All names are checked before any is kept."""
    if not isinstance(flags, dict):
        raise FlagTypeError(f"set_flags: flags must be a dict, got {type(flags).__name__}")
    for name in flags:
        _check_name(name, "set_flags")
    for name, value in flags.items():
        if name not in FLAGS.values:
            _log.warning("%s has no effect on graphc's XLA backend (kept for get_flags)", name)
        FLAGS.values[name] = value


def get_flags(flags) -> dict:
    """The values of a flag name or a list/tuple of them: what set_flags kept, else Paddle's
    default."""
    if not isinstance(flags, str | list | tuple):
        raise FlagTypeError(f"get_flags: flags must be a name or a list/tuple of names, got "
                        f"{type(flags).__name__}")
    names = [_check_name(n, "get_flags") for n in ([flags] if isinstance(flags, str)
                                                    else list(flags))]
    return {n: FLAGS.values.get(n, PUBLIC_FLAGS[n]) for n in names}
