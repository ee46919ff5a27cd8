"""graphc leaves the rest of the JAX process alone: a user's own JAX code gives the same
dtypes and the same jaxpr before importing graphc, after it, and after graphc ran a training
step (int64 labels), a float64 program, a DataLoader epoch and the threaded interpreter in
the same process; ``jax_enable_x64`` reads the same throughout. Each case runs in a fresh
Python process (the test suite's own process has JAX configured by conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import json
    import numpy as np
    import jax
    import jax.numpy as jnp

    def user_fn(x, ids, scale):
        return jnp.sum(x * scale) + jnp.arange(3).sum() + ids.sum(), jnp.zeros(3)

    def snapshot():
        x = jnp.ones((2, 3))
        ids = jnp.asarray(np.arange(4, dtype=np.int64))  # a user's int64 data
        out, zeros = user_fn(x, ids, 2.0)
        return {"x64": bool(jax.config.jax_enable_x64), "ones": str(x.dtype),
                "ids": str(ids.dtype), "out": str(out.dtype), "zeros": str(zeros.dtype),
                "py_float": str(jnp.asarray(1.0).dtype),
                "jaxpr": str(jax.make_jaxpr(user_fn)(x, ids, 2.0))}

    snaps = {"before": snapshot()}
    import graphc as fluid
    from graphc import layers, optimizer
    from graphc.backends.interpreter import run_graph
    from graphc.io import DataLoader
    from graphc.ir import lower
    snaps["imported"] = snapshot()
    facts = {}

    # a training step: float32 parameters, int64 labels (from numpy and from the user's
    # 32-bit JAX array, which is what jnp.asarray(int64 labels) gives without x64)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 4], "float32")
        label = layers.data("label", [-1, 1], "int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(x, 3), label))
        optimizer.SGD(0.1).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, 4)).astype("float32")
    ys = rng.integers(0, 3, (8, 1)).astype("int64")
    (l1,) = exe.run(main, feed={"x": xs, "label": ys}, fetch_list=[loss], scope=scope)
    (l2,) = exe.run(main, feed={"x": jnp.asarray(xs), "label": jnp.asarray(ys)},
                    fetch_list=[loss], scope=scope)
    facts["loss_dtype"] = str(l1.dtype)
    facts["losses_finite"] = bool(np.isfinite(l1).all() and np.isfinite(l2).all())
    facts["param_dtype"] = str(scope["fc_0.w_0"].dtype)
    snaps["trained"] = snapshot()

    # a DataLoader epoch: its thread places int64 labels as int64
    loader = DataLoader.from_generator(feed_list=[x, label], capacity=2)
    loader.set_batch_generator(lambda: iter([(xs, ys)]))
    for data in loader():
        facts["loader_label_dtype"] = str(data["label"].dtype)
        exe.run(main, feed=data, fetch_list=[loss], scope=scope)
    snaps["loader"] = snapshot()

    # a float64 program: float64 parameters and values, exact to float64
    main64, startup64 = fluid.Program(), fluid.Program()
    with fluid.program_guard(main64, startup64):
        a = layers.data("a", [-1, 3], "float64")
        s = layers.reduce_sum(layers.elementwise_mul(a, a))
    big = np.array([[1e-9, 1.0, 3.0]], "float64") + 1.0
    (got,) = exe.run(main64, feed={"a": big}, fetch_list=[s], scope=fluid.Scope())
    facts["f64_dtype"] = str(got.dtype)
    facts["f64_error"] = float(np.abs(got - (big * big).sum()).max())
    # the interpreter, with its op threads, on the same program
    _, (ref,) = run_graph(lower(main64), {}, {"a": big}, [s.name], num_threads=2)
    facts["interp_dtype"] = str(ref.dtype)
    facts["interp_error"] = float(np.abs(ref - (big * big).sum()).max())
    snaps["float64"] = snapshot()
    print("RESULT" + json.dumps({"snaps": snaps, "facts": facts}))
''')


def run_fresh(env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update({"JAX_PLATFORMS": "cpu", **env_extra})
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


@pytest.mark.parametrize("user_x64", [False, True], ids=["x64-off", "x64-on"])
def test_user_jax_unchanged_by_graphc(user_x64):
    result = run_fresh({"JAX_ENABLE_X64": "1"} if user_x64 else {})
    snaps, facts = result["snaps"], result["facts"]
    before = snaps["before"]
    assert before["x64"] is user_x64
    assert before["zeros"] == ("float64" if user_x64 else "float32")
    assert before["ids"] == ("int64" if user_x64 else "int32")
    for stage in ("imported", "trained", "loader", "float64"):
        assert snaps[stage] == before, stage  # dtypes, jaxpr and the flag alike
    # graphc's own work kept its 64-bit types all along
    assert facts["losses_finite"] and facts["loss_dtype"] == "float32"
    assert facts["param_dtype"] == "float32"
    assert facts["loader_label_dtype"] == "int64"
    assert facts["f64_dtype"] == "float64" and facts["interp_dtype"] == "float64"
    # the 1e-9 survives only in float64 (in float32 the sum would be off by ~2e-9)
    assert facts["f64_error"] < 1e-12 and facts["interp_error"] < 1e-12
