"""One process of tests/test_fleet20_ps.py's job, started by ``fleetrun --server_num 1
--worker_num 2``: a Paddle 2.0-style parameter-server script (``fleet.init()``,
``DistributedStrategy.a_sync`` / ``a_sync_configs`` from FLEET20_A_SYNC / FLEET20_K_STEPS),
whose workers run the default programs, rewritten in place. Each worker trains on its half
of every global batch and writes OUT/trainer<i>.npz (losses, parameters)."""

from __future__ import annotations

import os
import sys

import numpy as np

import graphc.distributed.fleet as fleet
import graphc.fluid as fluid

STEPS, HALF, WIDTH = 3, 4, 8


def build():
    main, startup = fluid.default_main_program(), fluid.default_startup_program()
    main.random_seed = startup.random_seed = 5
    x = fluid.data("x", [-1, WIDTH], "float32")
    y = fluid.data("y", [-1, 1], "float32")
    h = fluid.layers.fc(x, WIDTH, act="tanh")
    p = fluid.layers.fc(h, 1)
    return fluid.layers.mean(fluid.layers.square_error_cost(p, y))


def optimizer():
    return fluid.optimizer.SGD(0.2)


def batches():
    rng = np.random.default_rng(11)
    out = []
    for _ in range(STEPS):
        x = (rng.standard_normal((2 * HALF, WIDTH)) * 0.5).astype("float32")
        out.append({"x": x, "y": np.tanh(x[:, :2].sum(1, keepdims=True)).astype("float32")})
    return out


def main(out_dir: str) -> None:
    fleet.init()  # Paddle's variables from fleetrun: a server or a worker
    loss = build()
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = os.environ.get("FLEET20_A_SYNC", "1") == "1"
    strategy.a_sync_configs = {"k_steps": int(os.environ.get("FLEET20_K_STEPS", "0"))}
    fleet.distributed_optimizer(optimizer(), strategy).minimize(loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return
    tid = fleet.worker_index()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())  # the trainer's: pulls the servers' values
    fleet.init_worker()
    losses = []
    for batch in batches():
        mine = {k: v[tid * HALF:(tid + 1) * HALF] for k, v in batch.items()}
        value, = exe.run(fluid.default_main_program(), feed=mine, fetch_list=[loss])
        losses.append(float(np.asarray(value).reshape(-1)[0]))
    scope = fluid.global_scope()
    np.savez(os.path.join(out_dir, f"trainer{tid}.npz"), losses=np.array(losses),
             **{p.name: np.asarray(scope[p.name])
                for p in fluid.default_main_program().global_block().all_parameters()})
    fleet.stop_worker()


if __name__ == "__main__":
    main(sys.argv[1])
