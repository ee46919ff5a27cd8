"""Paddle 1.x's reader layers (fluid.layers.py_reader / create_py_reader_by_data / read_file)
and a non-iterable loader feeding the programs cloned from its own (PaddleCV's and PaddleNLP's
training scripts: ``test_prog = main.clone(for_test=True)`` reads the same reader)."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.dataio.io import DataLoaderError


def _batches(n=3, size=4):
    rng = np.random.RandomState(0)
    return [[(rng.rand(3).astype("float32"), np.array([i % 2], "int64")) for i in range(size)]
            for _ in range(n)]


def _build(reader_of):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        reader = reader_of()
        x, label = fluid.layers.read_file(reader)
        prob = fluid.layers.fc(x, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
        test = main.clone(for_test=True)
        fluid.optimizer.SGD(0.5).minimize(loss)
    return main, startup, test, reader, x, label, loss


def _epoch(exe, program, reader, fetch):
    out = []
    reader.start()
    try:
        while True:
            out.append(exe.run(program, fetch_list=fetch)[0])
    except fluid.core.EOFException:
        reader.reset()
    return out


@pytest.mark.parametrize("how", ["py_reader", "by_data"])
def test_reader_layers_feed_every_run_until_eof_and_the_clone_reads_them_too(how):
    def make():
        if how == "py_reader":
            return fluid.layers.py_reader(capacity=4, shapes=[(-1, 3), (-1, 1)],
                                          dtypes=["float32", "int64"], name="train_reader")
        x = fluid.data("x", [-1, 3])
        y = fluid.data("y", [-1, 1], "int64")
        return fluid.layers.create_py_reader_by_data(capacity=4, feed_list=[x, y])

    main, startup, test, reader, x, label, loss = _build(make)
    assert x.shape == (-1, 3) and label.dtype == "int64"
    batches = _batches()
    reader.decorate_paddle_reader(lambda: iter(batches))
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = _epoch(exe, main, reader, [loss])
        assert len(losses) == 3
        # the same numbers as feeding the batches by hand to the test clone
        tested = _epoch(exe, test, reader, [loss])
        feeder = fluid.DataFeeder([x, label], fluid.CPUPlace(), program=test)
        by_hand = [exe.run(test, feed=feeder.feed(b), fetch_list=[loss])[0] for b in batches]
    np.testing.assert_allclose(np.concatenate(tested), np.concatenate(by_hand), rtol=1e-6)


def test_a_tensor_provider_and_one_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 2)], dtypes=["float32"])
        x = fluid.layers.read_file(reader)
        doubled = fluid.layers.scale(x, 2.0)
    reader.decorate_tensor_provider(lambda: iter([(np.ones((3, 2), "float32"),)]))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    (out,) = _epoch(exe, main, reader, [doubled])
    np.testing.assert_array_equal(out, np.full((3, 2), 2.0, "float32"))


def test_bad_reader_arguments_are_typed():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(DataLoaderError, match="one entry per variable"):
            fluid.layers.py_reader(2, [(-1, 2), (-1, 1)], ["float32"])
        with pytest.raises(DataLoaderError, match="capacity"):
            fluid.layers.py_reader(0, [(-1, 2)], ["float32"])
        with pytest.raises(DataLoaderError, match="read_file takes"):
            fluid.layers.read_file("reader")
        reader = fluid.layers.py_reader(2, [(-1, 2)], ["float32"])
        with pytest.raises(DataLoaderError, match="no generator set"):
            reader.start()
