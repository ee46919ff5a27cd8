"""graphc.dataset: InMemoryDataset and QueueDataset read the documented text format in file
and line order (or the documented shuffled order) with any number of reader threads;
train_from_dataset gives the parameters of the equivalent feed-dict loop, on one device and
over 4 data-parallel devices (and K batches per run); malformed lines and missing files are
errors naming file and line, and no thread is left behind."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from graphc.dataset import DatasetError, InMemoryDataset, QueueDataset

import graphc as fluid
from graphc import layers, optimizer
from graphc.dataio.multislot import parse_line

pytestmark = pytest.mark.timeout(60)


def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 2, 2])
        label = fluid.data("label", [-1, 1], "int64")
        logits = layers.fc(layers.reshape(x, [-1, 4]), 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        optimizer.SGD(0.1).minimize(loss)
    return main, startup, x, label, loss


def write_files(tmp_path, sizes, seed=0):
    """Files of the documented format; x[0, 0] of sample i is i / 100 (its id)."""
    rng = np.random.default_rng(seed)
    xs, labels, files, i = [], [], [], 0
    for f, n in enumerate(sizes):
        lines = []
        for _ in range(n):
            x = rng.standard_normal(4).astype("float32")
            x[0] = i / 100
            y = int(rng.integers(0, 3))
            xs.append(x.reshape(2, 2))
            labels.append([y])
            lines.append("4 " + " ".join(repr(float(v)) for v in x) + f" 1 {y}")
            if f == 0 and i == 1:
                lines.append("")  # blank lines are skipped
            i += 1
        path = tmp_path / f"part-{f:03d}.txt"
        path.write_text("\n".join(lines) + "\n")
        files.append(str(path))
    return files, np.stack(xs), np.asarray(labels, "int64")


def dataset(kind, files, x, label, batch=4, threads=2):
    ds = fluid.DatasetFactory().create_dataset(kind)
    ds.set_use_var([x, label])
    ds.set_filelist(files)
    ds.set_batch_size(batch)
    ds.set_thread(threads)
    if kind == "InMemoryDataset":
        ds.load_into_memory()
    return ds


def no_threads():
    return not [t for t in threading.enumerate() if t.name.startswith("graphc-")]


def ids(ds, parts=1):
    return np.rint(np.concatenate([b[0][:, 0, 0] for b in ds._batches(parts)]) * 100).astype(int)


def test_parse_line_format():
    main, startup, x, label, loss = build()
    ds = InMemoryDataset()
    ds.set_use_var([x, label])
    assert parse_line("4 0.5 -1 2e-3 7 1 2\n", ds._slots, "f:1") == [[0.5, -1.0, 0.002, 7.0],
                                                                      [2]]
    assert parse_line("   \n", ds._slots, "f:2") is None


@pytest.mark.parametrize("kind", ["InMemoryDataset", "QueueDataset"])
@pytest.mark.parametrize("threads", [1, 3])
def test_every_sample_once_in_order(tmp_path, kind, threads):
    main, startup, x, label, loss = build()
    files, xs, labels = write_files(tmp_path, [5, 0, 7, 300, 1])
    ds = dataset(kind, files, x, label, batch=4, threads=threads)
    for _ in range(2):  # two epochs, the same order
        batches = list(ds._batches())
        assert [len(b[0]) for b in batches] == [4] * 78 + [1]
        np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), xs)
        np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), labels)
        assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == np.int64
    # under 4 data-parallel devices a last batch of 1 does not split: it is dropped
    np.testing.assert_array_equal(ids(ds, parts=4), np.arange(312))
    assert no_threads()


def test_local_shuffle_is_the_documented_seeded_permutation(tmp_path):
    main, startup, x, label, loss = build()
    files, xs, _ = write_files(tmp_path, [10, 7])
    ds = dataset("InMemoryDataset", files, x, label, batch=5)
    ds.local_shuffle(seed=3)
    perm = np.random.default_rng(3).permutation(17)
    np.testing.assert_array_equal(ids(ds), perm)
    np.testing.assert_array_equal(ids(ds), perm)  # stays until the next shuffle
    ds.local_shuffle(seed=4)
    np.testing.assert_array_equal(ids(ds), np.random.default_rng(4).permutation(17))
    assert ds.get_memory_data_size() == 17


def feed_dict_reference(main, startup, loss, xs, labels, batch, compiled=None, k=1):
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feeds = [{"x": xs[i:i + batch], "label": labels[i:i + batch]}
             for i in range(0, len(xs), batch)]
    prog = compiled if compiled is not None else main
    if k == 1:
        for f in feeds:
            exe.run(prog, feed=f, fetch_list=[loss], scope=scope)
    else:
        for i in range(0, len(feeds) - len(feeds) % k, k):
            exe.run(prog, feed=feeds[i:i + k], fetch_list=[loss], scope=scope)
    return scope


def assert_same_params(main, scope, ref):
    for p in main.global_block().all_parameters():
        np.testing.assert_allclose(np.asarray(scope[p.name]), np.asarray(ref[p.name]),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["InMemoryDataset", "QueueDataset"])
def test_train_from_dataset_equals_feed_dict_loop(tmp_path, kind, capsys):
    main, startup, x, label, loss = build()
    files, xs, labels = write_files(tmp_path, [9, 14, 7])  # 30 samples: 7 of 4 and 1 of 2
    ds = dataset(kind, files, x, label, batch=4)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    last = exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss],
                                  fetch_info=["loss"], print_period=3)
    ref = feed_dict_reference(main, startup, loss, xs, labels, 4)
    assert_same_params(main, scope, ref)
    assert np.asarray(last[0]).size == 1
    out = capsys.readouterr().out
    assert "train step 3: loss=" in out and "train step 6: loss=" in out
    assert no_threads()


@pytest.mark.parametrize("k", [1, 2])
def test_train_from_dataset_data_parallel(tmp_path, k):
    main, startup, x, label, loss = build()
    files, xs, labels = write_files(tmp_path, [20, 20])  # 5 batches of 8
    strategy = fluid.ExecutionStrategy()
    strategy.num_iteration_per_run = k

    def compiled():
        return fluid.CompiledProgram(main, exec_strategy=strategy).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(4))

    ds = dataset("InMemoryDataset", files, x, label, batch=8)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.train_from_dataset(compiled(), ds, scope=scope, fetch_list=[loss], print_period=100)
    ref = feed_dict_reference(main, startup, loss, xs, labels, 8, compiled(), k)
    assert_same_params(main, scope, ref)
    assert no_threads()


@pytest.mark.parametrize("kind", ["InMemoryDataset", "QueueDataset"])
@pytest.mark.parametrize("line, match", [
    ("4 1 2", r"part-001.txt:3: variable 'x' announces 4 values but the line has only 2"),
    ("3 1 2 3 1 0", r"part-001.txt:3: variable 'x' has 3 values, expected 4"),
    ("4 1 2 3 4 1 0.5", r"part-001.txt:3: variable 'label': a value is not an integer"),
    ("4 1 2 3 4 1 0 9", r"part-001.txt:3: 1 token\(s\) after the last variable 'label'"),
    ("4 1 2 3 4", r"part-001.txt:3: the line ends before variable 'label'"),
    ("x 1 2 3 4 1 0", r"part-001.txt:3: expected the count of variable 'x', got 'x'"),
])
def test_malformed_line_names_file_and_line(tmp_path, kind, line, match):
    main, startup, x, label, loss = build()
    files, _, _ = write_files(tmp_path, [300, 4])
    with open(files[1]) as f:
        lines = f.read().splitlines()
    lines[2] = line
    with open(files[1], "w") as f:
        f.write("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=match):
        ds = dataset(kind, files, x, label)
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss])
    assert no_threads()


@pytest.mark.parametrize("kind", ["InMemoryDataset", "QueueDataset"])
def test_missing_file(tmp_path, kind):
    main, startup, x, label, loss = build()
    files, _, _ = write_files(tmp_path, [600, 4, 4])
    ds = dataset("QueueDataset", files, x, label)
    if kind == "QueueDataset":  # the file disappears between two epochs
        assert len(ids(ds)) == 608
    import os
    os.remove(files[2])
    with pytest.raises(DatasetError, match=r"part-002.txt: cannot read the data file"):
        if kind == "InMemoryDataset":
            dataset(kind, files, x, label)
        else:
            exe, scope = fluid.Executor(), fluid.Scope()
            exe.run(startup, scope=scope)
            exe.train_from_dataset(main, ds, scope=scope)
    assert no_threads()


def test_misconfiguration():
    main, startup, x, label, loss = build()
    with pytest.raises(DatasetError, match="unknown dataset 'Foo'"):
        fluid.DatasetFactory().create_dataset("Foo")
    ds = QueueDataset()
    with pytest.raises(DatasetError, match="set_use_var"):
        fluid.Executor().train_from_dataset(main, ds)
    with pytest.raises(DatasetError, match="known dimensions"):
        ds.set_use_var([fluid.data("seq", [-1, -1])])
    ds = InMemoryDataset()
    ds.set_use_var([x])
    ds.set_filelist(["a"])
    with pytest.raises(DatasetError, match="load_into_memory"):
        ds.local_shuffle()
