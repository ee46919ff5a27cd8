"""A sparse parameter-server job for tests/test_pserver_sparse.py, run by ``graphc launch
--nproc_per_node 4`` (ranks 0-1 servers, 2-3 trainers), a Fluid 1.8 DistributeTranspiler script:
a CTR-style model with a distributed table (``is_distributed``: rows live on the servers,
two slots share it), an ``is_sparse`` table cut in two blocks (its gradient travels as rows)
and dense layers. PS_TEST_MODE=async / half_async: those modes; PS_TEST_STEPS: steps per
trainer; PS_TEST_BAD_STEP=k: trainer 1 first runs step k with an id outside the table (its
data checks refuse it), then the real batch; PS_TEST_SAVE_AT=k: trainer 0 checkpoints the
servers into OUT/mid before step k; PS_TEST_RESUME=DIR: servers load DIR, trainers pull and
go on from its step. After the last step trainer 0 checkpoints the
servers into OUT/ckpt (the table rows live only there)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import graphc.fluid as fluid
from graphc import DataError
from graphc.distributed import pserver

ENDPOINTS = "127.0.0.1:6180,127.0.0.1:6181"
TRAINERS, HALF = 2, 8
# PS_TEST_VOCAB: the distributed table's rows (2e9 x 8 float32 is 64 GB: more than any
# process of the job may hold)
VOCAB, SMALL, WIDTH = int(os.environ.get("PS_TEST_VOCAB", "1000000")), 2048, 8


def build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.program_guard(main, startup):
        slots = [fluid.layers.data(n, [1], dtype="int64") for n in ("a", "b")]
        c = fluid.layers.data("c", [1], dtype="int64")
        y = fluid.layers.data("y", [1], dtype="float32")
        table = fluid.ParamAttr(name="ctr_table",
                                initializer=fluid.initializer.Normal(0.0, 0.3))
        embs = [fluid.layers.embedding(s, [VOCAB, WIDTH], is_sparse=True, is_distributed=True,
                                       param_attr=table) for s in slots]
        embs.append(fluid.layers.embedding(c, [SMALL, WIDTH], is_sparse=True,
                                           param_attr=fluid.ParamAttr(name="small_table")))
        h = fluid.layers.fc(fluid.layers.concat(embs, axis=1), 16, act="tanh")
        p = fluid.layers.fc(h, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        fluid.optimizer.SGD(float(os.environ.get("PS_TEST_LR", "0.3"))).minimize(loss)
    return main, startup, loss


def batches(steps: int):
    """Ids from 40 values spread over the table (rows are revisited); the label
    is a function of them."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(steps):
        raw = rng.integers(0, 40, (2 * HALF, 3))
        a = (raw[:, :1] * 7919) % VOCAB
        b = (raw[:, 1:2] * 104729 + 3 + VOCAB // 2) % VOCAB
        c = raw[:, 2:] % SMALL
        y = np.sin(raw[:, :1] * 0.5) + 0.5 * np.cos(raw[:, 1:2] * 0.3)
        out.append({"a": a.astype("int64"), "b": b.astype("int64"), "c": c.astype("int64"),
                    "y": y.astype("float32")})
    return out


def dense_params(main, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()
            if p.name != "ctr_table"}


def main(out_dir: str) -> None:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    out, eps = Path(out_dir), ENDPOINTS.split(",")
    steps = int(os.environ.get("PS_TEST_STEPS", "4"))
    prog, startup, loss = build()
    config = fluid.DistributeTranspilerConfig()
    mode = os.environ.get("PS_TEST_MODE", "sync")
    config.sync_mode = mode == "sync"
    config.half_async = mode == "half_async"  # trainers wait for their own update
    t = fluid.DistributeTranspiler(config)
    if rank < len(eps):
        t.transpile(0, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                    startup_program=startup)
        server_prog, server_startup = t.get_pserver_programs(eps[rank])
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(server_startup)
        if os.environ.get("PS_TEST_RESUME"):  # blocks, velocities and table rows
            pserver.load_checkpoint(server_prog, os.environ["PS_TEST_RESUME"])
        stats = exe.run(server_prog)
        (out / f"server{rank}.json").write_text(json.dumps(stats))
        return
    tid = rank - len(eps)
    t.transpile(tid, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                startup_program=startup)
    trainer_prog = t.get_trainer_program()
    exe = fluid.Executor(fluid.CPUPlace())
    # trainer 0 pulls its initial values; trainer 1 runs the (transpiled) startup program,
    # which no longer makes the table, as Fluid scripts do: both must start alike
    resume = os.environ.get("PS_TEST_RESUME")
    exe.run(t.get_trainer_startup_program() if tid == 0 or resume else startup)
    first = 0
    if resume:  # the checkpoint's values were pulled; go on from its step
        from graphc.distributed.pserver.checkpoint import load_meta
        first = load_meta(resume)["step"]
    losses = []
    bad_step = int(os.environ.get("PS_TEST_BAD_STEP", "-1"))
    save_at = int(os.environ.get("PS_TEST_SAVE_AT", "-1"))
    for step, batch in enumerate(batches(steps)):
        if step < first:
            continue
        if step == save_at and tid == 0:
            pserver.save_checkpoint(str(out / "mid"))
        mine = {k: v[tid * HALF:(tid + 1) * HALF] for k, v in batch.items()}
        if step == bad_step and tid == 1:  # refused by its data checks: the servers must
            bad = dict(mine, a=mine["a"].copy())  # never see it, and the retry goes on
            bad["a"][0, 0] = VOCAB + 5
            try:
                exe.run(trainer_prog, feed=bad, fetch_list=[loss.name])
            except DataError as exc:
                (out / "refused.txt").write_text(str(exc))
        losses.append(float(np.asarray(exe.run(trainer_prog, feed=mine,
                                               fetch_list=[loss.name])[0]).reshape(-1)[0]))
    if tid == 0:
        if mode != "sync":  # async trainers run apart: checkpoint once the other is through
            deadline = time.time() + 60
            while not (out / "trainer1.done").exists() and time.time() < deadline:
                time.sleep(0.02)
        pserver.save_checkpoint(str(out / "ckpt"))
    np.savez(out / f"trainer{tid}.npz", losses=np.array(losses),
             **dense_params(prog, fluid.global_scope()))
    ch = pserver.trainer_channel()
    (out / f"trainer{tid}.json").write_text(json.dumps(
        {"bytes_sent": ch.bytes_sent, "bytes_received": ch.bytes_received}))
    pserver.complete()  # every push applied (its reply taken)
    (out / f"trainer{tid}.done").write_text("")


if __name__ == "__main__":
    main(sys.argv[1])
