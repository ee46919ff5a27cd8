"""One process of a parameter-server job that meets by endpoints (tests/test_pserver_endpoints.py):
started alone, as Paddle's distributed test harness starts each role, with Paddle's variables.

TRAINING_ROLE=PSERVER|TRAINER, PADDLE_PSERVERS_IP_PORT_LIST, POD_IP + PADDLE_PORT (a server),
PADDLE_TRAINER_ID + PADDLE_TRAINERS_NUM (a trainer); the model and data of
tests/pserver_sync_job.py. PS_TEST_MODE: sync (default), async or geo; PS_TEST_STEPS: steps
per trainer; PS_TEST_LR; PS_TEST_STEP_SLEEP: seconds between a trainer's steps.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import graphc.fluid as fluid

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pserver_sync_job as job  # noqa: E402

sys.path.pop(0)


def main(out: Path) -> None:
    env = os.environ
    pservers = env["PADDLE_PSERVERS_IP_PORT_LIST"]
    trainers = int(env["PADDLE_TRAINERS_NUM"])
    mode = env.get("PS_TEST_MODE", "sync")
    prog, startup, loss = job.build()
    config = fluid.DistributeTranspilerConfig()
    if mode == "geo":
        config.sync_mode = False
        config.runtime_split_send_recv = True
        config.geo_sgd_mode = True
        config.geo_sgd_need_push_nums = 2
    t = fluid.DistributeTranspiler(config)
    exe = fluid.Executor(fluid.CPUPlace())
    if env["TRAINING_ROLE"] == "PSERVER":
        current = f"{env['POD_IP']}:{env['PADDLE_PORT']}"
        t.transpile(0, program=prog, pservers=pservers, trainers=trainers,
                    sync_mode=mode != "async", startup_program=startup,
                    current_endpoint=current)
        server_prog, server_startup = t.get_pserver_programs(current)
        exe.run(server_startup)
        stats = exe.run(server_prog)  # listens on its endpoint until the trainers complete
        (out / f"server{pservers.split(',').index(current)}.json").write_text(json.dumps(stats))
        return
    tid = int(env["PADDLE_TRAINER_ID"])
    t.transpile(tid, program=prog, pservers=pservers, trainers=trainers,
                sync_mode=mode != "async", startup_program=startup)
    trainer_prog = t.get_trainer_program()
    exe.run(startup)
    steps = int(env.get("PS_TEST_STEPS", str(job.STEPS)))
    pause = float(env.get("PS_TEST_STEP_SLEEP", "0"))
    losses = []
    for b in job.batches(max(steps, job.STEPS + 1))[:steps]:
        part = {k: v[tid * job.HALF:(tid + 1) * job.HALF] for k, v in b.items()}
        value, = exe.run(trainer_prog, feed=part, fetch_list=[loss.name])
        losses.append(float(np.asarray(value).reshape(-1)[0]))
        (out / f"trainer{tid}.losses.json").write_text(json.dumps(losses))
        time.sleep(pause)
    np.savez(out / f"trainer{tid}.final.npz", **job.params(prog, fluid.global_scope()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
