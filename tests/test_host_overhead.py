"""Per-step host work (issue 28, "Host work per step"): the vectorised packing of many LoD
slots equals the per-feed packing it replaces and hands every case it does not cover back to
the checked path; the run plan keeps docs/errors.md's guarantees (a bad feed names the feed,
a refused step leaves the scope untouched and names the op) on cached and LoD runs alike."""

from __future__ import annotations

import numpy as np
import pytest
from test_executor_fast_path import classifier

import graphc
import graphc.fluid as fluid
from graphc import models, optimizer
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.types import TensorType
from graphc.runtime import lod as rlod
from graphc.runtime.feeds import FeedError
from graphc.runtime.lod import LoDTensor, pack_feeds
from graphc.runtime.lod_pack import pack_level1

INT64 = np.dtype("int64")


def _slot(rng, n, lo=0, hi=3, tail=(1,), dtype="int64"):
    lens = rng.integers(lo, hi + 1, n)
    data = rng.integers(0, 50, (int(lens.sum()), *tail)).astype(dtype)
    return LoDTensor(data, [lens.tolist()])


def _want(tail=(1,), dtype="int64", level=1):
    return TensorType((-1, *tail), dtype, lod_level=level)


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].data.dtype == b[name].data.dtype, name
        np.testing.assert_array_equal(a[name].data, b[name].data, err_msg=name)
        assert len(a[name].lengths) == len(b[name].lengths) == 1
        assert a[name].lengths[0].dtype == b[name].lengths[0].dtype, name
        np.testing.assert_array_equal(a[name].lengths[0], b[name].lengths[0], err_msg=name)


@pytest.mark.parametrize("seed", range(4))
def test_vectorised_packing_equals_per_feed_packing(seed):
    """Random CTR-like batches, empty sequences included, slots of two dtypes and token
    shapes in one step: the same buffers, lengths and one shared bucket."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    items = {f"C{i}": (_slot(rng, n), _want(), INT64) for i in range(int(rng.integers(1, 9)))}
    items["emb"] = (_slot(rng, n, 1, 2, (3,), "float32"), _want((3,), "float32"),
                    np.dtype("float32"))
    fast = pack_level1(items)
    assert fast is not None
    _same(fast, pack_feeds(items))
    caps = {a.data.shape[0] for a in fast.values()}
    assert len(caps) == 1 and caps.pop() == rlod.bucket(max(len(np.asarray(v))
                                                            for v, _, _ in items.values()))


def test_cases_it_does_not_cover_go_back_to_the_checked_path():
    rng = np.random.default_rng(0)
    ok = (_slot(rng, 4), _want(), INT64)
    cases = {
        "two levels": (LoDTensor(np.zeros((3, 1), "int64"), [[1, 1], [2, 1]]),
                       _want(level=2), INT64),
        "a dtype to convert": (_slot(rng, 4, dtype="int32"), _want(), INT64),
        "other sequence counts": (_slot(rng, 5), _want(), INT64),
        "lengths that miss the data": (LoDTensor(np.zeros((3, 1), "int64"), [[1, 1, 1, 1]]),
                                       _want(), INT64),
        "a token shape to reshape": (LoDTensor(np.zeros((4,), "int64"), [[1, 1, 1, 1]]),
                                     _want(), INT64),
        "not a LoDTensor": (np.zeros((4, 1), "int64"), _want(), INT64),
    }
    for why, item in cases.items():
        assert pack_level1({"a": ok, "b": item}) is None, why
    rlod.set_shared_bucket(False)
    try:
        assert pack_level1({"a": ok}) is None  # per-feed buckets: the per-feed packer
    finally:
        rlod.set_shared_bucket(True)


@pytest.fixture(scope="module")
def ctr():
    m = models.ctr_dnn(6, 50, 4, (8,), optimizer_fn=lambda: optimizer.SGD(0.1))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    return m, scope, exe


def _ctr_batch(rng, n=16, bad_id=None):
    f = {"dense_input": rng.standard_normal((n, 13)).astype("float32"),
         "label": rng.integers(0, 2, (n, 1)).astype("int64")}
    for s in range(6):
        lens = rng.integers(1, 4, n).tolist()
        ids = rng.integers(0, 50, (sum(lens), 1))
        if bad_id is not None and s == 3:
            ids[2, 0] = bad_id
        f[f"C{s + 1}"] = fluid.create_lod_tensor(ids, [lens], None)
    return f


def test_ctr_runs_equal_the_interpreter_and_refusals_keep_the_scope(ctr):
    """A jitted step fed through the vectorised packer equals the reference interpreter (its
    feeds packed by the per-feed packer): the loss and every updated parameter; a batch with
    an id outside the table is refused naming the slot's feed, the scope as it was; lengths
    that do not describe a slot's ids name that feed."""
    m, scope, exe = ctr
    rng = np.random.default_rng(1)
    exe.run(m.main, feed=_ctr_batch(rng), fetch_list=[m.loss], scope=scope)  # compiles
    batch = _ctr_batch(rng)
    state = {name: np.array(scope[name]) for name in scope.keys()}
    block = m.main.global_block()
    lod = {n: (v, block.var(n).type, np.dtype(block.var(n).dtype)) for n, v in batch.items()
           if isinstance(v, LoDTensor)}
    feeds = {**{n: v for n, v in batch.items() if n not in lod}, **pack_feeds(lod)}
    new_state, (ref,) = run_graph(graphc.lower(m.main), state, feeds, [m.loss.name])
    (loss,) = exe.run(m.main, feed=batch, fetch_list=[m.loss], scope=scope)
    np.testing.assert_allclose(loss, ref, rtol=1e-5, atol=1e-6)
    for p in block.all_parameters():
        np.testing.assert_allclose(np.asarray(scope[p.name]), new_state[p.name], rtol=1e-5,
                                   atol=1e-6, err_msg=p.name)
    before = {n: np.array(scope[n]) for n in scope.keys()}
    refused = r"feed 'C4' holds 77 at \[2\]: op fused_embedding_seq_pool"
    with pytest.raises(DataError, match=refused):
        exe.run(m.main, feed=_ctr_batch(rng, bad_id=77), fetch_list=[m.loss], scope=scope)
    bad = _ctr_batch(rng)
    bad["C2"] = LoDTensor(np.zeros((3, 1), "int64"), [[1] * 16])
    with pytest.raises(FeedError, match="feed 'C2'"):
        exe.run(m.main, feed=bad, fetch_list=[m.loss], scope=scope)
    for name, value in before.items():
        np.testing.assert_array_equal(np.asarray(scope[name]), value, err_msg=name)


def test_cached_plan_refuses_bad_labels_and_a_later_good_run_commits():
    """The run plan reads the data checks before committing: a refused cached run leaves
    the scope (and the run counter) as it was, and the next good run goes on from there,
    equal to a run that never met the bad batch."""
    main, startup, loss = classifier()
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((5, 3)).astype("float32"),
              "label": rng.integers(0, 4, (5, 1)).astype("int64")} for _ in range(3)]
    bad = {"x": feeds[0]["x"], "label": np.full((5, 1), 9, "int64")}
    runs = []
    for with_bad in (True, False):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        out = [exe.run(main, feed=feeds[0], fetch_list=[loss], scope=scope)[0]]
        if with_bad:
            count = scope.run_count(main)
            with pytest.raises(DataError, match="feed 'label' holds 9 .*softmax_with_cross"):
                exe.run(main, feed=bad, fetch_list=[loss], scope=scope)  # the cached plan
            assert scope.run_count(main) == count
        out += [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds[1:]]
        runs.append(out)
    np.testing.assert_array_equal(np.asarray(runs[0]), np.asarray(runs[1]))
