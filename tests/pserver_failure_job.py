"""A parameter-server job that fails on purpose, for tests/test_pserver_failures.py: ``graphc
launch --server_num 1 --worker_num 2 pserver_failure_job.py OUT`` of a tiny dense model
(DistributeTranspiler, sync mode). Rank 0 serves; ranks 1-2 are trainers 0-1.

PS_FAULT picks the fault, at round/step PS_FAULT_STEP (default 2): ``server-raise`` (the
server's update raises), ``server-exit`` (the server calls os._exit(3)), ``server-kill`` (it
SIGKILLs itself), ``server-hang`` (its update never returns), ``trainer-raise``,
``trainer-kill``, ``trainer-hang`` (trainer 1 sleeps in its training loop). The faulty rank
writes OUT/fault_at (time.time()) just before the fault, so a test can time the job's end.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import graphc.fluid as fluid

ENDPOINTS, TRAINERS, STEPS = "127.0.0.1:6170", 2, 6


def fault(out: Path, what: str) -> None:
    """Do the fault ``what`` (raise, exit, kill, hang) in this process."""
    (out / "fault_at").write_text(repr(time.time()))
    if what == "raise":
        raise RuntimeError(f"{os.environ['PS_FAULT']} on purpose")
    if what == "exit":
        os._exit(3)
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "hang":
        while True:  # never returns; not waiting for any peer
            time.sleep(1.0)
    raise ValueError(f"unknown fault '{what}'")


class FaultyServerExecutor(fluid.Executor):
    """The server's executor: its update step (a run with a feed) faults at round k."""

    def __init__(self, out: Path, what: str | None, at: int):
        super().__init__(fluid.CPUPlace())
        self.out, self.what, self.at, self.rounds = out, what, at, 0

    def run(self, program=None, feed=None, *args, **kwargs):
        if feed:  # one update round of the server loop
            self.rounds += 1
            if self.what and self.rounds == self.at:
                fault(self.out, self.what)
        return super().run(program, feed, *args, **kwargs)


def build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 4], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def main(out_dir: str) -> None:
    from mpi4py import MPI
    rank = MPI.COMM_WORLD.Get_rank()
    out = Path(out_dir)
    role, _, what = os.environ.get("PS_FAULT", "-").partition("-")
    at = int(os.environ.get("PS_FAULT_STEP", "2"))
    prog, startup, loss = build()
    t = fluid.DistributeTranspiler()
    if rank == 0:  # the server
        t.transpile(0, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                    startup_program=startup)
        server_prog, server_startup = t.get_pserver_programs(ENDPOINTS)
        exe = FaultyServerExecutor(out, what if role == "server" else None, at)
        exe.run(server_startup)
        exe.run(server_prog)  # serves until both trainers complete
        return
    tid = rank - 1
    t.transpile(tid, program=prog, pservers=ENDPOINTS, trainers=TRAINERS,
                startup_program=startup)
    trainer_prog = t.get_trainer_program()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.default_rng(tid)
    for step in range(1, STEPS + 1):
        if role == "trainer" and tid == 1 and step == at:
            fault(out, what)
        x = rng.standard_normal((4, 4)).astype("float32")
        exe.run(trainer_prog, feed={"x": x, "y": x[:, :1]}, fetch_list=[loss.name])
    from graphc.distributed import pserver
    pserver.complete()
    (out / f"trainer{tid}.done").write_text("ok")


if __name__ == "__main__":
    main(sys.argv[1])
