"""fluid.DataFeeder: minibatches of samples become feed dicts of the declared dtypes and shapes
(a flat sample reshaped as Paddle does), per device with feed_parallel / decorate_reader, and
bad samples are FeedErrors naming the feed and the sample."""

from __future__ import annotations

import numpy as np
import pytest

import graphc as fluid
from graphc import layers
from graphc.fluid import DataFeeder, LoDTensor, core
from graphc.runtime.executor import FeedError

pytestmark = pytest.mark.timeout(120)


def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.data("img", [-1, 1, 2, 2])
        label = fluid.data("label", [-1, 1], "int64")
        pred = layers.fc(img, 3)
    return main, startup, img, label, pred


def samples(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(4).tolist(), int(rng.integers(0, 3))) for _ in range(n)]


def test_feed_converts_and_reshapes_and_runs():
    main, startup, img, label, pred = build()
    batch = samples(3)
    feeder = DataFeeder(feed_list=[img, label], place=fluid.CPUPlace())
    fed_tensors = feeder.feed(batch)
    # Paddle 1.8's feeder returns LoDTensors, a dense variable's with an empty LoD
    for name, dims in (("img", [3, 1, 2, 2]), ("label", [3, 1])):
        t = fed_tensors[name]
        assert isinstance(t, LoDTensor) and t.lod() == [] and t.shape() == dims
        assert t.recursive_sequence_lengths() == [] and t._get_dims() == dims
        assert t.has_valid_recursive_sequence_lengths()
    assert fed_tensors["img"]._dtype() == core.VarDesc.VarType.FP32
    assert fed_tensors["label"]._dtype() == core.VarDesc.VarType.INT64
    feed = {k: np.array(v) for k, v in fed_tensors.items()}
    assert feed["img"].dtype == np.float32 and feed["label"].dtype == np.int64
    np.testing.assert_array_equal(feed["img"].reshape(3, 4),
                                  np.array([s[0] for s in batch], "float32"))
    np.testing.assert_array_equal(feed["label"][:, 0], [s[1] for s in batch])
    # names resolve against the program; a float label with no fraction is a label
    by_name = DataFeeder(["img", "label"], fluid.CPUPlace(), program=main)
    fed = by_name.feed([(np.array(s[0], "float64"), float(s[1])) for s in batch])
    np.testing.assert_array_equal(fed["img"], feed["img"])
    np.testing.assert_array_equal(fed["label"], feed["label"])
    assert by_name.feed_names == ["img", "label"]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = exe.run(main, feed=fed_tensors, fetch_list=[pred], scope=scope)[0]
    w, b = np.asarray(scope["fc_0.w_0"]), np.asarray(scope["fc_0.b_0"])
    np.testing.assert_allclose(got, feed["img"].reshape(3, 4) @ w + b, rtol=1e-5, atol=1e-6)
    # the feeder's tensors and plain arrays run alike, with return_numpy=False too
    again = exe.run(main, feed=feed, fetch_list=[pred], scope=scope, return_numpy=False)[0]
    assert isinstance(again, LoDTensor) and again.lod() == []
    np.testing.assert_array_equal(np.array(again), got)


@pytest.mark.parametrize("bad, match", [
    ([([0.0] * 4, 1), ([0.0] * 4,)], "sample 1 must be a tuple or list of 2 values"),
    ([([0.0] * 4, 1), ([0.0] * 4, 2.5)], "feed 'label', sample 1: converting 2.5 to the "
                                         "declared int64 would lose"),
    ([(["a"] * 4, 1)], "feed 'img', sample 0: cannot convert"),
    ([([0.0] * 4, 1), ([0.0] * 3, 1)], "feed 'img': sample 1 has shape \\[3\\] but sample 0"),
    ([([[0.0, 1.0], [2.0]], 1)], "feed 'img', sample 0: the value is not a rectangular"),
    ([([0.0] * 5, 1)], "feed 'img' is declared with shape \\[-1, 1, 2, 2\\] but its samples "
                       "have shape \\[5\\]"),
    ([([[[0.0] * 2] * 2] * 2, 1)], "feed 'img' is declared with shape \\[-1, 1, 2, 2\\] but "
                                   "the minibatch has shape \\[1, 2, 2, 2\\]"),
    ([], "no samples"),
])
def test_bad_samples_name_feed_and_sample(bad, match):
    _, _, img, label, _ = build()
    with pytest.raises(FeedError, match=match):
        DataFeeder([img, label], fluid.CPUPlace()).feed(bad)


def test_bad_feed_lists():
    main, _, img, _, _ = build()
    with pytest.raises(FeedError, match="'nope' is not a variable"):
        DataFeeder(["nope"], fluid.CPUPlace(), program=main)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        seq = fluid.data("seq", [-1, 1], "int64")
    seq._set_type(lod_level=1)  # as a program from elsewhere (a parsed one) may declare it
    lod = DataFeeder([seq], fluid.CPUPlace()).feed([([1, 2],), ([3],)])["seq"]  # test_lod_*
    assert lod.recursive_sequence_lengths() == [[2, 1]]
    on_gpu = DataFeeder([img], fluid.CUDAPlace(0))
    if fluid.is_compiled_with_cuda():
        assert on_gpu._get_number_of_places_() >= 1
    else:
        with pytest.raises(FeedError, match="CUDAPlace but JAX sees no GPU"):
            list(on_gpu.feed_parallel([]))


def test_feed_parallel_and_decorate_reader():
    main, startup, img, label, pred = build()
    feeder = DataFeeder([img, label], fluid.CPUPlace())
    batches = [samples(2, seed=i) for i in range(5)]
    per_device = list(feeder.feed_parallel(batches[:2], num_places=2))
    assert len(per_device) == 2
    np.testing.assert_array_equal(per_device[1]["label"], feeder.feed(batches[1])["label"])
    with pytest.raises(FeedError, match="got 3 minibatches for 2 devices"):
        list(feeder.feed_parallel(batches[:3], num_places=2))

    single = list(feeder.decorate_reader(lambda: iter(batches), multi_devices=False)())
    assert len(single) == 5 and single[4]["img"].shape() == [2, 1, 2, 2]
    multi = list(feeder.decorate_reader(lambda: iter(batches), multi_devices=True,
                                        num_places=2)())
    assert len(multi) == 2 and all(len(m) == 2 for m in multi)  # the fifth is dropped
    np.testing.assert_array_equal(multi[1][1]["img"], single[3]["img"])
    with pytest.raises(FeedError, match="1 minibatch\\(es\\) are left over for 2 devices"):
        list(feeder.decorate_reader(lambda: iter(batches), True, 2, drop_last=False)())
    # a per-device list runs a data-parallel program like the joined batch
    compiled = fluid.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = exe.run(compiled, feed=multi[0], fetch_list=[pred], scope=scope)[0]
    joined = feeder.feed(batches[0] + batches[1])
    want = exe.run(main, feed=joined, fetch_list=[pred], scope=scope)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_fit_a_line_idiom_through_the_fluid_surface(tmp_path):
    """The book's fit_a_line as written for Paddle 1.x (imports ported): DataFeeder over
    paddle.batch, training lowers the loss, and the saved inference model predicts alike."""
    import graphc as paddle
    import graphc.fluid as fluid

    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    y_predict = fluid.layers.fc(input=x, size=1, act=None)
    diff = fluid.layers.elementwise_sub(y_predict, y)
    avg_cost = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
    fluid.optimizer.SGD(learning_rate=0.05).minimize(avg_cost)

    rng = np.random.default_rng(3)
    true_w = rng.standard_normal(13)
    data = [(f, np.array([f @ true_w + 0.5])) for f in rng.standard_normal((64, 13))]
    train_reader = paddle.batch(lambda: iter(data), batch_size=16)
    place = fluid.CPUPlace()
    feeder = fluid.DataFeeder(place=place, feed_list=[x, y])
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(fluid.default_startup_program())
        losses = []
        for _ in range(5):
            for batch in train_reader():
                losses.append(exe.run(fluid.default_main_program(),
                                      feed=feeder.feed(batch),
                                      fetch_list=[avg_cost])[0].item())
        assert losses[-1] < 0.5 * losses[0]
        fluid.io.save_inference_model(str(tmp_path), ["x"], [y_predict], exe)
        probe = feeder.feed(data[:4])
        want = exe.run(fluid.default_main_program().clone(for_test=True), feed=probe,
                       fetch_list=[y_predict])[0]
    with fluid.scope_guard(fluid.Scope()):
        program, feed_names, fetch_targets = fluid.io.load_inference_model(str(tmp_path), exe)
        got = exe.run(program, feed={feed_names[0]: probe["x"]}, fetch_list=fetch_targets)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_wrong_argument_types_are_feed_errors():
    main, _, img, _, _ = build()
    with pytest.raises(FeedError, match="feed_list must be a list of feed Variables"):
        DataFeeder(None, fluid.CPUPlace(), program=main)
    with pytest.raises(FeedError, match="program must be a Program, got str"):
        DataFeeder([img], fluid.CPUPlace(), program="main")
    feeder = DataFeeder([img], fluid.CPUPlace(), program=main)
    with pytest.raises(FeedError, match="takes a minibatch .* got int"):
        feeder.feed(5)
    for bad in ("abc", 0, True, 1.5):
        with pytest.raises(FeedError, match="num_places must be a whole number >= 1"):
            list(feeder.feed_parallel([], num_places=bad))
    assert feeder._get_number_of_places_(np.int64(2)) == 2


# -- host25: the feeder's LoDTensors as Paddle 1.8 scripts use them ----------------------------

def test_feeder_tensors_and_fetches_answer_paddles_lodtensor_methods():
    """A script reads the feeder's values and ``return_numpy=False`` fetches with LoDTensor's
    methods: LoD slots keep their lengths, dense ones have an empty LoD, every fetch (LoD or
    dense) is a LoDTensor; the storage methods (dims, layout, alloc) act as Paddle's."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.data("img", [-1, 1, 2, 2])
        words = fluid.data("words", [-1, 1], "int64", lod_level=1)
        emb = layers.embedding(words, size=[7, 3])
        pooled = layers.sequence_pool(emb, "sum")
        out = layers.elementwise_add(layers.fc(img, 3), pooled)
    feeder = DataFeeder([img, words], fluid.CPUPlace(), program=main)
    fed = feeder.feed([([0.5] * 4, [1, 2, 3]), ([1.0] * 4, [4])])
    assert fed["words"].recursive_sequence_lengths() == [[3, 1]]
    assert fed["words"].lod() == [[0, 3, 4]] and fed["words"].shape() == [4, 1]
    assert fed["img"].lod() == [] and fed["img"].shape() == [2, 1, 2, 2]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    table = np.asarray(scope[main.all_parameters()[0].name])
    got_out, got_emb, got_pooled = exe.run(main, feed=fed, fetch_list=[out, emb, pooled],
                                           scope=scope, return_numpy=False)
    for t in (got_out, got_emb, got_pooled):
        assert isinstance(t, LoDTensor) and t.has_valid_recursive_sequence_lengths()
    assert got_emb.recursive_sequence_lengths() == [[3, 1]] and got_emb.lod() == [[0, 3, 4]]
    np.testing.assert_allclose(np.array(got_emb), table[[1, 2, 3, 4]], rtol=1e-6)
    assert got_pooled.lod() == [] and got_out.recursive_sequence_lengths() == []
    np.testing.assert_allclose(np.array(got_pooled), [table[1:4].sum(0), table[4]], rtol=1e-6)
    assert got_out._get_dims() == [2, 3] and got_out._dtype() == core.VarDesc.VarType.FP32
    assert got_out._place() == fluid.CPUPlace() and "shape: [2, 3]" in str(got_out)
    # storage methods: dims, then an int buffer of them, layouts Paddle knows
    t = LoDTensor()
    assert not t._is_initialized() and "uninitialized" in str(t)
    t._set_dims([2, 3])
    t._alloc_int(fluid.CPUPlace())
    assert np.array(t).dtype == np.int32 and t._get_dims() == [2, 3]
    t._mutable_data(fluid.CPUPlace(), core.VarDesc.VarType.FP64)
    assert t._dtype() == "float64" and t.shape() == [2, 3]
    t._set_layout("NHWC")
    from graphc.ir.errors import GraphcError
    with pytest.raises(GraphcError, match="unknown layout 'NWHC'"):
        t._set_layout("NWHC")
    t.set(np.arange(6, dtype="float32").reshape(6, 1), fluid.CPUPlace())
    t.set_lod([[0, 2, 6]])
    assert t.recursive_sequence_lengths() == [[2, 4]] and t.has_valid_recursive_sequence_lengths()
    t.set_recursive_sequence_lengths([[1, 2]])  # its rows are checked when it is fed
    assert not t.has_valid_recursive_sequence_lengths()
