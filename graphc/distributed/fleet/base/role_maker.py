"""``paddle.distributed.fleet.base.role_maker``: Paddle 2.0's role makers, graphc's Fluid 1.8
ones (graphc.fluid.incubate.fleet.base.role_maker) under 2.0's arguments and method names."""

from __future__ import annotations

from ....fluid.incubate.fleet.base import role_maker as _fluid
from ....fluid.incubate.fleet.base.role_maker import RoleError, RoleMakerBase

__all__ = ["PaddleCloudRoleMaker", "Role", "RoleError", "RoleMakerBase",
           "UserDefinedRoleMaker"]


class Role:
    WORKER = 1
    SERVER = 2
    HETER_WORKER = 3
    ALL = 4


class _Spelling20:
    """2.0's fleet calls the role maker's methods with a leading underscore."""

    def _is_worker(self):
        return self.is_worker()

    def _is_server(self):
        return self.is_server()

    def _is_first_worker(self):
        return self.is_first_worker()

    def _worker_index(self):
        return self.worker_index()

    def _server_index(self):
        return self.server_index()

    def _role_id(self):
        return self.role_id()

    def _worker_num(self):
        return self.worker_num()

    def _server_num(self):
        return self.server_num()

    def _get_trainer_endpoints(self):
        return self.get_trainer_endpoints()

    def _get_pserver_endpoints(self):
        return self.get_pserver_endpoints()

    def _barrier(self, comm_world="worker"):
        if comm_world == "worker":
            return self.barrier_worker()
        if comm_world == "all":
            return self.barrier_all()
        raise RoleError(f"_barrier: comm_world must be 'worker' or 'all', got {comm_world!r}")

    def _all_gather(self, input, comm_world="worker"):
        if comm_world not in ("worker", "all"):
            raise RoleError(f"_all_gather: comm_world must be 'worker' or 'all', got "
                            f"{comm_world!r}")
        if comm_world == "all":
            return self.all_gather(input)
        from ....fluid.incubate.fleet.base.role_maker import _plain
        return self._communicator().all_gather(_plain(input), "worker")

    def _all_reduce(self, input, mode="sum", comm_world="worker"):
        import numpy as np
        values = self._all_gather(np.asarray(input).reshape(-1), comm_world)
        out = np.zeros(np.asarray(input).size, dtype=np.asarray(input).dtype)
        from ....fluid.incubate.fleet.base.comm import check_mode, reduce_into
        check_mode(mode)
        reduce_into(values, out, mode)
        return out.reshape(np.shape(input))


class PaddleCloudRoleMaker(_Spelling20, _fluid.PaddleCloudRoleMaker):
    """``PaddleCloudRoleMaker(is_collective=False, **kwargs)``: collective, the launcher's or
    Paddle's variables (PADDLE_TRAINER_ID, PADDLE_TRAINER_ENDPOINTS, ...); otherwise the
    parameter-server variables (TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, ...)."""

    def __init__(self, is_collective=False, **kwargs):
        super().__init__(is_collective)


class UserDefinedRoleMaker(_Spelling20, _fluid.UserDefinedRoleMaker):
    """``UserDefinedRoleMaker(is_collective=False, init_gloo=False, current_id=, role=,
    worker_num=, server_endpoints=)``: a parameter-server role given by hand (2.0 takes the
    1.8 arguments as keywords); collective roles come from the launcher."""

    def __init__(self, is_collective=False, init_gloo=False, **kwargs):
        if is_collective:
            _fluid.RoleMakerBase.__init__(self, True)
            self._worker_endpoints = list(kwargs.get("worker_endpoints") or [])
            return
        role = kwargs.get("role", Role.WORKER)
        super().__init__(current_id=kwargs.get("current_id", 0),
                         role=_fluid.Role.SERVER if role == Role.SERVER else role,
                         worker_num=kwargs.get("worker_num", 0),
                         server_endpoints=kwargs.get("server_endpoints"))
