"""fuse-embedding-seq-pool (issue 28): golden IR of the CTR-DNN's slots fused (forward, their
gradients and the sum joining them), its declines, and exactness: the interpreter before ==
after on random CTR batches (empty sequences, padding_idx, dense and sparse gradients, slots
in buckets of different sizes), the jitted step fused == unfused == the interpreter, and a
bad id named by its slot's feed."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_harness import golden_text

import graphc
import graphc.fluid as fluid
from graphc import layers, models
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.ir.graph import lower
from graphc.ir.text import parse
from graphc.passes import PassManager, make_pass
from graphc.runtime.executor import DataError
from graphc.runtime.lod import pack_feeds
from graphc.testing import check_golden
from graphc.testing.lod import as_feed

GOLDEN = Path(__file__).parent / "golden" / "fuse-embedding-seq-pool"
PASS = "fuse-embedding-seq-pool"


def _ctr(slots=3, vocab=40, hidden=(6,), is_sparse=True, train=True):
    return models.ctr_dnn(slots, vocab, 4, hidden, is_sparse=is_sparse,
                          optimizer_fn=(lambda: graphc.optimizer.SGD(0.1)) if train else None)


def _apply(main, fetch, **options):
    before, after = lower(main), lower(main)
    keep = [resolve_fetch(after, n) for n in fetch]
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(after, keep=keep)
    return before, after, {k: v for r in report.passes for k, v in r.stats.items()}


def _lod(rng, n, vocab, lo=0, hi=4):
    lens = rng.integers(lo, hi + 1, n).tolist()
    lens[0] = 1
    return fluid.create_lod_tensor(rng.integers(0, vocab, (sum(lens), 1)), [lens], None)


def _batch(rng, slots, n=6, vocab=40):
    f = {"dense_input": rng.standard_normal((n, 13)).astype("float32"),
         "label": rng.integers(0, 2, (n, 1))}
    f.update({f"C{s + 1}": _lod(rng, n, vocab) for s in range(slots)})
    return f


def _same(a, b, rtol=1e-5, atol=1e-6):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=rtol, atol=atol)


def _types(graph) -> list[str]:
    return [op.type for op in graph.ops()]


# -- golden IR ------------------------------------------------------------------------------

def test_golden_ctr_training_fuses_slots_gradients_and_their_sum():
    m = _ctr(slots=3, hidden=(4,))
    before, after, stats = _apply(m.main, [m.loss.name])
    check_golden(GOLDEN / "ctr_three_slots_sgd.ir", golden_text(PASS, before, after, stats))
    assert stats == {"fused groups": 1, "fused slots": 3, "fused grad groups": 1}
    types = _types(after)
    assert types.count("fused_embedding_seq_pool") == 1
    assert types.count("fused_embedding_seq_pool_grad") == 1
    assert not {"lookup_table", "sequence_pool", "lookup_table_grad", "sequence_pool_grad",
                "sum"} & set(types)
    assert parse(after.to_text()).structurally_equal(after)


def _mixed_program():
    """Slots a-b pooled by SUM (fused), c by AVERAGE, d's embedding fetched, e alone in its
    table, f's table also read by an unpooled lookup (its gradient joins the sum)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        ids = {k: graphc.data(k, [-1, 1], "int64", lod_level=1) for k in "abcdef"}
        dense_ids = graphc.data("g", [-1, 1], "int64")

        def emb(k, table, width=3):
            return layers.embedding(ids[k], [30, width], is_sparse=True,
                                    param_attr=graphc.ParamAttr(name=table))
        pooled = [layers.sequence_pool(emb(k, "T"), "sum") for k in "ab"]
        pooled.append(layers.sequence_pool(emb("c", "T"), "average"))
        fetched = emb("d", "T")
        pooled.append(layers.sequence_pool(fetched, "sum"))
        pooled.append(layers.sequence_pool(emb("e", "U", 2), "sum"))
        pooled.append(layers.sequence_pool(emb("f", "T"), "sum"))
        plain = layers.embedding(dense_ids, [30, 3], is_sparse=True,
                                 param_attr=graphc.ParamAttr(name="T"))
        h = layers.concat([*pooled, plain], axis=1)
        loss = layers.mean(layers.fc(h, 1))
        graphc.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss, fetched


def test_golden_declines_and_a_sum_with_other_addends():
    main, startup, loss, fetched = _mixed_program()
    before, after, stats = _apply(main, [loss.name, fetched.name])
    check_golden(GOLDEN / "mixed_declines.ir", golden_text(PASS, before, after, stats))
    assert stats == {"skipped: pooltype AVERAGE (only SUM fuses)": 1,
                     "skipped: embedding output is fetched": 1,
                     "skipped: only 1 pooled lookup(s) of U (min_slots 2)": 1,
                     "fused groups": 1, "fused slots": 3, "fused grad groups": 1}
    fused = [op for op in after.ops() if op.type == "fused_embedding_seq_pool"]
    assert [v.name for v in fused[0].inputs["Ids"]] == ["a", "b", "f"]
    # the table's other row gradients (c, d, the dense lookup) still join in one sum
    (total,) = [op for op in after.ops() if op.type == "sum"]
    assert len(total.inputs["X"]) == 4
    rng = np.random.default_rng(3)
    state, _ = run_graph(lower(startup))
    feeds = {k: as_feed(main, k, _lod(rng, 5, 30)) for k in "abcdef"}
    feeds["g"] = rng.integers(0, 30, (5, 1))
    want_state, want = run_graph(before, state, feeds, [loss.name])
    got_state, got = run_graph(after, state, feeds, [loss.name])
    _same(got, want)
    _same([got_state[k] for k in sorted(want_state)], [want_state[k] for k in sorted(want_state)])


def test_min_slots_one_fuses_a_lone_slot_and_inference_fuses_forward_only():
    m = _ctr(slots=1, hidden=(4,))
    _, after, stats = _apply(m.main, [m.loss.name], min_slots=1)
    assert stats == {"fused groups": 1, "fused slots": 1, "fused grad groups": 1}
    assert "fused_embedding_seq_pool_grad" in _types(after)
    m = _ctr(slots=2, train=False)
    _, after, stats = _apply(m.main, [m.loss.name])
    assert stats == {"fused groups": 1, "fused slots": 2}


# -- exactness --------------------------------------------------------------------------------

@pytest.mark.parametrize("is_sparse", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_interpreter_fused_equals_unfused_on_random_ctr_batches(is_sparse, shared):
    """Slots in one shared bucket, or each in its own (the fused op pads them to the
    largest); empty sequences in most batches; dense and row-sparse table gradients."""
    m = _ctr(slots=4, is_sparse=is_sparse)
    before, after, stats = _apply(m.main, [m.loss.name])
    assert stats["fused slots"] == 4
    state, _ = run_graph(lower(m.startup))
    rng = np.random.default_rng(7)
    for _ in range(3):
        batch = _batch(rng, 4)
        lod = {k: v for k, v in batch.items() if k.startswith("C")}
        if shared:
            feeds = pack_feeds({k: (v, m.main.global_block().var(k).type, np.int64)
                                for k, v in lod.items()})
        else:
            feeds = {k: as_feed(m.main, k, v) for k, v in lod.items()}
        feeds.update({k: np.asarray(v) for k, v in batch.items() if k not in lod})
        want_state, want = run_graph(before, state, feeds, [m.loss.name])
        got_state, got = run_graph(after, state, feeds, [m.loss.name])
        _same(got, want)
        _same([got_state[k] for k in sorted(want_state)],
              [want_state[k] for k in sorted(want_state)])
        state = got_state


def test_padding_idx_rows_pool_to_zero_and_get_no_gradient():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        a = graphc.data("a", [-1, 1], "int64", lod_level=1)
        b = graphc.data("b", [-1, 1], "int64", lod_level=1)
        pooled = [layers.sequence_pool(layers.embedding(
            x, [10, 3], is_sparse=True, padding_idx=2,
            param_attr=graphc.ParamAttr(name="T")), "sum") for x in (a, b)]
        loss = layers.mean(layers.fc(layers.concat(pooled, axis=1), 1))
        graphc.optimizer.SGD(0.5).minimize(loss)
    before, after, stats = _apply(main, [loss.name, *(p.name for p in pooled)])
    assert stats["fused slots"] == 2
    state, _ = run_graph(lower(startup))
    feeds = {"a": as_feed(main, "a", fluid.create_lod_tensor([[2, 2], [1, 2, 3], [5]],
                                                             [[2, 3, 1]], None)),
             "b": as_feed(main, "b", fluid.create_lod_tensor([[2], [], [4, 2]], [[1, 0, 2]],
                                                             None))}
    fetch = [loss.name, *(p.name for p in pooled)]
    want_state, want = run_graph(before, state, feeds, fetch)
    got_state, got = run_graph(after, state, feeds, fetch)
    _same(got, want)
    np.testing.assert_array_equal(got[1][0], 0)  # a sequence of padding ids only
    _same([got_state["T"]], [want_state["T"]])
    np.testing.assert_array_equal(got_state["T"][2], state["T"][2])  # padding row untouched


def test_unequal_sequence_counts_pool_each_slot_on_its_own_rows():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        xs = [graphc.data(k, [-1, 1], "int64", lod_level=1) for k in "ab"]
        pooled = [layers.sequence_pool(layers.embedding(
            x, [10, 3], param_attr=graphc.ParamAttr(name="T")), "sum") for x in xs]
    fetch = [p.name for p in pooled]
    before, after, stats = _apply(main, fetch)
    assert stats["fused slots"] == 2
    state, _ = run_graph(lower(startup))
    feeds = {"a": as_feed(main, "a", fluid.create_lod_tensor([[1, 2, 3]], [[3]], None)),
             "b": as_feed(main, "b", fluid.create_lod_tensor([[4], [], [5, 6]], [[1, 0, 2]],
                                                             None))}
    _, want = run_graph(before, state, feeds, fetch)
    _, got = run_graph(after, state, feeds, fetch)
    assert [g.shape for g in got] == [(1, 3), (3, 3)]
    _same(got, want)


def _train(batches, fused: bool, slots: int):
    m = _ctr(slots=slots, vocab=40, hidden=(8,))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    bs = graphc.BuildStrategy()
    bs.fuse_embedding_seq_pool = fused
    prog = graphc.CompiledProgram(m.main, build_strategy=bs)
    start = {v.name: np.asarray(scope[v.name]) for v in m.main.global_block().vars.values()
             if v.persistable}
    losses = [float(np.asarray(exe.run(prog, feed=b, fetch_list=[m.loss], scope=scope)[0])
                    .reshape(-1)[0]) for b in batches]
    params = {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}
    return m, prog, losses, start, params


def test_jitted_fused_equals_unfused_and_the_interpreter():
    batches = [_batch(np.random.default_rng(s), 5, n=8) for s in range(3)]
    _, _, want, _, want_params = _train(batches, False, 5)
    m, prog, got, start, params = _train(batches, True, 5)
    _same(got, want)
    _same([params[k] for k in sorted(want_params)], [want_params[k] for k in sorted(want_params)])
    # the first step on the interpreter, over the fused graph the executor compiled
    graph = prog._build_graph((m.loss.name,))
    assert "fused_embedding_seq_pool_grad" in _types(graph)
    feeds = {k: as_feed(m.main, k, v) for k, v in batches[0].items()}
    _, (loss,) = run_graph(graph, start, feeds, [m.loss.name])
    _same([np.asarray(loss).reshape(-1)[0]], [want[0]])


def test_a_bad_id_is_named_by_its_slots_feed():
    m = _ctr(slots=3, vocab=40, hidden=(4,))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    batch = _batch(np.random.default_rng(0), 3, n=4)
    batch["C3"] = fluid.create_lod_tensor([[1], [40], [2], [3]], [[1, 1, 1, 1]], None)
    before = np.asarray(scope["SparseFeatFactors"]).copy()
    with pytest.raises(DataError, match=r"feed 'C3' holds 40 at \[1\].*fused_embedding_seq"):
        exe.run(m.main, feed=batch, fetch_list=[m.loss], scope=scope)
    np.testing.assert_array_equal(np.asarray(scope["SparseFeatFactors"]), before)


# -- a property: any sequence lengths, any ids, forward and row gradients alike ------------------
@functools.cache  # built once per padding_idx: the examples reuse it
def _property_graphs(padding_idx):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        xs = [graphc.data(k, [-1, 1], "int64", lod_level=1) for k in "abc"]
        pooled = [layers.sequence_pool(layers.embedding(
            x, [7, 2], is_sparse=True, padding_idx=padding_idx,
            param_attr=graphc.ParamAttr(name="T")), "sum") for x in xs]
        w = graphc.data("w", [6], "float32")
        loss = layers.reduce_sum(layers.elementwise_mul(
            layers.square(layers.concat(pooled, axis=1)), w))
        graphc.optimizer.SGD(0.5).minimize(loss)
    fetch = [loss.name, *(p.name for p in pooled)]
    before, after, stats = _apply(main, fetch)
    assert stats["fused slots"] == 3
    return main, startup, before, after, fetch


@settings(max_examples=8, deadline=None)
@given(st.data(), st.sampled_from([-1, 3]))
def test_property_fused_equals_unfused_for_any_lengths_and_ids(data, padding_idx):
    """Three slots of one batch: any lengths (empty sequences, whole-empty slots), any ids
    (padding_idx among them); pooled values, loss and the updated table agree."""
    main, startup, before, after, fetch = _property_graphs(padding_idx)
    n = data.draw(st.integers(1, 4))
    feeds = {}
    for k in "abc":
        lens = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        ids = data.draw(st.lists(st.integers(0, 6), min_size=sum(lens), max_size=sum(lens)))
        feeds[k] = as_feed(main, k, fluid.create_lod_tensor(
            np.asarray(ids, np.int64).reshape(-1, 1), [lens], None))
    feeds["w"] = np.linspace(-1, 1, 6).astype("float32")
    state = {"T": np.arange(14, dtype="float32").reshape(7, 2) / 7,
             "learning_rate_0": np.asarray([0.5], "float32")}
    want_state, want = run_graph(before, state, feeds, fetch)
    got_state, got = run_graph(after, state, feeds, fetch)
    _same(got, want)
    _same([got_state["T"]], [want_state["T"]])
