"""graphc.io.DataLoader: batches prepared on a thread and placed ahead of the step deliver
every sample once per epoch, in order, on one device, sharded over 4 data-parallel devices
(with the step's own sharding, so no copy), and K batches per run; a failing generator or a
bad batch is a clear error, and the thread is gone after errors, reset and epoch end."""

from __future__ import annotations

import threading

import jax
import numpy as np
import pytest
from graphc.io import DataLoader, DataLoaderError

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.jax.data_parallel import feed_sharding

pytestmark = pytest.mark.timeout(60)

B = 8  # global batch


def build(lr=0.1):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        label = fluid.data("label", [-1, 1], "int64")
        logits = layers.fc(layers.fc(x, 6, act="relu"), 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        optimizer.SGD(lr).minimize(loss)
    return main, startup, x, label, loss


def make_batches(n, batch=B, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = rng.standard_normal((batch, 4)).astype("float32")
        x[:, 0] = np.arange(i * batch, (i + 1) * batch)  # sample ids
        out.append((x, rng.integers(0, 3, (batch, 1)).astype("int64")))
    return out


def loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("graphc-")]


def params(scope, main):
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}


def run_feed_dicts(main, startup, loss, batches, compiled=None, k=1):
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    prog = compiled if compiled is not None else main
    for i in range(0, len(batches) - len(batches) % k, k):
        group = batches[i:i + k]
        feed = ({"x": group[0][0], "label": group[0][1]} if k == 1 else
                [{"x": x, "label": y} for x, y in group])
        exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)
    return params(scope, main)


def test_batches_in_order_on_one_device_and_thread_gone():
    main, startup, x, label, loss = build()
    batches = make_batches(5)
    loader = DataLoader.from_generator(feed_list=[x, label], capacity=2)
    loader.set_batch_generator(lambda: iter(batches))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    for _epoch in range(2):
        seen = []
        for data in loader():
            assert set(data) == {"x", "label"}
            assert isinstance(data["x"], jax.Array)
            seen.append(np.asarray(data["x"])[:, 0])
            exe.run(main, feed=data, fetch_list=[loss], scope=scope)
        np.testing.assert_array_equal(np.concatenate(seen), np.arange(5 * B))
        assert not loader_threads()
    assert loader.last_epoch_stats["items"] == 5
    ref = run_feed_dicts(main, startup, loss, batches * 2)
    for name, value in params(scope, main).items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-6, atol=1e-6)


def test_sample_generators_and_return_list():
    main, startup, x, label, loss = build()

    def samples():
        for i in range(10):
            yield [float(i), 0.0, 1.0, 2.0], i % 3  # float64 list and a scalar label

    loader = DataLoader.from_generator(feed_list=[x, label], return_list=True)
    loader.set_sample_generator(samples, batch_size=4)  # 10 samples: the last 2 dropped
    items = list(loader())
    assert [type(i) for i in items] == [list, list]
    xs = np.concatenate([np.asarray(i[0]) for i in items])
    np.testing.assert_array_equal(xs[:, 0], np.arange(8))
    assert items[0][0].dtype == np.float32 and items[0][1].shape == (4, 1)

    loader.set_sample_generator(samples, batch_size=4, drop_last=False)
    assert [np.asarray(i[1]).shape[0] for i in loader()] == [4, 4, 2]

    def lists():
        for i in range(3):
            yield [([float(3 * i + j)] * 4, [j]) for j in range(3)]

    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_sample_list_generator(lists)
    got = [np.asarray(d["x"])[:, 0] for d in loader()]
    np.testing.assert_array_equal(np.concatenate(got), np.arange(9))
    assert not loader_threads()


def dp_program(main, loss, k=1):
    strategy = fluid.ExecutionStrategy()
    strategy.num_iteration_per_run = k
    return fluid.CompiledProgram(main, exec_strategy=strategy).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(4))


def test_data_parallel_sharded_in_order_without_copy():
    main, startup, x, label, loss = build()
    compiled = dp_program(main, loss)
    batches = make_batches(4)
    loader = DataLoader.from_generator(feed_list=[x, label], capacity=3)
    loader.set_batch_generator(lambda: iter(batches), places=compiled)
    want = feed_sharding(compiled.devices)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    seen = []
    for i, data in enumerate(loader()):
        for arr in data.values():
            assert arr.sharding == want  # split over the 4 devices, as the step takes it
            assert len(arr.addressable_shards) == 4
        if i == 0:
            exe.run(compiled, feed=data, fetch_list=[loss, "x"], scope=scope)  # compile
            continue
        # placed state and feeds go into the step as they are: no transfer at all
        with jax.transfer_guard("disallow"):
            _, xs = exe.run(compiled, feed=data, fetch_list=[loss, "x"], scope=scope,
                            return_numpy=False)
        seen.append(np.asarray(xs)[:, 0])
    np.testing.assert_array_equal(np.concatenate(seen), np.arange(B, 4 * B))
    ref = run_feed_dicts(main, startup, loss, batches, dp_program(main, loss))
    for name, value in params(scope, main).items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-6, atol=1e-6)
    assert not loader_threads()


def test_k_batches_per_run_over_devices():
    main, startup, x, label, loss = build()
    k = 2
    compiled = dp_program(main, loss, k)
    batches = make_batches(5)  # two runs of 2; the fifth batch is dropped (drop_last)
    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_batch_generator(lambda: iter(batches), places=compiled)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    seen = []
    for data in loader():
        assert data["x"].shape == (k, B, 4)
        assert data["x"].sharding == feed_sharding(compiled.devices, k)
        _, xs = exe.run(compiled, feed=data, fetch_list=[loss, "x"], scope=scope)
        seen.append(xs[..., 0].reshape(-1))
    np.testing.assert_array_equal(np.concatenate(seen), np.arange(4 * B))
    ref = run_feed_dicts(main, startup, loss, batches[:4], dp_program(main, loss))
    for name, value in params(scope, main).items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-6, atol=1e-6)

    strict = DataLoader.from_generator(feed_list=[x, label], drop_last=False)
    strict.set_batch_generator(lambda: iter(batches), places=compiled)
    with pytest.raises(DataLoaderError, match="fewer than the num_iteration_per_run = 2"):
        list(strict())
    assert not loader_threads()


def test_generator_that_raises_stops_the_thread():
    main, startup, x, label, loss = build()

    def gen():
        yield make_batches(1)[0]
        raise OSError("disk on fire")

    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_batch_generator(gen)
    it = loader()
    next(it)
    with pytest.raises(DataLoaderError, match="OSError: disk on fire") as info:
        next(it)
    assert isinstance(info.value.__cause__, OSError)
    assert not loader_threads()
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("bad, match", [
    ((np.zeros((B, 4), "float32"), np.zeros((B, 1), "float32")),
     "variable 'label' is declared int64 but got float32"),
    ((np.zeros((B, 5), "float32"), np.zeros((B, 1), "int64")),
     r"variable 'x' is declared with shape \[-1, 4\] but got an array of shape \[8, 5\]"),
    ((np.zeros((B, 4), "float32"),), "got 1 arrays for the 2 variables"),
])
def test_bad_batches_name_the_variable(bad, match):
    main, startup, x, label, loss = build()
    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_batch_generator(lambda: iter([bad]))
    with pytest.raises(DataLoaderError, match=match):
        list(loader())
    assert not loader_threads()


def test_uneven_batch_over_devices():
    main, startup, x, label, loss = build()
    loader = DataLoader.from_generator(feed_list=[x, label])
    loader.set_batch_generator(lambda: iter(make_batches(1, batch=6)),
                               places=fluid.cpu_places(4))
    with pytest.raises(DataLoaderError, match="'x' has batch size 6, which does not split "
                                              "evenly over 4 devices"):
        list(loader())


def test_reset_mid_epoch_stops_the_thread_and_restarts():
    main, startup, x, label, loss = build()
    started = threading.Event()

    def endless():
        i = 0
        while True:
            started.set()
            yield make_batches(1, seed=i)[0]
            i += 1

    loader = DataLoader.from_generator(feed_list=[x, label], capacity=2)
    loader.set_batch_generator(endless)
    it = loader()
    next(it)
    assert started.wait(5) and loader_threads()
    loader.reset()
    assert not loader_threads()
    first = next(iter(loader()))  # a new epoch starts from the beginning
    np.testing.assert_array_equal(np.asarray(first["x"]), make_batches(1, seed=0)[0][0])
    loader.reset()
    assert not loader_threads()


def test_misuse():
    main, startup, x, label, loss = build()
    with pytest.raises(DataLoaderError, match="iterable=False"):
        DataLoader.from_generator(feed_list=[x], iterable=False)()  # it feeds exe.run itself
    unset = DataLoader.from_generator(feed_list=[x])
    assert unset() is unset  # Paddle's call returns the loader; iterating needs a generator
    with pytest.raises(DataLoaderError, match="no generator set"):
        iter(unset())
    with pytest.raises(DataLoaderError, match="feed_list"):
        DataLoader.from_generator(feed_list=["x"])
