"""Executor.run's first try (issue 28, host work per step): the steady function of a
program's last repeated run matches the run's key itself (version, binding, fetch entries,
feed names, types, dtypes and shapes); every other run takes the checked path, unchanged."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from test_executor_fast_path import BAD_FEEDS, classifier, good_feed, reference_losses, snapshot

import graphc
from graphc import layers, optimizer
from graphc.backends.data_checks import DataError
from graphc.runtime.compiled_program import CompiledProgram
from graphc.runtime.executor import Executor, FeedError
from graphc.runtime.run_as import DATA_PARALLEL


@pytest.fixture
def steady():
    """A classifier run three times with one key: its steady function is run's first try."""
    main, startup, loss = classifier()
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    for seed in range(3):
        exe.run(main, feed=good_feed(seed=seed), fetch_list=[loss], scope=scope)
    assert callable(exe._fast[id(main)])
    return main, startup, loss, scope, exe


def _replayed(startup, main, runs):
    """``runs`` [(feed, fetch names)] through an executor per run on one scope: each run
    checked in full, none cached."""
    scope = graphc.Scope()
    Executor().run(startup, scope=scope)
    return [Executor().run(main, feed=f, fetch_list=list(names), scope=scope)
            for f, names in runs]


@pytest.mark.parametrize("change, message", BAD_FEEDS)
def test_feed_checks_hold_on_the_first_try(steady, change, message):
    main, _, loss, scope, exe = steady
    before = snapshot(scope)
    feed = good_feed()
    change(feed)
    with pytest.raises(FeedError, match=message):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)


def test_data_checks_and_ignore_index_on_the_first_try(steady):
    main, startup, loss, scope, exe = steady
    before = snapshot(scope)
    bad = good_feed(seed=3)
    bad["label"][4, 0] = 4
    with pytest.raises(DataError, match=r"feed 'label' holds 4 at \[4, 0\]"):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)
    assert graphc.Scope.run_count(scope, main) == 3  # the refused run did not count
    # -100 is softmax_with_cross_entropy's ignore_index: below the range, yet allowed
    ignored = good_feed(seed=4)
    ignored["label"][1, 0] = -100
    got = exe.run(main, feed=ignored, fetch_list=[loss], scope=scope)[0]
    seeds = [good_feed(seed=s) for s in range(3)]
    want = reference_losses(seeds + [ignored])[3]
    np.testing.assert_allclose(got.item(), want, rtol=1e-6)


def test_fetch_entries_names_and_other_lists(steady):
    """A name for the Variable, a tuple, another fetch list in turns, a reordered feed dict:
    each the same results as runs checked in full."""
    main, startup, loss, scope, exe = steady
    w = "fc_0.w_0"
    runs, got = [], []
    # (the third [loss, w] makes its steady function the first try: then [w, loss] differs)
    for i, fetch in enumerate([[loss.name], (loss,), [loss, w], [loss, w], [loss, w],
                               [w, loss.name], [loss]]):
        feed = good_feed(seed=10 + i)
        if i == 6:
            feed = {"label": feed["label"], "x": feed["x"]}
        got.append(exe.run(main, feed=feed, fetch_list=fetch, scope=scope))
        runs.append((feed, [f if isinstance(f, str) else f.name for f in fetch]))
    want = _replayed(startup, main, [(good_feed(seed=s), [loss.name]) for s in range(3)] + runs)
    for ours, theirs in zip(got, want[3:]):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    assert graphc.Scope.run_count(scope, main) == 10


def test_a_bound_program_and_a_changed_program_leave_the_first_try(steady):
    main, _, loss, scope, exe = steady
    compiled = CompiledProgram(main)
    DATA_PARALLEL.bind(main, compiled)
    try:
        exe.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)
        assert compiled in exe._prepared  # ran as its CompiledProgram
    finally:
        DATA_PARALLEL.unbind(main)
    with graphc.program_guard(main):
        twice = layers.scale(loss, 2.0)
    one, two = exe.run(main, feed=good_feed(), fetch_list=[loss, twice], scope=scope)
    np.testing.assert_allclose(two, 2 * one, rtol=1e-6)


def test_run_counter_keys_dropout_on_the_first_try():
    """The steady run advances the scope's run counter as a checked run does: dropout's
    masks equal those of runs each checked in full, the counter equals the runs."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = graphc.data("x", [-1, 3], "float32")
        h = layers.dropout(layers.fc(x, 8), 0.5)
        loss = layers.mean(layers.fc(h, 1))
        optimizer.SGD(0.1).minimize(loss)
    feeds = [{"x": good_feed(seed=s)["x"]} for s in range(6)]
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    got = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
    assert id(main) in exe._fast
    want = _replayed(startup, main, [(f, [loss.name]) for f in feeds])
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate([w[0] for w in want]))
    assert graphc.Scope.run_count(scope, main) == 6


def test_default_scope_and_a_freed_program():
    main, startup, loss = classifier()
    exe = Executor()
    with graphc.scope_guard(graphc.Scope()):
        exe.run(startup)
        for s in range(4):
            exe.run(main, feed=good_feed(seed=s), fetch_list=[loss])
        assert graphc.Scope.run_count(graphc.global_scope(), main) == 4
    key = id(main)
    assert key in exe._fast
    del main, loss, startup
    gc.collect()
    assert key not in exe._fast and key not in exe._repeats


def test_x64_is_graphcs_for_the_call_alone(steady):
    """The steady run sets x64 around its call only: the caller's JAX keeps 32-bit types
    after runs and after a refused run, and the int64 label reaches the step as int64."""
    import jax
    import jax.numpy as jnp
    main, _, loss, scope, exe = steady
    for s in range(3):
        exe.run(main, feed=good_feed(seed=s), fetch_list=[loss], scope=scope)
        assert jnp.asarray(np.int64(1)).dtype == np.int32 and not jax.config.jax_enable_x64
    bad = good_feed()
    bad["label"][0, 0] = 7
    with pytest.raises(DataError):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    assert jnp.asarray(np.int64(1)).dtype == np.int32
    with jax.enable_x64(True):  # a caller in x64 stays there
        exe.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)
        assert jnp.asarray(np.int64(1)).dtype == np.int64
    (step,) = exe._prepare(main, None, (loss.name,)).steps.values()
    assert step.traces == 1  # (every run took the one int64 trace)


def test_jax_array_feeds_keep_the_device_checks_on_the_first_try():
    """jax array feeds keep their checks in the step: the first try reads the step's check
    summary before committing, so a bad label is refused there with the scope's values as
    they were (the donated buffers replaced by equal ones) and the counter unchanged."""
    import jax.numpy as jnp
    main, startup, loss = classifier()
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)

    with graphc.backends.precision.graphc_x64():
        feeds = [{"x": jnp.asarray(good_feed(seed=s)["x"]),
                  "label": jnp.asarray(good_feed(seed=s)["label"])} for s in range(4)]
        bad = {"x": feeds[0]["x"], "label": jnp.asarray(np.full((5, 1), 5, np.int64))}
    got = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds[:3]]
    assert id(main) in exe._fast
    (step,) = exe._prepare(main, None, (loss.name,)).steps.values()
    assert step.check_sites and not step.host_checks  # the check stayed in the step
    before = snapshot(scope)
    with pytest.raises(DataError, match="label"):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)
    assert graphc.Scope.run_count(scope, main) == 3
    got.append(exe.run(main, feed=feeds[3], fetch_list=[loss], scope=scope)[0])
    want = reference_losses([{k: np.asarray(v) for k, v in f.items()} for f in feeds])
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-6)


def test_a_forward_only_program_on_the_first_try():
    """No state the step updates (an inference program): the first try passes no updated
    arrays, reads the parameters it only reads, and equals a fresh executor's runs."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = graphc.data("x", [-1, 3], "float32")
        y = layers.fc(x, 2, act="tanh")
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    feeds = [{"x": good_feed(seed=s)["x"]} for s in range(4)]
    got = [exe.run(main, feed=f, fetch_list=[y], scope=scope)[0] for f in feeds]
    assert id(main) in exe._fast
    (step,) = exe._prepare(main, None, (y.name,)).steps.values()
    assert step.updated_names == [] and step.readonly_names
    for f, ours in zip(feeds, got):
        np.testing.assert_array_equal(ours, Executor().run(main, feed=f, fetch_list=[y],
                                                           scope=scope)[0])
