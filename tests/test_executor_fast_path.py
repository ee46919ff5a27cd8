"""Executor.run's per-step fast path (issue 18): a feed dict whose key was accepted before
skips recomputing the feed checks, yet every check still holds; and the explicit hooks
(feed providers, the collective wait) that replaced monkeypatches of Executor.run."""

from __future__ import annotations

import graphc.io  # noqa: F401  (registers its feed provider)
import jax.numpy as jnp
import numpy as np
import pytest

import graphc
import graphc.distributed
from graphc import layers, optimizer
from graphc.backends.data_checks import DataError
from graphc.ir.errors import GraphcError
from graphc.runtime.executor import Executor, FeedError
from graphc.runtime.host_services import HostServices, process_services


def classifier():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = graphc.data("x", [-1, 3], "float32")
        label = graphc.data("label", [-1, 1], "int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(x, 4), label))
        optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def good_feed(batch=5, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 3)).astype(np.float32),
            "label": rng.integers(0, 4, (batch, 1)).astype(np.int64)}


def trained_classifier(runs: int):
    """(main, loss, scope, executor) of a classifier run ``runs`` times on good feeds."""
    main, startup, loss = classifier()
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    for seed in range(runs):
        exe.run(main, feed=good_feed(seed=seed), fetch_list=[loss], scope=scope)
    return main, loss, scope, exe


@pytest.fixture
def trained():
    return trained_classifier(2)  # the second run takes the cached plan


def snapshot(scope):
    return {n: np.array(scope[n]) for n in scope.keys()}


def reference_losses(feeds):
    """The same runs through fresh executors (every run checked in full, never cached)."""
    main, startup, loss = classifier()
    scope = graphc.Scope()
    Executor().run(startup, scope=scope)
    out = []
    for feed in feeds:
        exe = Executor()  # a new executor has no plans
        out.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].item())
    return out


def test_cached_runs_equal_fully_checked_runs():
    feeds = [good_feed(seed=s) for s in range(4)] + [good_feed(batch=7, seed=9)]
    main, startup, loss = classifier()
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    ours = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0].item() for f in feeds]
    np.testing.assert_allclose(ours, reference_losses(feeds), rtol=1e-6)
    prep = exe._prepared[main][1][(loss.name,)]  # prepared per fetch list
    assert len(prep.feed.plans) == 2  # batch 5 and batch 7: one plan per accepted key


# bad feeds of good_feed()'s shape: each must be refused by name, scope untouched (shared
# with test_executor_steady_key, which checks them on a run's first try)
BAD_FEEDS = [
    (lambda f: f.update(x=f["x"].astype(np.float64)), "has dtype float64"),
    (lambda f: f.update(x=f["x"][:, :2]), r"has shape \[5, 2\]"),
    (lambda f: f.update(x=f["x"][:0], label=f["label"][:0]), "an empty batch"),
    (lambda f: f.pop("label"), "missing feed 'label'"),
    (lambda f: f.update(y=f["x"]), "feed 'y' is not a variable"),
    (lambda f: f.update(label=[[0.5]] * 5), "would change"),
]


@pytest.mark.parametrize("change, message", BAD_FEEDS)
def test_feed_checks_hold_after_a_plan_is_cached(trained, change, message):
    main, loss, scope, exe = trained
    before = snapshot(scope)
    feed = good_feed()
    change(feed)
    with pytest.raises(FeedError, match=message):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)


def test_data_checks_hold_on_the_cached_plan(trained):
    main, loss, scope, exe = trained
    before = snapshot(scope)
    feed = good_feed()
    feed["label"][2, 0] = 9  # same names, types, dtypes and shapes as the accepted feeds
    with pytest.raises(DataError, match="feed 'label' holds 9 at \\[2, 0\\]"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)


def test_lists_and_narrowed_jax_arrays_are_converted_every_time(trained):
    main, loss, scope, exe = trained
    feed = good_feed()
    want = reference_losses([feed])[0]
    for value in (feed["label"].tolist(), jnp.asarray(feed["label"].astype(np.int32))):
        main2, startup2, loss2 = classifier()
        scope2, exe2 = graphc.Scope(), Executor()
        exe2.run(startup2, scope=scope2)
        for _ in range(2):  # the second run must convert again (no plan for these values)
            scope3 = graphc.Scope()
            exe2.run(startup2, scope=scope3)
            got = exe2.run(main2, feed={"x": feed["x"], "label": value}, fetch_list=[loss2],
                           scope=scope3)[0]
            np.testing.assert_allclose(got.item(), want, rtol=1e-6)


def test_state_checked_per_scope(trained):
    main, loss, scope, exe = trained
    other = graphc.Scope()
    for name in scope.keys():
        other[name] = np.array(scope[name])
    a = exe.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)[0]
    b = exe.run(main, feed=good_feed(), fetch_list=[loss], scope=other)[0]
    np.testing.assert_allclose(a, b, rtol=1e-6)  # same state, same batch
    other["fc_0.w_0"] = np.zeros((3, 5), np.float32)
    exe.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)  # the other scope
    with pytest.raises(GraphcError, match="scope variable 'fc_0.w_0' holds float32\\[3, 5\\]"):
        exe.run(main, feed=good_feed(), fetch_list=[loss], scope=other)


def test_run_is_not_wrapped_by_other_modules():
    # graphc.io and graphc.distributed use the host services, not wrappers of run()
    assert Executor.run.__module__ == "graphc.runtime.executor"
    assert Executor.run.__qualname__ == "Executor.run"  # (x64 is entered inside it)
    assert not hasattr(Executor.run, "__wrapped__")
    assert graphc.io._feed_from_bound_loaders in process_services().feed_providers
    assert Executor().services is process_services()


def test_feed_provider_gives_the_feed_of_a_run_without_one(trained):
    main, loss, scope, exe = trained
    feed = good_feed(seed=3)
    want = reference_losses([good_feed(seed=0), good_feed(seed=1), feed])[2]
    asked = []

    def provider(program):
        asked.append(program)
        return feed if program is main else None

    # an Executor with services of its own: the provider is not added process-wide
    services = process_services().replace()
    services.add_feed_provider(provider)
    mine = Executor(services=services)
    got = mine.run(main, fetch_list=[loss], scope=scope)[0]
    assert asked == [main]
    np.testing.assert_allclose(got.item(), want, rtol=1e-6)
    assert provider not in process_services().feed_providers


def test_collective_wait_wraps_every_run(trained):
    main, loss, scope, exe = trained
    entered = []

    class Wait:
        def __init__(self, label):
            self.label = label

        def __enter__(self):
            entered.append(self.label)

        def __exit__(self, *exc):
            entered.append("exit")

    waited = Executor(services=HostServices(collective_wait=Wait))
    waited.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)
    with pytest.raises(FeedError):
        waited.run(main, feed={}, fetch_list=[loss], scope=scope)
    assert entered == ["Executor.run", "exit", "Executor.run", "exit"]
    exe.run(main, feed=good_feed(), fetch_list=[loss], scope=scope)  # the process's: none
    assert len(entered) == 4


def test_distributed_sets_the_watchdog_on_the_process_services():
    from graphc.distributed import watchdog
    services = process_services()
    try:
        graphc.distributed._mark_multiprocess_steps()
        assert services.collective_wait is watchdog.waiting
        # the steps an Executor builds carry its services (a data-parallel step waits there)
        assert Executor().services.collective_wait is watchdog.waiting
    finally:
        services.collective_wait = None
