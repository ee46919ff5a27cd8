"""A step's one-level LoD feeds handed to XLA as one token buffer and one lengths array
(issue 28, host work per step: lod_pack.PackedFeeds, CompiledStep.call_lod_rows): the same
losses, parameters and refusals as each feed handed on its own, in any feed order."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import models, optimizer
from graphc.backends.data_checks import DataError
from graphc.runtime import lod as rlod
from graphc.runtime.lod import LoDTensor
from graphc.runtime.lod_pack import PackedFeeds, pack_level1

SLOTS, VOCAB = 4, 40


def _batch(rng, n=12, bad_id=None):
    f = {"dense_input": rng.standard_normal((n, 13)).astype("float32"),
         "label": rng.integers(0, 2, (n, 1)).astype("int64")}
    for s in range(SLOTS):
        lens = rng.integers(0, 4, n).tolist()  # empty sequences too
        lens[0] = max(lens[0], 1)
        ids = rng.integers(0, VOCAB, (sum(lens), 1))
        if bad_id is not None and s == 2:
            ids[0, 0] = bad_id
        f[f"C{s + 1}"] = fluid.create_lod_tensor(ids, [lens], None)
    return f


def _trained(batches, shared: bool, fused: bool):
    """Losses and parameters after ``batches``, and the one compiled step."""
    m = models.ctr_dnn(SLOTS, VOCAB, 4, (8,), optimizer_fn=lambda: optimizer.SGD(0.1))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    bs = graphc.BuildStrategy()
    bs.fuse_embedding_seq_pool = fused
    prog = graphc.CompiledProgram(m.main, build_strategy=bs)
    rlod.set_shared_bucket(shared)
    try:
        losses = [exe.run(prog, feed=b, fetch_list=[m.loss], scope=scope)[0] for b in batches]
    finally:
        rlod.set_shared_bucket(True)
    params = {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}
    steps = [s for p in exe._prepared[prog][1].values() for s in p.steps.values()]
    return np.concatenate(losses), params, steps, (m, scope, exe, prog)


@pytest.fixture(scope="module")
def runs():
    """The same batches trained with the feeds as rows of one buffer, and with a bucket
    per feed (each feed on its own); the second batch in another feed order."""
    rng = np.random.default_rng(0)
    batches = [_batch(rng) for _ in range(3)]
    batches[1] = dict(reversed(list(batches[1].items())))
    return _trained(batches, True, True), _trained(batches, False, True)


def test_rows_equal_feeds_on_their_own(runs):
    (rows, rows_params, rows_steps, _), (own, own_params, own_steps, _) = runs
    np.testing.assert_allclose(rows, own, rtol=1e-5, atol=1e-6)
    for name in own_params:
        np.testing.assert_allclose(rows_params[name], own_params[name], rtol=1e-5,
                                   atol=1e-6, err_msg=name)
    # the rows path compiled, and the per-feed form of its step was never traced
    assert all(s._rows_jit is not None for s in rows_steps)
    assert all(s._rows_jit is None for s in own_steps)
    assert sum(s.traces for s in rows_steps) == len(rows_steps) + 1  # (2 layouts, 1 step)


def test_a_bad_id_on_the_rows_path_names_its_feed_and_keeps_the_scope(runs):
    m, scope, exe, prog = runs[0][3]
    before = {n: np.array(scope[n]) for n in scope.keys()}
    rng = np.random.default_rng(1)
    with pytest.raises(DataError, match=r"feed 'C3' holds 41 at \[0\]"):
        exe.run(prog, feed=_batch(rng, bad_id=41), fetch_list=[m.loss], scope=scope)
    for name, value in before.items():
        np.testing.assert_array_equal(np.asarray(scope[name]), value, err_msg=name)


def test_packed_feeds_only_for_one_buffer():
    rng = np.random.default_rng(2)
    want = graphc.ir.types.TensorType((-1, 1), "int64", lod_level=1)
    ints = {f"C{i}": (LoDTensor(rng.integers(0, 9, (3, 1)), [[1, 2]]), want,
                      np.dtype("int64")) for i in range(3)}
    packed = pack_level1(ints)
    assert type(packed) is PackedFeeds
    names, tokens, lengths = packed.stack
    assert names == ("C0", "C1", "C2") and tokens.shape[0] == 3 and lengths.shape == (3, 2)
    for i, name in enumerate(names):  # each feed's LoDArray is its row
        np.testing.assert_array_equal(packed[name].data, tokens[i])
        np.testing.assert_array_equal(packed[name].lengths[0], lengths[i])
    floats = graphc.ir.types.TensorType((-1, 2), "float32", lod_level=1)
    mixed = dict(ints, emb=(LoDTensor(np.ones((3, 2), "float32"), [[2, 1]]), floats,
                            np.dtype("float32")))
    assert type(pack_level1(mixed)) is dict  # two buffers: each feed on its own
