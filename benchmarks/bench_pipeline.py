"""How long the full pass pipeline takes: on a ResNet-50 training graph (forward + backward
+ Momentum with L2 decay) and on MLP training graphs of growing size up to ~100k ops.

Targets (issue): ResNet-50-sized graph under 1 s; 100k ops under 10 s, growing linearly.
Run: .venv/bin/python benchmarks/bench_pipeline.py [--layers 1250 4000 12500]
"""

from __future__ import annotations

import argparse
import time

from bench_backward import build  # the same MLP
from graphc.models import resnet

import graphc as fluid
from graphc import optimizer
from graphc.passes import pipeline_for

# Every BuildStrategy option that has a single-device pass.
ALL_ON = dict(fuse_elewise_add_act_ops=True, fuse_bn_act_ops=True,
              fuse_relu_depthwise_conv=True, fuse_all_optimizer_ops=True, enable_inplace=True,
              memory_optimize=True, enable_sequential_execution=True)


def mlp_training(n_layers: int, width: int = 8):
    """bench_backward's N-layer MLP, minimised with Momentum."""
    main, startup, loss = build(n_layers, width)
    with fluid.program_guard(main, startup):
        optimizer.Momentum(0.01, 0.9).minimize(loss)
    return main, loss


def resnet_training():
    model = resnet(50)
    with fluid.program_guard(model.main, model.startup):
        optimizer.Momentum(0.1, 0.9, regularization=fluid.regularizer.L2Decay(1e-4)).minimize(
            model.loss)
    return model.main, model.loss


def time_pipeline(program, loss, strategy) -> tuple[int, float, float, str]:
    t0 = time.perf_counter()
    graph = fluid.lower(program)
    t1 = time.perf_counter()
    pm = pipeline_for(strategy)
    report = pm.run(graph, keep=[graph.latest(loss.name)])
    t2 = time.perf_counter()
    return graph.num_ops, t1 - t0, t2 - t1, report.table()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1250, 4000, 12500])
    parser.add_argument("--table", action="store_true", help="print per-pass tables")
    args = parser.parse_args()
    strategy = fluid.BuildStrategy(**ALL_ON)
    print(f"pipeline: {pipeline_for(strategy)}\n")
    print(f"{'graph':<22} {'ops before':>10} {'ops after':>9} {'lower s':>8} {'passes s':>9} "
          f"{'us/op':>7}")
    cases = [("resnet50 training", *resnet_training())]
    cases += [(f"mlp x{n} training", *mlp_training(n)) for n in args.layers]
    for name, program, loss in cases:
        before = fluid.lower(program).num_ops
        after, lower_s, pass_s, table = time_pipeline(program, loss, strategy)
        print(f"{name:<22} {before:>10} {after:>9} {lower_s:>8.2f} {pass_s:>9.2f} "
              f"{pass_s / before * 1e6:>7.1f}")
        if args.table:
            print(table + "\n")


if __name__ == "__main__":
    main()
