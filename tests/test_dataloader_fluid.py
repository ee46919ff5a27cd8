"""DataLoader's Fluid idioms: ``iterable=False`` loaders feed ``exe.run`` (one batch per device
for a data-parallel program) until ``EOFException``; ``places`` that repeat a device give one
batch per place; ``PyReader``'s ``decorate_*`` spellings. Results equal feeding the same
batches by hand."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from graphc.io import DataLoader, DataLoaderError, EOFException, PyReader

import graphc as fluid
from graphc import layers, optimizer

pytestmark = pytest.mark.timeout(120)


def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        label = fluid.data("label", [-1, 1], "int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(x, 3), label))
        optimizer.SGD(0.1).minimize(loss)
    return main, startup, x, label, loss


def make_batches(n, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, 4)).astype("float32"),
             rng.integers(0, 3, (batch, 1)).astype("int64")) for _ in range(n)]


def params(scope, main):
    return {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}


def by_hand(main, startup, loss, feeds, prog=None):
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [exe.run(prog or main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
    return params(scope, main), losses


def no_loader_threads():
    return not [t for t in threading.enumerate() if t.name.startswith("graphc-DataLoader")]


def test_non_iterable_loader_feeds_exe_run_until_eof():
    main, startup, x, label, loss = build()
    batches = make_batches(3)
    loader = DataLoader.from_generator(feed_list=[x, label], capacity=None, iterable=False)
    assert loader.iterable is False
    loader.set_batch_generator(lambda: iter(batches))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(DataLoaderError, match="not started"):
        exe.run(main, fetch_list=[loss], scope=scope)
    losses = []
    for _ in range(2):  # two epochs, Paddle's loop
        loader.start()
        try:
            while True:
                losses.append(exe.run(main, fetch_list=[loss], scope=scope)[0])
        except EOFException:
            loader.reset()
    want, want_losses = by_hand(main, startup, loss,
                                [{"x": a, "label": b} for a, b in batches * 2])
    assert len(losses) == 6
    np.testing.assert_allclose(np.array(losses), np.array(want_losses), rtol=1e-6)
    for n, w in want.items():
        np.testing.assert_allclose(params(scope, main)[n], w, rtol=1e-6)
    # the end of an epoch stays the end until reset; a second start needs a reset
    loader.start()
    with pytest.raises(DataLoaderError, match="already started"):
        loader.start()
    for _ in batches:
        exe.run(main, scope=scope)
    before = params(scope, main)
    for _ in range(2):
        with pytest.raises(EOFException, match="reset"):
            exe.run(main, fetch_list=[loss], scope=scope)
    assert all((before[n] == v).all() for n, v in params(scope, main).items())
    loader.reset()
    assert no_loader_threads()
    # an explicit feed bypasses the loader; fluid.core's EOFException is the same class
    exe.run(main, feed={"x": batches[0][0], "label": batches[0][1]}, scope=scope)
    from graphc.fluid import core
    assert core.EOFException is EOFException


def test_non_iterable_data_parallel_takes_one_batch_per_device():
    main, startup, x, label, loss = build()
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    batches = make_batches(5)
    loader = DataLoader.from_generator(feed_list=[x, label], iterable=False)
    loader.set_sample_list_generator(lambda: ([(a[i], b[i]) for i in range(len(a))]
                                              for a, b in batches))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    loader.start()
    runs = 0
    with pytest.raises(EOFException):
        while True:
            exe.run(compiled, fetch_list=[loss], scope=scope)
            runs += 1
    loader.reset()
    assert runs == 2  # 5 batches: two runs of 2 devices, the fifth is left over
    joined = [{"x": np.concatenate([batches[i][0], batches[i + 1][0]]),
               "label": np.concatenate([batches[i][1], batches[i + 1][1]])} for i in (0, 2)]
    want, _ = by_hand(main, startup, loss, joined, compiled)
    for n, w in want.items():
        np.testing.assert_allclose(params(scope, main)[n], w, rtol=1e-6)


def test_generator_error_in_non_iterable_mode_is_raised_from_run():
    main, startup, x, label, loss = build()

    def broken():
        yield make_batches(1)[0]
        raise OSError("disk gone")

    loader = DataLoader.from_generator(feed_list=[x, label], iterable=False)
    loader.set_batch_generator(broken)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    loader.start()
    exe.run(main, scope=scope)
    with pytest.raises(DataLoaderError, match="OSError: disk gone"):
        exe.run(main, scope=scope)
    loader.reset()
    assert no_loader_threads()


def test_places_repeating_a_device_give_a_batch_per_place():
    main, startup, x, label, loss = build()
    batches = make_batches(5)
    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_batch_generator(lambda: iter(batches), places=[fluid.CPUPlace()] * 2)
    items = list(loader())
    assert len(items) == 2 and all(isinstance(i, list) and len(i) == 2 for i in items)
    for k, item in enumerate(items):
        for j, feed in enumerate(item):
            np.testing.assert_array_equal(np.asarray(feed["x"]), batches[2 * k + j][0])
    # as Paddle, a data-parallel program takes the list: one feed per device
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    got, _ = by_hand(main, startup, loss, items, compiled)
    joined = [{"x": np.concatenate([batches[i][0], batches[i + 1][0]]),
               "label": np.concatenate([batches[i][1], batches[i + 1][1]])} for i in (0, 2)]
    want, _ = by_hand(main, startup, loss, joined, compiled)
    for n, w in want.items():
        np.testing.assert_allclose(got[n], w, rtol=1e-6)
    strict = DataLoader.from_generator(feed_list=[x, label], return_list=True,
                                       drop_last=False)
    strict.set_batch_generator(lambda: iter(batches), places=[fluid.CPUPlace()] * 2)
    it = strict()
    assert isinstance(next(it)[0], list)
    next(it)
    with pytest.raises(DataLoaderError, match="1 batch.*2 places"):
        next(it)
    assert no_loader_threads()


def test_py_reader_spellings():
    main, startup, x, label, loss = build()
    batches = make_batches(2)

    def samples():
        for a, b in batches:
            for i in range(len(a)):
                yield a[i], b[i]

    reader = PyReader(feed_list=[x, label], capacity=2)
    assert reader.iterable
    reader.decorate_sample_generator(samples, batch_size=4)
    got = [np.asarray(d["x"]) for d in reader()]
    np.testing.assert_array_equal(np.stack(got), np.stack([a for a, _ in batches]))
    reader.decorate_sample_list_generator(lambda: ([(a[i], b[i]) for i in range(4)]
                                                   for a, b in batches))
    assert len(list(reader())) == 2
    fed = PyReader(feed_list=[x, label], capacity=2, iterable=False)
    fed.decorate_batch_generator(lambda: iter(batches))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    fed.start()
    losses = []
    try:
        while True:
            losses.append(exe.run(main, fetch_list=[loss], scope=scope)[0])
    except EOFException:
        fed.reset()
    _, want = by_hand(main, startup, loss, [{"x": a, "label": b} for a, b in batches])
    np.testing.assert_allclose(np.array(losses), np.array(want), rtol=1e-6)
    with pytest.raises(DataLoaderError, match="start\\(\\) is for loaders built with "
                                              "iterable=False"):
        reader.start()


def test_queue_size_shows_the_prepared_batches():
    """PaddleRec's word2vec prints loader.queue.size() while it trains."""
    import time
    x = fluid.data("qx", [-1, 3], "float32")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=False)
    loader.set_batch_generator(lambda: iter([[np.ones((2, 3), "float32")]] * 3))
    assert (loader.queue.size(), loader.queue.capacity()) == (0, 4)
    assert loader.queue.is_closed()
    loader.start()
    deadline = time.time() + 10
    while loader.queue.size() < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert loader.queue.size() == 3 and not loader.queue.is_closed()
    loader.reset()
    assert loader.queue.size() == 0


def test_a_non_iterable_loader_given_a_place_feeds_exe_run():
    x = fluid.data("nx", [-1, 3], "float32")
    y = fluid.layers.reduce_sum(x)
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=False)
    loader.set_batch_generator(lambda: iter([[np.ones((2, 3), "float32")]] * 2),
                               places=fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    loader.start()
    got = [exe.run(fetch_list=[y])[0][0] for _ in range(2)]
    import graphc.fluid.core as core
    with pytest.raises(core.EOFException):
        exe.run(fetch_list=[y])
    loader.reset()
    assert got == [6.0, 6.0]
