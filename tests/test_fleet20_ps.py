"""Paddle 2.0's ``paddle.distributed.fleet`` in parameter-server mode: ``fleet.init()`` and
``DistributedStrategy.a_sync`` / ``a_sync_configs`` run the parameter-server transpiler under
``fleetrun --server_num/--worker_num``; sync equals local training on the whole batches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc.distributed.fleet as fleet
import graphc.fluid as fluid
from graphc.distributed.fleet import FleetError
from graphc.distributed.fleet.parameter_server import transpiler_strategy

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "fleet20_ps_job.py"
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")
sys.path.insert(0, str(ROOT / "tests"))
import fleet20_ps_job as job  # noqa: E402


def _strategy(a_sync: bool, **configs):
    s = fleet.DistributedStrategy()
    s.a_sync = a_sync
    s.a_sync_configs = configs
    return s


def test_a_sync_maps_onto_the_transpilers_modes(caplog):
    sync = transpiler_strategy(_strategy(False, k_steps=0), FleetError).get_program_config()
    assert sync.sync_mode and not sync.geo_sgd_mode
    for configs in ({}, {"k_steps": 0}, {"k_steps": -1}):
        c = transpiler_strategy(_strategy(True, **configs), FleetError).get_program_config()
        assert not c.sync_mode and not c.geo_sgd_mode and c.runtime_split_send_recv
    geo = transpiler_strategy(_strategy(True, k_steps=4), FleetError).get_program_config()
    assert geo.geo_sgd_mode and geo.geo_sgd_need_push_nums == 4
    with pytest.raises(FleetError, match="k_steps=4 \\(GEO\\) needs a_sync = True"):
        transpiler_strategy(_strategy(False, k_steps=4), FleetError)
    with pytest.raises(FleetError, match="unknown key\\(s\\) \\['k_step'\\]"):
        transpiler_strategy(_strategy(True, k_step=4), FleetError)
    transpiler_strategy(_strategy(True, k_steps=0, send_queue_size=8), FleetError)
    assert "send_queue_size" in caplog.text  # accepted, said to have no effect


def test_parameter_server_mode_needs_paddles_variables(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP")):
            monkeypatch.delenv(name)
    with pytest.raises(graphc.GraphcError, match="PaddleCloudRoleMaker: the environment "
                       "variable PADDLE_PSERVERS_IP_PORT_LIST is not set"):
        fleet.init()
    with pytest.raises(FleetError, match="run_server\\(\\) is for parameter-server jobs"):
        monkeypatch.setitem(fleet._FLEET, "ps", None)
        fleet.run_server()


def _local_reference():
    """One process on the whole batches (sync parameter-server training's equal)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = job.build()
        job.optimizer().minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for batch in job.batches():
        exe.run(main, feed=batch, fetch_list=[loss], scope=scope)
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
@pytest.mark.xdist_group("mpi")
@pytest.mark.parametrize("a_sync", ["0", "1"])
def test_fleetrun_runs_a_2_0_parameter_server_script(tmp_path, a_sync):
    """1 server, 2 workers: sync (a_sync=False) gives local training's parameters on both
    workers; async (a_sync=True, k_steps=0) trains (finite, the loss falls)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP", "XLA_FLAGS"))}
    env.update(PYTHONPATH=str(ROOT), CPU_NUM="1", FLEET20_A_SYNC=a_sync, FLEET20_K_STEPS="0")
    proc = subprocess.run([sys.executable, "-m", "graphc", "fleetrun", "--server_num", "1",
                           "--worker_num", "2", "--log_dir", str(tmp_path / "log"),
                           "--timeout", "150", str(JOB), str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=180)
    logs = "".join(p.read_text() for p in sorted((tmp_path / "log").glob("workerlog.*")))
    assert proc.returncode == 0, proc.stderr[-2000:] + logs[-3000:]
    got = [np.load(tmp_path / f"trainer{t}.npz") for t in (0, 1)]
    if a_sync == "0":
        for name, ref in _local_reference().items():
            for g in got:
                np.testing.assert_allclose(g[name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
    else:
        for g in got:
            assert np.isfinite(g["losses"]).all()
        assert got[0]["losses"][-1] < got[0]["losses"][0]
