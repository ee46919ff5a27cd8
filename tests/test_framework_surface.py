"""Issue 25's framework surface: CPU_NUM honoured after XLA started (places mapped onto one
device, same numbers), LoDTensor fetches, module-only imports, flags and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.ir.errors import GraphcError, ParseError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_py(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CPU_NUM", "XLA_FLAGS")}
    environ["PYTHONPATH"] = ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=300)


# -- 1. CPU_NUM read when a data-parallel program is built ----------------------------------

_TRAIN = """
    import json, os, sys
    import numpy as np
    import graphc.fluid as fluid
    late = {late}
    if late:
        assert not fluid.core.is_compiled_with_cuda()  # must not start JAX's backends
        from jax._src import xla_bridge
        assert not xla_bridge.backends_are_initialized()
    exe = fluid.Executor(fluid.CPUPlace())
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 5])
        y = fluid.data("y", [-1, 1])
        h = fluid.layers.batch_norm(fluid.layers.fc(x, 8, act="relu"))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    exe.run(startup)
    if late:
        import jax
        assert jax.device_count() == 1
        os.environ["CPU_NUM"] = "4"  # as Paddle's unit tests do, after the first run
    prog = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    rng = np.random.RandomState(0)
    losses = []
    for i in range(3):
        feed = {{"x": rng.rand(8, 5).astype("float32"), "y": rng.rand(8, 1).astype("float32")}}
        (l,) = exe.run(prog, feed=feed, fetch_list=[loss])
        losses.append(np.asarray(l).tolist())
    scope = fluid.global_scope()
    params = {{p.name: np.asarray(scope.find_var(p.name).get_tensor()).ravel().tolist()
              for p in main.all_parameters()}}
    print(json.dumps({{"losses": losses, "params": params}}))
"""


def test_cpu_num_set_after_the_backend_started_maps_places_onto_one_device():
    late = run_py(_TRAIN.format(late=True))
    assert late.returncode == 0, late.stderr
    ref = run_py(_TRAIN.format(late=False), CPU_NUM="4",
                 XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert ref.returncode == 0, ref.stderr
    got, want = json.loads(late.stdout), json.loads(ref.stdout)
    assert np.shape(got["losses"]) == (3, 4)  # one loss per place, as 4 devices give
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=2e-5, atol=1e-6)
    assert got["params"].keys() == want["params"].keys()
    for name in want["params"]:
        np.testing.assert_allclose(got["params"][name], want["params"][name], rtol=2e-5,
                                   atol=1e-6, err_msg=name)


def test_cpu_places_after_the_start_and_hierarchical_allreduce_on_one_device():
    out = run_py("""
        import jax, numpy as np, graphc, graphc.fluid as fluid
        jax.devices()
        places = fluid.cpu_places(3)
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 2])
            out = fluid.layers.scale(x, 2.0)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        prog = fluid.CompiledProgram(main).with_data_parallel(places=places)
        (got,) = exe.run(prog, feed={"x": np.arange(6, dtype="float32").reshape(3, 2)},
                         fetch_list=[out])
        print(len(places), got.ravel().tolist())
        with fluid.program_guard(main, startup):
            loss = fluid.layers.mean(fluid.layers.fc(x, 1))
            fluid.optimizer.SGD(0.1).minimize(loss)
        exe.run(startup)
        bs = fluid.BuildStrategy()
        bs.use_hierarchical_allreduce, bs.hierarchical_allreduce_inter_nranks = True, 2
        prog = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(4))
        try:
            exe.run(prog, feed={"x": np.ones((4, 2), "float32")}, fetch_list=[loss])
        except graphc.GraphcError as e:
            print(type(e).__name__, e)
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "3 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]"
    assert "hierarchical all-reduce needs 4 real devices" in lines[1]


def test_is_compiled_with_cuda_leaves_the_backends_alone():
    out = run_py("""
        import graphc.fluid as fluid
        from jax._src import xla_bridge
        print(fluid.core.is_compiled_with_cuda(), fluid.core.get_cuda_device_count(),
              xla_bridge.backends_are_initialized())
    """, JAX_PLATFORMS="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "0", "False"]
