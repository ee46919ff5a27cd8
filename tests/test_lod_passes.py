"""Passes on LoD programs (issue 16: "passes that cannot handle a LoD value decline with a
reason"): every pass either leaves a LoD program computing what it computed before (the
interpreter before == after, LoD fetches included) or reports why it left LoD values alone."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import resolve_fetch, run_graph, run_replicas
from graphc.ir.graph import lower
from graphc.passes import PassManager, make_pass
from graphc.testing.lod import as_feed

LENS = [2, 0, 3, 1]  # an empty sequence and one of length 1


def _program(depth=2, bn=False):
    """ids -> sparse embedding + a float LoD input -> ``depth`` fc relu layers on the tokens
    (optionally batch_norm + relu) -> sequence_pool -> fc softmax -> cross-entropy, SGD."""
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 1
    with graphc.program_guard(main, startup):
        w = graphc.data("w", [-1, 1], "int64", lod_level=1)
        x = graphc.data("x", [-1, 4], lod_level=1)
        label = graphc.data("label", [-1, 1], "int64")
        h = layers.elementwise_add(layers.embedding(w, [20, 4], is_sparse=True), x)
        for _ in range(depth):
            h = layers.fc(h, 4, act="relu")
        if bn:
            h = layers.batch_norm(layers.fc(h, 4), act="relu")
        pooled = layers.sequence_pool(h, "sum")
        pred = layers.fc(pooled, 2, act="softmax")
        loss = layers.mean(layers.cross_entropy(pred, label))
        graphc.optimizer.SGD(0.1).minimize(loss)
    rng = np.random.default_rng(0)
    t = sum(LENS)
    feeds = {"w": fluid.create_lod_tensor(rng.integers(0, 20, (t, 1)), [LENS], None),
             "x": fluid.create_lod_tensor(rng.standard_normal((t, 4)).astype("float32"),
                                          [LENS], None),
             "label": rng.integers(0, 2, (len(LENS), 1))}
    packed = {k: as_feed(main, k, v) for k, v in feeds.items()}
    return main, startup, [loss.name, h.name], packed


def _apply(passes, main, fetch, num_devices=1):
    before, after = lower(main), lower(main)
    keep = [resolve_fetch(after, n) for n in fetch]
    report = PassManager(passes, verify_each=True).run(after, keep=keep,
                                                       num_devices=num_devices)
    return before, after, {k: v for r in report.passes for k, v in r.stats.items()}


def _same(a, b, rtol=1e-6, atol=1e-6):
    """Fetches or states agree; LoD fetches in their lengths and tokens (padding included:
    it must stay zero)."""
    for x, y in zip(a, b):
        if hasattr(x, "lengths"):
            for lx, ly in zip(x.lengths, y.lengths):
                np.testing.assert_array_equal(lx, ly)
            x, y = x.data, y.data
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=rtol, atol=atol)


def _check(pass_names, depth=2, bn=False, rtol=1e-6, atol=1e-6, **options):
    main, startup, fetch, feeds = _program(depth, bn)
    state, _ = run_graph(lower(startup))
    passes = [make_pass(n, **options.get(n, {})) for n in pass_names]
    before, after, stats = _apply(passes, main, fetch)
    want_state, want = run_graph(before, state, feeds, fetch)
    got_state, got = run_graph(after, state, feeds, fetch)
    _same(got, want, rtol, atol)
    assert want_state.keys() <= got_state.keys()  # amp adds its loss-scaling state
    _same([got_state[k] for k in sorted(want_state)],
          [want_state[k] for k in sorted(want_state)], rtol, atol)
    return stats


def test_fuse_elewise_add_act_fuses_on_lod_values():
    stats = _check(["fuse-elewise-add-act"])
    assert stats["fused add->act"] == 2 and stats["fused add->act grad"] == 2


def test_fuse_bn_act_declines_a_lod_batch_norm():
    stats = _check(["fuse-bn-act"], bn=True)
    assert stats == {"skipped: batch_norm on a LoD value (fused_batch_norm_act takes dense "
                     "values)": 2}


def test_roll_repeated_layers_declines_lod_layers():
    stats = _check(["roll-repeated-layers"], depth=4)
    assert stats["skipped: layer reads or writes a LoD value (variable-length sequences)"] >= 1
    assert not any("LoD" in k for k in stats if not k.startswith("skipped"))


def test_amp_keeps_lod_results_close_and_names_what_it_leaves_in_float32():
    stats = _check(["amp"], rtol=5e-2, atol=5e-2)
    assert stats["bfloat16 ops"] > 0
    assert stats["skipped: sequence_pool: does not accept bfloat16 operands"] == 1


@pytest.mark.parametrize("names", [["sequential-execution"], ["fuse-all-optimizer-ops"],
                                   ["dce"], ["fuse-broadcast-ops"],
                                   ["backward-optimizer-op-deps"]])
def test_passes_that_do_not_touch_lod_values_keep_results(names):
    _check(names)


@pytest.mark.parametrize("name", ["enable-inplace", "memory-optimize"])
def test_memory_plans_size_lod_values_by_their_token_bucket(name):
    main, _, fetch, _ = _program()
    _check([name])  # the plan does not change what the graph computes
    _, after, stats = _apply([make_pass(name, lod_tokens=64)], main, fetch)
    lod_values = [v for v in after.values.values() if v.type.lod_level]
    assert stats["LoD values (sized at 64 tokens)"] == len(lod_values) > 0
    if name == "memory-optimize":
        assert stats["skipped: LoD value: not pooled (each feed's token bucket is chosen "
                     "per batch)"] > 0
    plan = after.memory_plan
    # the feeds w (int64 [T, 1]) and x (f32 [T, 4]) grow by 8 + 16 bytes a token
    at16, at64 = plan.predict(4, tokens=16), plan.predict(4, tokens=64)
    assert at64.arguments - at16.arguments == (64 - 16) * (8 + 16)
    # no LoD value shares a buffer with a value of another type or another LoD
    groups: dict[int, list] = {}
    for vname, b in plan.buffer_of.items():
        groups.setdefault(b, []).append(after.value(vname))
    for members in groups.values():
        if any(v.type.lod_level for v in members):
            assert len({v.type for v in members}) == 1, members


def test_sync_batch_norm_declines_a_lod_batch_norm():
    main, _, fetch, _ = _program(bn=True)
    _, _, stats = _apply([make_pass("sync-batch-norm")], main, fetch, num_devices=2)
    assert stats == {"skipped: batch_norm on a LoD value: statistics stay per replica": 1}


@pytest.mark.parametrize("names", [["data-parallel"], ["data-parallel", "fuse-all-reduce-ops"]])
def test_data_parallel_passes_on_lod_programs_equal_one_replica(names):
    main, startup, fetch, feeds = _program()
    state, _ = run_graph(lower(startup))
    passes = [make_pass(n, **({"nranks": 2} if n == "data-parallel" else {})) for n in names]
    before, after, stats = _apply(passes, main, fetch, num_devices=2)
    assert stats["all_reduce"] == 6 and stats["all_gather_rows"] == 1  # the sparse table
    want_state, (want_loss, want_h) = run_graph(before, state, feeds, fetch)
    got_state, (got_loss, got_h) = run_replicas(after, state, feeds, fetch, num_replicas=2)
    # each replica's mean over its 2 sequences; their mean is the global one
    np.testing.assert_allclose(np.mean(got_loss), want_loss.reshape(()), rtol=1e-5)
    from graphc.runtime.lod import unpack
    np.testing.assert_allclose(np.asarray(unpack(got_h, 2)), np.asarray(unpack(want_h)),
                               rtol=1e-5, atol=1e-6)
    for k in want_state:
        np.testing.assert_allclose(got_state[k], want_state[k], rtol=1e-5, atol=1e-6,
                                   err_msg=k)
