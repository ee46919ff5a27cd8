"""``fluid.incubate.fleet.base.role_maker``: who this process is in a fleet job (the launcher's
or Paddle's variables, graphc.distributed.env), and its collectives with the others (comm.py)."""

from __future__ import annotations

import logging
import os

import numpy as np

from .....distributed.env import detect, split_endpoints
from ...._missing import missing
from .comm import (
    Alone,
    DirStore,
    JaxStore,
    MPIComm,
    RoleError,
    StoreComm,
    check_mode,
    reduce_into,
)

__all__ = ["GeneralRoleMaker", "MPISymetricRoleMaker", "PaddleCloudRoleMaker", "Role",
           "RoleError", "RoleMakerBase", "UserDefinedCollectiveRoleMaker",
           "UserDefinedRoleMaker"]
log = logging.getLogger("graphc.fleet")


class Role:
    WORKER = 1
    SERVER = 2


def _plain(value):
    """``value`` as JSON can carry it (NumPy scalars and arrays become numbers and lists)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class RoleMakerBase:
    """``is_collective``: collective training (every process a worker, ranks from the
    launcher or Paddle's variables); otherwise the role maker describes a parameter-server
    job. The collective methods (``all_gather``, ``all_reduce_worker``, ``barrier_worker``,
    ``barrier_all``) go over MPI in an MPI job, else over the collective job's JAX runtime
    (joined at the first call), and are trivial for one process."""

    def __init__(self, is_collective: bool = True):
        self._is_collective = bool(is_collective)
        self._worker_endpoints: list[str] = []
        self._server_endpoints: list[str] = []
        self._role_is_generated = False
        self._role = None
        self._current_id = -1
        self._comm = None

    def generate_role(self) -> None:
        """Paddle reads its environment here; graphc reads the launcher's at fleet.init."""

    def worker_index(self) -> int:
        return detect().rank

    def worker_num(self) -> int:
        return detect().size

    def server_num(self) -> int:
        return 0

    def is_worker(self) -> bool:
        return True

    def is_server(self) -> bool:
        return False

    def is_first_worker(self) -> bool:
        return self.worker_index() == 0

    def role_id(self) -> int:
        return self.worker_index()

    def server_index(self) -> int:
        """This server's index (-1: this process is no server)."""
        return -1

    def get_trainer_endpoints(self) -> list[str]:
        """Every trainer's ``ip:port`` (PADDLE_TRAINER_ENDPOINTS when the job has one)."""
        if self._worker_endpoints:
            return list(self._worker_endpoints)
        return list(detect().endpoints or split_endpoints(
            os.environ.get("PADDLE_TRAINER_ENDPOINTS", "")))

    def get_pserver_endpoints(self) -> list[str]:
        return list(self._server_endpoints)

    def to_string(self) -> str:
        """Paddle's line: the role as its number (Role.WORKER 1, Role.SERVER 2; Paddle's
        collective role makers print None there), the index, both endpoint lists."""
        role = Role.WORKER if self.is_worker() else Role.SERVER
        index = self.worker_index() if self.is_worker() else self.server_index()
        return (f"role: {role}, current_id: {index}, worker_endpoints: "
                f"{self.get_trainer_endpoints()}, server_endpoints: "
                f"{self.get_pserver_endpoints()}")

    # -- collectives
    def all_gather(self, input):
        """Every process's ``input`` (workers and servers), in rank order."""
        return self._communicator().all_gather(_plain(input), "all")

    def all_reduce_worker(self, input, output, mode="sum"):
        """Element-wise ``mode`` ("sum", "min", "max") of every worker's 1-D ``input``,
        written into ``output`` (a list or array of the same length); a server does nothing."""
        check_mode(mode)
        if not self.is_worker():
            log.warning("all_reduce_worker: this process is not a worker; nothing done")
            return
        reduce_into(self._communicator().all_gather(_plain(input), "worker"), output, mode)

    def barrier_worker(self):
        """Wait until every worker gets here (a server does not take part)."""
        if not self.is_worker():
            log.warning("barrier_worker: this process is not a worker; nothing done")
            return
        self._communicator().barrier("worker")

    def barrier_all(self):
        """Wait until every process of the job gets here."""
        self._communicator().barrier("all")

    def _communicator(self):
        if self._comm is None:
            self._comm = self._make_communicator()
        return self._comm

    def _make_communicator(self):
        env = detect()
        if env.uses_mpi:
            return MPIComm(*self._mpi_ranks(env.size))
        if self.worker_num() + self.server_num() <= 1:
            return Alone()
        if not self._is_collective:
            raise RoleError(
                f"{type(self).__name__}: the processes of this parameter-server job were "
                "started on their own, so their collectives need a store: run the job with "
                "graphc launch / fleetrun (MPI), or use GeneralRoleMaker(path=DIR)")
        from .....distributed import init, worker_index, worker_num
        from .....distributed.meet import deadline
        init()  # the collective job's JAX runtime (its store carries the values)
        rank, size = worker_index(), worker_num()
        if size <= 1:
            return Alone()
        seconds, source = deadline(None)
        return StoreComm(JaxStore(), {"worker": (rank, size), "all": (rank, size)}, seconds,
                         source)

    def _mpi_ranks(self, size: int) -> tuple[list[int], list[int]]:
        """(worker ranks, server ranks) of the MPI job: every rank works in a collective
        one; a parameter-server job's first GRAPHC_PS_SERVER_NUM ranks serve (graphc
        launch --server_num)."""
        if self._is_collective:
            return list(range(size)), []
        servers = os.environ.get("GRAPHC_PS_SERVER_NUM", "")
        if not servers.isdigit():
            raise RoleError(f"{type(self).__name__}: which MPI ranks serve is unknown (launch "
                            "the job with graphc launch --server_num S --worker_num W)")
        return list(range(int(servers), size)), list(range(int(servers)))


class _ServerRoles(RoleMakerBase):
    """Parameter-server roles: this process's role and index, the servers' endpoints and the
    number of trainers (graphc.fluid.incubate.fleet.parameter_server uses them)."""

    def _set(self, role: int, index: int, worker_num: int, endpoints: list[str]) -> None:
        self._role, self._index = role, int(index)
        self._worker_num, self._server_endpoints = int(worker_num), list(endpoints)
        self._current_id, self._role_is_generated = self._index, True
        if not self._worker_endpoints:
            self._worker_endpoints = list(split_endpoints(
                os.environ.get("PADDLE_TRAINER_ENDPOINTS", "")))

    def _roles(self):
        if not self._role_is_generated:
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
        return 0 if self._is_collective else len(self._roles()._server_endpoints)

    def get_pserver_endpoints(self) -> list[str]:
        return [] if self._is_collective else list(self._roles()._server_endpoints)

    def role_id(self) -> int:
        return self.worker_index() if self.is_worker() else self.server_index()


def _env(name: str, who: str = "PaddleCloudRoleMaker") -> str:
    value = os.environ.get(name)
    if value is None or not value.strip():
        raise RoleError(f"{who}: the environment variable {name} is not set "
                        "(graphc launch --server_num S --worker_num W sets it; see "
                        "docs/parameter_server.md)")
    return value.strip()


def _int_env(name: str, who: str = "PaddleCloudRoleMaker") -> int:
    value = _env(name, who)
    try:
        return int(value)
    except ValueError:
        raise RoleError(f"{who}: {name} must be an integer, got {value!r}") from None


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


class GeneralRoleMaker(_ServerRoles):
    """Paddle's general parameter-server role maker, from Paddle's variables:
    ``PADDLE_PSERVERS_IP_PORT_LIST``, ``PADDLE_TRAINER_ENDPOINTS``, ``TRAINING_ROLE`` and
    ``PADDLE_TRAINER_ID`` (a trainer) or ``PADDLE_PSERVER_ID`` (else ``POD_IP`` +
    ``PADDLE_PORT``; a server). Its collectives meet in the directory ``path`` (Paddle's
    store path; any directory every process can reach, under ``SYS_JOB_ID`` when set):
    graphc has no HDFS or HTTP store, so ``hdfs_name`` and ``http_ip_port`` are refused.
    Waits end after ``run_timeout_seconds`` (default FLAGS_rpc_deadline, else 180 s)."""

    def __init__(self, **kwargs):
        super().__init__(False)
        for refused in ("hdfs_name", "hdfs_ugi", "http_ip_port"):
            if kwargs.get(refused):
                raise RoleError(f"GeneralRoleMaker({refused}=...): graphc's role makers meet "
                                "through a directory, not HDFS or HTTP: pass path=DIR (local "
                                "or on a file system every process shares)")
        if kwargs.get("use_ps_gpu"):
            raise RoleError("GeneralRoleMaker(use_ps_gpu=True) is not supported")
        self._path = str(kwargs.get("path", "")).rstrip("/")
        self._run_timeout = kwargs.get("run_timeout_seconds")
        self._prefix = os.environ.get("SYS_JOB_ID", "")

    def generate_role(self) -> None:
        if self._role_is_generated:
            return
        who = "GeneralRoleMaker"
        servers = list(split_endpoints(_env("PADDLE_PSERVERS_IP_PORT_LIST", who)))
        workers = list(split_endpoints(_env("PADDLE_TRAINER_ENDPOINTS", who)))
        role = _env("TRAINING_ROLE", who).upper()
        if role == "TRAINER":
            index = _int_env("PADDLE_TRAINER_ID", who)
            if not 0 <= index < len(workers):
                raise RoleError(f"GeneralRoleMaker: PADDLE_TRAINER_ID={index} is not in [0, "
                                f"{len(workers)}) (PADDLE_TRAINER_ENDPOINTS)")
            me = workers[index]
        elif role == "PSERVER":
            if os.environ.get("PADDLE_PSERVER_ID", "").strip():
                index = _int_env("PADDLE_PSERVER_ID", who)
                if not 0 <= index < len(servers):
                    raise RoleError(f"GeneralRoleMaker: PADDLE_PSERVER_ID={index} is not in "
                                    f"[0, {len(servers)}) (PADDLE_PSERVERS_IP_PORT_LIST)")
            else:
                me = f"{_env('POD_IP', who)}:{_env('PADDLE_PORT', who)}"
                if me not in servers:
                    raise RoleError(f"GeneralRoleMaker: this server's POD_IP:PADDLE_PORT '{me}'"
                                    f" is not in PADDLE_PSERVERS_IP_PORT_LIST {servers}")
                index = servers.index(me)
            me = servers[index]
        else:
            raise RoleError(f"GeneralRoleMaker: TRAINING_ROLE must be TRAINER or PSERVER, got "
                            f"{role!r}")
        self._worker_endpoints, self._cur_endpoint = workers, me
        self._set(Role.WORKER if role == "TRAINER" else Role.SERVER, index, len(workers),
                  servers)

    def get_local_endpoint(self) -> str:
        """This process's ``ip:port``."""
        self._roles()
        return self._cur_endpoint

    def get_trainer_endpoints(self) -> list[str]:
        return list(self._roles()._worker_endpoints)

    def _make_communicator(self):
        me = self._roles()
        everyone = me._worker_endpoints + me._server_endpoints
        if len(everyone) <= 1:
            return Alone()
        if not self._path:
            raise RoleError("GeneralRoleMaker: its collectives meet in a directory every "
                            "process of the job can reach: pass path=DIR")
        from .....distributed.meet import deadline
        seconds, source = deadline(self._run_timeout)
        group = "worker" if me._role == Role.WORKER else "server"
        count = len(me._worker_endpoints if group == "worker" else me._server_endpoints)
        members = {group: (me._index, count), "all": (everyone.index(me._cur_endpoint),
                                                       len(everyone))}
        return StoreComm(DirStore(self._path, self._prefix), members, seconds, source)


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

    def _mpi_ranks(self, size: int) -> tuple[list[int], list[int]]:
        return list(range(1, size, 2)), list(range(0, size, 2))  # odd work, even serve


def __getattr__(name: str):
    raise missing(__name__, name)
