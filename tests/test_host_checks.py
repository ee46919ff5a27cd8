"""Data checks of fed numpy arrays made on the host (runtime/host_checks.py) and the steady
run path (RunPlan.steady): the same refusals as the step's own checks (culprit, value,
position, count; nothing committed), the same results, and every case they do not cover
(a jax array feed, a computed value, a changed scope or program) on the checked path."""

from __future__ import annotations

import gc

import jax.numpy as jnp
import numpy as np
import pytest
from test_executor_fast_path import classifier

import graphc
from graphc import layers, optimizer
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import GraphcError
from graphc.runtime.fetches import FetchError
from graphc.runtime.run_plan import RunPlan


def _feed(batch=5, seed=0, label=None):
    rng = np.random.default_rng(seed)
    out = {"x": rng.standard_normal((batch, 3)).astype(np.float32),
           "label": rng.integers(0, 4, (batch, 1)).astype(np.int64)}
    if label is not None:
        out["label"] = np.asarray(label, np.int64).reshape(batch, 1)
    return out


def _started(build=classifier):
    main, startup, loss = build()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    return main, loss, scope, exe


def _steps(exe, main, loss):
    return list(exe._prepare(main, None, (loss.name,)).steps.values())


def _snapshot(scope):
    return {n: np.array(scope[n]) for n in scope.keys()}


def _same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# the label of row 3 is 9, rows 1 and 3 are bad: the step's message, word for word
BAD = [0, -1, 2, 9, 1]
REFUSED = (r"^feed 'label' holds -1 at \[1, 0\] \(2 such values\): op softmax_with_cross_"
           r"entropy at .* expects labels in \[0, 4\) or ignore_index -100\. The step was "
           r"refused: nothing in the scope changed$")


@pytest.mark.parametrize("batch", [5, 700])  # a Python list, and one numpy reduction
def test_a_fed_label_is_checked_on_the_host_with_the_steps_message(batch):
    main, loss, scope, exe = _started()
    good = _feed(batch)
    exe.run(main, feed=good, fetch_list=[loss], scope=scope)
    (step,) = _steps(exe, main, loss)
    assert step.check_sites == [] and [n for n, _ in step.host_checks] == ["label"]
    before, count = _snapshot(scope), scope.run_count(main)
    labels = np.zeros(batch, np.int64)
    labels[:5] = BAD
    for _ in range(2):  # the checked path, then the steady one
        with pytest.raises(DataError, match=REFUSED):
            exe.run(main, feed=dict(good, label=labels.reshape(batch, 1)), fetch_list=[loss],
                    scope=scope)
        exe.run(main, feed=good, fetch_list=[loss], scope=scope)
        exe.run(main, feed=good, fetch_list=[loss], scope=scope)
    assert scope.run_count(main) == count + 4
    with pytest.raises(DataError):
        exe.run(main, feed=dict(good, label=labels.reshape(batch, 1)), fetch_list=[loss],
                scope=scope)
    assert scope.run_count(main) == count + 4
    assert before.keys() == _snapshot(scope).keys()


def test_a_jax_array_feed_keeps_the_check_in_the_step_with_the_same_message():
    main, loss, scope, exe = _started()
    exe.run(main, feed=_feed(), fetch_list=[loss], scope=scope)
    # (JAX without x64 makes the labels int32: the executor widens them in the step)
    on_device = {"x": jnp.asarray(_feed()["x"]), "label": jnp.asarray(np.int32(BAD))[:, None]}
    before = _snapshot(scope)
    with pytest.raises(DataError, match=REFUSED):
        exe.run(main, feed=on_device, fetch_list=[loss], scope=scope)
    _same(before, _snapshot(scope))
    steps = _steps(exe, main, loss)
    assert len(steps) == 2 and len(steps[1].check_sites) == 1 and not steps[1].host_checks


def test_host_checked_runs_equal_device_checked_runs_and_the_interpreter():
    """ignore_index labels pass both ways; losses and parameters agree across the numpy
    feeds (host checks, steady path), jax feeds (checks in the step) and the interpreter."""
    feeds = [_feed(seed=s) for s in range(4)] + [_feed(seed=7, label=[0, -100, 3, -100, 1])]
    results = []
    for to_device in (False, True):
        main, loss, scope, exe = _started()
        ref_state = _snapshot(scope)
        losses = []
        for f in feeds:
            given = {k: jnp.asarray(v) for k, v in f.items()} if to_device else f
            losses.append(exe.run(main, feed=given, fetch_list=[loss], scope=scope)[0].item())
        results.append((losses, _snapshot(scope)))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    for name, value in results[0][1].items():
        np.testing.assert_allclose(value, results[1][1][name], rtol=1e-6, err_msg=name)
    graph, state, losses = graphc.lower(main), ref_state, []
    for f in feeds:
        state, (value,) = run_graph(graph, state, f, [loss.name])
        losses.append(float(np.asarray(value).reshape(())))
    np.testing.assert_allclose(results[0][0], losses, rtol=1e-5)


def _lookup(lookup=True):
    def build():
        main, startup = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, startup), graphc.unique_name.guard():
            x = graphc.data("x", [-1, 3], "float32")
            hot = layers.one_hot(graphc.data("hot", [-1, 1], "int64"), 3)
            loss = layers.mean(layers.fc(x, 3) * hot)
            if lookup:
                emb = layers.embedding(graphc.data("ids", [-1, 1], "int64"), [6, 2])
                loss = loss + layers.mean(emb)
            optimizer.SGD(0.5).minimize(loss)
        return main, startup, loss
    return build


GOOD = {"x": np.ones((2, 3), np.float32), "ids": np.array([[0], [5]], np.int64),
        "hot": np.array([[0], [1]], np.int64)}


@pytest.mark.parametrize("lookup, change, message", [
    (False, {"hot": [[3], [0]]}, r"^feed 'hot' holds 3 at \[0, 0\]: op one_hot .* expects "
                                 r"ids in \[0, 3\)"),
    (True, {"hot": [[0], [-1]]}, r"^feed 'hot' holds -1 at \[1, 0\]: op one_hot"),
    (True, {"ids": [[1], [6]]}, r"^feed 'ids' holds 6 at \[1, 0\]: op lookup_table .*"
                                r"expects ids in \[0, 6\) \(the table's rows\)"),
])
def test_all_of_a_steps_checks_go_to_the_host_or_none_does(lookup, change, message):
    """one_hot's id check is a range check of its feed; an embedding lookup's stays in the
    step (the predictor makes it on the host from the step's check sites), and with it
    every other check of that step."""
    main, loss, scope, exe = _started(_lookup(lookup))
    good = {k: v for k, v in GOOD.items() if lookup or k != "ids"}
    exe.run(main, feed=good, fetch_list=[loss], scope=scope)
    (step,) = _steps(exe, main, loss)
    if lookup:
        assert not step.host_checks and len(step.check_sites) == 2
    else:
        assert step.check_sites == [] and [n for n, _ in step.host_checks] == ["hot"]
    before = _snapshot(scope)
    bad = dict(good, **{k: np.array(v, np.int64) for k, v in change.items()})
    with pytest.raises(DataError, match=message):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    _same(before, _snapshot(scope))


def test_the_steady_path_sees_a_changed_scope_and_a_changed_program():
    main, loss, scope, exe = _started()
    feed = _feed()
    for _ in range(3):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    (entry,) = exe._repeats[id(main)].values()
    assert isinstance(entry[1], RunPlan) and callable(entry[2])
    w = next(n for n in scope.keys() if n.endswith(".w_0"))
    scope[w] = np.zeros(np.asarray(scope[w]).shape, np.float64)  # another dtype: refused
    with pytest.raises(GraphcError, match=f"scope variable '{w}' holds float64"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    scope[w] = np.ones(np.asarray(scope[w]).shape, np.float32)  # a new value: taken
    other = graphc.Scope()
    for name, value in _snapshot(scope).items():
        other[name] = value
    ones = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
    # a second scope: its own arrays, checked, and the first scope's left alone
    kept = _snapshot(scope)
    other_loss = exe.run(main, feed=feed, fetch_list=[loss], scope=other)[0]
    _same(kept, _snapshot(scope))
    np.testing.assert_array_equal(other_loss, ones)  # the same state and feed
    with graphc.program_guard(main):  # the program changes: prepared again
        extra = layers.scale(loss, 2.0)
    assert entry[0] != main.version
    again, twice = exe.run(main, feed=feed, fetch_list=[loss, extra], scope=other)
    np.testing.assert_allclose(twice, 2 * again, rtol=1e-6)


def test_a_freed_program_leaves_the_fast_path():
    main, loss, scope, exe = _started()
    for _ in range(2):
        exe.run(main, feed=_feed(), fetch_list=[loss], scope=scope)
    key = id(main)
    assert key in exe._repeats
    with pytest.raises(FetchError, match="must be Variables or names"):  # not a cached key
        exe.run(main, feed=_feed(), fetch_list=[loss, 3], scope=scope)
    del main, loss
    gc.collect()
    assert key not in exe._repeats


def test_a_direct_call_of_a_host_checked_step_makes_its_checks():
    """A step taken from the executor (exe.compile, the predictor's steps) and called as it
    is checks its fed arrays itself, even on its first call."""
    main, loss, scope, exe = _started()
    step = exe.compile(main, feed=_feed(), fetch_list=[loss])
    assert step.host_feeds == {"x", "label"}
    state = [scope[n] for n in step.state_names]  # (Tensors: jax arrays as the step wants)
    arrays = [jnp.asarray(np.asarray(t)) for t in state]
    split = len(step.updated_names)
    bad = _feed(label=BAD)
    with pytest.raises(DataError, match=REFUSED):
        step(arrays[:split], arrays[split:], (bad["x"], bad["label"]), 0)
    assert not any(a.is_deleted() for a in arrays)  # nothing was dispatched
    assert step.check_sites == [] and step.host_checker is not None
