"""``fluid.install_check.run_check()``: builds and trains a tiny program on one device and
data-parallel on two places, and says that graphc works (Paddle's check, in graphc's words)."""

from __future__ import annotations

import numpy as np

__all__ = ["run_check"]


def run_check() -> None:
    """Train a two-layer program a few steps on one place and on two data-parallel places;
    raises the error that stopped it, else prints that graphc is installed and working."""
    from .. import fluid

    print("Running a graphc check program ...")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 2])
        hidden = fluid.layers.fc(x, 4, act="relu")
        loss = fluid.layers.mean(fluid.layers.fc(hidden, 1))
        fluid.optimizer.SGD(0.01).minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.ones((4, 2), "float32")}
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(2):
            exe.run(main, feed=feed, fetch_list=[loss])
        print("graphc works well on one device.")
        parallel = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(2))
        for _ in range(2):
            exe.run(parallel, feed=feed, fetch_list=[loss])
        print("graphc works well on several places (data parallel).")
    print("graphc is installed successfully! Build Fluid programs with graphc.fluid now.")
