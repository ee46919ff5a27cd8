"""``fluid.incubate.fleet.base.role_maker``: who this process is in a fleet job. graphc reads
the launcher's variables (graphc.distributed.env); role makers only carry the mode."""

from __future__ import annotations

from .....distributed.env import detect
from ...._missing import missing

__all__ = ["MPISymetricRoleMaker", "PaddleCloudRoleMaker", "Role", "RoleMakerBase",
           "UserDefinedCollectiveRoleMaker", "UserDefinedRoleMaker"]


class Role:
    WORKER = 1
    SERVER = 2


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


class PaddleCloudRoleMaker(RoleMakerBase):
    """Paddle's default role maker (``PaddleCloudRoleMaker(is_collective=True)``)."""

    def __init__(self, is_collective: bool = False, **kwargs):
        super().__init__(is_collective)


class UserDefinedCollectiveRoleMaker(RoleMakerBase):
    """A collective role given by hand; graphc still takes ranks from the launcher."""

    def __init__(self, current_id: int = 0, worker_endpoints=None):
        super().__init__(True)
        self._current_id, self._worker_endpoints = int(current_id), list(worker_endpoints or [])


class UserDefinedRoleMaker(RoleMakerBase):
    """A parameter-server role given by hand (servers and trainers): refused by fleet.init."""

    def __init__(self, current_id: int = 0, role=Role.WORKER, worker_num: int = 0,
                 server_endpoints=None):
        super().__init__(False)


class MPISymetricRoleMaker(RoleMakerBase):
    """Paddle's MPI parameter-server role maker: refused by fleet.init."""

    def __init__(self):
        super().__init__(False)


def __getattr__(name: str):
    raise missing(__name__, name)
