"""The parameter-server fleet's pieces without MPI (issue 17): role makers reading Paddle's
variables or arguments, the strategy factory's configs, fleet's order and role checks."""

from __future__ import annotations

from pathlib import Path

import pytest

import graphc.fluid as fluid
import graphc.fluid.incubate.fleet.parameter_server.distribute_transpiler as ps
from graphc.fluid.incubate.fleet.base.role_maker import (
    PaddleCloudRoleMaker,
    Role,
    RoleError,
    UserDefinedRoleMaker,
)

FleetError, FleetTranspiler = ps.FleetError, ps.FleetTranspiler
StrategyError = ps.distributed_strategy.StrategyError
StrategyFactory = ps.distributed_strategy.StrategyFactory
DistributedStrategyFactory = ps.distributed_strategy_factory.DistributedStrategyFactory

EPS = "127.0.0.1:6170,127.0.0.1:6171"


def test_paddle_cloud_role_maker_reads_a_trainer(monkeypatch):
    monkeypatch.setenv("TRAINING_ROLE", "TRAINER")
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", EPS)
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "3")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "2")
    role = PaddleCloudRoleMaker()
    assert role.is_worker() and not role.is_server()
    assert (role.worker_index(), role.worker_num(), role.server_num()) == (2, 3, 2)
    assert role.get_pserver_endpoints() == EPS.split(",")


def test_paddle_cloud_role_maker_reads_a_server(monkeypatch):
    monkeypatch.setenv("TRAINING_ROLE", "PSERVER")
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", EPS)
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("POD_IP", "127.0.0.1")
    monkeypatch.setenv("PADDLE_PORT", "6171")
    role = PaddleCloudRoleMaker()
    assert role.is_server() and role.server_index() == 1 and role.worker_index() == -1
    monkeypatch.setenv("PADDLE_PORT", "7000")
    with pytest.raises(RoleError, match="'127.0.0.1:7000' is not in PADDLE_PSERVERS"):
        PaddleCloudRoleMaker().is_server()
    monkeypatch.setenv("TRAINING_ROLE", "BOSS")
    with pytest.raises(RoleError, match="TRAINING_ROLE must be TRAINER or PSERVER"):
        PaddleCloudRoleMaker().generate_role()
    monkeypatch.delenv("PADDLE_TRAINERS_NUM")
    with pytest.raises(RoleError, match="PADDLE_TRAINERS_NUM is not set"):
        PaddleCloudRoleMaker().generate_role()


def test_user_defined_role_maker_checks_its_arguments():
    role = UserDefinedRoleMaker(1, Role.SERVER, 4, ["a:1", "b:2"])
    assert role.is_server() and role.server_index() == 1 and role.worker_num() == 4
    with pytest.raises(RoleError, match="current_id must be in \\[0, 2\\) for a server"):
        UserDefinedRoleMaker(2, Role.SERVER, 4, ["a:1", "b:2"])
    with pytest.raises(RoleError, match="duplicates"):
        UserDefinedRoleMaker(0, Role.WORKER, 2, ["a:1", "a:1"])
    with pytest.raises(RoleError, match="list of strings"):
        UserDefinedRoleMaker(0, Role.WORKER, 2, "a:1")


def test_strategy_factory_configs():
    sync = DistributedStrategyFactory.create_sync_strategy()
    assert sync.get_program_config().sync_mode is True
    for make in (StrategyFactory.create_async_strategy,
                 StrategyFactory.create_half_async_strategy):
        c = make().get_program_config()
        assert c.sync_mode is False and c.runtime_split_send_recv is True
    assert StrategyFactory.create_half_async_strategy().get_program_config().half_async
    geo = StrategyFactory.create_geo_strategy(400).get_program_config()
    assert geo.geo_sgd_mode and geo.geo_sgd_need_push_nums == 400
    sync.set_program_config({"min_block_size": 81920})
    assert sync.get_program_config().min_block_size == 81920
    config = fluid.DistributeTranspilerConfig()
    config.slice_var_up = False
    sync.set_program_config(config)
    assert sync.get_program_config() is config and config.sync_mode
    with pytest.raises(StrategyError, match="no field 'block_size'"):
        sync.set_program_config({"block_size": 1})
    flags = sync.get_trainer_runtime_config().get_communicator_flags()
    assert flags["communicator_send_wait_times"] == "5"
    assert sync.get_server_runtime_config()._rpc_send_thread_num == 12


def test_fleet_order_and_roles():
    fleet = FleetTranspiler()
    with pytest.raises(FleetError, match="fleet.init"):
        fleet.is_worker()
    with pytest.raises(FleetError, match="collective"):
        fleet.init(PaddleCloudRoleMaker(is_collective=True))
    fleet.init(UserDefinedRoleMaker(0, Role.WORKER, 2, ["a:1"]))
    assert fleet.is_worker() and fleet.worker_num() == 2 and fleet.is_first_worker()
    with pytest.raises(FleetError, match="for servers"):
        fleet.run_server()
    with pytest.raises(FleetError, match="StrategyFactory"):
        fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy=object())


def test_launch_server_num_worker_num(tmp_path):
    """``graphc launch --server_num S --worker_num W``: S + W ranks, the counts forwarded to
    every rank, whose wrapper sets Paddle's role variables (graphc.distributed.pserver.roles)."""
    import argparse

    from graphc.distributed.launch import LaunchError, add_arguments, build_command
    from graphc.distributed.pserver.roles import role_env
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    p = argparse.ArgumentParser()
    add_arguments(p)
    cmd, env = build_command(p.parse_args(["--server_num", "2", "--worker_num", "3",
                                           str(script)]))
    assert cmd[cmd.index("-n") + 1] == "5"
    assert (env["GRAPHC_PS_SERVER_NUM"], env["GRAPHC_PS_WORKER_NUM"]) == ("2", "3")
    assert "GRAPHC_PS_SERVER_NUM" in cmd and "GRAPHC_PS_WORKER_NUM" in cmd
    for bad, message in ((["--server_num", "2"], "go together"),
                         (["--server_num", "2", "--worker_num", "2", "--nproc_per_node", "3"],
                          "differs"),
                         (["--server_num", "0", "--worker_num", "2"], "at least 1")):
        with pytest.raises(LaunchError, match=message):
            build_command(p.parse_args([*bad, str(script)]))
    assert role_env(1, 2, 3)["PADDLE_PORT"] == "6171"
    assert role_env(4, 2, 3)["PADDLE_TRAINER_ID"] == "2"


def test_collective_role_variables():
    """Outside a parameter-server launch each rank gets fleetrun's collective variables;
    a variable the user set is kept; --hosts gives the endpoints of every node's ranks."""
    import argparse

    from graphc.distributed.launch import add_arguments, build_command
    from graphc.distributed.pserver.roles import from_environ
    env = from_environ(1, {"CUDA_VISIBLE_DEVICES": "3"}, 2)
    assert env == {"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2",
                   "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:6170,127.0.0.1:6171",
                   "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:6171", "FLAGS_selected_gpus": "3"}
    assert "PADDLE_TRAINER_ID" not in from_environ(1, {"PADDLE_TRAINER_ID": "7"}, 2)
    hosts = {"GRAPHC_LAUNCH_ENDPOINTS": "a:6170,a:6171,b:6170,b:6171"}
    assert from_environ(2, hosts, 4)["PADDLE_CURRENT_ENDPOINT"] == "b:6170"
    p = argparse.ArgumentParser()
    add_arguments(p)
    script = Path(__file__)
    _, launched = build_command(p.parse_args(["--hosts", "a,b", "--nproc_per_node", "2",
                                              str(script)]))
    assert launched["GRAPHC_LAUNCH_ENDPOINTS"] == "a:6170,a:6171,b:6170,b:6171"


def test_mpi_symetric_role_maker(monkeypatch):
    import graphc.fluid.incubate.fleet.base.role_maker as rm
    monkeypatch.setattr(rm, "_mpi_rank_size", lambda: (3, 4))
    role = rm.MPISymetricRoleMaker()
    assert role.is_worker() and role.worker_index() == 1 and role.worker_num() == 2
    assert role.get_pserver_endpoints() == ["127.0.0.1:60001", "127.0.0.1:60002"]
    monkeypatch.setattr(rm, "_mpi_rank_size", lambda: (2, 4))
    assert rm.MPISymetricRoleMaker().server_index() == 1
    monkeypatch.setattr(rm, "_mpi_rank_size", lambda: (0, 3))
    with pytest.raises(RoleError, match="even number of ranks"):
        rm.MPISymetricRoleMaker().generate_role()
