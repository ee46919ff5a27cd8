"""Paddle's inference API (fluid.core.AnalysisConfig, NativeConfig, PaddleTensor, zero-copy
tensors, create_paddle_predictor, CompiledProgram._with_inference_optimize): a trained model
saved with save_inference_model predicts through every entry point exactly as exe.run of the
loaded program, as one compiled step per input signature; bad input is a typed error."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.fluid import layers
from graphc.ir.errors import GraphcError
from graphc.runtime.checkpoint import CheckpointError
from graphc.runtime.feeds import FeedError
from graphc.runtime.lod import LoDError
from graphc.runtime.predictor import PredictorError

pytestmark = pytest.mark.timeout(180)

rng = np.random.default_rng(0)
X = rng.standard_normal((5, 4)).astype("float32")
Y = rng.integers(0, 3, (5, 1)).astype("int64")
DICT = 20


def _train_dense(dirname):
    """A tiny fc + batch_norm classifier, trained two steps and saved; (dir, want on X)."""
    main, startup = fluid.Program(), fluid.Program()
    scope = fluid.core.Scope()
    with fluid.scope_guard(scope), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        label = fluid.data("label", [-1, 1], "int64")
        h = layers.batch_norm(layers.fc(x, 8, act="relu"))
        pred = layers.fc(h, 3, act="softmax")
        loss = layers.mean(layers.cross_entropy(pred, label))
        fluid.optimizer.SGD(0.1).minimize(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        for _ in range(2):
            exe.run(main, feed={"x": X, "label": Y}, fetch_list=[loss])
        fluid.io.save_inference_model(str(dirname), ["x"], [pred], exe)
    return str(dirname)


def _loaded_run(dirname, feed, return_numpy=True):
    """exe.run of the loaded inference program: what every predictor must equal."""
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.core.Scope()):
        program, feeds, fetch = fluid.io.load_inference_model(dirname, exe)
        return exe.run(program, feed=feed, fetch_list=fetch, return_numpy=return_numpy)


@pytest.fixture(scope="module")
def dense_model(tmp_path_factory):
    d = _train_dense(tmp_path_factory.mktemp("dense"))
    return d, _loaded_run(d, {"x": X})[0]


def _steps(predictor):
    return len(predictor.core.executor._prepare(predictor.core.program, None,
                                                predictor.core.fetch_names).steps)


def test_paddle_tensor_run_through_analysis_and_native_configs(dense_model):
    d, want = dense_model
    for config in (fluid.core.AnalysisConfig(d), _native(d)):
        predictor = fluid.core.create_paddle_predictor(config)
        assert predictor.get_input_names() == ["x"]
        out = predictor.run([fluid.core.PaddleTensor(X)])
        assert len(out) == 1 and out[0].name == predictor.get_output_names()[0]
        assert out[0].shape == [5, 3] and out[0].dtype == fluid.core.PaddleDType.FLOAT32
        assert out[0].lod == []
        np.testing.assert_array_equal(np.array(out[0].data.float_data()).reshape(5, 3), want)
        np.testing.assert_array_equal(out[0].as_ndarray(), want)


def _native(d):
    config = fluid.core.NativeConfig()
    config.model_dir = d
    config.use_gpu = False
    config.fraction_of_gpu_memory = 0.15
    return config


def test_paddle_tensor_built_field_by_field(dense_model):
    d, want = dense_model
    t = fluid.core.PaddleTensor()
    t.name = "x"
    t.shape = [5, 4]
    t.data = fluid.core.PaddleBuf(X.reshape(-1).tolist())  # a list: float32, as Paddle
    t.dtype = fluid.core.PaddleDType.FLOAT32
    out = fluid.core.create_paddle_predictor(_native(d)).run([t])
    np.testing.assert_array_equal(out[0].as_ndarray(), want)


def test_zero_copy_run_and_handles_and_clone(dense_model):
    d, want = dense_model
    config = fluid.core.AnalysisConfig(d)
    config.disable_gpu()
    config.switch_ir_optim(False)
    config.switch_use_feed_fetch_ops(False)
    config.switch_specify_input_names(True)
    config.enable_memory_optim()
    config.set_cpu_math_library_num_threads(2)
    assert not config.ir_optim() and not config.use_feed_fetch_ops_enabled()
    assert config.cpu_math_library_num_threads() == 2
    predictor = fluid.core.create_paddle_predictor(config)
    x = predictor.get_input_tensor("x")
    x.reshape([5, 4])
    x.copy_from_cpu(X)
    assert x.shape() == [5, 4] and x.type() == fluid.core.PaddleDType.FLOAT32
    assert predictor.zero_copy_run()
    out = predictor.get_output_tensor(predictor.get_output_names()[0])
    np.testing.assert_array_equal(out.copy_to_cpu(), want)
    assert out.shape() == [5, 3] and out.lod() == []
    # paddle_infer spellings: create_predictor, handles, run() without arguments
    p2 = fluid.core.create_predictor(config)
    p2.get_input_handle("x").copy_from_cpu(X[:2])
    assert p2.run() is None
    np.testing.assert_array_equal(
        p2.get_output_handle(p2.get_output_names()[0]).copy_to_cpu(), want[:2])
    # a clone shares parameters and steps, with inputs and outputs of its own
    twin = predictor.clone()
    twin.get_input_tensor("x").copy_from_cpu(X[:1])
    twin.zero_copy_run()
    # one row: XLA may pick another kernel than for five, which rounds differently
    np.testing.assert_allclose(
        twin.get_output_tensor(twin.get_output_names()[0]).copy_to_cpu(), want[:1],
        rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(out.copy_to_cpu(), want)  # the original's output stays
    assert twin.core.scope is predictor.core.scope


def test_one_compiled_step_per_signature_and_the_fast_path(dense_model):
    d, want = dense_model
    # a global scope of this test's own: other tests' parameters share these names
    with fluid.scope_guard(fluid.Scope()):
        predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(d))
        core = predictor.core
        for _ in range(3):
            np.testing.assert_array_equal(core.run({"x": X})[0], want)
        assert _steps(predictor) == 1 and len(core._fast) == 1
        for _ in range(2):
            np.testing.assert_array_equal(core.run({"x": X[:2]})[0], want[:2])
        assert _steps(predictor) == 2 and len(core._fast) == 2
        # the parameters live in the predictor's scope, not the global one
        assert not any(n in fluid.global_scope() for n in core.scope.keys())


def test_clones_run_from_several_threads(dense_model):
    """Paddle's serving pattern: one clone per thread. The batch-norm model's step rewrites
    (unchanged) statistics whose buffers it donates: clones sharing them take turns."""
    d, want = dense_model
    predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(d))
    results, errors = [], []

    def serve(p, rows):
        try:
            for _ in range(20):
                h = p.get_input_handle("x")
                h.copy_from_cpu(X[:rows])
                p.run()
                results.append((rows, p.get_output_handle(p.get_output_names()[0])
                                .copy_to_cpu()))
        except Exception as exc:  # reported below, with the thread's own traceback lost
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(predictor.clone(), rows))
               for rows in (1, 2, 5, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 80
    for rows, out in results:  # other row counts may round differently (another kernel)
        np.testing.assert_allclose(out, want[:rows], rtol=1e-6, atol=1e-7)


def test_book_flow_compiled_program_with_inference_optimize(tmp_path):
    """Paddle 1.8's test_word2vec_book: LoD word ids, the loaded program run with
    return_numpy=False, then the same inputs as PaddleTensors through a CompiledProgram
    compiled for inference with a NativeConfig."""
    main, startup = fluid.Program(), fluid.Program()
    names = ["firstw", "secondw", "thirdw", "forthw"]
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        words = [fluid.data(n, [-1, 1], "int64", lod_level=1) for n in names]
        nxt = fluid.data("nextw", [-1, 1], "int64", lod_level=1)
        embs = [layers.embedding(w, size=[DICT, 8], param_attr="shared_w") for w in words]
        hidden = layers.fc(layers.concat(embs, axis=1), 16, act="sigmoid")
        predict = layers.fc(hidden, DICT, act="softmax")
        loss = layers.mean(layers.cross_entropy(predict, nxt))
        fluid.optimizer.SGD(0.01).minimize(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        batch = {n: fluid.create_lod_tensor(rng.integers(0, DICT, (3, 1)), [[1, 1, 1]], None)
                 for n in names + ["nextw"]}
        exe.run(main, feed=batch, fetch_list=[loss])
        fluid.io.save_inference_model(str(tmp_path), names, [predict], exe)

    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    with fluid.scope_guard(fluid.core.Scope()):
        program, feed_names, fetch = fluid.io.load_inference_model(str(tmp_path), exe)
        inputs = [fluid.create_random_int_lodtensor([[1]], [1], place, low=0, high=DICT - 1)
                  for _ in names]
        results = exe.run(program, feed=dict(zip(feed_names, inputs)), fetch_list=fetch,
                          return_numpy=False)

        def to_infer_tensor(lod_tensor):
            t = fluid.core.PaddleTensor()
            t.lod = lod_tensor.lod()
            t.data = fluid.core.PaddleBuf(np.array(lod_tensor))
            t.shape = lod_tensor.shape()
            t.dtype = fluid.core.PaddleDType.INT64
            return t

        config = fluid.core.NativeConfig()
        config.model_dir = str(tmp_path)
        compiled = fluid.compiler.CompiledProgram(program)
        compiled._with_inference_optimize(config)
        assert compiled._is_inference is True
        outs = exe.run(compiled, feed=[to_infer_tensor(t) for t in inputs])
        np_data = np.array(results[0])
        got = outs[0].data.float_data()
        assert len(got) == DICT
        np.testing.assert_allclose(np_data[0], got, rtol=5e-5)
        with pytest.raises(GraphcError, match="already compiled for inference"):
            compiled._with_inference_optimize(config)


def test_lod_inputs_through_zero_copy_and_paddle_tensor(tmp_path):
    """A LoD input (ids -> embedding -> sequence_pool -> fc): set_lod on a zero-copy tensor
    and a PaddleTensor's lod give exe.run's numbers, over batches of several lengths."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        ids = fluid.data("ids", [-1, 1], "int64", lod_level=1)
        pooled = layers.sequence_pool(layers.embedding(ids, size=[DICT, 6]), "sum")
        out = layers.fc(pooled, 2)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["ids"], [out], exe)
    predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(str(tmp_path)))
    for lengths in ([3, 1, 2], [2, 2], [3, 1, 2]):
        data = rng.integers(0, DICT, (sum(lengths), 1)).astype("int64")
        lod = [[0, *np.cumsum(lengths).tolist()]]
        want = _loaded_run(str(tmp_path), {"ids": fluid.create_lod_tensor(data, [lengths],
                                                                          None)})[0]
        h = predictor.get_input_tensor("ids")
        h.copy_from_cpu(data)
        h.set_lod(lod)
        assert h.lod() == lod
        predictor.zero_copy_run()
        got = predictor.get_output_tensor(predictor.get_output_names()[0]).copy_to_cpu()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        t = fluid.core.PaddleTensor(data, name="ids", lod=lod)
        np.testing.assert_allclose(predictor.run([t])[0].as_ndarray(), want, rtol=1e-6,
                                   atol=1e-6)
    assert len(predictor.core._fast) == 1  # LoD inputs: one remembered entry, any bucket
    # offsets that do not describe the tokens, after valid ones were remembered: LoDError
    h = predictor.get_input_tensor("ids")
    h.copy_from_cpu(data)
    for bad in ([[0, 3, 1, 6]], [[0, 2, 9]], [[1, 6]]):
        h.set_lod(bad)
        with pytest.raises(LoDError, match="offsets"):
            predictor.zero_copy_run()
    with pytest.raises(FeedError, match="'ids' is declared with lod_level=1"):
        predictor.core.run({"ids": data})


def test_prog_file_and_params_file(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        y = layers.fc(x, 3)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, model_filename="model",
                                      params_filename="params")
    want = _loaded_run_files(str(tmp_path))
    config = fluid.core.AnalysisConfig(str(tmp_path / "model"), str(tmp_path / "params"))
    assert config.prog_file().endswith("model") and config.params_file().endswith("params")
    out = fluid.core.create_paddle_predictor(config).run([fluid.core.PaddleTensor(X)])
    np.testing.assert_array_equal(out[0].as_ndarray(), want)
    native = fluid.core.NativeConfig()
    native.prog_file, native.param_file = str(tmp_path / "model"), str(tmp_path / "params")
    out = fluid.core.create_paddle_predictor(native).run([fluid.core.PaddleTensor(X)])
    np.testing.assert_array_equal(out[0].as_ndarray(), want)


def _loaded_run_files(d):
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.core.Scope()):
        program, feeds, fetch = fluid.io.load_inference_model(d, exe, "model", "params")
        return exe.run(program, feed={"x": X}, fetch_list=fetch)[0]


def test_paddle_buf_spellings():
    buf = fluid.core.PaddleBuf(np.arange(3, dtype=np.int64))
    assert buf.int64_data() == [0, 1, 2] and buf.length() == 24 and not buf.empty()
    assert buf.tolist("int64") == [0, 1, 2]
    assert fluid.core.PaddleBuf([1, 2]).float_data() == [1.0, 2.0]
    assert fluid.core.PaddleBuf(8).length() == 8
    assert fluid.core.PaddleBuf(0).empty()
    t = fluid.core.PaddleTensor(np.ones((2, 2), np.int32), name="a", lod=[[0, 2]])
    assert t.dtype == fluid.core.PaddleDType.INT32 and t.shape == [2, 2] and t.lod == [[0, 2]]


def test_bad_input_is_a_typed_error_naming_it(dense_model, tmp_path):
    d, _ = dense_model
    predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(d))
    with pytest.raises(PredictorError, match="no input 'nope'.*\\['x'\\]"):
        predictor.get_input_tensor("nope")
    with pytest.raises(PredictorError, match="no output 'nope'"):
        predictor.get_output_tensor("nope")
    with pytest.raises(PredictorError, match="no input 'y'"):
        predictor.run([fluid.core.PaddleTensor(X, name="y")])
    with pytest.raises(FeedError, match="'x' has shape \\[5, 3\\]"):
        predictor.run([fluid.core.PaddleTensor(X[:, :3].copy(), name="x")])
    with pytest.raises(FeedError, match="'x' has dtype int64"):
        predictor.run([fluid.core.PaddleTensor(X.astype(np.int64), name="x")])
    bad = fluid.core.PaddleTensor(X, name="x")
    bad.shape = [5, 5]
    with pytest.raises(PredictorError, match="'x': shape \\[5, 5\\].*100 bytes.*80"):
        predictor.run([bad])
    with pytest.raises(PredictorError, match="holds nothing yet"):
        predictor.get_output_tensor(predictor.get_output_names()[0]).copy_to_cpu()
    with pytest.raises(PredictorError, match="float32, float16"):
        predictor.get_input_tensor("x").copy_from_cpu(X.astype(np.complex64))
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(CheckpointError, match="no_such_model"):
        fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(missing))
    with pytest.raises(PredictorError, match="names no model"):
        fluid.core.create_paddle_predictor(fluid.core.NativeConfig())
    with pytest.raises(PredictorError, match="NativeConfig or AnalysisConfig"):
        fluid.core.create_paddle_predictor({"model_dir": d})
    with pytest.raises(GraphcError, match="NativeConfig or AnalysisConfig"):
        fluid.compiler.CompiledProgram(fluid.Program())._with_inference_optimize(None)
