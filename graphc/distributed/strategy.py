"""DistributedStrategy: the seeds' fleet strategy table (fields, types, defaults), validated like
BuildStrategy, saved as TOML, JSON or protobuf text (``save_to_prototxt``), and turned into the
BuildStrategy a data-parallel program compiles with."""

from __future__ import annotations

import enum
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, model_validator

from ..strategy import (
    AmpConfigs,
    BuildStrategy,
    ExecutionStrategy,
    StrategyError,
    _own_table,
    _Strategy,
    read_strategy_text,
    warn_no_effect,
)

log = logging.getLogger("graphc.distributed")

# Fields graphc accepts for scripts written for NCCL/cuDNN and documents as without effect
# on its XLA backend (XLA picks convolution algorithms and runs collectives itself).
GPU_ONLY = ("sync_nccl_allreduce", "nccl_comm_num", "cudnn_exhaustive_search",
            "conv_workspace_size_limit", "cudnn_batchnorm_spatial_persistent")
# Fields of parameter-server training, which graphc does not have yet.
PARAMETER_SERVER = ("a_sync", "a_sync_configs")
_NESTED = {"build_strategy": BuildStrategy, "execution_strategy": ExecutionStrategy,
           "amp_configs": AmpConfigs}
# The fleet guide writes ``dist_strategy.BuildStrategy = {'num_iteration_per_drop_scope': 30}``
# (its own misspelling of build_strategy, with an ExecutionStrategy field in it): accepted,
# with a warning that names the field meant and where each key went.
_MISSPELT = {"BuildStrategy": "build_strategy", "ExecutionStrategy": "execution_strategy"}


class DistributedStrategy(_Strategy):
    """How a fleet job trains (the seeds' DistributedStrategy table).

    A BuildStrategy field set directly (``dist_strategy.fuse_bn_act_ops = True``, as the seeds
    do) goes to ``build_strategy``. The collective fields here win over ``build_strategy``'s
    of the same name when the job compiles (``to_build_strategy``).
    """

    kind: ClassVar[str] = "distributed_strategy"

    auto: bool = False
    a_sync: bool = True  # parameter-server only: an error if set explicitly (see fleet)
    a_sync_configs: dict[str, Any] = Field(default_factory=dict)
    sync_nccl_allreduce: bool = True
    nccl_comm_num: int = Field(1, ge=1)
    use_hierarchical_allreduce: bool = False
    hierarchical_allreduce_inter_nranks: int = Field(1, ge=0)
    sync_batch_norm: bool = False
    fuse_all_reduce_ops: bool = True
    fuse_grad_size_in_MB: float = Field(32.0, gt=0)
    fuse_grad_size_in_TFLOPS: float = Field(20.0, ge=0)
    cudnn_exhaustive_search: bool = True
    conv_workspace_size_limit: int = Field(4000, ge=0)
    cudnn_batchnorm_spatial_persistent: bool = True
    thread_num: int = Field(1, ge=1)
    amp: bool = False
    amp_configs: AmpConfigs = Field(default_factory=AmpConfigs)
    build_strategy: BuildStrategy = Field(default_factory=BuildStrategy)
    execution_strategy: ExecutionStrategy = Field(default_factory=ExecutionStrategy)

    NO_EFFECT: ClassVar[dict[str, str]] = {
        "sync_nccl_allreduce": "XLA orders its collectives (NCCL)",
        "nccl_comm_num": "XLA chooses its communicators (NCCL)",
        "cudnn_exhaustive_search": "XLA picks convolution algorithms (cuDNN)",
        "conv_workspace_size_limit": "XLA sizes convolution workspaces (cuDNN)",
        "cudnn_batchnorm_spatial_persistent": "XLA picks batch-norm kernels (cuDNN)",
        "thread_num": "there are no executor threads; a step is one XLA call",
    }

    @model_validator(mode="after")
    def _log_fields_without_effect(self) -> DistributedStrategy:
        warn_no_effect(self)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _MISSPELT:
            self._set_misspelt(name, value)
            return
        if name not in type(self).model_fields and name in BuildStrategy.model_fields:
            setattr(self.build_strategy, name, value)
            return
        super().__setattr__(name, value)

    def _set_misspelt(self, name: str, value: Any) -> None:
        meant = _MISSPELT[name]
        if not isinstance(value, dict):
            log.warning("DistributedStrategy.%s: read as '%s' (the fleet guide's spelling)",
                        name, meant)
            super().__setattr__(meant, value)
            return
        # a dict of fields: each key to the strategy that has it, all or nothing
        subs = {"build_strategy": self.build_strategy.model_copy(deep=True),
                "execution_strategy": self.execution_strategy.model_copy(deep=True)}
        placed = []
        for key, field_value in value.items():
            owner = meant if key in _NESTED[meant].model_fields else next(
                (o for o in subs if key in _NESTED[o].model_fields), None)
            if owner is None:
                raise StrategyError(f"DistributedStrategy.{name}: '{key}' is a field of neither "
                                    "BuildStrategy nor ExecutionStrategy")
            setattr(subs[owner], key, field_value)
            placed.append(f"{key} -> {owner}" + ("" if owner == meant else
                                                 f" (an {_NESTED[owner].__name__} field)"))
        log.warning("DistributedStrategy.%s is the fleet guide's spelling of '%s'; set %s",
                    name, meant, ", ".join(placed) or "nothing")
        for owner, sub in subs.items():
            super().__setattr__(owner, sub)

    def __getattr__(self, name: str) -> Any:
        if name in BuildStrategy.model_fields and name not in type(self).model_fields:
            return getattr(self.build_strategy, name)
        return super().__getattr__(name)

    # -- what the job compiles with ------------------------------------------------------
    def to_build_strategy(self, num_trainers: int = 1, local_devices: int = 1) -> BuildStrategy:
        """``build_strategy`` with the collective fields applied; hierarchical groups of
        ``hierarchical_allreduce_inter_nranks`` devices, or of each process's devices when it
        is 0 or 1 (the seeds' "ranks per node")."""
        bs = self.build_strategy.model_copy(deep=True)
        for name in ("fuse_all_reduce_ops", "fuse_grad_size_in_MB", "fuse_grad_size_in_TFLOPS",
                     "use_hierarchical_allreduce", "sync_batch_norm", "amp"):
            object.__setattr__(bs, name, getattr(self, name))
        object.__setattr__(bs, "amp_configs", self.amp_configs.model_copy(deep=True))
        inter = self.hierarchical_allreduce_inter_nranks
        object.__setattr__(bs, "hierarchical_allreduce_inter_nranks",
                           inter if inter > 1 else local_devices)
        object.__setattr__(bs, "num_trainers", max(num_trainers, 1))
        return BuildStrategy.model_validate(bs.model_dump())

    # -- files -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return _plain(self.model_dump())

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "dict"):
        data = _own_table(cls, data, source)
        for name, sub in _NESTED.items():
            if isinstance(data.get(name), dict):
                data[name] = sub.from_dict(data[name], f"{source}: {name}")
        return cls._from_fields(data, source)

    def save_to_prototxt(self, path: str | os.PathLike) -> None:
        """Write protobuf text (``name: value`` lines, ``name { ... }`` blocks), as Paddle."""
        path = Path(path)
        # a temporary name of this process's own: in the seeds' example every rank saves
        # the same file, and a shared temporary name let one rank's replace fail
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        from . import strategy_proto  # protobuf loads only for the prototxt formats
        tmp.write_text(strategy_proto.to_text(DistributedStrategy, self.to_dict()))
        os.replace(tmp, path)

    @classmethod
    def load_from_prototxt(cls, path: str | os.PathLike) -> DistributedStrategy:
        path = Path(path)
        from . import strategy_proto  # protobuf loads only for the prototxt formats
        data = strategy_proto.parse(DistributedStrategy, read_strategy_text(path), str(path))
        return cls.from_dict(data, str(path))

    @classmethod
    def load(cls, name_or_path: str | os.PathLike):
        if str(name_or_path).endswith((".prototxt", ".pbtxt")):
            return cls.load_from_prototxt(name_or_path)
        return super().load(name_or_path)


def _plain(value):
    """Enums as their names, recursively (what every file format writes)."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
