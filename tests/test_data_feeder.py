"""fluid.DataFeeder: minibatches of samples become feed dicts of the declared dtypes and shapes
(a flat sample reshaped as Paddle does), per device with feed_parallel / decorate_reader, and
bad samples are FeedErrors naming the feed and the sample."""

from __future__ import annotations

import numpy as np
import pytest

import graphc as fluid
from graphc import layers
from graphc.fluid import DataFeeder
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
    feed = feeder.feed(batch)
    assert feed["img"].dtype == np.float32 and feed["img"].shape == (3, 1, 2, 2)
    assert feed["label"].dtype == np.int64 and feed["label"].shape == (3, 1)
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
    got = exe.run(main, feed=feed, fetch_list=[pred], scope=scope)[0]
    w, b = np.asarray(scope["fc_0.w_0"]), np.asarray(scope["fc_0.b_0"])
    np.testing.assert_allclose(got, feed["img"].reshape(3, 4) @ w + b, rtol=1e-5, atol=1e-6)


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
    assert len(single) == 5 and single[4]["img"].shape == (2, 1, 2, 2)
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
