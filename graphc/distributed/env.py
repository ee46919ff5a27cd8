"""Which launcher started this process and where it sits among its peers: OpenMPI 4/5,
MPICH (Hydra/PMI), SLURM, or Paddle's collective variables (a trainer started on its own)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerEnv:
    """This process's place in the job, as its launcher describes it."""

    launcher: str  # "openmpi" | "mpich" | "slurm" | "paddle" | "none"
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    # "paddle": every trainer's host:port (PADDLE_TRAINER_ENDPOINTS); the first is where the
    # job meets (JAX's coordinator)
    endpoints: tuple[str, ...] = ()

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
    return paddle_collective(env) or WorkerEnv("none")


# a parameter-server job's variables (Paddle 1.6's PADDLE_PSERVERS too): its trainers meet
# the servers, not each other
PSERVER_MARKERS = ("PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PSERVERS", "GRAPHC_PS_SERVER_NUM")


def is_parameter_server_job(env=None) -> bool:
    env = os.environ if env is None else env
    return any(env.get(name, "").strip() for name in PSERVER_MARKERS) or \
        env.get("TRAINING_ROLE", "").strip().upper() == "PSERVER"


def split_endpoints(raw) -> tuple[str, ...]:
    """``"ip:port,ip:port"`` (or a list of them) as a tuple, blanks dropped."""
    items = raw.split(",") if isinstance(raw, str) else list(raw or ())
    return tuple(str(e).strip() for e in items if str(e).strip())


def endpoints_env(rank: int, endpoints, launcher: str = "paddle") -> WorkerEnv:
    """The place of trainer ``rank`` among ``endpoints``; the trainers sharing its host are
    its node (local rank and size, as Paddle's launcher counts them)."""
    eps = split_endpoints(endpoints)
    host = eps[rank].rsplit(":", 1)[0] if 0 <= rank < len(eps) else ""
    local = [i for i, e in enumerate(eps) if e.rsplit(":", 1)[0] == host]
    return WorkerEnv(launcher, rank, len(eps), local.index(rank) if rank in local else 0,
                     max(len(local), 1), eps)


def paddle_collective(env) -> WorkerEnv | None:
    """A collective trainer started alone with Paddle's variables (PADDLE_TRAINER_ID,
    PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS): None when they are absent or describe a
    parameter-server job. Lenient (the count comes from either variable): ``init`` checks
    them and names what is missing or inconsistent."""
    if is_parameter_server_job(env):
        return None
    eps = split_endpoints(env.get("PADDLE_TRAINER_ENDPOINTS", ""))
    size = _int(env, "PADDLE_TRAINERS_NUM", len(eps))
    if size <= 1 and len(eps) <= 1:
        return None
    rank = _int(env, "PADDLE_TRAINER_ID")
    if len(eps) == size:
        return endpoints_env(rank, eps)
    return WorkerEnv("paddle", rank, max(size, len(eps)), endpoints=eps)
