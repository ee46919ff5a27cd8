"""The interpreter's compiled rules (backends/compiled_rules.py) compute exactly what its
eager rules compute: random numbers, data checks, host callbacks and regions included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import graphc
from graphc import layers
from graphc.backends.compiled_rules import RuleCache
from graphc.backends.interpreter import run_graph
from graphc.ir.graph import lower
from graphc.testing import feeds_for, random_programs


def _training_program():
    x = graphc.data("x", [4, 6], dtype="float32")
    lab = graphc.data("lab", [4, 1], dtype="int64")
    h = layers.dropout(layers.fc(x, 5, act="relu"), 0.5)
    loss = layers.mean(layers.cross_entropy(layers.softmax(h), lab))
    u = layers.uniform_random([3, 3], seed=0)
    graphc.optimizer.SGD(0.1).minimize(loss)
    feeds = {"x": np.random.default_rng(0).random((4, 6), dtype=np.float32),
             "lab": np.array([[0], [1], [2], [4]])}
    return (lower(graphc.default_startup_program()), lower(graphc.default_main_program()),
            feeds, [loss.name, h.name, u.name])


def _close(x, y, name=""):
    """XLA may fuse a compiled rule's float32 arithmetic (an ulp); random draws, integer
    results and shapes must match exactly."""
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape, name
    tol = 1e-6 if x.dtype in (np.float32, np.float16) else 1e-12
    np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), rtol=tol, atol=tol,
                               err_msg=name)


def _same(a, b):
    (state_a, fetched_a), (state_b, fetched_b) = a, b
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        _close(state_a[name], state_b[name], name)
    for x, y in zip(fetched_a, fetched_b, strict=True):
        _close(x, y)


def test_compiled_equals_eager_and_compiles_once():
    """A training step (dropout and uniform_random draw per step) gives the same state and
    fetches both ways at several steps; the second run of a step only hits the cache."""
    startup, main, feeds, fetch = _training_program()
    cache = RuleCache()
    state, _ = run_graph(startup, rules=None)
    _same((state, []), (run_graph(startup, rules=cache)[0], []))
    for step in (0, 3):
        _same(run_graph(main, state, feeds, fetch, step, rules=None),
              run_graph(main, state, feeds, fetch, step, rules=cache))
    compiles = cache.stats["compiles"]
    assert compiles >= len(main.ops()) - 2 and cache.stats["hits"] >= len(main.ops()) - 2
    run_graph(main, state, feeds, fetch, 5, rules=cache)
    assert cache.stats["compiles"] == compiles  # a new step is a new argument, not a compile


def test_data_checks_raise_through_compiled_rules():
    startup, main, feeds, fetch = _training_program()
    state, _ = run_graph(startup)
    bad = dict(feeds, lab=np.array([[0], [1], [9], [4]]))
    messages = []
    for rules in (None, RuleCache(), RuleCache()):
        with pytest.raises(graphc.DataError, match=r"holds 9 at \[2, 0\]") as info:
            run_graph(main, state, bad, fetch[:1], rules=rules)
        messages.append(str(info.value))
    assert len(set(messages)) == 1


def test_bounded_and_threads_share_one_cache():
    startup, main, feeds, fetch = _training_program()
    state, _ = run_graph(startup, rules=None)
    cache = RuleCache(maxsize=3)
    _same(run_graph(main, state, feeds, fetch, rules=None),
          run_graph(main, state, feeds, fetch, num_threads=3, rules=cache))
    assert len(cache) == 3 and cache.stats["compiles"] > 3


def test_host_callbacks_run_every_time(capsys):
    """Print runs eagerly (its output each run, in order), as before."""
    x = graphc.data("x", [2], dtype="float32")
    y = layers.Print(layers.scale(x, 2.0), message="seen")
    main = lower(graphc.default_main_program())
    cache = RuleCache()
    for _ in range(2):
        run_graph(main, {}, {"x": np.ones(2, np.float32)}, [y.name], rules=cache)
    assert capsys.readouterr().out.count("seen") == 2
    assert cache.stats["eager"] >= 2


@settings(max_examples=3)
@given(random_programs(max_ops=4, regions=True))
def test_random_programs_compiled_equals_eager(gen):
    state, _ = run_graph(gen.startup_graph(), rules=None)
    feeds = feeds_for(gen, 3, 0)
    graph = gen.graph()
    _same(run_graph(graph, state, feeds, gen.fetch, rules=None),
          run_graph(graph, state, feeds, gen.fetch, rules=RuleCache()))
