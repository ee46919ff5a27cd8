"""One trainer of tests/test_collective_alone.py, started as a plain process with Paddle's
variables (no launcher): ``python collective_alone_job.py MODE OUT_DIR``.

MODE ``nccl2``: a Fluid 1.8 script with ``DistributeTranspiler`` in nccl2 mode (trainers and
current_endpoint from the variables, as Paddle's test_dist_base does); ``fleet``: the
collective fleet (``fleet.init(is_collective=True)``, ``distributed_optimizer``); ``pe``:
``ParallelExecutor(num_trainers=2, trainer_id=...)``, made before the startup runs. Each
trainer feeds its contiguous half of every global batch and writes OUT_DIR/<id>.npz
(its losses and parameters; under ``fleet`` also what the role maker's collectives gave);
COLL_TEST_DIE=<id>: that trainer exits after the startup program, before any step.
The test imports ``build``/``batches`` for the 1-process run.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import graphc.fluid as fluid

STEPS, GLOBAL_BATCH, WIDTH = 3, 8, 16


def build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, WIDTH], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        h = fluid.layers.fc(x, WIDTH, act="tanh")
        p = fluid.layers.fc(h, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
    return main, startup, loss


def optimizer():
    return fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)


def batches() -> list[dict]:
    rng = np.random.RandomState(3)
    return [{"x": rng.randn(GLOBAL_BATCH, WIDTH).astype("float32"),
             "y": rng.randn(GLOBAL_BATCH, 1).astype("float32")} for _ in range(STEPS)]


def params(main, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}


def main(mode: str, out_dir: str) -> None:
    tid = int(os.environ["PADDLE_TRAINER_ID"])
    prog, startup, loss = build()
    with fluid.program_guard(prog, startup):
        if mode == "nccl2":
            optimizer().minimize(loss)
            config = fluid.DistributeTranspilerConfig()
            config.mode = "nccl2"
            fluid.DistributeTranspiler(config).transpile(
                tid, program=prog, startup_program=startup,
                trainers=os.environ["PADDLE_TRAINER_ENDPOINTS"],
                current_endpoint=os.environ["PADDLE_CURRENT_ENDPOINT"])
        elif mode == "pe":  # Paddle's ParallelExecutor(num_trainers=, trainer_id=)
            optimizer().minimize(loss)
            pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=prog,
                                        num_trainers=2, trainer_id=tid)
        else:
            from graphc.distributed import fleet
            from graphc.fluid.incubate.fleet.base import role_maker
            fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True),
                       is_collective=True)
            assert fleet.worker_index() == tid and fleet.worker_num() == 2
            fleet.distributed_optimizer(optimizer()).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.global_scope() if mode == "pe" else fluid.Scope()
    exe.run(startup, scope=scope)
    if os.environ.get("COLL_TEST_DIE") == str(tid):  # a peer lost after the job met
        print(f"trainer {tid} dies", flush=True)
        os._exit(3)
    half = GLOBAL_BATCH // 2
    losses = []
    for batch in batches():
        mine = {k: v[tid * half:(tid + 1) * half] for k, v in batch.items()}
        if mode == "pe":
            out, = pe.run(fetch_list=[loss.name], feed=mine)
        else:
            out, = exe.run(prog, feed=mine, fetch_list=[loss], scope=scope)
        losses.append(np.asarray(out))
    extra = {}
    if mode == "fleet":  # the role maker's collectives, over the joined job's store
        role = role_maker.PaddleCloudRoleMaker(is_collective=True)
        out = [0, 0]
        role.all_reduce_worker([tid, 5 - tid], out, mode="max")
        role.barrier_worker()
        role.barrier_all()
        extra = {"gathered": np.array(role.all_gather(10 * tid + 1)), "reduced": np.array(out),
                 "endpoints": np.array(role.get_trainer_endpoints())}
    np.savez(os.path.join(out_dir, f"{tid}.npz"), losses=np.stack(losses),
             **params(prog, scope), **extra)
    print(f"trainer {tid} done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
