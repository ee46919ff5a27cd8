"""What stopped PaddlePaddle/book's Fluid chapters (word2vec, understand_sentiment, fit_a_line)
when ported by renaming imports only: each pattern as the chapter writes it, in graphc's words."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.runtime.feeds import FeedError


@pytest.fixture(autouse=True)
def _fresh_programs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        yield main, startup


def test_a_data_declared_twice_alike_is_one_variable(_fresh_programs):
    # word2vec declares its label in train() and again in train_program()
    main, startup = _fresh_programs
    a = fluid.data(name="nextw", shape=[None, 1], dtype="int64")
    b = fluid.data(name="nextw", shape=[None, 1], dtype="int64")
    assert a is b
    assert [v.name for v in main.list_vars() if v.is_data] == ["nextw"]
    emb = fluid.embedding(b, size=[10, 3])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    out, = exe.run(main, feed={"nextw": np.array([[1], [7]], "int64")}, fetch_list=[emb])
    assert out.shape == (2, 1, 3)


def test_ids_made_by_create_lod_tensor_feed_a_scalar_token_sequence(_fresh_programs):
    # understand_sentiment: fluid.data("words", shape=[None], lod_level=1) is trained through a
    # DataFeeder ([N] ids) and then fed fluid.create_lod_tensor(list of id lists), which is
    # [N, 1]: the same values per token
    main, startup = _fresh_programs
    words = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
    emb = fluid.embedding(words, size=[20, 4])
    pooled = fluid.layers.sequence_pool(emb, "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    seqs = [[1, 2, 3], [4, 5]]
    feeder = fluid.DataFeeder(feed_list=[words], place=fluid.CPUPlace())
    via_feeder, = exe.run(main, feed=feeder.feed([(s,) for s in seqs]), fetch_list=[pooled])
    tensor = fluid.create_lod_tensor([np.array(s, "int64") for s in seqs], [[3, 2]],
                                     fluid.CPUPlace())
    assert np.array(tensor).shape == (5, 1)
    via_tensor, = exe.run(main, feed={"words": tensor}, fetch_list=[pooled])
    np.testing.assert_array_equal(via_feeder, via_tensor)
    # more values per token than declared is still refused
    wide = fluid.create_lod_tensor(np.arange(10, dtype="int64").reshape(5, 2), [[3, 2]],
                                   fluid.CPUPlace())
    with pytest.raises(FeedError, match="feed 'words' has shape \\[5, 2\\]"):
        exe.run(main, feed={"words": wide}, fetch_list=[pooled])


def test_a_fetched_loss_converts_to_a_python_float(_fresh_programs):
    # fit_a_line and most Fluid scripts print '%.2f' % value or float(value) of a fetched
    # [1]-shaped mean: NumPy 2.4 made that an error, which is why graphc pins NumPy < 2.4
    main, startup = _fresh_programs
    x = fluid.data(name="x", shape=[None, 3])
    loss = fluid.layers.mean(fluid.layers.fc(x, 1))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    value, = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[loss])
    assert value.shape == (1,)
    with pytest.warns(DeprecationWarning):
        assert float(value) == pytest.approx(float(value[0]))
        assert "%.3f" % value == "%.3f" % value[0]  # noqa: UP031 (the scripts do this)
