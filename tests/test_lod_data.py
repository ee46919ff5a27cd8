"""LoD data (issue 16): Dataset MultiSlot files with variable-length slots, train_from_dataset
on a CTR-DNN, DataLoader batches of variable-length samples (packed on the loader's thread,
split by whole sequences over devices), num_iteration_per_run > 1 and per-device feed lists
with LoD feeds; each against feeding the same batches by hand."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.dataset import DatasetError, InMemoryDataset, QueueDataset
from graphc.io import DataLoader, DataLoaderError

import graphc
import graphc.fluid as fluid
from graphc import layers, models
from graphc.runtime.feeds import FeedError
from graphc.runtime.lod import LoDTensor

SLOTS, VOCAB, DENSE = 3, 40, 2


def lod_tensor(data, lengths):
    return fluid.create_lod_tensor(np.asarray(data), lengths, fluid.CPUPlace())


def _ctr(lr=0.2, opt="sgd"):
    make = (lambda: graphc.optimizer.SGD(lr)) if opt == "sgd" else (
        lambda: graphc.optimizer.Adam(lr))
    return models.ctr_dnn(num_slots=SLOTS, vocab=VOCAB, emb_dim=4, hidden=(8,),
                          dense_dim=DENSE, optimizer_fn=make)


def _samples(n, rng):
    """Samples whose click depends on the slots' ids (learnable), lengths 1-5."""
    out = []
    for _ in range(n):
        dense = rng.standard_normal(DENSE).round(3).tolist()
        slots = [rng.integers(0, VOCAB, rng.integers(1, 6)).tolist() for _ in range(SLOTS)]
        label = int(np.mean(slots[0]) < VOCAB / 2)
        out.append((dense, slots, label))
    return out


def _write(path, samples):
    with open(path, "w") as f:
        for dense, slots, label in samples:
            parts = [f"{len(dense)} " + " ".join(map(str, dense))]
            parts += [f"{len(s)} " + " ".join(map(str, s)) for s in slots]
            f.write(" ".join(parts) + f" 1 {label}\n")


def _by_hand(samples):
    """The feed dict Executor.run takes for these samples (LoDTensors for the slots)."""
    feed = {"dense_input": np.asarray([s[0] for s in samples], "float32"),
            "label": np.asarray([[s[2]] for s in samples], "int64")}
    for k in range(SLOTS):
        seqs = [s[1][k] for s in samples]
        feed[f"C{k + 1}"] = fluid.create_lod_tensor(seqs, [[len(q) for q in seqs]],
                                                    fluid.CPUPlace())
    return feed


def _params(m, scope):
    return {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}


def _mean_loss(exe, m, scope, samples, bs):
    test = m.main.clone(for_test=True)
    return float(np.mean([exe.run(test, feed=_by_hand(samples[i:i + bs]),
                                  fetch_list=[m.loss], scope=scope)[0]
                          for i in range(0, len(samples), bs)]))


# -- Dataset: MultiSlot files with variable-length slots ---------------------------------------

@pytest.mark.parametrize("kind", [InMemoryDataset, QueueDataset])
def test_multislot_files_give_lod_batches(tmp_path, kind):
    rng = np.random.default_rng(0)
    samples = _samples(11, rng)
    _write(tmp_path / "a.txt", samples[:6])
    _write(tmp_path / "b.txt", samples[6:])
    m = _ctr()
    ds = kind()
    ds.set_use_var(m.feeds)
    ds.set_filelist([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
    ds.set_batch_size(4)
    if kind is InMemoryDataset:
        ds.load_into_memory()
    batches = list(ds._batches())
    assert [len(b[0]) for b in batches] == [4, 4, 3]
    for i, batch in enumerate(batches):
        want = _by_hand(samples[4 * i:4 * i + 4])
        for var, got in zip(m.feeds, batch):
            if var.lod_level:
                assert isinstance(got, LoDTensor)
                assert got.recursive_sequence_lengths() == \
                    want[var.name].recursive_sequence_lengths()
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want[var.name]))


def test_multislot_shuffle_keeps_each_samples_sequences(tmp_path):
    rng = np.random.default_rng(1)
    samples = _samples(9, rng)
    _write(tmp_path / "a.txt", samples)
    m = _ctr()
    ds = InMemoryDataset()
    ds.set_use_var(m.feeds)
    ds.set_filelist([str(tmp_path / "a.txt")])
    ds.set_batch_size(5)
    ds.load_into_memory()
    ds.local_shuffle(seed=3)
    perm = np.random.default_rng(3).permutation(9)
    got = list(ds._batches())
    for i, batch in enumerate(got):
        want = _by_hand([samples[j] for j in perm[5 * i:5 * i + 5]])
        for var, value in zip(m.feeds, batch):
            np.testing.assert_array_equal(np.asarray(value), np.asarray(want[var.name]))
            if var.lod_level:
                assert value.lod() == want[var.name].lod()


def test_multislot_errors_name_file_and_line(tmp_path):
    m = _ctr()
    bad = {"zero": "2 0.1 0.2 0 1 5 1 6 1 1\n",  # an empty slot: Paddle asks for padding
           "short": "2 0.1 0.2 2 3\n",
           "dense": "3 0.1 0.2 0.3 1 1 1 1 1 1 1 0\n"}
    messages = {"zero": r"'C1' \(lod_level=1\) has 0 values.*pad",
                "short": "announces 2 values",
                "dense": "'dense_input' has 3 values, expected 2"}
    for name, line in bad.items():
        path = tmp_path / f"{name}.txt"
        path.write_text("2 0.1 0.2 1 1 1 2 1 3 1 0\n" + line)
        ds = InMemoryDataset()
        ds.set_use_var(m.feeds)
        ds.set_filelist([str(path)])
        with pytest.raises(DatasetError, match=f"{name}.txt:2: .*{messages[name]}"):
            ds.load_into_memory()
    nested = graphc.data("nested", [-1, 1], "int64", lod_level=2)
    with pytest.raises(DatasetError, match="lod_level=2"):
        InMemoryDataset().set_use_var([nested])


def test_train_from_dataset_trains_ctr_dnn_and_equals_feeding_by_hand(tmp_path):
    rng = np.random.default_rng(2)
    samples = _samples(48, rng)
    _write(tmp_path / "part-0", samples[:20])
    _write(tmp_path / "part-1", samples[20:])
    files = [str(tmp_path / "part-0"), str(tmp_path / "part-1")]
    bs, epochs = 8, 4

    m = _ctr()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    before = _mean_loss(exe, m, scope, samples, bs)
    ds = QueueDataset()
    ds.set_use_var(m.feeds)
    ds.set_filelist(files)
    ds.set_batch_size(bs)
    ds.set_thread(2)
    for _ in range(epochs):
        exe.train_from_dataset(m.main, ds, scope=scope, fetch_list=[m.loss],
                               print_period=1000)
    after = _mean_loss(exe, m, scope, samples, bs)
    assert after < 0.8 * before, (before, after)

    # the same batches fed by hand as LoDTensors: the same parameters
    m2 = _ctr()
    scope2 = graphc.Scope()
    exe.run(m2.startup, scope=scope2)
    for _ in range(epochs):
        for i in range(0, len(samples), bs):
            exe.run(m2.main, feed=_by_hand(samples[i:i + bs]), fetch_list=[m2.loss],
                    scope=scope2)
    p1, p2 = _params(m, scope), _params(m2, scope2)
    for name, value in p2.items():
        np.testing.assert_allclose(p1[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


# -- DataLoader -------------------------------------------------------------------------------

def _seq_model():
    words = graphc.data("words", [-1, 1], "int64", lod_level=1)
    label = graphc.data("label", [-1, 1], "float32")
    emb = layers.embedding(words, [VOCAB, 3])
    pooled = layers.sequence_pool(emb, "sum")
    loss = layers.mean(layers.square(layers.elementwise_sub(layers.fc(pooled, 1), label)))
    graphc.optimizer.SGD(0.05).minimize(loss)
    return words, label, loss


def _seq_batches(num, n, rng):
    return [[(rng.integers(0, VOCAB, rng.integers(0, 6)).tolist(), [float(rng.random())])
             for _ in range(n)] for _ in range(num)]


def _run_by_hand(main, startup, batches, loss):
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    out = []
    for b in batches:
        seqs = [s[0] for s in b]
        feed = {"words": fluid.create_lod_tensor(seqs, [[len(q) for q in seqs]],
                                                 fluid.CPUPlace()),
                "label": np.asarray([s[1] for s in b], "float32")}
        out.append(float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
    return out


@pytest.mark.parametrize("source", ["sample_list", "batch_lod_tensor", "sample"])
def test_dataloader_lod_batches_equal_feeding_by_hand(source):
    rng = np.random.default_rng(4)
    batches = _seq_batches(4, 3, rng)
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        words, label, loss = _seq_model()
    want = _run_by_hand(main, startup, batches, loss)

    loader = DataLoader.from_generator(feed_list=[words, label], capacity=2)
    if source == "sample_list":
        loader.set_sample_list_generator(lambda: iter(batches))
    elif source == "sample":
        loader.set_sample_generator(lambda: (s for b in batches for s in b), batch_size=3)
    else:
        def gen():
            for b in batches:
                seqs = [s[0] for s in b]
                yield [lod_tensor(np.asarray(sum(seqs, []), "int64").reshape(-1, 1),
                                  [[len(q) for q in seqs]]), [s[1] for s in b]]
        loader.set_batch_generator(gen)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    got = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
           for feed in loader()]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_dataloader_refuses_dense_arrays_and_wrong_levels_for_lod_variables():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        words, label, _ = _seq_model()
    loader = DataLoader.from_generator(feed_list=[words, label])
    loader.set_batch_generator(lambda: iter([[np.zeros((3, 1), "int64"), np.zeros((3, 1))]]))
    with pytest.raises(DataLoaderError, match="batch 0: variable 'words' is a LoD variable"):
        list(loader())
    two = lod_tensor(np.zeros((2, 1), "int64"), [[1], [2]])
    loader.set_batch_generator(lambda: iter([[two, np.zeros((1, 1))]]))
    with pytest.raises(DataLoaderError, match="declared with lod_level=1 but got a "
                                              "LoDTensor with 2 level"):
        list(loader())


def _ctr_sample_batches(num, n, rng):
    return [[(s[0], *s[1], [s[2]]) for s in _samples(n, rng)] for _ in range(num)]


def _ctr_loader_run(batches, places, k=1):
    m = _ctr(0.01, "adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    prog = m.main
    if places:
        prog = graphc.CompiledProgram(m.main).with_data_parallel(
            loss_name=m.loss.name, places=graphc.cpu_places(places))
    if k > 1:
        prog = graphc.CompiledProgram(m.main) if not places else prog
        prog.exec_strategy.num_iteration_per_run = k
    loader = DataLoader.from_generator(feed_list=m.feeds, capacity=2)
    loader.set_sample_list_generator(lambda: iter(batches),
                                     places=prog if places or k > 1 else None)
    losses = []
    for feed in loader():
        out = np.asarray(exe.run(prog, feed=feed, fetch_list=[m.loss], scope=scope)[0])
        losses.extend(out.reshape(k, -1).mean(axis=1).tolist())
    return losses, _params(m, scope)


def test_dataloader_ctr_four_devices_equal_one():
    batches = _ctr_sample_batches(3, 8, np.random.default_rng(5))
    one, p1 = _ctr_loader_run(batches, 0)
    four, p4 = _ctr_loader_run(batches, 4)
    assert len(one) == 3
    np.testing.assert_allclose(four, one, rtol=1e-5)
    for name, value in p1.items():
        np.testing.assert_allclose(p4[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_dataloader_lod_with_num_iteration_per_run_equals_single_runs():
    batches = _ctr_sample_batches(4, 4, np.random.default_rng(6))
    one, p1 = _ctr_loader_run(batches, 0)
    two, p2 = _ctr_loader_run(batches, 0, k=2)
    np.testing.assert_allclose(two, one, rtol=1e-5)
    for name, value in p1.items():
        np.testing.assert_allclose(p2[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


# -- the executor: num_iteration_per_run, per-device feed lists --------------------------------

def _ragged_feed(rng, n, lens=None):
    lens = rng.integers(0, 7, n).tolist() if lens is None else lens
    return {"x": lod_tensor(rng.standard_normal((sum(lens), 2)).astype("float32"), [lens])}


def _pool_program():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 2], lod_level=1)
        h = layers.fc(x, 3, act="tanh")
        loss = layers.mean(layers.sequence_pool(h, "sum"))
        graphc.optimizer.SGD(0.1).minimize(loss)
    return main, startup, h, loss


def test_num_iteration_per_run_takes_lod_feeds_in_a_common_bucket():
    rng = np.random.default_rng(7)
    # very different token counts: 3 and 60 tokens share the 64 bucket
    feeds = [_ragged_feed(rng, 3, [1, 0, 2]), _ragged_feed(rng, 3, [20, 20, 20]),
             _ragged_feed(rng, 3), _ragged_feed(rng, 3)]
    main, startup, h, loss = _pool_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    single = [exe.run(main, feed=f, fetch_list=[loss, h], scope=scope, return_numpy=False)
              for f in feeds]
    w1 = np.asarray(scope["fc_0.w_0"])

    cp = graphc.CompiledProgram(main)
    cp.exec_strategy.num_iteration_per_run = 2
    scope2 = graphc.Scope()
    exe.run(startup, scope=scope2)
    got = []
    for i in (0, 2):
        losses, hs = exe.run(cp, feed=feeds[i:i + 2], fetch_list=[loss, h], scope=scope2,
                             return_numpy=False)
        assert np.asarray(losses).shape == (2, 1) and len(hs) == 2
        got.extend(zip(np.asarray(losses)[:, 0], hs))
    for (loss1, h1), (loss2, h2) in zip(single, got):
        np.testing.assert_allclose(loss2, np.asarray(loss1).reshape(()), rtol=1e-6)
        assert isinstance(h2, LoDTensor)
        assert h2.recursive_sequence_lengths() == h1.recursive_sequence_lengths()
        np.testing.assert_allclose(np.asarray(h2), np.asarray(h1), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(scope2["fc_0.w_0"]), w1, rtol=1e-6)
    # a dict whose LoD feed is a list of K LoDTensors is the same thing
    exe.run(cp, feed={"x": [feeds[0]["x"], feeds[1]["x"]]}, fetch_list=[loss], scope=scope2)
    with pytest.raises(FeedError, match="same number of sequences"):
        exe.run(cp, feed=[feeds[0], _ragged_feed(rng, 2)], fetch_list=[loss], scope=scope2)
    with pytest.raises(FeedError, match="give a list of 2 LoDTensors"):
        exe.run(cp, feed={"x": feeds[0]["x"]}, fetch_list=[loss], scope=scope2)


def test_per_device_feed_lists_take_lod_feeds():
    rng = np.random.default_rng(8)
    per_device = [_ragged_feed(rng, 2) for _ in range(4)]
    lens = sum((f["x"].recursive_sequence_lengths()[0] for f in per_device), [])
    whole = {"x": lod_tensor(np.concatenate([np.asarray(f["x"]) for f in per_device]),
                             [lens])}
    main, startup, h, loss = _pool_program()
    results = []
    for feed in (whole, per_device):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        cp = graphc.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(4))
        _, hv = exe.run(cp, feed=feed, fetch_list=[loss, h], scope=scope, return_numpy=False)
        results.append((hv, np.asarray(scope["fc_0.w_0"])))
    (h_whole, w_whole), (h_list, w_list) = results
    assert h_list.recursive_sequence_lengths() == [lens]
    np.testing.assert_allclose(np.asarray(h_list), np.asarray(h_whole), rtol=1e-6)
    np.testing.assert_allclose(w_list, w_whole, rtol=1e-6)
    uneven = [_ragged_feed(rng, 2) for _ in range(3)] + [_ragged_feed(rng, 1)]
    with pytest.raises(FeedError, match="same number of sequences"):
        exe.run(cp, feed=uneven, fetch_list=[loss], scope=scope)


def test_non_iterable_loader_feeds_lod_batches_one_per_device():
    """iterable=False: exe.run(program) takes one batch per device; LoD batches stay
    LoDTensors until the executor joins them by sequences and packs them."""
    batches = _ctr_sample_batches(4, 2, np.random.default_rng(9))
    m = _ctr(0.01, "adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    cp = graphc.CompiledProgram(m.main).with_data_parallel(
        loss_name=m.loss.name, places=graphc.cpu_places(2))
    loader = DataLoader.from_generator(feed_list=m.feeds, capacity=2, iterable=False)
    loader.set_sample_list_generator(lambda: iter(batches))
    loader.start()
    got = []
    with pytest.raises(graphc.io.EOFException):
        while True:
            got.append(float(np.mean(exe.run(cp, fetch_list=[m.loss], scope=scope)[0])))
    loader.reset()
    # the same as one device fed two batches' samples at a time
    joined = [batches[0] + batches[1], batches[2] + batches[3]]
    one, p1 = _ctr_loader_run(joined, 0)
    np.testing.assert_allclose(got, one, rtol=1e-5)
    for name, value in p1.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_a_loader_packed_for_one_device_feeds_a_data_parallel_program():
    """Batches packed for the default device are packed again for a 4-device step (the
    PackedLoD keeps its LoDTensor), so the result equals a loader built for the step."""
    batches = _ctr_sample_batches(2, 8, np.random.default_rng(10))
    want, p_want = _ctr_loader_run(batches, 4)
    m = _ctr(0.01, "adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    cp = graphc.CompiledProgram(m.main).with_data_parallel(
        loss_name=m.loss.name, places=graphc.cpu_places(4))
    loader = DataLoader.from_generator(feed_list=m.feeds, capacity=2)
    loader.set_sample_list_generator(lambda: iter(batches))  # places=None: one device
    got = [float(np.mean(exe.run(cp, feed=f, fetch_list=[m.loss], scope=scope)[0]))
           for f in loader()]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for name, value in p_want.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-6, err_msg=name)


def test_multi_process_runs_refuse_lod_feeds_with_the_reason():
    from types import SimpleNamespace

    from graphc.runtime.feed_plan import FeedPlan
    prep = SimpleNamespace(devices=["d0", "d1", "d2", "d3"], feed_parts=2,
                           feed_dtypes={"x": np.dtype("float32")})
    t = lod_tensor(np.zeros((3, 2), "float32"), [[1, 2]])
    with pytest.raises(FeedError, match="multi-process data-parallel runs do not take LoD "
                                        "feeds yet"):
        FeedPlan._lod_feeds(prep, {"x": t})
