"""Tiered compilation (runtime/tiered.py): the switch to the optimised executable, results
across it, the opt-out, a failing optimised compile, and no thread left after close()."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import graphc
from graphc import layers
from graphc.runtime.tiered import TieredCall


def _program():
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 3
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        x = graphc.data("x", [-1, 6], "float32")
        y = graphc.data("y", [-1, 1], "int64")
        h = layers.fc(x, 16, act="tanh")
        h = layers.dropout(h, 0.25)
        logits = layers.fc(h, 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        graphc.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, start, loss


def _feeds(n):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((8, 6)).astype("float32"),
             "y": rng.integers(0, 3, (8, 1)).astype("int64")} for _ in range(n)]


@pytest.fixture(scope="module")
def plain():
    """(losses, final parameters) of 6 steps without tiers."""
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = False
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    losses = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in _feeds(6)]
    params = {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}
    return np.array(losses), params


def _same_bits(a, b):
    assert a[0].tobytes() == b[0].tobytes()
    assert a[1].keys() == b[1].keys()
    for name in a[1]:
        assert a[1][name].tobytes() == b[1][name].tobytes(), name


def test_switch_happens_and_results_are_bit_identical(plain):
    # the quick tier at the optimised options: every step must equal the plain step's bits,
    # whichever executable ran it (the state and step counter carry across the switch)
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = True
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    feeds = _feeds(6)
    call = exe.compile(main, feed=feeds[0], fetch_list=[loss])._jitted
    call.quick_options = {}
    tiers, losses = [], []
    for i, feed in enumerate(feeds):
        losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
        tiers.append(call.tier)
        if i == 2:
            assert call.wait(120)  # the optimised executable is ready: the next run uses it
    assert tiers[3:] == ["full"] * 3 and call.switched_at is not None
    params = {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}
    exe.close()
    _same_bits((np.array(losses), params), plain)


def test_opt_out_is_the_default_and_env_turns_it_on(monkeypatch):
    monkeypatch.delenv("GRAPHC_TIERED", raising=False)
    assert graphc.Executor().tiered is False
    monkeypatch.setenv("GRAPHC_TIERED", "1")
    assert graphc.Executor().tiered is True
    monkeypatch.setenv("GRAPHC_TIERED", "0")
    exe = graphc.Executor()
    assert exe.tiered is False
    main, start, loss = _program()
    exe.run(start, scope=graphc.Scope())
    step = exe.compile(main, feed=_feeds(1)[0], fetch_list=[loss])
    assert not isinstance(step._jitted, TieredCall)


def test_failing_optimised_compile_falls_back_to_quick(plain):
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = True
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    feeds = _feeds(4)
    call = exe.compile(main, feed=feeds[0], fetch_list=[loss])._jitted
    call.quick_options = {}
    call.full_options = {"xla_no_such_option_graphc": 1}  # XLA refuses it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
        assert call.wait(120)
    assert call.tier == "quick" and call.switched_at is None
    assert any("optimised compile" in str(w.message) for w in caught)
    assert np.array(losses).tobytes() == plain[0][:4].tobytes()
    exe.close()


def test_no_thread_left_after_close():
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = True
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    exe.run(main, feed=_feeds(1)[0], fetch_list=[loss], scope=scope)
    exe.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("graphc-tiered")]


def test_quick_tier_steps_are_close_and_the_switch_comes(plain):
    # the default quick executable (LLVM -O0) differs from the optimised one in last bits
    # only (docs/tiered_compilation.md); after the switch the optimised one runs
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = True
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    feeds = _feeds(6)
    call = exe.compile(main, feed=feeds[0], fetch_list=[loss])._jitted
    losses, tiers = [], []
    for i, feed in enumerate(feeds):
        losses.append(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
        tiers.append(call.tier)
        if i == 1:
            assert call.wait(120)
    assert tiers[2:] == ["full"] * 4
    np.testing.assert_allclose(np.array(losses), plain[0], rtol=1e-5)
    exe.close()


def test_failing_quick_compile_waits_for_the_optimised_one(plain):
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = True
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    feeds = _feeds(6)
    call = exe.compile(main, feed=feeds[0], fetch_list=[loss])._jitted
    call.quick_options = {"xla_no_such_option_graphc": 1}
    losses = [exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
    assert call.tier == "full" and call.switched_at == 1
    exe.close()
    assert np.array(losses).tobytes() == plain[0].tobytes()


def test_tiered_n_runs_at_most_n_quick_steps(plain):
    main, start, loss = _program()
    exe = graphc.Executor()
    exe.tiered = 1  # one quick step, then wait for the optimised executable
    scope = graphc.Scope()
    exe.run(start, scope=scope)
    feeds = _feeds(3)
    call = exe.compile(main, feed=feeds[0], fetch_list=[loss])._jitted
    call.quick_options = {}
    tiers = []
    for feed in feeds:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        tiers.append(call.tier)
    assert tiers[1:] == ["full", "full"] and call.quick_steps == 1
    exe.close()
