"""Several processes: 2 processes x 2 CPU devices (``graphc launch``) against 1 process x 4
devices, same fleet script, same global batch: step time and bootstrap time.

Run ``python benchmarks/bench_multiprocess.py [--layers 20] [--width 64] [--steps 30]
[--repeat 2]``. The model is an MLP of ``--layers`` fc layers trained with Momentum through
``fleet.distributed_optimizer`` with bucketing on (``fuse_all_reduce_ops``). Each
configuration runs ``--repeat`` times, alternating; the report gives each run's numbers.

Reported per run:
- ``init``: seconds from the moment the benchmark starts the job (``graphc launch`` or
  ``python``) to ``fleet.init()`` returning on rank 0 (interpreter and graphc import, mpirun,
  the MPI port exchange, ``jax.distributed.initialize``, gloo's connections);
- ``first step``: from the same moment to the end of the first training step (building the
  program, the startup program, compiling the data-parallel step);
- ``step``: median seconds of ``--steps`` steps after 3 warm-up steps (each fetches the loss,
  so it waits for the step's collectives).
On a 2-core machine 4 XLA CPU devices share 2 cores either way: the numbers show what the
second process costs, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(args) -> None:
    import numpy as np

    import graphc
    from graphc import layers
    from graphc.distributed import fleet

    t0 = float(os.environ["BENCH_T0"])
    fleet.init(is_collective=True)
    t_init = time.time() - t0
    rank, n = fleet.worker_index(), fleet.worker_num()
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = graphc.data("x", [-1, args.width])
        y = graphc.data("y", [-1, 1], dtype="int64")
        h = x
        for _ in range(args.layers - 1):
            h = layers.fc(h, args.width, act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, 10), y))
        s = fleet.DistributedStrategy()
        s.fuse_all_reduce_ops = True
        fleet.distributed_optimizer(graphc.optimizer.Momentum(0.01, 0.9), s).minimize(loss)
    exe = graphc.Executor(graphc.CPUPlace())
    exe.run(startup)
    rng = np.random.RandomState(0)
    per_rank = args.batch // n
    feed = {"x": rng.randn(per_rank, args.width).astype("float32"),
            "y": rng.randint(0, 10, (per_rank, 1)).astype("int64")}
    exe.run(main, feed=feed, fetch_list=[loss])
    t_first = time.time() - t0
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[loss])
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        exe.run(main, feed=feed, fetch_list=[loss])
        times.append(time.perf_counter() - start)
    if rank == 0:
        Path(args.worker).write_text(json.dumps({
            "init": t_init, "first_step": t_first, "step": statistics.median(times),
            "processes": n, "devices": len(__import__("jax").devices())}))


def run_one(kind: str, args, out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), CPU_NUM="2" if kind == "2x2" else "4")
    env.pop("XLA_FLAGS", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # compile every time: bootstrap as cold
    script = [str(Path(__file__).resolve()), "--worker", str(out), "--layers",
              str(args.layers), "--width", str(args.width), "--steps", str(args.steps),
              "--batch", str(args.batch)]
    if kind == "2x2":
        cmd = [sys.executable, "-m", "graphc", "launch", "--nproc_per_node", "2",
               "--timeout", "600", *script]
    else:
        cmd = [sys.executable, *script]
    env["BENCH_T0"] = repr(time.time())
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"{kind} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                 f"{proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=20)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"MLP {args.layers} x fc({args.width}), global batch {args.batch}, Momentum, "
          "bucketing on")
    print(f"{'run':<16}{'init s':>9}{'first step s':>14}{'step ms (median)':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for kind in ("1x4", "2x2"):
                res = run_one(kind, args, Path(tmp) / f"{kind}.{r}.json")
                assert res["devices"] == 4, res
                label = ("1 proc x 4 dev" if kind == "1x4" else "2 proc x 2 dev")
                print(f"{label:<16}{res['init']:>9.2f}{res['first_step']:>14.2f}"
                      f"{res['step'] * 1e3:>18.2f}", flush=True)


if __name__ == "__main__":
    main()
