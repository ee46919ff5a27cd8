"""``fluid.incubate.fleet.base.role_maker``: who this process is in a fleet job. graphc reads
the launcher's variables (graphc.distributed.env); role makers only carry the mode."""

from __future__ import annotations

import os

from .....distributed.env import detect
from .....ir.errors import GraphcError
from ...._missing import missing

__all__ = ["MPISymetricRoleMaker", "PaddleCloudRoleMaker", "Role", "RoleError", "RoleMakerBase",
           "UserDefinedCollectiveRoleMaker", "UserDefinedRoleMaker"]


class Role:
    WORKER = 1
    SERVER = 2


class RoleError(GraphcError):
    """A role maker's variables or arguments are missing or inconsistent (names which)."""


class RoleMakerBase:
    """``is_collective``: collective training (the only mode graphc runs); otherwise the
    role maker describes a parameter-server job and ``fleet.init`` refuses it."""

    def __init__(self, is_collective: bool = True):
        self._is_collective = bool(is_collective)

    def generate_role(self) -> None:
        """Paddle reads its environment here; graphc reads the launcher's at fleet.init."""

    def worker_index(self) -> int:
        return detect().rank

    def worker_num(self) -> int:
        return detect().size

    def is_worker(self) -> bool:
        return True

    def is_server(self) -> bool:
        return False

    def is_first_worker(self) -> bool:
        return self.worker_index() == 0

    def role_id(self) -> int:
        return self.worker_index()


class _ServerRoles(RoleMakerBase):
    """Parameter-server roles: this process's role and index, the servers' endpoints and the
    number of trainers (graphc.fluid.incubate.fleet.parameter_server uses them)."""

    def _set(self, role: int, index: int, worker_num: int, endpoints: list[str]) -> None:
        self._role, self._index = role, int(index)
        self._worker_num, self._server_endpoints = int(worker_num), list(endpoints)

    def _roles(self):
        if not hasattr(self, "_role"):
            self.generate_role()
        return self

    def is_worker(self) -> bool:
        return self._is_collective or self._roles()._role == Role.WORKER

    def is_server(self) -> bool:
        return not self._is_collective and self._roles()._role == Role.SERVER

    def worker_index(self) -> int:
        if self._is_collective:
            return super().worker_index()
        me = self._roles()
        return me._index if me._role == Role.WORKER else -1

    def server_index(self) -> int:
        me = self._roles()
        return me._index if me._role == Role.SERVER else -1

    def worker_num(self) -> int:
        return super().worker_num() if self._is_collective else self._roles()._worker_num

    def server_num(self) -> int:
        return len(self._roles()._server_endpoints)

    def get_pserver_endpoints(self) -> list[str]:
        return list(self._roles()._server_endpoints)

    def role_id(self) -> int:
        return self.worker_index() if self.is_worker() else self.server_index()


def _env(name: str) -> str:
    value = os.environ.get(name)
    if value is None or not value.strip():
        raise RoleError(f"PaddleCloudRoleMaker: the environment variable {name} is not set "
                        "(graphc launch --server_num S --worker_num W sets it; see "
                        "docs/parameter_server.md)")
    return value.strip()


def _int_env(name: str) -> int:
    value = _env(name)
    try:
        return int(value)
    except ValueError:
        raise RoleError(f"PaddleCloudRoleMaker: {name} must be an integer, got {value!r}"
                        ) from None


class PaddleCloudRoleMaker(_ServerRoles):
    """Paddle's default role maker. ``is_collective=True``: the launcher's ranks.
    Otherwise (parameter server) it reads Paddle's variables: ``TRAINING_ROLE`` (TRAINER or
    PSERVER), ``PADDLE_PSERVERS_IP_PORT_LIST``, ``PADDLE_TRAINERS_NUM``, and
    ``PADDLE_TRAINER_ID`` (a trainer) or ``POD_IP`` + ``PADDLE_PORT`` (a server, whose
    ``ip:port`` must be in the list; its position is the server's index)."""

    def __init__(self, is_collective: bool = False, **kwargs):
        super().__init__(is_collective)

    def generate_role(self) -> None:
        if self._is_collective:
            return
        endpoints = [e.strip() for e in _env("PADDLE_PSERVERS_IP_PORT_LIST").split(",")
                     if e.strip()]
        trainers = _int_env("PADDLE_TRAINERS_NUM")
        role = _env("TRAINING_ROLE").upper()
        if role == "TRAINER":
            tid = _int_env("PADDLE_TRAINER_ID")
            if not 0 <= tid < trainers:
                raise RoleError(f"PaddleCloudRoleMaker: PADDLE_TRAINER_ID={tid} is not in "
                                f"[0, PADDLE_TRAINERS_NUM={trainers})")
            self._set(Role.WORKER, tid, trainers, endpoints)
        elif role == "PSERVER":
            me = f"{_env('POD_IP')}:{_env('PADDLE_PORT')}"
            if me not in endpoints:
                raise RoleError(f"PaddleCloudRoleMaker: this server's POD_IP:PADDLE_PORT "
                                f"'{me}' is not in PADDLE_PSERVERS_IP_PORT_LIST {endpoints}")
            self._set(Role.SERVER, endpoints.index(me), trainers, endpoints)
        else:
            raise RoleError(f"PaddleCloudRoleMaker: TRAINING_ROLE must be TRAINER or PSERVER, "
                            f"got {role!r}")


class UserDefinedCollectiveRoleMaker(RoleMakerBase):
    """A collective role given by hand; graphc still takes ranks from the launcher."""

    def __init__(self, current_id: int = 0, worker_endpoints=None):
        super().__init__(True)
        self._current_id, self._worker_endpoints = int(current_id), list(worker_endpoints or [])


class UserDefinedRoleMaker(_ServerRoles):
    """A parameter-server role given by hand, checked as Paddle checks it."""

    def __init__(self, current_id: int = 0, role=Role.WORKER, worker_num: int = 0,
                 server_endpoints=None):
        super().__init__(False)
        if not isinstance(server_endpoints, list | tuple) or not all(
                isinstance(e, str) for e in server_endpoints):
            raise RoleError(f"UserDefinedRoleMaker: server_endpoints must be a list of "
                            f"strings, got {server_endpoints!r}")
        if len(set(server_endpoints)) != len(server_endpoints):
            raise RoleError(f"UserDefinedRoleMaker: server_endpoints has duplicates: "
                            f"{list(server_endpoints)}")
        if role not in (Role.WORKER, Role.SERVER):
            raise RoleError(f"UserDefinedRoleMaker: role must be Role.WORKER or Role.SERVER, "
                            f"got {role!r}")
        if not isinstance(worker_num, int) or worker_num < 1:
            raise RoleError(f"UserDefinedRoleMaker: worker_num must be a positive int, got "
                            f"{worker_num!r}")
        limit = len(server_endpoints) if role == Role.SERVER else worker_num
        if not isinstance(current_id, int) or not 0 <= current_id < limit:
            raise RoleError(f"UserDefinedRoleMaker: current_id must be in [0, {limit}) for a "
                            f"{'server' if role == Role.SERVER else 'worker'}, got "
                            f"{current_id!r}")
        self._set(role, current_id, worker_num, list(server_endpoints))

    def generate_role(self) -> None:
        """The role was given by hand."""


def _mpi_rank_size() -> tuple[int, int]:
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


class MPISymetricRoleMaker(_ServerRoles):
    """Paddle's MPI parameter-server role maker: two processes per node, even ranks servers
    and odd ranks workers, index ``rank // 2`` (an int: Paddle's ``/`` gave a float). The
    servers' endpoints are names only (MPI carries the messages): ``127.0.0.1:60001+i``."""

    def __init__(self):
        super().__init__(False)

    def generate_role(self) -> None:
        rank, size = _mpi_rank_size()
        if size < 2 or size % 2:
            raise RoleError(f"MPISymetricRoleMaker needs an even number of ranks (a server "
                            f"and a worker per pair), got {size}")
        endpoints = [f"127.0.0.1:{60001 + i}" for i in range(size // 2)]
        self._set(Role.SERVER if rank % 2 == 0 else Role.WORKER, rank // 2, size // 2,
                  endpoints)


def __getattr__(name: str):
    raise missing(__name__, name)
