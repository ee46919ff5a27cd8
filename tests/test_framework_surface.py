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
    bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    bs.reduce_strategy = getattr(fluid.BuildStrategy.ReduceStrategy, "{mode}")
    es.num_iteration_per_run = k = {k}
    prog = fluid.CompiledProgram(main, build_strategy=bs, exec_strategy=es)
    prog = prog.with_data_parallel(loss_name=loss.name)
    rng = np.random.RandomState(0)
    losses = []
    for i in range(3):
        feed = {{"x": rng.rand(k, 8, 5).astype("float32"),
                "y": rng.rand(k, 8, 1).astype("float32")}}
        if k == 1:
            feed = {{name: value[0] for name, value in feed.items()}}
        (l,) = exe.run(prog, feed=feed, fetch_list=[loss])
        losses.append(np.asarray(l).tolist())
    scope = fluid.global_scope()
    params = {{p.name: np.asarray(scope.find_var(p.name).get_tensor()).ravel().tolist()
              for p in main.all_parameters()}}
    print(json.dumps({{"losses": losses, "params": params}}))
"""


@pytest.mark.parametrize("mode, k", [("AllReduce", 1), ("Reduce", 2)])
def test_cpu_num_set_after_the_backend_started_maps_places_onto_one_device(mode, k):
    # Reduce: optimizer state held as per-place rows; k=2: two iterations per call
    late = run_py(_TRAIN.format(late=True, mode=mode, k=k))
    assert late.returncode == 0, late.stderr
    ref = run_py(_TRAIN.format(late=False, mode=mode, k=k), CPU_NUM="4",
                 XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert ref.returncode == 0, ref.stderr
    got, want = json.loads(late.stdout), json.loads(ref.stdout)
    # one loss per place, as 4 devices give (per iteration with k > 1)
    assert np.shape(got["losses"]) == ((3, 4) if k == 1 else (3, k, 4))
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
        # a loader on the same places: one batch per place, as Paddle's per-place feeds
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
        rows = np.arange(6, dtype="float32").reshape(3, 1, 2)
        loader.set_batch_generator(lambda: iter([[r] for r in rows]), places=places)
        for data in loader():
            (again,) = exe.run(prog, feed=data, fetch_list=[out])
        print(again.ravel().tolist())
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
    assert lines[1] == "[0.0, 2.0, 4.0, 6.0, 8.0, 10.0]"
    assert "hierarchical all-reduce needs 4 real devices" in lines[2]


def test_is_compiled_with_cuda_leaves_the_backends_alone():
    out = run_py("""
        import graphc.fluid as fluid
        from jax._src import xla_bridge
        print(fluid.core.is_compiled_with_cuda(), fluid.core.get_cuda_device_count(),
              xla_bridge.backends_are_initialized())
    """, JAX_PLATFORMS="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "0", "False"]


# -- 2. return_numpy=False: LoDTensors -----------------------------------------------------

def test_return_numpy_false_gives_lod_tensors_for_every_fetch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3])
        ids = fluid.data("ids", [-1, 1], dtype="int64", lod_level=1)
        dense = fluid.layers.scale(x, 2.0)
        pooled = fluid.layers.sequence_pool(
            fluid.layers.embedding(ids, size=[10, 2]), "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    seq = fluid.create_lod_tensor(np.array([[1], [2], [3]], "int64"), [[2, 1]],
                                  fluid.CPUPlace())
    got, pool = exe.run(main, feed={"x": np.ones((2, 3), "float32"), "ids": seq},
                        fetch_list=[dense, pooled], return_numpy=False)
    assert isinstance(got, fluid.LoDTensor) and isinstance(pool, fluid.LoDTensor)
    assert got.recursive_sequence_lengths() == [] and got.lod() == []
    assert got.shape() == [2, 3] and got._get_dims() == [2, 3]
    np.testing.assert_array_equal(np.array(got), np.full((2, 3), 2.0, "float32"))
    assert got._dtype() == "float32" and got.has_valid_recursive_sequence_lengths()
    assert got._is_initialized() and got._place() == fluid.CPUPlace()
    assert got._get_float_element(5) == 2.0
    got._set_float_element(0, 7.0)
    assert np.array(got)[0, 0] == 7.0
    got.set_recursive_sequence_lengths([[1, 1]])
    assert got.lod() == [[0, 1, 2]]
    got.set_lod([[0, 2]])
    assert got.recursive_sequence_lengths() == [[2]]
    got._set_dims([3, 2])
    assert got.shape() == [3, 2]
    got.set(np.zeros((4, 1), "int64"), fluid.CPUPlace())
    assert got.shape() == [4, 1] and got._dtype() == "int64"
    with pytest.raises(GraphcError, match="outside the tensor's 4 elements"):
        got._get_float_element(4)
    assert pool.shape() == [2, 2]
    tensor = fluid.global_scope().find_var(main.all_parameters()[0].name).get_tensor()
    assert tensor._get_dims() == [10, 2] and tensor.lod() == []
    assert tensor._copy().shape() == [10, 2]


# -- 3. imports that only load modules -----------------------------------------------------

_STUB_ROOTS = ("graphc.fluid.dygraph", "graphc.fluid.contrib", "graphc.fluid.layers.")


@pytest.fixture
def fresh_stubs():
    """Forget the stub modules a test imported: importing one makes it an attribute of its
    parent (``fluid.dygraph``), which other tests expect to be the refusal."""
    before = set(sys.modules)
    yield
    for name in sorted(set(sys.modules) - before, reverse=True):
        if name.startswith(_STUB_ROOTS):
            module = sys.modules.pop(name)
            parent, _, child = name.rpartition(".")
            owner = sys.modules.get(parent)
            if owner is not None and owner.__dict__.get(child) is module:
                delattr(owner, child)
            if parent == "graphc.fluid.layers" and graphc.layers.__dict__.get(child) is module:
                delattr(graphc.layers, child)


@pytest.mark.parametrize("module", [
    "graphc.fluid.dygraph.base", "graphc.fluid.dygraph.parallel",
    "graphc.fluid.layers.control_flow", "graphc.fluid.layers.io",
    "graphc.fluid.contrib.layers", "graphc.fluid.contrib.utils"])
def test_module_only_imports_load(module, fresh_stubs):
    __import__(module)


@pytest.mark.parametrize("statement, advice", [
    ("from graphc.fluid.optimizer import no_such_optimizer", "graphc does not provide it"),
    ("from graphc.fluid.layers.nn import no_such_layer", "graphc does not provide it"),
    ("from graphc.fluid.dygraph.base import to_variable", "static programs only"),
    ("from graphc.fluid.dygraph.parallel import ParallelEnv", "static programs only"),
    ("from graphc.fluid.contrib.layers import rank_attention", "contrib holds only"),  # nlp24
    ("from graphc.fluid.layers import no_such_layer", "does not provide it"),
])
def test_from_import_of_a_missing_name_gives_the_advice(statement, advice, fresh_stubs):
    with pytest.raises(fluid.MissingModuleError, match=advice):
        exec(statement, {})
    with pytest.raises(ImportError):  # scripts' ``except ImportError`` still catches it
        exec(statement, {})


def test_names_that_exist_resolve_and_hasattr_stays_false(fresh_stubs):
    from graphc.fluid.layers.control_flow import equal  # noqa: F401  (Paddle's home of it)
    from graphc.fluid.layers.io import data
    assert data is fluid.data or data is fluid.layers.data
    import graphc.fluid.dygraph.base as base
    assert not hasattr(fluid.optimizer, "no_such_optimizer") and not hasattr(base, "to_variable")
    with pytest.raises(fluid.MissingAPIError, match="static programs only"):
        base.to_variable  # noqa: B018


# -- 4. flags -------------------------------------------------------------------------------

def test_set_flags_refuses_a_misspelt_flag_and_get_flags_has_defaults():
    with pytest.raises(GraphcError, match="did you mean FLAGS_eager_delete_tensor_gb"):
        fluid.set_flags({"FLAGS_eager_delete_tensor_gbb": 0.0, "FLAGS_benchmark": True})
    assert fluid.get_flags("FLAGS_benchmark") == {"FLAGS_benchmark": False}  # none was kept
    fluid.set_flags({"FLAGS_eager_delete_tensor_gb": 0.0})
    assert fluid.get_flags(["FLAGS_eager_delete_tensor_gb"]) == {
        "FLAGS_eager_delete_tensor_gb": 0.0}


# -- 5. bad input stays typed -----------------------------------------------------------------

def test_ir_text_versions_in_other_digits_and_huge_ints_are_parse_errors():
    from graphc.ir.text.parser import parse
    text = ("graph @main {\n  input %x: f32[-1,3] {feed}\n"
            "  %V: f32[-1,3] = scale(X=%x) {scale=S}\n}\n")
    for name, scale in (("y#\u00b2", "2.0"), ("y#\u0663", "2.0"), ("y", "1" * 5000)):
        with pytest.raises(ParseError):
            parse(text.replace("%V", "%" + name).replace("S", scale))


def test_a_5000_digit_integer_in_a_strategy_toml_is_a_strategy_error(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[build_strategy]\nnum_trainers = " + "9" * 5000 + "\n")
    with pytest.raises(graphc.StrategyError, match="s.toml"):
        graphc.BuildStrategy.load(path)


def test_a_multislot_id_of_2_to_the_70_is_a_dataset_error(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, 1], dtype="int64", lod_level=1)
        label = fluid.data("label", [-1, 1], dtype="int64")
    data = tmp_path / "part-0"
    data.write_text(f"2 1 {2 ** 70} 1 0\n")
    ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    ds.set_use_var([ids, label])
    ds.set_batch_size(1)
    ds.set_filelist([str(data)])
    with pytest.raises(GraphcError, match=f"part-0:1.*{2 ** 70} does not fit"):
        ds.load_into_memory()


# -- 4. the smaller names ---------------------------------------------------------------------

def _tiny():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, x, loss


def test_profiler_traces_into_profile_path_and_prints_run_times(tmp_path, capsys):
    import graphc.fluid.profiler as profiler
    main, startup, _, loss = _tiny()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    path = tmp_path / "profile"
    with profiler.profiler("CPU", "total", str(path)):
        for _ in range(3):
            exe.run(main, feed={"x": np.ones((2, 2), "float32")}, fetch_list=[loss])
    out = capsys.readouterr().out
    assert "graphc profiling report" in out and str(path) in out
    row = next(line for line in out.splitlines() if line.startswith("Executor.run"))
    assert row.split()[1] == "3"  # three timed runs
    traces = [f for _, _, files in os.walk(path) for f in files if f.endswith(".xplane.pb")]
    assert traces, "JAX's trace was not written to profile_path"
    profiler.start_profiler("All")
    profiler.reset_profiler()
    exe.run(main, feed={"x": np.ones((2, 2), "float32")}, fetch_list=[loss])
    profiler.stop_profiler(None, str(path))  # replaces the earlier trace whole
    assert "Executor.run" in capsys.readouterr().out
    with pytest.raises(GraphcError, match="state must be one of"):
        profiler.start_profiler("TPU")
    with pytest.raises(GraphcError, match="was not started"):
        profiler.stop_profiler()


def test_install_check_runs_a_program(capsys):
    fluid.install_check.run_check()
    out = capsys.readouterr().out
    assert "graphc works well on one device." in out
    assert "graphc is installed successfully!" in out


def test_small_framework_names(caplog):
    assert fluid.framework.grad_var_name("fc_0.w_0") == "fc_0.w_0@GRAD"
    assert fluid.core._set_eager_deletion_mode(0.0, 1.0, True) is None
    assert fluid.reader.DataLoaderBase is fluid.io.DataLoader
    main, *_ = _tiny()
    with caplog.at_level("WARNING", logger="graphc.fluid"):
        fluid.transpiler.memory_optimize(main)
        fluid.transpiler.release_memory(main)
        fluid.memory_optimize(main)
    assert caplog.text.count("deprecated and does nothing") == 3


def test_py_reader_next_and_data_loader_from_dataset(tmp_path):
    main, startup, x, loss = _tiny()
    reader = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=True)
    reader.decorate_batch_generator(
        lambda: iter([[np.full((2, 2), i, "float32")] for i in range(2)]), fluid.CPUPlace())
    (first,), (second,) = reader.next(), next(reader)  # a feed dict per place, as Paddle
    assert float(np.asarray(first["x"]).sum()) == 0.0
    assert float(np.asarray(second["x"]).sum()) == 4.0
    with pytest.raises(StopIteration):
        reader.next()
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ids = fluid.data("ids", [-1, 1], dtype="int64")
    data = tmp_path / "part-0"
    data.write_text("1 3\n1 4\n1 5\n")
    ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    ds.set_use_var([ids])
    ds.set_batch_size(2)
    ds.set_filelist([str(data)])
    ds.load_into_memory()
    loader = fluid.io.DataLoader.from_dataset(ds, fluid.CPUPlace(), drop_last=True)
    batches = [np.asarray(b[0]["ids"]).ravel().tolist() for b in loader()]  # per place
    assert batches == [[3, 4], [5]]  # drop_last drops batches short of the places only
    with pytest.raises(GraphcError, match="InMemoryDataset or QueueDataset"):
        fluid.io.DataLoader.from_dataset([1, 2], fluid.CPUPlace())


def test_variable_takes_paddle_18s_arguments():
    block = fluid.Program().global_block()
    v = fluid.Variable(block, fluid.core.VarDesc.VarType.LOD_TENSOR, "v", [-1, 2], "int64",
                       lod_level=1, persistable=True)
    assert (v.name, list(v.shape), v.dtype, v.lod_level, v.persistable) == (
        "v", [-1, 2], "int64", 1, True)
    sparse = fluid.Variable(block, type=fluid.core.VarDesc.VarType.SELECTED_ROWS, shape=[4, 3])
    assert sparse.selected_rows and sparse.name and sparse.dtype == "float32"


def test_return_merged_false_with_return_numpy_false_stacks_per_place():
    main, startup, x, loss = _tiny()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    prog = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                          places=fluid.cpu_places(2))
    (per_place,) = exe.run(prog, feed={"x": np.ones((4, 2), "float32")}, fetch_list=[loss],
                           return_numpy=False, return_merged=False)
    assert isinstance(per_place, fluid.LoDTensor) and per_place.shape() == [2, 1]
