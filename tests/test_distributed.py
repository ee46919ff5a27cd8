"""Several processes (issue 6): graphc.distributed's bootstrap helpers, the fleet API,
DistributedStrategy, and ``graphc launch`` (mpirun from the ``mpi`` extra).

The multi-process tests start real jobs of 2 ranks x 2 CPU devices; they share the
``xdist_group("mpi")`` so one xdist worker runs them one after another (2 cores).
Every subprocess has a timeout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc.distributed as dist
from graphc.distributed import fleet
from graphc.distributed.env import WorkerEnv, detect
from graphc.distributed.fleet import FleetError
from graphc.distributed.launch import LaunchError, add_arguments, build_command
from graphc.strategy import StrategyError

ROOT = Path(__file__).resolve().parent.parent
GRAPHC = [sys.executable, "-m", "graphc"]
HAVE_MPI = Path(sys.executable).with_name("mpirun").exists() or shutil.which("mpirun")


def launch(*args, nproc=2, cpu_num=2, timeout=120, **kw) -> subprocess.CompletedProcess:
    """``graphc launch --nproc_per_node NPROC ARGS`` with CPU_NUM devices per rank."""
    env = dict(os.environ, CPU_NUM=str(cpu_num), PYTHONPATH=str(ROOT),
               # later runs reuse compiled steps (the tests' cache: see conftest.py)
               JAX_COMPILATION_CACHE_DIR=str(ROOT / ".pytest_cache" / "jax-compilation"))
    env.pop("XLA_FLAGS", None)
    return subprocess.run([*GRAPHC, "launch", "--nproc_per_node", str(nproc), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout, **kw)


def left_behind(marker: str, wait: float = 10.0) -> str:
    """The command lines of processes still running with ``marker`` (after ``wait`` s)."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True,
                             timeout=10).stdout
        mine = [line for line in out.splitlines() if "pgrep" not in line]
        if not mine or time.monotonic() > deadline:
            return "\n".join(mine)
        time.sleep(0.5)


# -- 2 processes x 2 devices == 1 process x 4 devices ------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
def test_two_processes_match_one_process_with_four_devices(tmp_path):
    """One job (one bootstrap) trains every configuration of distributed_equivalence.py
    (flat all-reduce, bucketed, hierarchical with inter_nranks=2, amp, and bow_net with a
    sparse embedding whose rows are all-gathered across processes): per-device losses of
    the two ranks, concatenated, and the trainable parameters of both ranks equal those of
    one process with 4 devices (1e-5), batch norm's statistics on rank 0 too; the rank logs
    land in --log_dir."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import distributed_equivalence as eq
    finally:
        sys.path.pop(0)
    logs = tmp_path / "logs"
    proc = launch("--log_dir", logs, ROOT / "tests" / "distributed_equivalence.py", tmp_path,
                  timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):  # rank-prefixed output, and each rank's own log without the prefix
        assert f"[rank {rank}] sparse: done" in proc.stdout
        log = (logs / f"workerlog.{rank}").read_text()
        assert "sparse: done" in log and "[rank" not in log

    for config in eq.CONFIGS:
        model = eq.build(config)
        scope = graphc.Scope()
        with graphc.unique_name.guard(), graphc.scope_guard(scope), \
                graphc.program_guard(model.main, model.startup):
            eq.optimizer().minimize(model.loss)
            cp = graphc.CompiledProgram(
                model.main, build_strategy=eq.strategy(config).to_build_strategy(1, 4)
            ).with_data_parallel(loss_name=model.loss.name, places=graphc.cpu_places(4))
            exe = graphc.Executor(graphc.CPUPlace())
            exe.run(model.startup)
            fetch = [model.loss] + ([eq.SPARSE_GRAD] if config == "sparse" else [])
            fetched = [exe.run(cp, feed=batch, fetch_list=fetch) for batch in eq.batches(config)]
            ref_losses = np.stack([np.asarray(f[0]) for f in fetched])
            ref = eq.params(model, scope)
        got = [np.load(tmp_path / f"{config}.{rank}.npz") for rank in (0, 1)]
        losses = np.concatenate([g["losses"] for g in got], axis=1)  # (steps, 4 devices)
        assert losses.shape == ref_losses.shape == (eq.STEPS, 4), config
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-5,
                                   err_msg=f"{config}: per-device losses")
        np.testing.assert_allclose(losses.mean(1), ref_losses.mean(1), rtol=1e-5, atol=1e-5)
        sparse_keys = {"fetched_sparse_grad", "fetched_sparse_height"}
        assert set(ref) == set(got[0].files) - {"losses"} - sparse_keys
        if config == "sparse":  # each rank gets its 2 devices' blocks of the 4 devices' fetch
            whole = fetched[-1][1]
            assert isinstance(whole, graphc.SelectedRows) and whole.height == 4 * eq.VOCAB
            for rank in (0, 1):
                assert int(got[rank]["fetched_sparse_height"]) == 2 * eq.VOCAB
                np.testing.assert_allclose(
                    got[rank]["fetched_sparse_grad"],
                    np.asarray(whole)[rank * 2 * eq.VOCAB:(rank + 1) * 2 * eq.VOCAB],
                    rtol=1e-5, atol=1e-6, err_msg=f"sparse fetch on rank {rank}")
        trainable = {p.name for p in model.main.global_block().all_parameters()
                     if p.trainable}
        for name, value in ref.items():
            # batch norm's running statistics stay per device (as in Paddle): rank 0's
            # are device 0's, which the 1-process scope holds; rank 1's are device 2's
            for rank in (0, 1) if name in trainable else (0,):
                np.testing.assert_allclose(got[rank][name], value, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{config}: {name} on rank {rank}")


# -- the seeds' collective ResNet example ------------------------------------------------
@pytest.mark.slow
@pytest.mark.xdist_group("mpi")
@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
def test_seed_collective_resnet_example_runs_under_launch(tmp_path):
    """examples/collective_resnet.py (the seed's script, tiny ResNet-18, synthetic data) runs
    on 2 ranks x 2 devices: exit 0, the seed's print line for every step from both ranks,
    and the strategy saved as prototxt (read back equal). amp is off here only to keep the
    test short (XLA's CPU compile of the bf16 step takes ~25 s); amp in data parallel across
    processes is checked by the equivalence test's "amp" configuration."""
    proc = launch(ROOT / "examples" / "collective_resnet.py", "--steps", "2",
                  "--image_size", "8", "--base_width", "4", "--no_amp", cwd=tmp_path,
                  timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        for step in (0, 1):
            line = next(li for li in proc.stdout.splitlines()
                        if li.startswith(f"[rank {rank}] worker_index: {rank}, step{step} "))
            cost, speed = (float(part.split("=")[-1].split(":")[-1])
                           for part in line.split(", ")[-2:])
            assert np.isfinite(cost) and cost > 0 and speed > 0, line
    s = graphc.DistributedStrategy.load_from_prototxt(tmp_path / "dist_strategy.prototxt")
    assert s.nccl_comm_num == 2 and s.fuse_all_reduce_ops and s.build_strategy.fuse_bn_act_ops
    assert s.execution_strategy.num_iteration_per_drop_scope == 100
    assert s.amp_configs.init_loss_scaling == 128 and s.amp_configs.decr_ratio == 0.5


# -- failures: nothing hangs, nothing is left behind -------------------------------------
FAILING = textwrap.dedent("""
    import os, signal, sys, time
    import graphc
    from graphc.distributed import fleet
    mode = sys.argv[1]
    fleet.init(is_collective=True)
    if fleet.worker_index() == 1:
        if mode == "raise":  # an unknown strategy field: a clear error on rank 1
            strategy = fleet.DistributedStrategy()
            strategy.fuse_all_reduce_opz = True
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    if mode != "hang":
        fleet.barrier_worker()  # rank 0 waits in a collective for rank 1, which never comes
    time.sleep(300)
""")


@pytest.mark.xdist_group("mpi")
@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
@pytest.mark.parametrize("mode", ["raise", "kill"])
def test_failing_rank_ends_the_job(tmp_path, mode):
    """Rank 1 raises (an unknown DistributedStrategy field) or SIGKILLs itself while rank 0
    waits in a collective: launch exits non-zero within 60 s and no process of the job
    (mpirun, rank wrappers, scripts) is left."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    marker = f"graphc-test-{uuid.uuid4().hex}"
    start = time.monotonic()
    try:
        proc = launch(script, mode, marker, timeout=90)
    finally:
        leftover = left_behind(marker)
        if leftover:
            subprocess.run(["pkill", "-KILL", "-f", marker], timeout=10)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0, proc.stdout + proc.stderr
    # (a raising rank used to wait in jax.distributed's exit barrier until gloo's 30 s
    # timeout: ~38 s; now ~6 s)
    assert elapsed < (30 if mode == "raise" else 60), f"the job took {elapsed:.0f} s to end"
    assert not leftover, f"left behind:\n{leftover}"
    if mode == "raise":
        assert "[rank 1] graphc.strategy.StrategyError: DistributedStrategy has no field " \
               "'fuse_all_reduce_opz'" in proc.stderr, proc.stderr[-3000:]


@pytest.mark.xdist_group("mpi")
@pytest.mark.skipif(not HAVE_MPI, reason="needs mpirun")
def test_launch_timeout_stops_a_hanging_job(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(FAILING)
    marker = f"graphc-test-{uuid.uuid4().hex}"
    start = time.monotonic()
    try:
        proc = launch("--timeout", "20", script, "hang", marker, timeout=90)
    finally:
        leftover = left_behind(marker)
        if leftover:
            subprocess.run(["pkill", "-KILL", "-f", marker], timeout=10)
    assert proc.returncode == 124, proc.stdout + proc.stderr
    assert "--timeout 20s" in proc.stderr
    assert time.monotonic() - start < 60
    assert not leftover, f"left behind:\n{leftover}"


# -- misconfiguration: one clear line, non-zero exit -------------------------------------
def _cli(capsys, *argv) -> tuple[int, str]:
    from graphc.cli import main
    code = main(["launch", *map(str, argv)])
    return code, capsys.readouterr().err


def test_launch_misconfiguration_is_one_clear_line(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    cases = [
        (("--hostfile", tmp_path / "nope", script), "hostfile '"),
        (("--nproc_per_node", "0", script), "--nproc_per_node must be at least 1, got 0"),
        ((tmp_path / "missing.py",), "training script '"),
        (("--devices", "0,1,2", "--nproc_per_node", "2", script),
         "3 devices do not split evenly over 2"),
    ]
    for argv, message in cases:
        code, err = _cli(capsys, *argv)
        assert code == 1, argv
        assert len(err.strip().splitlines()) == 1 and err.startswith("graphc: error: "), err
        assert "LaunchError" in err and message in err, err


def test_launch_misconfiguration_from_the_shell(tmp_path):
    """The installed command: exit 1 and one line on stderr, nothing started."""
    proc = subprocess.run([*GRAPHC, "launch", "--nproc_per_node", "0", __file__],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("graphc: error: LaunchError: --nproc_per_node must be at "
                                   "least 1, got 0")


def _args(*argv) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args([*argv])


def test_launch_command_line(tmp_path, monkeypatch):
    script = tmp_path / "t.py"
    script.write_text("")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb slots=2\n")
    monkeypatch.setenv("CPU_NUM", "2")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth1")
    monkeypatch.setenv("FLAGS_rpc_deadline", "5000")
    cmd, env = build_command(_args("--mpirun", "mpirun", "--nproc_per_node", "2", "--hosts",
                                   "a, b", str(script), "--lr", "0.1"))
    assert cmd[cmd.index("--host") + 1] == "a:2,b:2" and cmd[cmd.index("-n") + 1] == "4"
    assert cmd[-5:] == ["-m", "graphc.distributed.rank", str(script), "--lr", "0.1"]
    assert cmd[cmd.index("-x") + 1] == "CPU_NUM"  # forwarded to the other nodes
    forwarded = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    assert {"NCCL_SOCKET_IFNAME", "FLAGS_rpc_deadline"} <= forwarded
    cmd, env = build_command(_args("--mpirun", "mpirun", "--nproc_per_node", "2",
                                   "--hostfile", str(hostfile), "--devices", "0,1",
                                   "--log_dir", str(tmp_path / "l"), str(script)))
    assert cmd[cmd.index("--hostfile") + 1] == str(hostfile)
    assert cmd[cmd.index("--map-by") + 1] == "ppr:2:node"
    assert env["GRAPHC_LAUNCH_DEVICES"] == "0,1"
    assert env["GRAPHC_LAUNCH_LOG_DIR"] == str((tmp_path / "l").resolve())
    assert "GRAPHC_LAUNCH_LOG_DIR" in cmd and "GRAPHC_LAUNCH_DEVICES" in cmd
    with pytest.raises(LaunchError, match="do not split evenly"):
        build_command(_args("--mpirun", "m", "--devices", "0,1,2", "--nproc_per_node", "2",
                            str(script)))


# -- a rank's wrapper: prefix, log, exit status ------------------------------------------
def _rank(tmp_path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_", "SLURM_"))}
    env.update(OMPI_COMM_WORLD_RANK="3", OMPI_COMM_WORLD_SIZE="4",
               OMPI_COMM_WORLD_LOCAL_RANK="1", OMPI_COMM_WORLD_LOCAL_SIZE="2",
               GRAPHC_LAUNCH_LOG_DIR=str(tmp_path), GRAPHC_LAUNCH_DEVICES="4,5,6,7",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "graphc.distributed.rank", str(script), "a"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_rank_wrapper_prefixes_logs_and_passes_the_exit_status(tmp_path):
    proc = _rank(tmp_path, """
        import os, sys
        print("hello", sys.argv[1], os.environ["CUDA_VISIBLE_DEVICES"])
        print("oops", file=sys.stderr)
        sys.exit(3)
    """)
    assert proc.returncode == 3
    assert proc.stdout == "[rank 3] hello a 6,7\n"  # local rank 1 of 2: the second pair
    assert proc.stderr == "[rank 3] oops\n"
    assert sorted((tmp_path / "workerlog.3").read_text().splitlines()) == ["hello a 6,7",
                                                                          "oops"]


def test_rank_wrapper_reports_a_killed_child_as_128_plus_signal(tmp_path):
    proc = _rank(tmp_path, """
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    assert proc.returncode == 128 + signal.SIGKILL


# -- environment detection, sharding, init in one process --------------------------------
@pytest.mark.parametrize("env, expected", [
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
      "PMIX_RANK": "2"}, WorkerEnv("openmpi", 2, 4, 0, 2)),
    ({"PMI_SIZE": "3", "PMI_RANK": "1", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"},
     WorkerEnv("mpich", 1, 3, 1, 3)),
    ({"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
      "SLURM_NTASKS_PER_NODE": "4"}, WorkerEnv("slurm", 5, 8, 1, 4)),
    ({"PATH": "/usr/bin", "SLURM_JOB_ID": "7"}, WorkerEnv("none")),
])
def test_detect_launcher(env, expected):
    got = detect(env)
    assert got == expected
    assert got.uses_mpi == (expected.launcher in ("openmpi", "mpich"))


def test_shard_batches_gives_every_rank_the_same_count(monkeypatch):
    batches = list(range(10))
    shards = []
    for rank in range(3):
        monkeypatch.setitem(dist._STATE, "env", WorkerEnv("openmpi", rank, 3))
        shards.append(dist.shard_batches(batches))
        assert dist.worker_index() == rank and dist.worker_num() == 3
        assert dist.is_first_worker() == (rank == 0)
    assert [len(s) for s in shards] == [3, 3, 3]
    assert sorted(sum(shards, [])) == list(range(9))  # disjoint; the remainder dropped
    with pytest.raises(dist.DistributedError, match="do not split evenly"):
        dist.shard_batches(batches, drop_last=False)
    assert dist.shard_batches(list(range(9)), drop_last=False) == [2, 5, 8]


def test_init_is_a_no_op_in_one_process():
    assert "OMPI_COMM_WORLD_SIZE" not in os.environ
    env = dist.init()
    assert env.launcher == "none" and env.size == 1
    assert dist.init() is env  # idempotent
    assert dist.worker_index() == 0 and dist.worker_num() == 1 and dist.is_first_worker()
    dist.barrier()  # nothing to wait for
    fleet.init(is_collective=True)
    assert fleet.worker_index() == 0 and fleet.worker_num() == 1


# -- fleet API errors ----------------------------------------------------------------------
def test_fleet_parameter_server_modes_are_clear_errors():
    # is_collective=False is Paddle 2.0's parameter-server mode (issue 27): its role comes
    # from Paddle's variables, which this process lacks
    with pytest.raises(graphc.GraphcError, match="PADDLE_PSERVERS_IP_PORT_LIST is not set"):
        fleet.init(is_collective=False)
    fleet.init(is_collective=True)
    opt = graphc.optimizer.SGD(0.1)
    fleet.distributed_optimizer(opt, fleet.DistributedStrategy())  # a_sync default: fine
    s = fleet.DistributedStrategy()
    s.a_sync = True
    with pytest.raises(FleetError, match="a_sync is a parameter-server option"):
        fleet.distributed_optimizer(opt, s)
    with pytest.raises(FleetError, match="must be a fleet.DistributedStrategy"):
        fleet.distributed_optimizer(opt, graphc.BuildStrategy())


# -- DistributedStrategy -------------------------------------------------------------------
SEED_DEFAULTS = {  # the seeds' DistributedStrategy table (002, "Fleet 训练策略")
    "auto": False, "a_sync": True, "sync_nccl_allreduce": True, "nccl_comm_num": 1,
    "use_hierarchical_allreduce": False, "hierarchical_allreduce_inter_nranks": 1,
    "sync_batch_norm": False, "fuse_all_reduce_ops": True, "fuse_grad_size_in_MB": 32,
    "fuse_grad_size_in_TFLOPS": 20, "cudnn_exhaustive_search": True,
    "conv_workspace_size_limit": 4000, "cudnn_batchnorm_spatial_persistent": True,
}
SEED_AMP_CONFIGS = {"init_loss_scaling": 128, "decr_every_n_nan_or_inf": 2,
                    "incr_every_n_steps": 1000, "incr_ratio": 2.0,
                    "use_dynamic_loss_scaling": True, "decr_ratio": 0.5,
                    "custom_white_list": [], "custom_black_list": []}


def seed_strategy() -> graphc.DistributedStrategy:
    """The seeds' example strategy, set as the seed sets it."""
    s = fleet.DistributedStrategy()
    s.sync_nccl_allreduce = True
    s.nccl_comm_num = 2
    s.fuse_all_reduce_ops = True
    s.fuse_grad_size_in_MB = 16
    s.fuse_grad_size_in_TFLOPS = 50
    bs = graphc.BuildStrategy()
    bs.enable_sequential_execution = True
    bs.fuse_elewise_add_act_ops = True
    bs.fuse_bn_act_ops = True
    bs.enable_auto_fusion = True
    bs.fuse_all_optimizer_ops = True
    s.build_strategy = bs
    es = graphc.ExecutionStrategy()
    es.num_threads = 3
    es.num_iteration_per_drop_scope = 100
    es.num_iteration_per_run = 1
    s.execution_strategy = es
    s.amp = True
    s.amp_configs = dict(SEED_AMP_CONFIGS)
    s.use_hierarchical_allreduce = True
    s.hierarchical_allreduce_inter_nranks = 8
    s.thread_num = 3
    return s


def test_defaults_are_the_seeds_table():
    s = graphc.DistributedStrategy()
    assert fleet.DistributedStrategy is graphc.DistributedStrategy is dist.DistributedStrategy
    assert {k: getattr(s, k) for k in SEED_DEFAULTS} == SEED_DEFAULTS
    assert not s.amp and s.build_strategy == graphc.BuildStrategy()
    assert s.execution_strategy == graphc.ExecutionStrategy()


def test_build_strategy_fields_set_on_it_are_forwarded():
    s = graphc.DistributedStrategy()
    s.fuse_bn_act_ops = True  # as the seeds write it
    s.enable_inplace = True
    assert s.build_strategy.fuse_bn_act_ops and s.build_strategy.enable_inplace
    assert s.fuse_bn_act_ops is True
    assert "fuse_bn_act_ops" not in s.to_dict()  # lives in build_strategy only
    with pytest.raises(StrategyError, match="has no field 'fuse_all_reduce_opz'"):
        s.fuse_all_reduce_opz = True
    with pytest.raises(StrategyError, match="nccl_comm_num"):
        s.nccl_comm_num = 0
    with pytest.raises(StrategyError):
        graphc.DistributedStrategy(not_a_field=1)


def test_to_build_strategy_maps_the_collective_fields():
    s = seed_strategy()
    bs = s.to_build_strategy(num_trainers=4, local_devices=2)
    assert isinstance(bs, graphc.BuildStrategy)
    assert bs.fuse_all_reduce_ops and bs.fuse_grad_size_in_MB == 16
    assert bs.fuse_grad_size_in_TFLOPS == 50
    assert bs.use_hierarchical_allreduce and bs.hierarchical_allreduce_inter_nranks == 8
    assert bs.num_trainers == 4 and bs.amp
    assert bs.amp_configs.init_loss_scaling == 128 and bs.amp_configs.decr_ratio == 0.5
    assert bs.fuse_bn_act_ops and bs.fuse_all_optimizer_ops  # the build_strategy's own
    assert s.build_strategy.num_trainers == 1  # not changed in place
    # inter_nranks 0 or 1 (the default): groups of one process's devices
    s.hierarchical_allreduce_inter_nranks = 1
    assert s.to_build_strategy(2, 4).hierarchical_allreduce_inter_nranks == 4
    s.fuse_all_reduce_ops = False  # the collective field wins over build_strategy's
    s.build_strategy.fuse_all_reduce_ops = True
    assert not s.to_build_strategy(2, 2).fuse_all_reduce_ops
    s.sync_batch_norm = True
    assert s.to_build_strategy(2, 2).sync_batch_norm


@pytest.mark.parametrize("suffix", [".prototxt", ".toml", ".json"])
def test_file_round_trips(tmp_path, suffix):
    s = seed_strategy()
    s.a_sync_configs = {"k_steps": 4}
    path = tmp_path / f"dist_strategy{suffix}"
    if suffix == ".prototxt":
        s.save_to_prototxt(path)
        text = path.read_text()
        assert "nccl_comm_num: 2" in text and "amp_configs {" in text
        assert "  init_loss_scaling: 128.0" in text
        back = graphc.DistributedStrategy.load_from_prototxt(path)
    else:
        s.save(path)
        back = graphc.DistributedStrategy.load(path)
    assert back == s
    assert {k: getattr(back.amp_configs, k) for k in SEED_AMP_CONFIGS} == SEED_AMP_CONFIGS
    assert graphc.DistributedStrategy.load(path) == s  # load() picks the format by suffix


def test_prototxt_lists_and_comments(tmp_path):
    path = tmp_path / "s.prototxt"
    path.write_text('# Paddle writes these\nnccl_comm_num: 2\namp: true\n'
                    'amp_configs {\n  custom_white_list: "conv2d"\n'
                    '  custom_white_list: "mul"\n  init_loss_scaling: 1024\n}\n'
                    'build_strategy { reduce_strategy: Reduce }\n')
    s = graphc.DistributedStrategy.load_from_prototxt(path)
    assert s.amp_configs.custom_white_list == ["conv2d", "mul"]
    assert s.amp_configs.init_loss_scaling == 1024
    assert s.build_strategy.reduce_strategy.name == "Reduce"


@pytest.mark.parametrize("name, text", [
    ("s.toml", "[distributed_strategy]\nfuse_all_reduce_opz = true\n"),
    ("s.json", '{"distributed_strategy": {"fuse_all_reduce_opz": true}}'),
    ("s.prototxt", "nccl_comm_num: 2\nfuse_all_reduce_opz: true\n"),
])
def test_unknown_field_in_a_file_is_a_clear_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(StrategyError) as info:
        graphc.DistributedStrategy.load(path)
    message = str(info.value)
    assert str(path) in message and "fuse_all_reduce_opz" in message
    assert len(message.splitlines()) == 1


def test_bad_prototxt_names_the_line(tmp_path):
    path = tmp_path / "bad.prototxt"
    path.write_text("nccl_comm_num: 2\namp_configs {\n  incr_ratio 2.0\n}\n")
    with pytest.raises(StrategyError, match=r"bad.prototxt:3: .*incr_ratio 2.0.*Expected \":\""):
        graphc.DistributedStrategy.load_from_prototxt(path)
    with pytest.raises(StrategyError, match="does not exist"):
        graphc.DistributedStrategy.load_from_prototxt(tmp_path / "nope.prototxt")
    path.write_text("nccl_comm_num: 2\n\n  amp: ?\n")
    with pytest.raises(StrategyError, match=r"bad.prototxt:3: '  amp: \?'"):
        graphc.DistributedStrategy.load_from_prototxt(path)
