"""Which launcher started this process and where it sits among its peers: OpenMPI 4/5,
MPICH (Hydra/PMI) or SLURM, read from the variables each one sets; no launcher = one process."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerEnv:
    """This process's place in the job, as its launcher describes it."""

    launcher: str  # "openmpi" | "mpich" | "slurm" | "none"
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def uses_mpi(self) -> bool:
        return self.launcher in ("openmpi", "mpich")


def _int(env, name: str, default: int = 0) -> int:
    raw = env.get(name, "")
    return int(raw) if raw.strip().lstrip("-").isdigit() else default


def detect(env=None) -> WorkerEnv:
    """The launcher's view of this process (OpenMPI first: its variables are unambiguous)."""
    env = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in env:
        return WorkerEnv("openmpi", _int(env, "OMPI_COMM_WORLD_RANK"),
                         _int(env, "OMPI_COMM_WORLD_SIZE", 1),
                         _int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
                         _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1))
    if "PMI_SIZE" in env:  # MPICH's Hydra (and Intel MPI)
        return WorkerEnv("mpich", _int(env, "PMI_RANK"), _int(env, "PMI_SIZE", 1),
                         _int(env, "MPI_LOCALRANKID"), _int(env, "MPI_LOCALNRANKS", 1))
    if "SLURM_NTASKS" in env and "SLURM_PROCID" in env:
        return WorkerEnv("slurm", _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS", 1),
                         _int(env, "SLURM_LOCALID"),
                         _int(env, "SLURM_NTASKS_PER_NODE", 1))
    return WorkerEnv("none")
