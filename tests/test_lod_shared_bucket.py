"""Compiles bounded per program, not per feed (issue 28): the LoD feeds of one step share one
token bucket (runtime/lod.py's ``pack_feeds``), so the CTR-DNN's 26 slots, each near a
bucket boundary, no longer combine into a new step signature for almost every batch."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import models
from graphc.dataio.loader_epoch import pack_lod_batches
from graphc.runtime import lod as rlod
from graphc.runtime.lod import PackedLoD, pack_feeds

SLOTS = 26


def _ctr_batch(rng, n, lo=1, hi=3):
    f = {"dense_input": rng.standard_normal((n, 13)).astype("float32"),
         "label": rng.integers(0, 2, (n, 1))}
    for s in range(SLOTS):
        lens = rng.integers(lo, hi + 1, n).tolist()
        f[f"C{s + 1}"] = fluid.create_lod_tensor(rng.integers(0, 1000, (sum(lens), 1)),
                                                 [lens], None)
    return f


@pytest.fixture(scope="module")
def ctr():
    m = models.ctr_dnn(SLOTS, 1000, 4, (8,), optimizer_fn=lambda: graphc.optimizer.SGD(0.01))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    return m, scope, exe


def test_fresh_ctr_batches_compile_at_most_three_steps(ctr):
    """20 fresh batches of 512 and 10 of 256 (26 slots of 1-3 ids: ~1,024 tokens a slot, on
    a boundary): one shared bucket per step, so one variant per batch size (<= 2 each if a
    batch's largest slot fell under the boundary); per-feed buckets compiled ~20."""
    m, scope, exe = ctr
    rng = np.random.default_rng(28)
    for n in [512] * 20 + [256] * 10:
        exe.run(m.main, feed=_ctr_batch(rng, n), fetch_list=[m.loss], scope=scope)
    (prep,) = exe._prepared[m.main][1].values()
    caps = sorted({dict(sig)["C1"][1] for _, sig in prep.steps})
    assert len(prep.steps) <= 3, (len(prep.steps), caps)
    assert caps == [(1024, 1), (2048, 1)]  # batch 256 -> 1024 rows, 512 -> 2048


def test_per_feed_buckets_combine_into_many_signatures(ctr):
    """What the shared bucket fixes, checked on the feed plan alone (no compiles)."""
    m, scope, exe = ctr
    exe.run(m.main, feed=_ctr_batch(np.random.default_rng(0), 512), fetch_list=[m.loss],
            scope=scope)
    (prep,) = exe._prepared[m.main][1].values()
    rng = np.random.default_rng(5)
    batches = [_ctr_batch(rng, 512) for _ in range(20)]
    shared = {prep.feed.check(m.main, b)[1] for b in batches}
    rlod.set_shared_bucket(False)
    try:
        own = {prep.feed.check(m.main, b)[1] for b in batches}
    finally:
        rlod.set_shared_bucket(True)
    assert len(shared) == 1 and len(own) >= 15, (len(shared), len(own))


def _type(level, shape=(-1, 1), dtype="int64"):
    return graphc.data(f"v{level}{len(shape)}", list(shape), dtype, lod_level=level).type


def test_pack_feeds_shares_token_and_sub_sequence_buckets():
    small = fluid.create_lod_tensor(np.arange(3).reshape(3, 1), [[1, 2]], None)
    big = fluid.create_lod_tensor(np.arange(40).reshape(40, 1), [[15, 25]], None)
    nested = fluid.create_lod_tensor(np.ones((5, 2), "float32"), [[1, 1], [2, 3]], None)
    want1, want2 = _type(1), _type(2, (-1, 2), "float32")
    out = pack_feeds({"s": (small, want1, np.int64), "b": (big, want1, np.int64),
                      "n": (nested, want2, np.float32)})
    assert out["s"].data.shape == out["b"].data.shape == (64, 1)
    assert out["n"].data.shape == (64, 2) and out["n"].lengths[1].shape == (16,)
    np.testing.assert_array_equal(out["s"].data[:3, 0], [0, 1, 2])
    assert not out["s"].data[3:].any()  # padding rows stay zero
    stacked = pack_feeds({"s": ([small, small], want1, np.int64),
                          "b": ([big, small], want1, np.int64)}, iterations=2)
    assert stacked["s"].data.shape == stacked["b"].data.shape == (2, 64, 1)
    rlod.set_shared_bucket(False)
    try:
        own = pack_feeds({"s": (small, want1, np.int64), "b": (big, want1, np.int64)})
    finally:
        rlod.set_shared_bucket(True)
    assert own["s"].data.shape == (16, 1) and own["b"].data.shape == (64, 1)
    with pytest.raises(rlod.LoDError, match="True or False"):
        rlod.set_shared_bucket(1)


def test_a_dataloader_packs_its_lod_variables_into_one_bucket():
    a = graphc.data("la", [-1, 1], "int64", lod_level=1)
    b = graphc.data("lb", [-1, 1], "int64", lod_level=1)
    small = fluid.create_lod_tensor(np.arange(3).reshape(3, 1), [[1, 2]], None)
    big = fluid.create_lod_tensor(np.arange(40).reshape(40, 1), [[15, 25]], None)
    pa, pb = pack_lod_batches([a, b], [(small, big)], 1)
    assert isinstance(pa, PackedLoD) and pa.array.data.shape == pb.array.data.shape == (64, 1)


def test_the_predictors_fast_path_packs_into_the_executors_shared_bucket(tmp_path):
    """Two LoD inputs of different sizes through zero-copy tensors: the fast path packs them
    into the bucket the executor's feed plan chose, so its one compiled step serves every
    call (no silent retrace for other shapes) and the outputs equal exe.run's."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        xs = [fluid.data(n, [-1, 1], "int64", lod_level=1) for n in ("a", "b")]
        pooled = [fluid.layers.sequence_pool(fluid.layers.embedding(
            x, size=[50, 4], param_attr=fluid.ParamAttr(name="T")), "sum") for x in xs]
        out = fluid.layers.fc(fluid.layers.concat(pooled, axis=1), 2)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["a", "b"], [out], exe)
    predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(str(tmp_path)))
    rng = np.random.default_rng(2)
    for lens in ([[3, 1, 2], [9, 7, 4]], [[1, 1, 1], [8, 8, 9]], [[2, 2, 2], [5, 9, 9]]):
        data = [rng.integers(0, 50, (sum(n), 1)).astype("int64") for n in lens]
        feed = {k: fluid.create_lod_tensor(d, [n], None) for k, d, n in zip("ab", data, lens)}
        with fluid.scope_guard(fluid.core.Scope()):
            program, _, fetch = fluid.io.load_inference_model(str(tmp_path), exe)
            want = exe.run(program, feed=feed, fetch_list=fetch)[0]
        for k, d, n in zip("ab", data, lens):
            h = predictor.get_input_tensor(k)
            h.copy_from_cpu(d)
            h.set_lod([[0, *np.cumsum(n).tolist()]])
        predictor.zero_copy_run()
        got = predictor.get_output_tensor(predictor.get_output_names()[0]).copy_to_cpu()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    (fast,) = predictor.core._fast.values()
    # one trace of the fast step for the three input sizes (a retrace per shape is what this
    # guards against), counted by the step itself: jit's _cache_size() sizes a C++ dispatch
    # cache shared by every jit in the process, and read 0 after enough earlier tests
    assert fast.step.traces == 1
