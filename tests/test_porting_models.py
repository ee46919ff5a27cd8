"""Blockers met porting PaddlePaddle/models 1.8 programs: Paddle's fluid.layers submodules,
LoD through expand/cos_sim/sequence_unpad, rank-1 labels in cross_entropy, numeric-string feeds."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.dataio.loader_epoch import DataLoaderError
from graphc.fluid import MissingAPIError, MissingModuleError
from graphc.fluid.layer_modules import PADDLE_LAYER_MODULES
from graphc.ir.errors import ShapeError
from graphc.runtime.feeds import FeedError
from graphc.runtime.lod import LoDTensor, unpack
from graphc.testing.lod import as_feed, lod_grad_check
from graphc.testing.lod_checks import token_loss

# (module, a name Paddle 1.8 keeps there) as ported model code spells them
_SPELLINGS = [
    ("nn", "cos_sim"), ("nn", "reduce_sum"), ("nn", "elementwise_mul"), ("nn", "mean"),
    ("tensor", "cast"), ("tensor", "fill_constant"), ("tensor", "concat"),
    ("control_flow", "less_than"), ("control_flow", "equal"), ("io", "data"),
    ("ops", "sigmoid"), ("loss", "cross_entropy"), ("detection", "box_coder"),
    ("metric_op", "auc"), ("learning_rate_scheduler", "noam_decay"),
    ("sequence_lod", "sequence_pool"), ("math_op_patch", "monkey_patch_variable"),
    ("utils", "flatten"), ("rnn", "dynamic_gru"),
]


@pytest.mark.parametrize("module,name", _SPELLINGS)
def test_layer_submodule_import_and_attribute(module, name):
    imported = importlib.import_module(f"graphc.fluid.layers.{module}")
    if module != "rnn":  # fluid.layers.rnn is Paddle's rnn() layer, the module is imported
        assert getattr(fluid.layers, module) is imported
    # utils/math_op_patch keep their own helpers (utils.flatten is not the flatten layer)
    own = PADDLE_LAYER_MODULES[module][1] == "own"
    expected = imported.__dict__[name] if own else getattr(fluid.layers, name)
    assert getattr(imported, name) is expected
    scope: dict = {}
    exec(f"from graphc.fluid.layers.{module} import {name} as found", scope)
    assert scope["found"] is expected


def test_every_listed_name_resolves_or_advises():
    for module, (names, _) in PADDLE_LAYER_MODULES.items():
        mod = importlib.import_module(f"graphc.fluid.layers.{module}")
        for name in names:
            try:
                getattr(mod, name)
            except MissingAPIError as exc:  # graphc lacks it: the error says so
                assert name in str(exc)


def test_missing_name_advice_survives_from_import():
    # (a name graphc lacks: Paddle's MPIRoleMaker, a base class outside its public list;
    # StaticRNN, IfElse and GeneralRoleMaker, the earlier examples, port since issues 26-27)
    import graphc.fluid.incubate.fleet.base.role_maker as role_maker
    with pytest.raises(MissingAPIError, match="MPIRoleMaker"):
        role_maker.MPIRoleMaker  # noqa: B018
    with pytest.raises(MissingModuleError, match="MPIRoleMaker") as info:
        exec("from graphc.fluid.incubate.fleet.base.role_maker import MPIRoleMaker", {})
    assert isinstance(info.value, ImportError)


def test_name_outside_paddles_module_is_refused():
    # Paddle 1.8 keeps cross_entropy in loss.py, not nn.py
    with pytest.raises(MissingAPIError, match="graphc.fluid.layers.sequence_lod"):
        fluid.layers.sequence_lod.cross_entropy  # noqa: B018
    with pytest.raises(AttributeError):
        fluid.layers.nn.no_such_layer  # noqa: B018


# -- LoD inputs Paddle accepts: expand, cos_sim, sequence_unpad --------------------------------

def _both_backends(fetch, feed):
    """Fetch on the jitted Executor and on the interpreter: (executor's, interpreter's)."""
    main = graphc.default_main_program()
    got = graphc.Executor().run(main, feed=feed, fetch_list=fetch, return_numpy=False)
    packed = {k: as_feed(main, k, v) for k, v in feed.items()}
    ref = run_graph(graphc.lower(main), {}, packed, [v.name for v in fetch])[1]
    return got, [unpack(r) if not isinstance(r, np.ndarray) else r for r in ref]


def _tokens(value):
    return np.asarray(value if not isinstance(value, LoDTensor) else np.array(value))


def test_expand_keeps_the_lod_when_dim0_is_tiled_once():
    rng = np.random.default_rng(1)
    lengths = [[2, 0, 3]]
    tokens = rng.standard_normal((5, 2))
    x = graphc.data("x", [-1, 2], "float64", lod_level=1)
    out = layers.expand(x, expand_times=[1, 3])
    assert out.lod_level == 1 and out.shape == (-1, 6)
    feed = {"x": fluid.create_lod_tensor(tokens, lengths, fluid.CPUPlace())}
    for value in _both_backends([out], feed):
        value = value[0]
        np.testing.assert_allclose(_tokens(value), np.tile(tokens, (1, 3)))
        assert value.recursive_sequence_lengths() == lengths


def test_expand_gradient_over_lod_tokens():
    rng = np.random.default_rng(2)
    x = graphc.data("x", [-1, 2], "float64", lod_level=1)
    x.stop_gradient = False
    loss, extra = token_loss(layers.expand(x, expand_times=[1, 2]), rng)
    feeds = {"x": fluid.create_lod_tensor(rng.standard_normal((4, 2)), [[1, 3]],
                                          fluid.CPUPlace()), **extra}
    lod_grad_check(graphc.default_main_program(), loss, feeds, ["x"], rng)


def test_expand_of_lod_tokens_along_dim0_is_refused():
    x = graphc.data("x", [-1, 2], "float64", lod_level=1)
    with pytest.raises(ShapeError, match="expand_times"):
        layers.expand(x, expand_times=[2, 1])


def _cos(a, b):
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    norm = np.linalg.norm(a, axis=1, keepdims=True) * np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1, keepdims=True) / norm


@pytest.mark.parametrize("y_kind", ["lod", "dense_rows", "one_row"])
def test_cos_sim_shares_x_lod(y_kind):
    rng = np.random.default_rng(3)
    lengths = [[1, 3, 2]]
    xv = rng.standard_normal((6, 4))
    yv = rng.standard_normal((1 if y_kind == "one_row" else 6, 4))
    x = graphc.data("x", [-1, 4], "float64", lod_level=1)
    y = graphc.data("y", [-1, 4], "float64", lod_level=1 if y_kind == "lod" else 0)
    out = layers.cos_sim(x, y)
    assert out.lod_level == 1
    feed = {"x": fluid.create_lod_tensor(xv, lengths, fluid.CPUPlace()),
            "y": fluid.create_lod_tensor(yv, lengths, fluid.CPUPlace()) if y_kind == "lod"
            else yv}
    for value in _both_backends([out], feed):
        np.testing.assert_allclose(_tokens(value[0]), _cos(xv, yv), rtol=1e-10)
        assert value[0].recursive_sequence_lengths() == lengths


def test_cos_sim_gradient_over_lod_tokens():
    rng = np.random.default_rng(4)
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    y = graphc.data("y", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = y.stop_gradient = False
    loss, extra = token_loss(layers.cos_sim(x, y), rng)
    lengths = [[2, 0, 2]]
    feeds = {"x": fluid.create_lod_tensor(rng.standard_normal((4, 3)), lengths,
                                          fluid.CPUPlace()),
             "y": fluid.create_lod_tensor(rng.standard_normal((4, 3)), lengths,
                                          fluid.CPUPlace()), **extra}
    grads = lod_grad_check(graphc.default_main_program(), loss, feeds, ["x", "y"], rng)
    assert all(np.isfinite(np.asarray(g)).all() for g in grads.values())


def test_sequence_unpad_ignores_the_lod_of_x():
    # rerank/listwise: a padded [N, M] batch fed to a lod_level=1 variable, one row per sample
    rng = np.random.default_rng(5)
    padded = rng.standard_normal((3, 4, 2))
    length = np.array([2, 4, 0], "int64")
    x = graphc.data("x", [-1, 4, 2], "float64", lod_level=1)
    n = graphc.data("n", [-1], "int64")
    out = layers.sequence_unpad(x, n)
    assert out.lod_level == 1
    feed = {"x": fluid.create_lod_tensor(padded, [[1, 1, 1]], fluid.CPUPlace()), "n": length}
    want = np.concatenate([padded[i, :k] for i, k in enumerate(length)])
    for value in _both_backends([out], feed):
        np.testing.assert_allclose(_tokens(value[0]), want)
        assert value[0].recursive_sequence_lengths() == [length.tolist()]


def test_sequence_unpad_of_lod_x_checks_one_row_per_length():
    x = graphc.data("x", [-1, 4, 2], "float64", lod_level=1)
    n = graphc.data("n", [-1], "int64")
    out = layers.sequence_unpad(x, n)
    feed = {"x": fluid.create_lod_tensor(np.ones((2, 4, 2)), [[2]], fluid.CPUPlace()),
            "n": np.array([1, 1, 1], "int64")}
    with pytest.raises(DataError):
        graphc.Executor().run(feed=feed, fetch_list=[out], return_numpy=False)


# -- cross_entropy with a label of rank X's rank - 1 (Paddle 1.8's cross_entropy InferShape) --

def test_cross_entropy_takes_a_label_without_its_trailing_one():
    rng = np.random.default_rng(6)
    probs = rng.dirichlet(np.ones(4), size=5)
    labels = np.array([0, 3, 1, 3, 2], "int64")
    x = graphc.data("x", [-1, 4], "float64")
    label = graphc.data("label", [-1], "int64")
    y = layers.cross_entropy(x, label)
    assert y.shape == (-1,)
    want = -np.log(probs[np.arange(5), labels])
    for value in _both_backends([y], {"x": probs, "label": labels}):
        np.testing.assert_allclose(np.asarray(value[0]), want, rtol=1e-12)


def test_cross_entropy_rank1_label_ignore_index_and_gradient():
    probs = np.array([[0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    labels = np.array([1, -100, 0], "int64")
    x = graphc.data("x", [3, 2], "float64")
    x.stop_gradient = False
    label = graphc.data("label", [3], "int64")
    y = layers.cross_entropy(x, label)
    assert y.shape == (3,)
    append_backward(layers.reduce_sum(y))
    got, grad = graphc.Executor().run(feed={"x": probs, "label": labels},
                                      fetch_list=[y, "x@GRAD"])
    np.testing.assert_allclose(got, [-np.log(0.8), 0.0, -np.log(0.5)])
    want = np.zeros_like(probs)
    want[0, 1], want[2, 0] = -1 / 0.8, -1 / 0.5
    np.testing.assert_allclose(grad, want)


@pytest.mark.parametrize("x_shape,label_shape,soft", [
    ([-1, 4], [-1, 2], False), ([-1, 4], [-1], True), ([2, 4], [3], False),
    ([-1, 3, 4], [-1], False)])
def test_cross_entropy_label_shapes_paddle_refuses(x_shape, label_shape, soft):
    x = graphc.data("x", x_shape, "float32")
    label = graphc.data("label", label_shape, "float32" if soft else "int64")
    with pytest.raises(ShapeError, match="Label"):
        layers.cross_entropy(x, label, soft_label=soft)


# -- numeric strings in feeds: parsed as Paddle's np.array(data, dtype) -------------------------

def _feed_vars():
    ids = graphc.data("ids", [-1, 1], "int64")
    score = graphc.data("score", [-1, 2], "float32")
    seq = graphc.data("seq", [-1, 1], "int64", lod_level=1)
    return [ids, score, seq]


def test_data_feeder_parses_numeric_strings():
    feeder = fluid.DataFeeder(_feed_vars(), fluid.CPUPlace())
    feed = feeder.feed([(["7"], ["0.5", "2"], ["1", "2", "3"]), (["12"], ["1e-1", "-3"], ["4"])])
    np.testing.assert_array_equal(feed["ids"], [[7], [12]])
    assert np.array(feed["ids"]).dtype == np.int64 and np.array(feed["score"]).dtype == np.float32
    np.testing.assert_allclose(feed["score"], [[0.5, 2], [0.1, -3]])
    np.testing.assert_array_equal(np.array(feed["seq"]).reshape(-1), [1, 2, 3, 4])
    assert feed["seq"].recursive_sequence_lengths() == [[3, 1]]


@pytest.mark.parametrize("sample,where", [
    ((["7"], ["0.5", "2"], ["1"]), None),
    ((["1.5"], ["0", "0"], ["1"]), "'ids', sample 1"),
    ((["3"], ["x", "0"], ["1"]), "'score', sample 1"),
    ((["3"], ["0", "0"], ["2", "two"]), "'seq', sample 1"),
])
def test_data_feeder_refuses_text_that_is_no_number(sample, where):
    feeder = fluid.DataFeeder(_feed_vars(), fluid.CPUPlace())
    good = (["1"], ["0", "0"], ["5"])
    if where is None:
        feeder.feed([good, sample])
        return
    with pytest.raises(FeedError, match=where):
        feeder.feed([good, sample])


def test_data_loader_parses_numeric_strings_and_names_a_bad_sample():
    feed_vars = _feed_vars()
    samples = [("7", ["0.5", "2"], ["1", "2"]), ("12", ["1", "-3"], ["4"])]
    loader = fluid.io.DataLoader.from_generator(feed_list=feed_vars, capacity=2)
    loader.set_sample_list_generator(lambda: iter([samples]), fluid.CPUPlace())
    loader_bad = fluid.io.DataLoader.from_generator(feed_list=feed_vars, capacity=2)
    loader_bad.set_sample_list_generator(
        lambda: iter([[samples[0], ("x1", ["1", "-3"], ["4"])]]), fluid.CPUPlace())
    out = layers.reduce_sum(layers.cast(feed_vars[0], "float32")) + layers.reduce_sum(
        feed_vars[1])
    exe = graphc.Executor()
    for batch in loader():
        (got,) = exe.run(feed=batch, fetch_list=[out])
        np.testing.assert_allclose(got, 19 + 0.5)
    with pytest.raises(DataLoaderError, match="'ids'.*sample 1.*'x1'"):
        for batch in loader_bad():
            exe.run(feed=batch, fetch_list=[out])


def test_bpr_loss_keeps_the_lod_of_x():
    # gru4rec train_sample_neg: bpr_loss over the rows of a sequence_reshape'd LoD value
    rng = np.random.default_rng(7)
    lengths = [[2, 1]]
    xv = rng.standard_normal((3, 4))
    lv = np.array([[0], [3], [1]], "int64")
    x = graphc.data("x", [-1, 4], "float64", lod_level=1)
    label = graphc.data("label", [-1, 1], "int64", lod_level=1)
    y = layers.bpr_loss(x, label)
    assert y.lod_level == 1
    diff = xv[np.arange(3), lv[:, 0]][:, None] - xv
    logsig = -np.log1p(np.exp(-diff))
    want = -(logsig.sum(axis=1) - logsig[np.arange(3), lv[:, 0]]) / 3
    feed = {"x": fluid.create_lod_tensor(xv, lengths, fluid.CPUPlace()),
            "label": fluid.create_lod_tensor(lv, lengths, fluid.CPUPlace())}
    for value in _both_backends([y], feed):
        np.testing.assert_allclose(_tokens(value[0]).reshape(-1), want, rtol=1e-10)
        assert value[0].recursive_sequence_lengths() == lengths


def test_sequence_unpad_of_a_2d_x_gives_one_column_per_token():
    # Paddle's InferShape: X [N, M] -> Out [T, 1] (rerank/listwise embeds it, then squeezes 1)
    padded = np.arange(12, dtype="int64").reshape(3, 4)
    length = np.array([1, 3, 2], "int64")
    x = graphc.data("x", [-1, 4], "int64")
    n = graphc.data("n", [-1], "int64")
    out = layers.sequence_unpad(x, n)
    assert out.shape == (-1, 1) and out.lod_level == 1
    want = np.concatenate([padded[i, :k] for i, k in enumerate(length)])[:, None]
    for value in _both_backends([out], {"x": padded, "n": length}):
        np.testing.assert_array_equal(_tokens(value[0]), want)
        assert value[0].recursive_sequence_lengths() == [length.tolist()]


def test_dynamic_gru_reads_a_lod_h0_as_its_dense_rows():
    # rerank/listwise: h_0 is an fc over a lod_level=1 slot with one token per sample
    rng = np.random.default_rng(8)
    lengths = [[3, 1, 2]]
    xv = rng.standard_normal((6, 6))
    h0v = rng.standard_normal((3, 2))

    def build(h0_lod):
        x = graphc.data("x", [-1, 6], "float64", lod_level=1)
        h0 = graphc.data("h0", [-1, 2], "float64", lod_level=1 if h0_lod else 0)
        x.stop_gradient = h0.stop_gradient = False
        out = layers.dynamic_gru(x, size=2, h_0=h0, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(0.3)), bias_attr=False)
        return out, {"x": fluid.create_lod_tensor(xv, lengths, fluid.CPUPlace()),
                     "h0": fluid.create_lod_tensor(h0v, [[1, 1, 1]], fluid.CPUPlace())
                     if h0_lod else h0v}

    results = []
    for h0_lod in (False, True):
        with graphc.program_guard(graphc.Program(), graphc.Program()):
            out, feed = build(h0_lod)
            append_backward(layers.reduce_sum(layers.square(out)))
            exe = graphc.Executor()
            exe.run(graphc.default_startup_program())
            got = exe.run(feed=feed, fetch_list=[out, "h0@GRAD"], return_numpy=False)
            results.append([_tokens(g) for g in got])
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-12)
    np.testing.assert_allclose(results[1][1].reshape(3, 2), results[0][1], rtol=1e-12)


def test_data_loader_reshapes_samples_to_the_declared_rank_as_paddle():
    # rerank/listwise yields a whole batch as one sample: lens [8] for a [-1] variable
    lens = graphc.data("lens", [-1], "int64")
    grid = graphc.data("grid", [-1, 2], "float32")
    loader = fluid.io.DataLoader.from_generator(feed_list=[lens, grid], capacity=2)
    loader.set_sample_list_generator(
        lambda: iter([[([3, 1, 2], [[1.0, 2.0], [3.0, 4.0]])]]), fluid.CPUPlace())
    ((batch,),) = list(loader())  # Paddle's: one feed dict per place, in a list
    np.testing.assert_array_equal(np.asarray(batch["lens"]), [3, 1, 2])
    assert np.asarray(batch["grid"]).shape == (2, 2)
    bad = fluid.io.DataLoader.from_generator(feed_list=[lens, grid], capacity=2)
    bad.set_sample_list_generator(lambda: iter([[([3], [1.0, 2.0, 3.0])]]), fluid.CPUPlace())
    with pytest.raises(DataLoaderError, match="grid"):
        list(bad())
