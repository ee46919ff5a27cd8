"""CPU_NUM and places: the device count reaches XLA before its backend starts, a late or bad
request is a clear error, and an Executor runs on the place it was given. Each case runs in
a fresh interpreter (the device count is fixed per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import pytest

import graphc
from graphc.runtime.places import PlaceError, node_local_gpu


def run(code: str, **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "CPU_NUM"}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=120)


def test_cpu_num_sets_the_replicas_and_places():
    out = run("""
        import jax, numpy as np, graphc
        print(len(graphc.cpu_places()), jax.device_count("cpu"))
        x = graphc.data("x", [-1, 3])
        y = graphc.layers.scale(x, 2.0)
        for place in (graphc.CPUPlace(), graphc.CPUPlace(3)):
            exe = graphc.Executor(place)
            (got,) = exe.run(feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y],
                             return_numpy=False)
            print(got._place().device_id, float(np.array(got).sum()))
    """, CPU_NUM="4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["4 4", "0 12.0", "3 12.0"]


def test_asking_too_late_names_the_fix():
    # cpu_places(4) after the start gives 4 places (a data-parallel program maps them onto
    # the one device: test_framework_surface.py); changing XLA's count is the error
    out = run("""
        import jax, graphc
        jax.devices()
        print(len(graphc.cpu_places(4)))
        try:
            graphc.configure_cpu_devices(4)
        except graphc.DeviceError as e:
            print(e)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("4\n")
    assert "already started with 1; set CPU_NUM=4 in the environment" in out.stdout


def test_bad_values_are_errors():
    with pytest.raises(graphc.DeviceError, match="positive integer"):
        graphc.configure_cpu_devices(0)
    out = run("""
        import graphc
        try:
            graphc.cpu_places()
        except graphc.DeviceError as e:
            print(e)
    """, CPU_NUM="four")
    assert "CPU_NUM must be a positive integer, got 'four'" in out.stdout, out.stderr
    if not graphc.is_compiled_with_cuda():
        with pytest.raises(graphc.DeviceError, match="no GPU is visible"):
            graphc.cuda_places()
    n = len(jax.devices("cpu"))  # the test session has 8 (conftest)
    with pytest.raises(graphc.GraphcError, match=f"only {n} cpu device"):
        graphc.Executor(graphc.CPUPlace(n))


# -- FLAGS_selected_gpus names the node-local device (launched ranks on GPUs) --------------

@pytest.mark.parametrize("device_id, visible, flag, index", [
    (2, 1, "2", 0),      # the launcher narrowed CUDA_VISIBLE_DEVICES to GPU 2: device 0
    (3, 2, "2,3", 1),    # two GPUs per rank
    (0, 2, "2,3", 0),    # an id not selected is an index as is
    (1, 4, "1", 1),      # every GPU visible: ids are indexes
    (1, 2, "", 1),       # no launcher
])
def test_selected_gpus_are_the_ranks_own_devices(device_id, visible, flag, index):
    assert node_local_gpu(device_id, visible, {"FLAGS_selected_gpus": flag}) == index


def test_a_bad_selected_gpus_is_named():
    with pytest.raises(PlaceError, match="FLAGS_selected_gpus='gpu0'"):
        node_local_gpu(0, 1, {"FLAGS_selected_gpus": "gpu0"})


def test_a_bad_matmul_precision_is_named_when_a_step_is_traced(monkeypatch):
    """GRAPHC_MATMUL_PRECISION is read when graphc traces: a bad value is a GraphcError that
    names it, raised by the run that would have compiled, with the scope untouched."""
    import numpy as np

    from graphc.ir.errors import GraphcError
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        y = graphc.layers.fc(graphc.data("x", [-1, 3], "float32"), 2)
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    before = {n: np.array(scope[n]) for n in scope.keys()}
    monkeypatch.setenv("GRAPHC_MATMUL_PRECISION", "fast")
    with pytest.raises(GraphcError, match="GRAPHC_MATMUL_PRECISION='fast': expected one of"):
        exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y], scope=scope)
    assert all(np.array_equal(scope[n], v) for n, v in before.items())
    monkeypatch.setenv("GRAPHC_MATMUL_PRECISION", "highest")
    (out,) = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y], scope=scope)
    assert out.shape == (2, 2)
