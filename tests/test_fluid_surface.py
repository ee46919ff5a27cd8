"""graphc.fluid, the Paddle 1.8 module tree: import paths, core/framework shims, layers.data's
Fluid 1.x rule, nets, fluid.embedding, reader decorators, and deliberately missing APIs."""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.fluid import core
from graphc.fluid._missing import MissingAPIError, MissingModuleError


def _run(fetch, feed, startup=None):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup or fluid.default_startup_program())
    return exe.run(fluid.default_main_program(), feed=feed, fetch_list=fetch)


# -- module tree --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "graphc.fluid.core", "graphc.fluid.framework", "graphc.fluid.compiler",
    "graphc.fluid.executor", "graphc.fluid.reader", "graphc.fluid.layers",
    "graphc.fluid.layers.device", "graphc.fluid.nets", "graphc.fluid.clip",
    "graphc.fluid.metrics", "graphc.fluid.initializer", "graphc.fluid.regularizer",
    "graphc.fluid.param_attr", "graphc.fluid.unique_name", "graphc.fluid.optimizer",
    "graphc.fluid.io", "graphc.fluid.dataset", "graphc.fluid.parallel_executor",
    "graphc.fluid.incubate.fleet.base.role_maker", "graphc.fluid.incubate.fleet.collective",
    "graphc.fluid.incubate.fleet.parameter_server.distribute_transpiler",
    "graphc.fluid.incubate.fleet.parameter_server.distribute_transpiler.distributed_strategy",
    "graphc.reader",
])
def test_paddle_module_paths_import(path):
    assert importlib.import_module(path) is not None


def test_fluid_names_are_graphcs_own_objects():
    assert fluid.layers is graphc.layers
    assert fluid.layers.device is importlib.import_module("graphc.fluid.layers.device")
    assert fluid.Program is graphc.Program and fluid.Executor is graphc.Executor
    assert fluid.framework.Variable is graphc.Variable
    assert fluid.compiler.BuildStrategy is graphc.BuildStrategy
    assert fluid.executor.global_scope is graphc.global_scope
    assert fluid.reader.DataLoader is graphc.io.DataLoader
    assert fluid.reader.PyReader is graphc.io.PyReader
    assert fluid.optimizer.SGDOptimizer is graphc.optimizer.SGD
    assert fluid.optimizer.AdamOptimizer is graphc.optimizer.Adam
    assert fluid.initializer.XavierInitializer is graphc.initializer.Xavier
    assert fluid.initializer.ConstantInitializer is graphc.initializer.Constant
    assert fluid.regularizer.L2DecayRegularizer is graphc.regularizer.L2Decay
    assert fluid.dataset.InMemoryDataset is graphc.dataset.InMemoryDataset
    assert fluid.io.save_inference_model is fluid.paddle_io.save_inference_model  # Paddle format
    assert fluid.unique_name.guard is graphc.unique_name.guard
    assert fluid.param_attr.ParamAttr is fluid.ParamAttr is graphc.ParamAttr
    assert fluid.save is graphc.io.save and fluid.load is graphc.io.load
    assert fluid.in_dygraph_mode() is False


def test_get_places_lists_cpu_places():
    places = fluid.layers.device.get_places(device_count=2, device_type="CPU")
    assert places == [fluid.CPUPlace(0), fluid.CPUPlace(1)]
    with pytest.raises(graphc.GraphcError, match="device_type must be"):
        fluid.layers.device.get_places(device_type="TPU")


# -- core -----------------------------------------------------------------------------------------

def test_vartype_dtypes_compare_with_variable_dtype():
    x = fluid.layers.data("x", [3], dtype="float32")
    ids = fluid.layers.data("ids", [1], dtype="int64")
    VT = core.VarDesc.VarType
    assert x.dtype == VT.FP32 and ids.dtype == VT.INT64 and x.dtype != VT.FP64
    assert fluid.data("h", [-1, 2], dtype=VT.FP16).dtype == "float16"
    assert {VT.BOOL, VT.INT32, VT.FP64} == {"bool", "int32", "float64"}


def test_lodtensor_holds_an_array_and_feeds_like_it():
    t = core.LoDTensor()
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    t.set(arr, fluid.CPUPlace())
    assert t.shape() == [2, 3] and np.array_equal(np.array(t), arr)
    x = fluid.data("x", [-1, 3])
    (out,) = _run([fluid.layers.scale(x, 2.0)], {"x": t})
    np.testing.assert_allclose(out, arr * 2)
    assert t.lod() == [] and t.recursive_sequence_lengths() == []
    t.set_recursive_sequence_lengths([[1, 1]])  # LoD: tests/test_lod_core.py
    assert t.lod() == [[0, 1, 2]] and t.has_valid_recursive_sequence_lengths()
    with pytest.raises(graphc.GraphcError, match="holds no value"):
        np.array(core.LoDTensor())


def test_core_runtime_queries():
    assert core.EOFException is graphc.io.EOFException
    assert issubclass(core.EOFException, graphc.GraphcError)
    assert isinstance(core.is_compiled_with_cuda(), bool)
    assert core.get_cuda_device_count() >= 0
    assert isinstance(core.Scope(), graphc.Scope)


# -- framework ------------------------------------------------------------------------------------

def test_name_scope_is_a_working_context_manager():
    with fluid.name_scope("encoder"):
        with fluid.name_scope("block"):
            assert fluid.framework.current_name_scope() == "encoder/block"
            y = fluid.layers.fc(fluid.layers.data("x", [4]), 2)
    assert fluid.framework.current_name_scope() == ""
    assert y.name.startswith("fc_0")


def test_require_version_compares_with_paddle_1_8():
    fluid.require_version("1.6")
    fluid.require_version("1.8.0", "1.8.9")
    fluid.require_version(min_version="0.1.0", max_version="2")
    with pytest.raises(fluid.framework.VersionError, match="needs Paddle >= 2.0"):
        fluid.require_version("2.0")
    with pytest.raises(fluid.framework.VersionError, match="<= 1.7"):
        fluid.require_version("1.0", "1.7")
    with pytest.raises(TypeError, match="must be a str"):
        fluid.require_version(1.8)
    with pytest.raises(ValueError, match="not a version"):
        fluid.require_version("1.8.x")
    with pytest.raises(graphc.GraphcError):
        fluid.require_version("1.8", max_version=2)


def test_static_mode_switches():
    graphc.enable_static()
    fluid.enable_static()
    with pytest.raises(MissingAPIError, match="static programs only"):
        graphc.disable_static()


# -- layers.data (Fluid 1.x) and fluid.data ------------------------------------------------------

def _shape(v):
    return list(v.shape)


def test_layers_data_prepends_the_batch_dimension_as_fluid_1x():
    L = fluid.layers
    assert _shape(L.data("a", [13])) == [-1, 13]
    assert _shape(L.data("b", [3, 32, 32])) == [-1, 3, 32, 32]
    assert _shape(L.data("c", [-1, 13])) == [-1, 13]
    assert _shape(L.data("d", [4, -1])) == [4, -1]  # -1 anywhere: Paddle prepends nothing
    assert _shape(L.data("e", [None, 5])) == [-1, 5]
    assert _shape(L.data("f", [8, 13], append_batch_size=False)) == [8, 13]
    g = L.data("g", [1], "int64")  # graphc's dtype-third spelling keeps working
    assert (_shape(g), g.dtype) == ([-1, 1], "int64")
    assert L.data("g2", [1], np.float64).dtype == "float64"
    assert L.data("g3", [1], np.dtype("int32")).dtype == "int32"
    assert _shape(L.data("g4", [2, 3], np.bool_(False))) == [2, 3]
    h = L.data(name="h", shape=[2], dtype="int32", stop_gradient=False)
    assert (_shape(h), h.dtype, h.stop_gradient) == ([-1, 2], "int32", False)
    assert _shape(fluid.data("i", [13])) == [13]  # fluid.data: the shape as given
    assert _shape(graphc.data("j", [-1, 13])) == [-1, 13]


def test_layers_data_refuses_bad_declarations_at_the_call_site():
    with pytest.raises(graphc.ProgramError,
                       match=r"layers.data 'x' at tests/test_fluid_surface.py:\d+: every "
                             r"dimension must be an integer.*2.5"):
        fluid.layers.data("x", [-1, 2.5])
    with pytest.raises(graphc.ProgramError, match="lod_level=4; graphc takes LoD levels 0"):
        fluid.layers.data("words", [1], dtype="int64", lod_level=4)
    with pytest.raises(graphc.ProgramError, match="shape must be a list"):
        fluid.layers.data("y", 13)
    z = fluid.layers.data("z", [2])
    assert fluid.data("z", [-1, 2]) is z  # the same declaration again: the same variable
    with pytest.raises(graphc.ProgramError, match=r"already declared .* as shape \[-1, 2\], "
                                                  r"float32.*now asked for shape \[-1, 3\]"):
        fluid.data("z", [-1, 3])
    with pytest.raises(graphc.ProgramError, match="already declared"):
        fluid.data("z", [-1, 2], dtype="int64")


def test_shape_errors_name_inputs_and_suspect_a_missing_batch_dimension():
    x = fluid.data("x", [13])  # the batch dimension forgotten
    y = fluid.data("y", [-1, 4])
    with pytest.raises(graphc.ShapeError) as info:
        fluid.layers.elementwise_add(x, y)
    text = str(info.value)
    assert "variable 'x' of shape [13]" in text and "variable 'y' of shape [-1, 4]" in text
    assert "declare it with shape [-1, 13]" in text
    with pytest.raises(graphc.GraphcError, match=r"input 'x' of shape \[13\].*\[-1, 13\]"):
        fluid.layers.fc(x, 2)
    # failing further down: the note names the fed variable the input was computed from
    with pytest.raises(graphc.ShapeError,
                       match=r"note: fed variables declared without a -1 dimension: 'x' \[13\]"):
        fluid.layers.elementwise_add(fluid.layers.scale(x, 2.0), y)
    img = fluid.data("img", [1, 8, 8])
    with pytest.raises(graphc.GraphcError, match=r"'img' must be 4-D.*\[-1, 1, 8, 8\]"):
        fluid.layers.conv2d(img, 4, 3)


# -- nets -----------------------------------------------------------------------------------------

def test_glu_is_a_times_sigmoid_b():
    x = fluid.data("x", [-1, 6])
    out = fluid.nets.glu(x, dim=-1)
    assert _shape(out) == [-1, 3]
    v = np.random.default_rng(0).standard_normal((2, 6)).astype("float32")
    (got,) = _run([out], {"x": v})
    np.testing.assert_allclose(got, v[:, :3] / (1 + np.exp(-v[:, 3:])), rtol=1e-5)


def test_scaled_dot_product_attention_matches_numpy():
    q = fluid.data("q", [-1, 3, 4])
    k = fluid.data("k", [-1, 5, 4])
    v = fluid.data("v", [-1, 5, 2])
    out = fluid.nets.scaled_dot_product_attention(q, k, v)
    assert _shape(out) == [-1, 3, 2]
    rng = np.random.default_rng(1)
    qv, kv, vv = (rng.standard_normal(s).astype("float32") for s in [(2, 3, 4), (2, 5, 4),
                                                                     (2, 5, 2)])
    (got,) = _run([out], {"q": qv, "k": kv, "v": vv})
    logits = qv @ kv.transpose(0, 2, 1) / 2.0
    w = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (w / w.sum(-1, keepdims=True)) @ vv, rtol=1e-5, atol=1e-6)


def test_multi_head_attention_and_conv_nets_shapes():
    q = fluid.data("q", [-1, 3, 4])
    assert _shape(fluid.nets.scaled_dot_product_attention(q, q, q, num_heads=2)) == [-1, 3, 4]
    with pytest.raises(graphc.ProgramError, match="num_heads=3 must divide"):
        fluid.nets.scaled_dot_product_attention(q, q, q, num_heads=3)
    img = fluid.layers.data("img", [1, 8, 8])
    pooled = fluid.nets.simple_img_conv_pool(img, num_filters=4, filter_size=3, pool_size=2,
                                             pool_stride=2, act="relu")
    assert _shape(pooled) == [-1, 4, 3, 3]
    group = fluid.nets.img_conv_group(img, conv_num_filter=[2, 3], pool_size=2, pool_stride=2,
                                      conv_act="relu", conv_with_batchnorm=[True, False],
                                      conv_batchnorm_drop_rate=[0.5, 0.0])
    assert _shape(group) == [-1, 3, 4, 4]
    ops = [op.type for op in fluid.default_main_program().global_block().ops]
    assert ops.count("batch_norm") == 1 and ops.count("dropout") == 1
    with pytest.raises(core.LoDError, match="LoD"):
        fluid.nets.sequence_conv_pool(img, 4, 3)


def test_fluid_embedding_appends_the_width_to_any_id_shape():
    ids = fluid.data("ids", [-1, 3], dtype="int64")
    emb = fluid.embedding(ids, size=[10, 4],
                          param_attr=fluid.ParamAttr(name="table",
                                                     initializer=fluid.initializer.Uniform()))
    assert _shape(emb) == [-1, 3, 4]
    assert _shape(fluid.layers.embedding(fluid.data("one", [-1, 1], "int64"), [10, 4])) == [-1, 4]
    idv = np.array([[1, 2, 3], [9, 0, 1]], dtype="int64")
    (got,) = _run([emb], {"ids": idv, "one": np.zeros((2, 1), "int64")})
    table = np.array(fluid.global_scope().find_var("table").get_tensor())
    np.testing.assert_array_equal(got, table[idv])


def test_fluid_one_hot_appends_depth():
    ids = fluid.data("ids", [-1, 2], dtype="int64")
    out = fluid.one_hot(ids, depth=4)
    assert _shape(out) == [-1, 2, 4]
    (got,) = _run([out], {"ids": np.array([[0, 3]], "int64")})
    np.testing.assert_array_equal(got, np.eye(4, dtype="float32")[[[0, 3]]])


# -- deliberately missing APIs -------------------------------------------------------------------

@pytest.mark.parametrize("owner, name, advice", [
    (fluid, "dygraph", "static programs only"),
    (fluid.contrib, "tdm_sampler", "contrib holds only"),
    (fluid, "ComplexVariable", "dygraph"),
    (fluid, "load_op_library", "custom operators"),
    (fluid, "no_such_api", "graphc does not provide it"),
    (fluid.optimizer, "no_such_optimizer", "graphc does not provide it"),
    (fluid.layers, "no_such_layer", "graphc does not provide it"),
    (fluid.param_attr, "no_such_attr", "graphc does not provide it"),
    (graphc, "nn", "static programs only"),
    (graphc.dataset, "voc2012", "~/.cache/paddle/dataset/voc2012"),
])
def test_missing_apis_raise_a_graphc_error_with_advice(owner, name, advice):
    with pytest.raises(MissingAPIError, match=advice) as info:
        getattr(owner, name)
    assert isinstance(info.value, graphc.GraphcError | AttributeError)
    assert not hasattr(owner, name)


def test_missing_modules_import_as_stubs_and_refuse_their_contents():
    dygraph = importlib.import_module("graphc.fluid.dygraph")
    with pytest.raises(MissingAPIError, match="static programs only"):
        dygraph.guard()
    with pytest.raises(MissingModuleError, match="DistributedStrategy.amp"):
        importlib.import_module("graphc.fluid.contrib.mixed_precision")
    with pytest.raises(MissingModuleError, match="static programs only"):
        exec("from graphc.fluid.dygraph.base import to_variable", {})
    with pytest.raises(MissingModuleError, match="voc2012/VOCtrainval"):
        importlib.import_module("graphc.dataset.voc2012")
    assert issubclass(MissingModuleError, ImportError)


def test_fleet_import_paths():
    from graphc.fluid.incubate.fleet.base import role_maker
    from graphc.fluid.incubate.fleet.collective import DistributedStrategy, fleet
    from graphc.fluid.incubate.fleet.parameter_server.distribute_transpiler import (
        fleet as ps_fleet,
    )
    assert issubclass(DistributedStrategy, graphc.DistributedStrategy)
    strategy = DistributedStrategy()
    strategy.use_amp, strategy.amp_loss_scaling = True, 1024
    assert strategy.amp and strategy.amp_configs.init_loss_scaling == 1024
    assert strategy.mode == "nccl2" and strategy.use_local_sgd is False
    for field in ("use_local_sgd", "use_dgc", "use_dist_fc", "forward_recompute"):
        with pytest.raises(graphc.StrategyError, match=f"{field} = True is not supported"):
            setattr(strategy, field, True)
    with pytest.raises(graphc.StrategyError, match="collective_mode = 'local_sgd'"):
        strategy.collective_mode = "local_sgd"
    role = role_maker.PaddleCloudRoleMaker(is_collective=True)
    assert role.worker_index() == 0 and role.worker_num() == 1 and role.is_first_worker()
    with pytest.raises(graphc.GraphcError, match="parameter-server"):
        fleet.init(role_maker.PaddleCloudRoleMaker())
    with pytest.raises(graphc.GraphcError, match="parameter-server fleet"):
        ps_fleet.init(role)  # a collective role maker
    assert fleet.is_worker() and not fleet.is_server()


def test_fleet_rejects_what_is_not_a_role_maker_or_an_optimizer(monkeypatch):
    from graphc.distributed import fleet as graphc_fleet
    from graphc.fluid.incubate.fleet.collective import DistributedStrategy, fleet
    with pytest.raises(graphc.GraphcError, match="role_maker must be a role maker.*got int"):
        fleet.init(3)
    monkeypatch.setitem(graphc_fleet._FLEET, "initialized", True)  # as after fleet.init()
    with pytest.raises(graphc.GraphcError, match="optimizer must be an optimizer.*NoneType"):
        fleet.distributed_optimizer(None, DistributedStrategy())
    opt = fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), DistributedStrategy())
    assert callable(opt.minimize)


# -- reader decorators and paddle.batch ----------------------------------------------------------

def _numbers(n):
    return lambda: iter(range(n))


def test_batch_groups_samples():
    assert list(graphc.batch(_numbers(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(graphc.batch(_numbers(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(graphc.reader.ReaderError, match="batch_size must be a positive"):
        graphc.batch(_numbers(3), 0)


def test_reader_decorators():
    R = graphc.reader
    random.seed(3)
    shuffled = list(R.shuffle(_numbers(20), buf_size=8)())
    assert sorted(shuffled) == list(range(20)) and shuffled != list(range(20))
    assert sorted(shuffled[:8]) == list(range(8))  # shuffled within windows of buf_size
    assert list(R.chain(_numbers(2), _numbers(3))()) == [0, 1, 0, 1, 2]
    pairs = lambda: iter([(1, 2), (3, 4)])  # noqa: E731
    assert list(R.compose(_numbers(2), pairs)()) == [(0, 1, 2), (1, 3, 4)]
    with pytest.raises(R.ComposeNotAligned):
        list(R.compose(_numbers(2), _numbers(3))())
    assert list(R.compose(_numbers(2), _numbers(3), check_alignment=False)()) == [(0, 0),
                                                                                  (1, 1)]
    assert list(R.map_readers(lambda a, b: a * b, _numbers(4), _numbers(4))()) == [0, 1, 4, 9]
    assert list(R.buffered(_numbers(50), 4)()) == list(range(50))
    assert list(R.firstn(_numbers(10), 3)()) == [0, 1, 2]
    assert list(R.xmap_readers(lambda v: v * 10, _numbers(9), 3, 4, order=True)()) == \
        [v * 10 for v in range(9)]
    assert sorted(R.xmap_readers(lambda v: -v, _numbers(9), 2, 2)()) == sorted(-v for v in
                                                                                 range(9))
    calls = []

    def once():
        calls.append(1)
        return iter([5, 6])

    cached = R.cache(once)
    assert list(cached()) == [5, 6] and list(cached()) == [5, 6] and len(calls) == 1
    assert sorted(R.multiprocess_reader([_numbers(3), _numbers(2)])()) == [0, 0, 1, 1, 2]

    def broken():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(R.ReaderError, match="disk gone"):
        list(R.buffered(broken, 2)())
    assert importlib.import_module("graphc.reader") is R


def test_abandoned_threaded_readers_leave_no_thread_and_cache_keeps_no_partial_read():
    import threading
    import time
    R = graphc.reader
    names = ("graphc-reader-buffered", "graphc-reader-multi")

    def alive():
        return [t for t in threading.enumerate() if t.name in names]

    for _ in range(3):  # a consumer that stops early (firstn, a break) each epoch
        assert list(R.firstn(R.buffered(_numbers(1000), 2), 3)()) == [0, 1, 2]
        for _sample in R.multiprocess_reader([_numbers(1000), _numbers(1000)], queue_size=2)():
            break
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive() == []
    attempts = []

    def flaky():
        attempts.append(1)
        yield 1
        if len(attempts) == 1:
            raise OSError("first read fails part-way")
        yield 2

    cached = R.cache(flaky)
    with pytest.raises(OSError):
        list(cached())
    assert list(cached()) == [1, 2] and list(cached()) == [1, 2]


def test_weighted_average_backward_io_decorators_and_memory_optimize(caplog):
    avg = fluid.average.WeightedAverage()
    avg.add(np.array([1.0, 2.0]), 1)
    avg.add(np.array([4.0, 8.0]), 3)
    np.testing.assert_allclose(avg.eval(), [13 / 4, 26 / 4])
    avg.reset()
    with pytest.raises(graphc.GraphcError, match="nothing was added"):
        avg.eval()
    with pytest.raises(ValueError, match="weight must be a number"):
        avg.add(1.0, "2")
    assert fluid.backward.append_backward is graphc.append_backward
    assert fluid.io.batch is graphc.batch and fluid.io.shuffle is graphc.reader.shuffle
    with caplog.at_level("WARNING", logger="graphc.fluid"):
        fluid.memory_optimize(fluid.default_main_program())
    assert "does nothing" in caplog.text


# -- paddle.dataset.uci_housing / mnist from Paddle's cache --------------------------------------

def test_uci_housing_reads_paddles_cached_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GRAPHC_DATASET_CHECK_MD5", "0")  # a file of our own, not Paddle's
    with pytest.raises(graphc.GraphcError, match="uci_housing/housing.data is not there"):
        next(graphc.dataset.uci_housing.train()())
    rows = np.random.default_rng(0).uniform(0, 50, (10, 14)).round(3)
    folder = tmp_path / ".cache" / "paddle" / "dataset" / "uci_housing"
    folder.mkdir(parents=True)
    np.savetxt(folder / "housing.data", rows, fmt="%.3f")
    train = list(graphc.dataset.uci_housing.train()())
    test = list(importlib.import_module("graphc.dataset.uci_housing").test()())
    assert (len(train), len(test)) == (8, 2)
    f = rows[:, :13]
    scaled = (f - f.mean(0)) / (f.max(0) - f.min(0))
    np.testing.assert_allclose(np.stack([x for x, _ in train + test]), scaled, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([y for _, y in train + test]), rows[:, 13])


def test_mnist_reads_paddles_cached_idx_files(tmp_path, monkeypatch):
    import gzip
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GRAPHC_DATASET_CHECK_MD5", "0")  # files of our own, not Paddle's
    folder = tmp_path / ".cache" / "paddle" / "dataset" / "mnist"
    folder.mkdir(parents=True)
    pixels = np.arange(3 * 2 * 2, dtype=np.uint8).reshape(3, 4) * 20
    header = np.array([2051, 3, 2, 2], dtype=">i4").tobytes()
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + pixels.tobytes()))
    labels = np.array([7, 0, 9], dtype=np.uint8)
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(np.array([2049, 3], dtype=">i4").tobytes() + labels.tobytes()))
    samples = list(graphc.dataset.mnist.test()())
    assert [label for _, label in samples] == [7, 0, 9]
    np.testing.assert_allclose(np.stack([img for img, _ in samples]),
                               pixels / 255.0 * 2.0 - 1.0, rtol=1e-6)
    assert samples[0][0].dtype == np.float32
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\0\0\0\1rubbish"))
    with pytest.raises(graphc.GraphcError, match="not an IDX file"):
        list(graphc.dataset.mnist.test()())


def test_create_lod_tensor_and_flags(caplog):
    dense = fluid.create_lod_tensor(np.arange(6.0).reshape(2, 3), [], fluid.CPUPlace())
    assert dense.shape() == [2, 3] and np.array(dense)[1, 2] == 5.0
    with pytest.raises(core.LoDError, match=r"recursive_seq_lens=\[\[2, 2\]\] do not "
                                            "describe data of shape"):
        fluid.create_lod_tensor(np.ones((3, 1)), [[2, 2]], fluid.CPUPlace())
    with caplog.at_level("WARNING", logger="graphc.fluid"):
        fluid.set_flags({"FLAGS_cudnn_deterministic": True})
    assert "FLAGS_cudnn_deterministic has no effect" in caplog.text
    assert fluid.get_flags(["FLAGS_cudnn_deterministic"]) == {"FLAGS_cudnn_deterministic": True}
    with pytest.raises(ValueError, match="not a Paddle flag name"):
        fluid.set_flags({"cudnn": 1})
    with pytest.raises(graphc.GraphcError, match="never set"):
        fluid.get_flags("FLAGS_never")
    with pytest.raises(graphc.GraphcError, match="a name or a list/tuple of names, got int"):
        fluid.get_flags(3)


def test_the_missing_api_table_names_nothing_graphc_has():
    """An entry of the advice table for a name graphc now provides would shadow nothing but
    mislead: every ``layers.*`` / ``nets.*`` / top-level function entry must really be absent."""
    import types

    import graphc.fluid as fluid
    from graphc.fluid._missing import ADVICE
    present = []
    for key in ADVICE:
        head, _, name = key.rpartition(".")
        owner = {"": fluid, "layers": fluid.layers, "nets": fluid.nets}.get(head)
        value = vars(owner).get(name) if owner is not None else None
        if value is not None and not isinstance(value, types.ModuleType):  # shims are modules
            present.append(key)
    assert not present, f"remove from graphc/fluid/_missing.py: {present}"


def test_collective_fleet_save_persistables_honours_filename(tmp_path):
    from graphc.fluid.incubate.fleet.collective import fleet
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fluid.layers.fc(fluid.data("x", [-1, 3]), 2)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe = fluid.Executor()
        exe.run(startup)
        fleet.save_persistables(exe, str(tmp_path), main_program=main, filename="combined")
        assert (tmp_path / "combined").is_dir()  # as fluid.io.save_persistables puts it
        want = np.asarray(scope["fc_0.w_0"]).copy()
        scope["fc_0.w_0"] = np.zeros_like(want)
        fluid.io.load_persistables(exe, str(tmp_path), main_program=main, filename="combined")
        np.testing.assert_array_equal(np.asarray(scope["fc_0.w_0"]), want)
