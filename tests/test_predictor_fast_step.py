"""The inference predictor's own step (runtime/predictor_step.py): host segment ids for LoD
feeds and host id checks give exe.run's numbers and exe.run's DataError, with one trace."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.backends.data_checks import DataError
from graphc.backends.lod import LoDArray, given_segments, token_segments
from graphc.runtime.predictor_step import InferenceStep, host_segments

pytestmark = pytest.mark.timeout(180)
VOCAB = 30


def _save(dirname, lod: bool, batch_norm: bool = False):
    """ids a, b (LoD or dense [N, 1]) -> one embedding each -> (pool) -> concat with a dense
    x -> fc; batch_norm puts test-mode state in the step."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        ids = [fluid.data(n, [-1, 1], "int64", lod_level=int(lod)) for n in "ab"]
        x = fluid.data("x", [-1, 3])
        embs = [fluid.layers.embedding(i, size=[VOCAB, 4], param_attr=f"t{k}")
                for k, i in enumerate(ids)]
        if lod:
            embs = [fluid.layers.sequence_pool(e, "sum") for e in embs]
        else:
            embs = [fluid.layers.reshape(e, [-1, 4]) for e in embs]
        h = fluid.layers.concat([*embs, x], axis=1)
        if batch_norm:
            h = fluid.layers.batch_norm(h, is_test=True)
        out = fluid.layers.fc(h, 2)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        fluid.io.save_inference_model(str(dirname), ["a", "b", "x"], [out], exe)
    return str(dirname)


def _want(dirname, feed):
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.core.Scope()):
        program, _, fetch = fluid.io.load_inference_model(dirname, exe)
        return exe.run(program, feed=feed, fetch_list=fetch)[0]


def _batch(rng, lengths, bad=None):
    """{a, b: (ids, lengths)}, x: ids of each sequence; ``bad`` = (feed, row, id)."""
    out = {}
    for k, n in zip("ab", lengths):
        ids = rng.integers(0, VOCAB, (sum(n), 1)).astype("int64")
        if bad and bad[0] == k:
            ids[bad[1], 0] = bad[2]
        out[k] = (ids, n)
    out["x"] = rng.standard_normal((len(lengths[0]), 3)).astype("float32")
    return out


def _zero_copy(predictor, batch, lod: bool):
    for k in "ab":
        h = predictor.get_input_tensor(k)
        h.copy_from_cpu(batch[k][0])
        if lod:
            h.set_lod([[0, *np.cumsum(batch[k][1]).tolist()]])
    predictor.get_input_tensor("x").copy_from_cpu(batch["x"])
    predictor.zero_copy_run()
    return predictor.get_output_tensor(predictor.get_output_names()[0]).copy_to_cpu()


def _exe_feed(batch, lod: bool):
    feed = {"x": batch["x"]}
    for k in "ab":
        ids, n = batch[k]
        feed[k] = fluid.create_lod_tensor(ids, [n], None) if lod else ids
    return feed


@pytest.mark.parametrize("batch_norm", [False, True])
def test_lod_fast_step_equals_exe_run_with_one_trace(tmp_path, batch_norm):
    d = _save(tmp_path, lod=True, batch_norm=batch_norm)
    predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(d))
    rng = np.random.default_rng(4)
    # sizes within one bucket (17-32 tokens), empty sequences, repeated offsets; then one
    # small batch (<= 16 tokens: the executor's step, see DEVICE_SEGMENTS_UP_TO)
    stream = [([9, 0, 13], [1, 4, 2]), ([1, 11, 8], [5, 0, 6]), ([1, 11, 8], [5, 0, 6]),
              ([0, 0, 7], [13, 13, 3]), ([2, 1, 3], [1, 4, 2]), ([9, 0, 13], [1, 4, 2])]
    for lengths in stream:
        batch = _batch(rng, lengths)
        np.testing.assert_allclose(_zero_copy(predictor, batch, True),
                                   _want(d, _exe_feed(batch, True)), rtol=1e-5, atol=1e-6)
    (fast,) = predictor.core._fast.values()
    assert isinstance(fast.step, InferenceStep) and fast.host_checks is not None
    # one trace per form whatever the offsets: per feed (offsets that change) and stacked
    # (the last offsets again: StackPlan.tokens, InferenceStep.call_stacked)
    assert not fast.step.check_data and fast.step.traces == 2
    assert fast.base.traces == 2  # its first run's bucket (32) and the small batch's (16)
    assert sorted(fast.segments) == ["a", "b"]
    # the last offsets again: the steady case packs both feeds into one buffer
    feed = {k: batch[k][0] for k in "ab"}
    lods = {k: [[0, *np.cumsum(batch[k][1]).tolist()]] for k in "ab"}
    packed = fast.stack.pack(feed, lods, fast.verdicts, fast.dtypes)
    assert packed["a"].data.base is packed["b"].data.base is not None
    np.testing.assert_array_equal(packed["b"].data[:len(batch["b"][0])], batch["b"][0])
    assert fast.stack.checked == {0, 1}


def _predictor(dirname):
    """One call site for every predictor: a loaded op's source line is its loader's."""
    return fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig(dirname))


def _first_error(call):
    with pytest.raises(DataError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("lod", [True, "small", False])
@pytest.mark.parametrize("bad_id", [VOCAB, -2])
def test_a_bad_id_is_exe_runs_data_error_from_the_fast_path(tmp_path, lod, bad_id):
    """The executor's check (the first run) and the host's (a remembered signature) refuse
    the same id with the same message: the feed, the value, its position, the op. "small":
    a batch of at most 16 tokens, which the executor's step (its own checks) runs."""
    d = _save(tmp_path / "m", lod=bool(lod))
    rng = np.random.default_rng(5)
    lengths = ([2, 1, 3], [1, 2, 2]) if lod == "small" else ([12, 1, 3], [1, 9, 12])
    good = _batch(rng, lengths)
    bad = _batch(rng, lengths, bad=("b", 3, bad_id))
    if not lod:  # dense ids: one per row
        lengths = ([1, 1, 1], [1, 1, 1])
        good, bad = _batch(rng, lengths), _batch(rng, lengths, bad=("b", 2, bad_id))
    first = _predictor(d)
    want = _first_error(lambda: _zero_copy(first, bad, lod))
    assert "feed 'b'" in want and str(bad_id) in want
    predictor = _predictor(d)
    expect = _want(d, _exe_feed(good, lod))
    for _ in range(2):
        np.testing.assert_allclose(_zero_copy(predictor, good, lod), expect, rtol=1e-5,
                                   atol=1e-6)
    (fast,) = predictor.core._fast.values()
    assert isinstance(fast.step, InferenceStep) and fast.host_checks is not None
    assert fast.step.traces == (lod != "small")
    assert _first_error(lambda: _zero_copy(predictor, bad, lod)) == want
    # refused before running: the next good batch runs as before
    np.testing.assert_allclose(_zero_copy(predictor, good, lod), expect, rtol=1e-5,
                               atol=1e-6)


def test_host_segments_equal_the_devices_and_are_used_only_for_their_lengths():
    rng = np.random.default_rng(6)
    for n in (1, 3, 8):
        lengths = rng.integers(0, 4, n).astype(np.int32)
        cap = max(16, int(lengths.sum()))
        want = np.asarray(token_segments(jnp.asarray(lengths), cap))
        np.testing.assert_array_equal(host_segments(lengths, cap), want)

    lengths = jnp.asarray([2, 1], jnp.int32)
    other = jnp.asarray([2, 1], jnp.int32)
    marker = jnp.full((8,), 7, jnp.int32)
    with given_segments({id(lengths): (lengths, marker)}):
        assert token_segments(lengths, 8) is marker
        x = LoDArray(jnp.zeros((8, 1)), (lengths,))
        assert x.segment_ids() is marker
        np.testing.assert_array_equal(np.asarray(token_segments(other, 8)),
                                      [0, 0, 1, 2, 2, 2, 2, 2])
        # another capacity: derived on the device
        np.testing.assert_array_equal(np.asarray(token_segments(lengths, 4)), [0, 0, 1, 2])


def test_stack_plan_checks_each_feed_against_its_own_table():
    """Tables of different sizes: an id the larger one holds is refused for the smaller."""
    from graphc.runtime.predictor_step import HostIdChecks, StackPlan

    host = HostIdChecks(((0, 10, -1), (1, 50, -1)))  # feed a: 10 rows, feed b: 50
    plan = StackPlan(("a", "b"), {"a": None, "b": None}, host, shared=True)
    assert plan.limit is None and plan.checked == {0, 1}
    lengths = np.asarray([20], np.int32)
    verdicts = {k: ([0, 20], (20, 1), (20, 1), 32, lengths) for k in "ab"}
    dtypes = {k: np.dtype("int64") for k in "ab"}
    lods = {k: [[0, 20]] for k in "ab"}
    ok = {"a": np.full((20, 1), 9), "b": np.full((20, 1), 30)}
    assert plan.pack(ok, lods, verdicts, dtypes)["b"].data.shape == (32, 1)
    for k, v in (("a", 30), ("b", 50), ("a", -1)):
        bad = dict(ok)
        bad[k] = np.full((20, 1), v)
        assert plan.pack(bad, lods, verdicts, dtypes) is None


def test_clones_with_lod_inputs_from_several_threads(tmp_path):
    """Clones share the remembered step and its host segment ids: each thread's stream of
    batches (own lengths, one bucket) still gives exe.run's numbers."""
    import threading

    d = _save(tmp_path, lod=True)
    predictor = _predictor(d)
    rng = np.random.default_rng(7)
    streams = [[_batch(rng, lengths) for _ in range(2)] for lengths in
               (([9, 0, 13], [1, 4, 2]), ([5, 5, 10], [17, 1, 1]), ([1, 1, 20], [6, 6, 6]))]
    wants = [[_want(d, _exe_feed(b, True)) for b in s] for s in streams]
    _zero_copy(predictor, streams[0][0], True)
    errors = []

    def work(k):
        mine = predictor.clone()
        try:
            for i in range(30):
                got = _zero_copy(mine, streams[k][i % 2], True)
                np.testing.assert_allclose(got, wants[k][i % 2], rtol=1e-5, atol=1e-6)
        except Exception as exc:  # reported below, with the thread's stream
            errors.append((k, exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
