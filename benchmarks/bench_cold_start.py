"""Cold process to first finished step, and to the N-th, with tiered compilation off and on
(runtime/tiered.py), on ResNet-20, the CTR-DNN and the BERT-style encoder.

Run ``python benchmarks/bench_cold_start.py [--workloads resnet20 ctr encoder]
[--steps 100] [--repeats 3]``. Each (workload, mode) runs ``--repeats`` times, modes
interleaved, each in a new process with an empty compilation cache; the clock starts before
the child's interpreter does (imports, startup program and tracing count). Reported per
mode: medians of the wall time and of the child's CPU time (all its threads: the tiered
mode's CPU time includes the optimised compile running beside the quick steps) to the first
and to the last step, the step at which the optimised executable took over, and the final
loss (the tiered run's differs from the plain one in its last bits: see docs/tiered_compilation.md).
The encoder is ``bench_encoder.py``'s model (skipped if that script is absent).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _resnet20(batch: int = 64):
    import numpy as np

    import graphc
    from graphc import layers
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 1
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        img = graphc.data("image", [-1, 3, 32, 32], "float32")
        lab = graphc.data("label", [-1, 1], "int64")

        def conv_bn(x, f, stride=1, act="relu"):
            x = layers.conv2d(x, f, 3, stride=stride, padding=1, bias_attr=False)
            return layers.batch_norm(x, act=act)

        x, cin = conv_bn(img, 16), 16
        for stage, width in enumerate((16, 32, 64)):
            for i in range(3):
                stride = 2 if i == 0 and stage > 0 else 1
                y = conv_bn(conv_bn(x, width, stride), width, act=None)
                if stride != 1 or cin != width:
                    x = layers.batch_norm(layers.conv2d(x, width, 1, stride=stride,
                                                        bias_attr=False))
                x, cin = layers.elementwise_add(x, y, act="relu"), width
        logits = layers.fc(layers.pool2d(x, global_pooling=True, pool_type="avg"), 10)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, lab))
        graphc.optimizer.Momentum(0.1, 0.9).minimize(loss)
    rng = np.random.default_rng(0)
    feeds = [{"image": rng.standard_normal((batch, 3, 32, 32)).astype("float32"),
              "label": rng.integers(0, 10, (batch, 1)).astype("int64")} for _ in range(4)]
    return main, start, loss, feeds


def _ctr(batch: int = 512, slots: int = 26, vocab: int = 100_000):
    import numpy as np

    import graphc
    import graphc.fluid as fluid
    from graphc import models
    m = models.ctr_dnn(slots, vocab, 10, (400, 400, 400),
                       optimizer_fn=lambda: graphc.optimizer.SGD(0.01))
    rng = np.random.default_rng(0)
    feeds = []
    for _ in range(4):
        f = {"dense_input": rng.standard_normal((batch, 13)).astype("float32"),
             "label": rng.integers(0, 2, (batch, 1)).astype("int64")}
        for s in range(slots):
            lens = rng.integers(1, 4, batch).tolist()
            ids = rng.integers(0, vocab, (sum(lens), 1)).astype("int64")
            f[f"C{s + 1}"] = fluid.create_lod_tensor(ids, [lens], fluid.CPUPlace())
        feeds.append(f)
    return m.main, m.startup, m.loss, feeds


def _encoder():
    sys.path.insert(0, HERE)
    import bench_encoder as be
    cfg = be.Config()
    main, start, loss = be.build_graphc(cfg)
    return main, start, loss, be.make_batches(cfg, 4)


BUILDERS = {"resnet20": _resnet20, "ctr": _ctr, "encoder": _encoder}


def child(workload: str, mode: str, steps: int, t0: float) -> dict:
    import numpy as np

    import graphc
    main, start, loss, feeds = BUILDERS[workload]()
    exe = graphc.Executor()
    exe.tiered = mode == "on" or (int(mode[2:]) if mode.startswith("on") else False)
    exe.run(start)
    out = {}
    for i in range(steps):
        (value,) = exe.run(main, feed=feeds[i % len(feeds)], fetch_list=[loss])
        if i == 0:
            out["first_wall"], out["first_cpu"] = time.time() - t0, _cpu()
    out["last_wall"], out["last_cpu"] = time.time() - t0, _cpu()
    out["loss"] = float(np.asarray(value).reshape(-1)[0])
    calls = list(exe._tiered_calls)
    out["switched_at"] = calls[0].switched_at if calls else None
    exe.close()
    return out


def _spawn(workload, mode, steps, budget) -> dict | str:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GRAPHC_COMPILATION_CACHE=cache)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        t0 = time.time()
        cmd = [sys.executable, __file__, "--child", workload, mode, str(steps), repr(t0)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget)
        except subprocess.TimeoutExpired:
            return f"over the {budget} s budget"
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(BUILDERS))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=["off", "on"],
                    help="off, on (quick steps until the switch) or onN (at most N)")
    ap.add_argument("--budget", type=int, default=900, help="seconds per process")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        w, mode, steps, t0 = args.child
        print("RESULT " + json.dumps(child(w, mode, int(steps), float(t0))), flush=True)
        return
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, {args.steps} steps, "
          f"{args.repeats} repeats (medians)")
    for w in args.workloads:
        if w == "encoder" and not os.path.exists(os.path.join(HERE, "bench_encoder.py")):
            print(f"## {w}: skipped (benchmarks/bench_encoder.py is absent)")
            continue
        runs = {m: [] for m in args.modes}
        for _ in range(args.repeats):
            for mode in runs:
                r = _spawn(w, mode, args.steps, args.budget)
                if isinstance(r, str):
                    print(f"## {w} tiered {mode}: {r}")
                else:
                    runs[mode].append(r)
        print(f"## {w}")
        print(f"{'tiered':<8}{'first wall':>12}{'first cpu':>11}{'last wall':>11}"
              f"{'last cpu':>10}{'switch':>8}  loss")
        for mode, rs in runs.items():
            if not rs:
                continue
            med = {k: statistics.median(r[k] for r in rs)
                   for k in ("first_wall", "first_cpu", "last_wall", "last_cpu")}
            sw = [r["switched_at"] for r in rs]
            print(f"{mode:<8}{med['first_wall']:>11.2f}s{med['first_cpu']:>10.2f}s"
                  f"{med['last_wall']:>10.2f}s{med['last_cpu']:>9.2f}s{str(sw):>8}  "
                  f"{rs[0]['loss']!r}", flush=True)


if __name__ == "__main__":
    main()
