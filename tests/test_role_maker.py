"""Role makers' collectives and getters (Paddle 1.8's fluid.incubate.fleet.base.role_maker):
trivially in one process, over a directory (GeneralRoleMaker, separate processes), over MPI
(graphc launch); the 2.0 spelling (paddle.distributed.fleet.base.role_maker) imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from test_collective_alone import _finish  # every process group killed at the end

from graphc.fluid.incubate.fleet.base import comm, role_maker
from graphc.fluid.incubate.fleet.base.role_maker import RoleError

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "role_maker_job.py"
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")
CLEAN = ("PADDLE_", "TRAINING_ROLE", "POD_IP", "OMPI_", "PMI_", "SLURM_", "GRAPHC_PS_")


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(CLEAN):
            monkeypatch.delenv(name)
    return monkeypatch


# -- one process -------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: role_maker.PaddleCloudRoleMaker(is_collective=True),
    lambda: role_maker.UserDefinedCollectiveRoleMaker(0, ["127.0.0.1:6170"]),
    lambda: role_maker.UserDefinedRoleMaker(0, role_maker.Role.WORKER, 1, []),
])
@pytest.mark.parametrize("mode, expected", [("sum", [3, -1.5]), ("min", [3, -1.5]),
                                            ("max", [3, -1.5])])
def test_one_worker_collectives_are_trivial(clean_env, make, mode, expected):
    role = make()
    assert role.all_gather(7) == [7]
    assert role.all_gather(np.int64(7)) == [7]  # NumPy scalars travel as numbers
    out = [0, 0]
    assert role.all_reduce_worker([3, -1.5], out, mode=mode) is None
    assert out == expected
    arr = np.zeros(2, "float32")
    role.all_reduce_worker(np.array([3, -1.5], "float32"), arr, mode)
    np.testing.assert_array_equal(arr, expected)
    role.barrier_worker()
    role.barrier_all()
    with pytest.raises(ValueError, match="unknown mode: 'mean'"):
        role.all_reduce_worker([1], [0], mode="mean")
    with pytest.raises(RoleError, match="carry numbers, strings, lists and dicts .*got object"):
        role.all_gather(object())


def test_getters_and_to_string(clean_env):
    clean_env.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:6170")
    role = role_maker.PaddleCloudRoleMaker(is_collective=True)
    assert role.server_index() == -1 and role.get_pserver_endpoints() == []
    assert role.get_trainer_endpoints() == ["127.0.0.1:6170"]
    assert role.to_string() == ("role: 1, current_id: 0, worker_endpoints: "
                                "['127.0.0.1:6170'], server_endpoints: []")
    server = role_maker.UserDefinedRoleMaker(1, role_maker.Role.SERVER, 2,
                                             ["127.0.0.1:1", "127.0.0.1:2"])
    assert server.server_index() == 1 and server.worker_index() == -1
    assert server.get_pserver_endpoints() == ["127.0.0.1:1", "127.0.0.1:2"]
    assert server.to_string().startswith("role: 2, current_id: 1,")
    assert role_maker.RoleMakerBase().server_index() == -1


def test_a_job_started_alone_without_a_store_is_named(clean_env):
    """Two servers and two workers started on their own: their collectives need a store."""
    role = role_maker.UserDefinedRoleMaker(0, role_maker.Role.WORKER, 2,
                                           ["127.0.0.1:1", "127.0.0.1:2"])
    with pytest.raises(RoleError, match="UserDefinedRoleMaker: .* need a store.*"
                       "GeneralRoleMaker\\(path=DIR\\)"):
        role.barrier_all()
    out = [0]
    role_maker.UserDefinedRoleMaker(0, role_maker.Role.SERVER, 2, ["127.0.0.1:1"]
                                    ).all_reduce_worker([1], out)  # a server: nothing
    assert out == [0]


def test_all_reduce_checks_shapes():
    with pytest.raises(RoleError, match="one 1-D array per worker of one length"):
        comm.reduce_into([[1, 2], [1]], [0, 0], "sum")
    with pytest.raises(RoleError, match="output has 1 elements, input 2"):
        comm.reduce_into([[1, 2]], [0], "sum")


def test_store_collectives_over_a_directory(tmp_path):
    """StoreComm's rounds: three members gather and barrier repeatedly; a member that never
    comes is named after the deadline."""
    results, errors = {}, []

    def member(i):
        try:
            c = comm.StoreComm(comm.DirStore(str(tmp_path)), {"all": (i, 3)}, 20.0, "test")
            results[i] = [c.all_gather({"me": i}, "all"), c.all_gather(i * i, "all")]
            c.barrier("all")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    for i in range(3):
        assert results[i] == [[{"me": 0}, {"me": 1}, {"me": 2}], [0, 1, 4]]
    lonely = comm.StoreComm(comm.DirStore(str(tmp_path / "x")), {"all": (0, 2)}, 0.3, "t")
    with pytest.raises(RoleError, match="all 1 did not reach collective all/1 within 0.3 s"):
        lonely.barrier("all")


# -- GeneralRoleMaker --------------------------------------------------------------------------
GENERAL = {"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:7100",
           "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:7200,127.0.0.1:7201"}


def test_general_role_maker_reads_paddles_variables(clean_env):
    for name, value in {**GENERAL, "TRAINING_ROLE": "PSERVER", "POD_IP": "127.0.0.1",
                        "PADDLE_PORT": "7100"}.items():
        clean_env.setenv(name, value)
    role = role_maker.GeneralRoleMaker(path="/nonexistent")
    assert role.is_server() and role.server_index() == 0 and role.server_num() == 1
    assert role.worker_num() == 2 and role.get_local_endpoint() == "127.0.0.1:7100"
    assert role.get_trainer_endpoints() == ["127.0.0.1:7200", "127.0.0.1:7201"]
    clean_env.setenv("TRAINING_ROLE", "TRAINER")
    clean_env.setenv("PADDLE_TRAINER_ID", "1")
    role = role_maker.GeneralRoleMaker()
    assert role.is_worker() and role.worker_index() == 1 and not role.is_first_worker()
    assert role.get_local_endpoint() == "127.0.0.1:7201"
    assert role.get_pserver_endpoints() == ["127.0.0.1:7100"]
    with pytest.raises(RoleError, match="pass path=DIR"):
        role.barrier_worker()
    clean_env.setenv("PADDLE_TRAINER_ID", "2")
    with pytest.raises(RoleError, match=r"PADDLE_TRAINER_ID=2 is not in \[0, 2\)"):
        role_maker.GeneralRoleMaker().generate_role()
    clean_env.delenv("PADDLE_TRAINER_ENDPOINTS")
    with pytest.raises(RoleError, match="GeneralRoleMaker: the environment variable "
                       "PADDLE_TRAINER_ENDPOINTS is not set"):
        role_maker.GeneralRoleMaker().generate_role()
    for refused in ("hdfs_name", "http_ip_port"):
        with pytest.raises(RoleError, match=f"{refused}=...\\): .* pass path=DIR"):
            role_maker.GeneralRoleMaker(**{refused: "x:1"})




def test_general_role_maker_job_of_separate_processes(tmp_path):
    """2 trainers and 1 server, each its own process, meet in a directory."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
    base.update(GENERAL, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    roles = [{"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0"},
             {"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "1"},
             {"TRAINING_ROLE": "PSERVER", "PADDLE_PSERVER_ID": "0"}]
    procs = [subprocess.Popen([sys.executable, str(JOB), "general", str(tmp_path),
                               str(tmp_path / "store")], env={**base, **r},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for r in roles]
    for code, out in _finish(procs, timeout=120):
        assert code == 0, out[-3000:]
    got = {p: json.loads((tmp_path / f"general.127.0.0.1_{p}.json").read_text())["general"]
           for p in (7200, 7201, 7100)}
    for g in got.values():
        assert g["gathered"] == [7200, 7201, 7100]  # trainers, then servers
    for p in (7200, 7201):
        assert got[p]["sum"] == [14401, 2, -14401] and got[p]["min"] == [7200, 1, -7201]
    assert "sum" not in got[7100]  # a server takes no part in worker collectives
    assert got[7100]["to_string"] == ("role: 2, current_id: 0, worker_endpoints: "
                                      "['127.0.0.1:7200', '127.0.0.1:7201'], "
                                      "server_endpoints: ['127.0.0.1:7100']")


# -- MPI -----------------------------------------------------------------------------------------
@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
@pytest.mark.xdist_group("mpi")
def test_role_maker_collectives_over_mpi(tmp_path):
    """graphc launch, 4 ranks: MPISymetricRoleMaker (even ranks serve, odd work) and the
    collective PaddleCloudRoleMaker (every rank works)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
    env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "graphc", "launch", "--nproc_per_node", "4",
                           "--timeout", "150", str(JOB), "mpi", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = {r: json.loads((tmp_path / f"mpi.{r}.json").read_text()) for r in range(4)}
    for r, g in got.items():
        sym, col = g["symetric"], g["collective"]
        assert sym["gathered"] == [0, 1, 2, 3] and col["gathered"] == [0, 1, 2, 3]
        assert sym["worker"] == (r % 2 == 1)
        if r % 2:
            assert sym["sum"] == [4, 2, -4] and sym["min"] == [1, 1, -3]
        assert col["sum"] == [6, 4, -6] and col["min"] == [0, 1, -3]


# -- Paddle 2.0's spelling -----------------------------------------------------------------------
def test_distributed_fleet_role_maker_imports_as_the_collective_guide_writes_it(clean_env):
    import graphc.distributed.fleet as fleet
    import graphc.distributed.fleet.base.role_maker as role_maker20
    assert fleet.PaddleCloudRoleMaker is role_maker20.PaddleCloudRoleMaker
    assert (role_maker20.Role.WORKER, role_maker20.Role.SERVER, role_maker20.Role.ALL) == \
        (1, 2, 4)
    role = role_maker20.PaddleCloudRoleMaker(is_collective=True)
    assert role._worker_num() == 1 and role._is_first_worker() and role._is_worker()
    assert role._all_gather(3) == [3] and role._all_gather(3, "all") == [3]
    np.testing.assert_array_equal(role._all_reduce(np.array([[1, 2]]), "max"), [[1, 2]])
    role._barrier("worker")
    role._barrier("all")
    server = role_maker20.UserDefinedRoleMaker(
        current_id=1, role=role_maker20.Role.SERVER, worker_num=2,
        server_endpoints=["127.0.0.1:36011", "127.0.0.1:36012"])
    assert server._is_server() and server._server_index() == 1 and server._server_num() == 2
    assert server._get_pserver_endpoints() == ["127.0.0.1:36011", "127.0.0.1:36012"]
    fleet.init(role)  # a collective role maker: the collective fleet (one process here)
    assert fleet.worker_num() == 1
