"""Parameter servers against collective all-reduce on a CTR-DNN-style model: samples/s and
bytes per step for 1 server x {1, 2, 3} workers in sync, async and GEO, and a table-size sweep.

Run ``python benchmarks/bench_pserver.py [--workers 1 2 3] [--modes sync async geo]
[--vocab 10000] [--sweep 10000 100000 1000000] [--table sparse|distributed] [--steps 30]
[--repeat 1] [--transports mpi zmq] [--out results.json]``. The model: ``--slots`` sparse
slots of ``--ids`` ids each, looked up in one shared ``[vocab, --emb]`` table
(``embedding(is_sparse=True)``; ``--table distributed`` adds ``is_distributed=True``),
sum-pooled per slot, concatenated with 13 dense features, then fc ``--hidden`` (relu) and a
2-way softmax with cross-entropy on a binary label; SGD.

Each parameter-server configuration is one ``graphc launch --server_num 1 --worker_num W``
job of this script (a Fluid 1.8 script with the DistributeTranspiler, roles from Paddle's
variables); the collective one is ``graphc launch --nproc_per_node W`` with graphc's fleet
(gradients all-reduced, the embedding's row-sparse gradient all-gathered). Every worker feeds
``--batch`` samples per step. Reported per configuration:
- ``samples/s``: all workers' samples in the timed steps over the time from the first timed
  step's start to the last one's end (any worker); ``--warmup`` steps (compilation) first;
- ``step ms``: the workers' median step time; ``cpu ms``: the CPU time a worker's process
  used per timed step (the workers' median; a worker that waits by polling uses CPU while it
  waits);
- ``sent/step``: bytes a trainer sends per step (the trainer channel's count) and, for the
  collective path, the bytes each process contributes to the exchange (dense gradients, and
  the embedding's rows and ids; 0 for one process);
- ``recv/step``: bytes a trainer takes back per step: the server's count of bytes sent over
  every trainer step (warm-up included), and for the collective path the others'
  contributions;
- ``vs coll``: samples/s over the collective path's with the same worker count, same run;
- ``vs mpi``: samples/s over the same configuration's over MPI, same run. Every
  parameter-server configuration runs once per ``--transports`` entry (GRAPHC_PS_TRANSPORT:
  ``mpi``, messages over the launcher's MPI job; ``zmq``, over ZeroMQ between the endpoints,
  the server binding a free loopback port), the transports back to back in each round and
  first in turn; a last table shows how each one's step grows with the workers.
On a 2-core machine the ranks (servers included) share 2 cores: the numbers show what each
design costs here, not a scale-out.
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
DENSE = 13  # Criteo's dense features


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2, 3],
                   help="worker counts of the grid (none: skip the grid)")
    p.add_argument("--modes", nargs="+", default=["sync", "async", "geo"],
                   choices=["sync", "async", "geo"])
    p.add_argument("--no-collective", action="store_true", help="skip the all-reduce runs")
    p.add_argument("--transports", nargs="+", default=["mpi", "zmq"], choices=["mpi", "zmq"],
                   help="the parameter server's transports (GRAPHC_PS_TRANSPORT), each "
                   "configuration run over each in turn")
    p.add_argument("--vocab", type=int, default=10_000, help="table rows (workers grid)")
    p.add_argument("--sweep", type=int, nargs="*", default=[10_000, 100_000, 1_000_000],
                   help="table rows of the sweep (sync, 1 server x 1 worker); none: skip")
    p.add_argument("--table", choices=["sparse", "distributed"], default="sparse",
                   help="embedding(is_sparse=True) or also is_distributed=True")
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--ids", type=int, default=2, help="ids per slot (sum-pooled)")
    p.add_argument("--emb", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[400, 400, 400])
    p.add_argument("--batch", type=int, default=128, help="samples per worker per step")
    p.add_argument("--steps", type=int, default=30, help="timed steps per worker")
    p.add_argument("--warmup", type=int, default=4, help="untimed steps first (compiling; "
                   "the default sees each of the 4 distinct batches, so every row is touched)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--geo-k", type=int, default=10, help="GEO update_frequency")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per configuration, in rounds; the median run is reported")
    p.add_argument("--timeout", type=float, default=300, help="per job, seconds")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # a rank: its out dir
    p.add_argument("--mode", default="sync", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- one rank ----------------------------------------------------------------------------

def build(fluid, args, vocab: int):
    """(main, startup, loss) of the CTR-DNN-style model, optimizer not yet applied."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, args.slots * args.ids, 1], "int64")
        dense = fluid.data("dense", [-1, DENSE], "float32")
        label = fluid.data("label", [-1, 1], "int64")
        emb = fluid.layers.embedding(
            ids, size=[vocab, args.emb], is_sparse=True,
            is_distributed=args.table == "distributed",
            param_attr=fluid.ParamAttr(name="SparseFeatFactors"))
        pooled = fluid.layers.reduce_sum(  # sum pooling of each slot's ids
            fluid.layers.reshape(emb, [-1, args.slots, args.ids, args.emb]), dim=2)
        h = fluid.layers.concat([fluid.layers.reshape(pooled, [-1, args.slots * args.emb]),
                                 dense], axis=1)
        for width in args.hidden:
            h = fluid.layers.fc(h, width, act="relu")
        predict = fluid.layers.fc(h, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
    return main, startup, loss


def batches(args, vocab: int, worker: int, count: int = 4) -> list[dict]:
    """``count`` distinct batches for one worker: uniform ids; the label depends on the dense
    features, so the task is learnable."""
    import numpy as np
    rng = np.random.default_rng(100 + worker)
    out = []
    for _ in range(count):
        dense = rng.standard_normal((args.batch, DENSE)).astype("float32")
        out.append({"ids": rng.integers(0, vocab, (args.batch, args.slots * args.ids, 1)),
                    "dense": dense,
                    "label": (dense[:, :3].sum(1, keepdims=True) > 0).astype("int64")})
    return out


def _train(exe, prog, loss, args, data, channel=None) -> dict:
    """Warm-up steps, then timed ones; this worker's timings (and bytes sent)."""
    for i in range(args.warmup):
        exe.run(prog, feed=data[i % len(data)], fetch_list=[loss])
    sent0 = channel.bytes_sent if channel is not None else 0
    times, losses = [], []
    start, cpu = time.time(), time.process_time()
    for i in range(args.steps):
        t = time.perf_counter()
        value, = exe.run(prog, feed=data[i % len(data)], fetch_list=[loss])
        times.append(time.perf_counter() - t)
        losses.append(float(__import__("numpy").asarray(value).reshape(-1)[0]))
    end, cpu = time.time(), time.process_time() - cpu
    return {"start": start, "end": end, "step": statistics.median(times),
            "samples": args.steps * args.batch, "first_loss": losses[0],
            "last_loss": losses[-1],
            "cpu": cpu / args.steps,  # this process's CPU seconds per timed step
            "bytes_sent": (channel.bytes_sent - sent0) if channel is not None else None}


def worker(args) -> None:
    out = Path(args.worker)
    vocab = args.vocab
    if args.mode == "collective":
        _collective_worker(args, out, vocab)
        return
    import graphc.fluid as fluid
    from graphc.distributed import pserver
    role = os.environ["TRAINING_ROLE"]
    endpoints = os.environ["PADDLE_PSERVERS_IP_PORT_LIST"]
    trainers = int(os.environ["PADDLE_TRAINERS_NUM"])
    main, startup, loss = build(fluid, args, vocab)
    with fluid.program_guard(main, startup):
        fluid.optimizer.SGD(args.lr).minimize(loss)
    config = fluid.DistributeTranspilerConfig()
    if args.mode in ("async", "geo"):
        config.sync_mode = False
    if args.mode == "geo":
        config.runtime_split_send_recv = True
        config.geo_sgd_mode = True
        config.geo_sgd_need_push_nums = args.geo_k
    t = fluid.DistributeTranspiler(config)
    exe = fluid.Executor(fluid.CPUPlace())
    if role == "PSERVER":
        # the driver lists a free port (over zmq the server binds it), so the launcher's
        # POD_IP / PADDLE_PORT (its default port) are not this server's endpoint
        me = endpoints.split(",")[int(os.environ["PADDLE_PSERVER_ID"])]
        t.transpile(0, program=main, pservers=endpoints, trainers=trainers,
                    startup_program=startup, current_endpoint=me)
        prog, server_startup = t.get_pserver_programs(me)
        exe.run(server_startup)
        cpu = time.process_time()
        stats = exe.run(prog)  # serves until every trainer has completed
        stats["cpu_s"] = time.process_time() - cpu  # (its compilation included)
        (out / f"server{os.environ['PADDLE_PSERVER_ID']}.json").write_text(json.dumps(stats))
        return
    tid = int(os.environ["PADDLE_TRAINER_ID"])
    t.transpile(tid, program=main, pservers=endpoints, trainers=trainers,
                startup_program=startup)
    prog = t.get_trainer_program()
    exe.run(t.get_trainer_startup_program())
    res = _train(exe, prog, loss.name, args, batches(args, vocab, tid),
                 channel=pserver.trainer_channel())
    pserver.complete()
    (out / f"trainer{tid}.json").write_text(json.dumps(res))


def _collective_worker(args, out: Path, vocab: int) -> None:
    import graphc.fluid as fluid
    from graphc.distributed import fleet
    fleet.init(is_collective=True)
    rank = fleet.worker_index()
    main, startup, loss = build(fluid, args, vocab)
    with fluid.program_guard(main, startup):
        fleet.distributed_optimizer(fluid.optimizer.SGD(args.lr),
                                    fleet.DistributedStrategy()).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    res = _train(exe, main, loss.name, args, batches(args, vocab, rank))
    # what this process puts into the exchange per step: every dense gradient (all-reduced)
    # and the embedding's looked-up rows with their ids (all-gathered, never made dense)
    rows = args.batch * args.slots * args.ids
    dense = sum(int(_numel(p.shape)) for p in main.global_block().all_parameters()
                if p.name != "SparseFeatFactors")
    res["bytes_sent"] = (4 * dense + rows * (4 * args.emb + 8)) if fleet.worker_num() > 1 else 0
    (out / f"trainer{rank}.json").write_text(json.dumps(res))


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


# -- the driver --------------------------------------------------------------------------

def _free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_job(args, mode: str, workers: int, vocab: int, transport: str, tmp: Path) -> dict:
    """One launch; the workers' results merged into one row."""
    out = Path(tempfile.mkdtemp(prefix=f"{mode}-{transport}-{workers}-{vocab}-", dir=tmp))
    script = [str(Path(__file__).resolve()), "--worker", str(out), "--mode", mode,
              "--vocab", str(vocab), "--table", args.table, "--slots", str(args.slots),
              "--ids", str(args.ids), "--emb", str(args.emb), "--batch", str(args.batch),
              "--steps", str(args.steps), "--warmup", str(args.warmup), "--lr", str(args.lr),
              "--geo-k", str(args.geo_k), "--hidden", *map(str, args.hidden)]
    if mode == "collective":
        roles = ["--nproc_per_node", str(workers)]
    else:
        roles = ["--server_num", "1", "--worker_num", str(workers)]
    cmd = [sys.executable, "-m", "graphc", "launch", "--timeout", f"{args.timeout:g}",
           *roles, *script]
    env = dict(os.environ, PYTHONPATH=str(ROOT), CPU_NUM="1")
    for k in [k for k in env if k.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP",
                                                "GRAPHC_PS_", "GRAPHC_JOB_SECRET"))]:
        env.pop(k)
    if mode != "collective":
        # the same launch either way; only the delivery of the messages differs. A free port:
        # over zmq the server binds its endpoint (over MPI it only names the server)
        env["GRAPHC_PS_TRANSPORT"] = transport
        env["PADDLE_PSERVERS_IP_PORT_LIST"] = f"127.0.0.1:{_free_port()}"
    began = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=args.timeout + 60)
    wall = time.time() - began
    key = {"mode": mode, "transport": transport, "workers": workers, "vocab": vocab,
           "table": args.table}
    if proc.returncode != 0:
        lines = (proc.stdout + proc.stderr).strip().splitlines()
        errors = [ln for ln in lines if "Error" in ln] or lines[-3:]
        return {**key, "error": f"exit {proc.returncode}: {errors[-1].strip()}"}
    ranks = [json.loads((out / f"trainer{i}.json").read_text()) for i in range(workers)]
    samples = sum(r["samples"] for r in ranks)
    span = max(r["end"] for r in ranks) - min(r["start"] for r in ranks)
    row = {**key, "samples_per_s": samples / span,
           "step_ms": 1e3 * statistics.median(r["step"] for r in ranks),
           "cpu_ms": 1e3 * statistics.median(r["cpu"] for r in ranks),
           "bytes_sent_per_step": statistics.mean(r["bytes_sent"] for r in ranks)
           / args.steps if mode != "collective" else ranks[0]["bytes_sent"],
           "first_loss": statistics.mean(r["first_loss"] for r in ranks),
           "last_loss": statistics.mean(r["last_loss"] for r in ranks),
           "job_s": wall}
    if mode != "collective":
        row["server"] = json.loads((out / "server0.json").read_text())
        # what a trainer takes back per step: the server's count over every trainer step
        row["bytes_received_per_step"] = row["server"]["bytes_sent"] / (
            workers * (args.warmup + args.steps))
    else:
        row["bytes_received_per_step"] = row["bytes_sent_per_step"] * (workers - 1)
    return row


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _print(rows: list[dict], header: str) -> None:
    ok = [r for r in rows if "error" not in r]
    coll = {(r["workers"], r["vocab"]): r["samples_per_s"] for r in ok
            if r["mode"] == "collective"}
    mpi = {(r["mode"], r["workers"], r["vocab"]): r["samples_per_s"] for r in ok
           if r["transport"] == "mpi"}
    print(header)
    print(f"{'mode':<11}{'via':<5}{'W':>3}{'vocab':>10}{'samples/s':>11}{'step ms':>9}"
          f"{'cpu ms':>8}"
          f"{'sent/step':>11}{'recv/step':>11}{'vs coll':>9}{'vs mpi':>8}{'loss':>15}"
          f"{'job s':>7}")
    for r in rows:
        lead = f"{r['mode']:<11}{r['transport']:<5}{r['workers']:>3}{r['vocab']:>10}"
        if "error" in r:
            print(f"{lead}  FAILED {r['error']}")
            continue
        key = (r["workers"], r["vocab"])
        ratio = f"{r['samples_per_s'] / coll[key]:.2f}x" if key in coll else "-"
        base = mpi.get((r["mode"], *key))
        vs_mpi = f"{r['samples_per_s'] / base:.2f}x" if base and r["transport"] != "-" else "-"
        print(f"{lead}{r['samples_per_s']:>11.0f}"
              f"{r['step_ms']:>9.1f}{r['cpu_ms']:>8.1f}"
              f"{_fmt_bytes(r['bytes_sent_per_step']):>11}"
              f"{_fmt_bytes(r['bytes_received_per_step']):>11}{ratio:>9}{vs_mpi:>8}"
              f"{r['first_loss']:>7.3f}->{r['last_loss']:.3f}{r['job_s']:>7.1f}", flush=True)


def _print_growth(rows: list[dict]) -> None:
    """How a step's cost grows with the workers: each (mode, transport)'s step ms and
    samples/s at every W, and the step's growth over W = 1."""
    ok = [r for r in rows if "error" not in r]
    ws = sorted({r["workers"] for r in ok})
    if len(ws) < 2:
        return
    by = {(r["mode"], r["transport"], r["workers"]): r for r in ok}
    print(f"\n## cost with workers: step ms (samples/s) per W; growth: step(W) / step(W={ws[0]})")
    print(f"{'mode':<11}{'via':<5}" + "".join(f"{'W=' + str(w):>18}" for w in ws) + "  growth")
    for mode, via in dict.fromkeys((r["mode"], r["transport"]) for r in ok):
        cells = [by.get((mode, via, w)) for w in ws]
        text = "".join(f"{c['step_ms']:>8.1f} ({c['samples_per_s']:>6.0f})" if c else
                       f"{'-':>18}" for c in cells)
        first = cells[0]
        growth = " ".join(f"{c['step_ms'] / first['step_ms']:.2f}x" if c and first else "-"
                          for c in cells[1:])
        print(f"{mode:<11}{via:<5}{text}  {growth}", flush=True)


def _median_run(rows: list[dict]) -> dict:
    """The run with the median samples/s (the lower one of an even count); every run's
    samples/s kept in ``runs``; a failed run wins (so it is seen)."""
    failed = [r for r in rows if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(rows, key=lambda r: r["samples_per_s"])
    return {**ranked[(len(ranked) - 1) // 2], "runs": [r["samples_per_s"] for r in rows]}


def _plan(args) -> dict[str, list[list[tuple]]]:
    """Each part's configurations as groups (mode, workers, vocab, transport): the collective
    run alone, a parameter-server configuration over every transport."""
    colls = [] if args.no_collective else ["collective"]

    def group(mode, w, v):
        return [(mode, w, v, "-")] if mode == "collective" else [
            (mode, w, v, t) for t in args.transports]
    return {"workers_grid": [group(m, w, args.vocab) for w in args.workers
                             for m in colls + args.modes],
            "table_sweep": [group(m, 1, v) for v in args.sweep for m in colls + ["sync"]]}


def main() -> None:
    args = _parse()
    if args.worker:
        worker(args)
        return
    if args.table == "distributed" and "geo" in args.modes:
        args.modes.remove("geo")
        print("# GEO-SGD skipped: it keeps the parameters on the trainers, a distributed table "
              "lives on the servers (graphc refuses the pair, as Paddle does)", flush=True)
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}; "
          f"{args.slots} slots x {args.ids} ids, emb {args.emb}, table {args.table}, fc "
          f"{'-'.join(map(str, args.hidden))}, batch {args.batch}/worker, SGD, "
          f"{args.steps} timed steps after {args.warmup}; transports "
          f"{' '.join(args.transports)}; load average {os.getloadavg()[0]:.1f}", flush=True)
    results = {"args": {k: v for k, v in vars(args).items() if k not in ("worker", "mode")}}
    plan = _plan(args)
    groups = [g for part in plan.values() for g in part]
    runs: dict = {cfg: [] for g in groups for cfg in g}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):  # rounds in turn, so a busy spell hits every config;
            for g in groups:  # a configuration's transports back to back, first in turn
                for cfg in (g if r % 2 == 0 else g[::-1]):
                    runs[cfg].append(run_job(args, *cfg, Path(tmp)))
                    print(f"  round {r + 1}: {cfg[0]} ({cfg[3]}) x {cfg[1]}, vocab {cfg[2]} "
                          f"({runs[cfg][-1].get('job_s', 0):.0f} s)", file=sys.stderr,
                          flush=True)
    for part, part_groups in plan.items():
        results[part] = [_median_run(runs[cfg]) for g in part_groups for cfg in g]
    if results["workers_grid"]:
        _print(results["workers_grid"], f"\n## 1 server x W workers, vocab {args.vocab} (vs "
               "coll: samples/s over the collective path's with W processes; vs mpi: over "
               "the same configuration's over MPI)")
        _print_growth(results["workers_grid"])
    if results["table_sweep"]:
        _print(results["table_sweep"], "\n## table-size sweep: sync, 1 server x 1 worker "
               "(collective x 1: one process training locally)")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
