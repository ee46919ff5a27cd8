"""One parameter-server job for tests/test_pserver_sync.py, run by ``graphc launch
--nproc_per_node 4``: ranks 0-1 are servers, ranks 2-3 trainers, written as a Fluid 1.8 script
with the DistributeTranspiler. Trainer t trains on its half of each global batch; trainer 1
takes one step more than trainer 0 (uneven data), which must not hang the job.
PS_TEST_API=fleet: the same through the parameter-server fleet (PaddleCloudRoleMaker from
Paddle's variables, DistributedStrategyFactory; PS_TEST_STRATEGY=async for the async one);
PS_TEST_GEO=k: GEO-SGD pushing every k steps; PS_TEST_STEPS=N: N steps per trainer;
PS_TEST_LR: the learning rate; PS_TEST_SAVE=1: trainer 0 checkpoints after 2 steps (into
OUT/ckpt); PS_TEST_RESUME=DIR: servers load DIR, trainers pull and go on from its step;
PS_TEST_DC_ASGD=1: async with DC-ASGD; PS_TEST_FAIL=trainer1: trainer 1 raises after its
last step instead of completing."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import graphc.fluid as fluid
from graphc.distributed import pserver

ENDPOINTS = "127.0.0.1:6170,127.0.0.1:6171"
TRAINERS, STEPS, HALF = 2, 3, 4


def build(minimize: bool = True):
    """The model in new programs (or, without minimize, in the current program_guard's)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    if not minimize:
        main, startup = fluid.default_main_program(), fluid.default_startup_program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 128], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        h = fluid.layers.fc(x, 128, act="tanh")  # 128x128 weight: cut in 2 blocks
        p = fluid.layers.fc(h, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        if minimize:
            optimizer().minimize(loss)
    return main, startup, loss


def optimizer():
    """Momentum; PS_TEST_LR changes its learning rate (async needs a smaller one: W trainers
    apply W updates per global step)."""
    lr = float(os.environ.get("PS_TEST_LR", "0.1"))
    # PS_TEST_CLIP=global: clipped by the global norm of every gradient (blocks on both
    # servers): the servers sum their parts of the norm
    clip = (fluid.clip.GradientClipByGlobalNorm(float(os.environ.get("PS_TEST_CLIP_NORM", "0.1")))
            if os.environ.get("PS_TEST_CLIP") == "global" else None)
    return fluid.optimizer.Momentum(lr, 0.5, regularization=fluid.regularizer.L2Decay(0.01),
                                    grad_clip=clip)


def batches(steps: int = STEPS + 1):
    """A learnable task: y = tanh of the sum of the first 4 features."""
    rng = np.random.default_rng(3)
    out = []
    for _ in range(steps):
        x = (rng.standard_normal((2 * HALF, 128)) * 0.3).astype("float32")
        y = np.tanh(x[:, :4].sum(1, keepdims=True)).astype("float32")
        out.append({"x": x, "y": y})
    return out


def params(main, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}


def fleet_roles(rank: int) -> None:
    """Paddle's role variables for this rank (what ``graphc launch --server_num 2
    --worker_num 2`` is to export), read by PaddleCloudRoleMaker."""
    eps = ENDPOINTS.split(",")
    os.environ.update(PADDLE_PSERVERS_IP_PORT_LIST=ENDPOINTS, PADDLE_TRAINERS_NUM=str(TRAINERS))
    if rank < len(eps):
        ip, port = eps[rank].split(":")
        os.environ.update(TRAINING_ROLE="PSERVER", POD_IP=ip, PADDLE_PORT=port)
    else:
        os.environ.update(TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(rank - len(eps)))


def main(out_dir: str) -> None:
    """Servers serve until both trainers completed; trainers train and record."""
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    out = Path(out_dir)
    eps = ENDPOINTS.split(",")
    use_fleet = os.environ.get("PS_TEST_API") == "fleet"
    first = 0  # the first step to take (a resumed job skips the checkpoint's)
    given = {k: v for k, v in os.environ.items() if k.startswith(("PADDLE_", "TRAINING_",
                                                                   "POD_IP", "FLAGS_selected"))}
    (out / f"rank{rank}.env.json").write_text(json.dumps(given))  # what graphc launch set
    if use_fleet:
        import graphc.fluid.incubate.fleet.parameter_server.distribute_transpiler as ps
        from graphc.fluid.incubate.fleet.base import role_maker
        factory = ps.distributed_strategy_factory.DistributedStrategyFactory
        fleet = ps.fleet
        if "TRAINING_ROLE" not in os.environ:  # not launched with --server_num/--worker_num
            fleet_roles(rank)
        fleet.init(role_maker.PaddleCloudRoleMaker())
        main_prog, startup = fluid.Program(), fluid.Program()
        main_prog.random_seed = startup.random_seed = 7
        with fluid.program_guard(main_prog, startup):
            prog, _, loss = build(minimize=False)
            strategy = (factory.create_async_strategy() if os.environ.get(
                "PS_TEST_STRATEGY") == "async" else factory.create_sync_strategy())
            opt = fleet.distributed_optimizer(optimizer(), strategy)
            opt.minimize(loss, startup_program=startup)
        if fleet.is_server():
            fleet.init_server()
            stats = fleet.run_server()
            (out / f"server{fleet.server_index()}.json").write_text(json.dumps(stats))
            return
        tid, trainer_prog, prog = fleet.worker_index(), fleet.main_program, main_prog
        fleet.init_worker()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(fleet.startup_program)
    else:
        prog, startup, loss = build()
        config = fluid.DistributeTranspilerConfig()
        if os.environ.get("PS_TEST_GEO"):  # GEO-SGD, pushing every PS_TEST_GEO steps
            config.sync_mode = False
            config.runtime_split_send_recv = True
            config.geo_sgd_mode = True
            config.geo_sgd_need_push_nums = int(os.environ["PS_TEST_GEO"])
        if os.environ.get("PS_TEST_DC_ASGD"):  # async with delay compensation
            config.sync_mode = False
            config.enable_dc_asgd = True
        t = fluid.DistributeTranspiler(config)
        if rank < len(eps):  # a server
            t.transpile(0, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                        startup_program=startup)
            server_prog, server_startup = t.get_pserver_programs(eps[rank])
            exe = fluid.Executor(fluid.CPUPlace())
            exe.run(server_startup)
            if os.environ.get("PS_TEST_RESUME"):  # this server's blocks from the checkpoint
                pserver.load_checkpoint(server_prog, os.environ["PS_TEST_RESUME"])
            stats = exe.run(server_prog)  # Paddle's idiom: serves until trainers complete
            (out / f"server{rank}.json").write_text(json.dumps(stats))
            return
        tid = rank - len(eps)
        t.transpile(tid, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                    startup_program=startup)
        trainer_prog = t.get_trainer_program()
        exe = fluid.Executor(fluid.CPUPlace())
        if os.environ.get("PS_TEST_RESUME"):  # pull the resumed values; skip the steps taken
            exe.run(t.get_trainer_startup_program())
            from graphc.distributed.pserver.checkpoint import load_meta
            first = load_meta(os.environ["PS_TEST_RESUME"])["step"]
        else:
            exe.run(startup)
    losses = []
    steps = int(os.environ.get("PS_TEST_STEPS", "0"))
    data = batches(max(steps, STEPS + 1))
    fail = os.environ.get("PS_TEST_FAIL") == f"trainer{tid}"
    for step in range(first, steps or STEPS + tid):  # trainer 1: one extra step by default
        b = data[step]
        part = {k: v[tid * HALF:(tid + 1) * HALF] for k, v in b.items()}
        value, = exe.run(trainer_prog, feed=part, fetch_list=[loss.name])
        losses.append(float(np.asarray(value).reshape(-1)[0]))
        (out / f"trainer{tid}.losses.json").write_text(json.dumps(losses))
        if step == STEPS - 1:
            np.savez(out / f"trainer{tid}.npz", losses=np.array(losses),
                     **params(prog, fluid.global_scope()))
        if os.environ.get("PS_TEST_SAVE") and tid == 0 and step == 1:  # after 2 steps
            pserver.save_checkpoint(str(out / "ckpt"))
    np.savez(out / f"trainer{tid}.final.npz", **params(prog, fluid.global_scope()))
    if fail:  # instead of completing: the servers wait for this trainer
        deadline = time.time() + 60  # once trainer 0 is through (its results are checked)
        while not (out / "trainer0.done").exists() and time.time() < deadline:
            time.sleep(0.05)
        (out / "failed_at").write_text(repr(time.time()))
        raise RuntimeError(f"trainer {tid} fails on purpose after step {step}")
    if use_fleet:
        if tid == 0:  # the parameters a worker holds export as a local model's would
            fleet.save_inference_model(exe, str(out / "model"), ["x", "y"], [loss])
            np.savez(out / "trainer0.final.npz", **params(prog, fluid.global_scope()))
        fleet.stop_worker()
    else:
        pserver.complete()
    (out / f"trainer{tid}.done").write_text("")


if __name__ == "__main__":
    main(sys.argv[1])
