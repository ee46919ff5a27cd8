"""ExecutionStrategy: K iterations per run equal K single runs (state, fetches, dropout),
with clear feed errors; num_iteration_per_drop_scope is validated and keeps nothing; the
interpreter's thread pool runs ready ops concurrently, in dependency order, with the
sequential results."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings

import graphc as fluid
from graphc import layers, models, optimizer
from graphc.backends import interpreter
from graphc.backends.interpreter import InterpreterError, run_graph
from graphc.ir.graph import lower
from graphc.ir.opdef import CONTROL_SLOT
from graphc.passes import PassManager, make_pass
from graphc.testing import feeds_for, random_programs

K = 3
SCALE = 1 if os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci" else 4


def build(opt_name: str):
    """A small MLP with batch_norm, a dropout branch in the loss, and ``opt_name``."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 6])
        label = fluid.data("label", [-1, 1], "int64")
        h = layers.batch_norm(layers.fc(x, 5), act="relu")
        h = layers.dropout(h, 0.4)
        logits = layers.fc(h, 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        opt = {"sgd": optimizer.SGD(0.1), "momentum": optimizer.Momentum(0.1, 0.9)}[opt_name]
        opt.minimize(loss)
    return main, startup, loss


def batches(n: int, batch: int = 4, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((batch, 6)).astype("float32"),
             "label": rng.integers(0, 3, (batch, 1)).astype("int64")} for _ in range(n)]


def fresh_scope(exe, startup):
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return scope


def snapshot(scope):
    return {k: scope[k].copy() for k in scope.keys()}


def k_program(main, k=K, **build_strategy):
    return fluid.CompiledProgram(
        main, build_strategy=fluid.BuildStrategy(**build_strategy) if build_strategy else None,
        exec_strategy=fluid.ExecutionStrategy(num_iteration_per_run=k))


# -- num_iteration_per_run ------------------------------------------------------------------

@pytest.mark.parametrize("opt_name", ["sgd", "momentum"])
@pytest.mark.parametrize("form", ["list", "stacked"])
def test_k_iterations_equal_k_single_runs(opt_name, form):
    main, startup, loss = build(opt_name)
    exe = fluid.Executor()
    feeds = batches(2 * K)
    fetch = [loss, "fc_0.w_0", "dropout_0.tmp_0"]  # a loss, updated state, a dropout mask
    single = fresh_scope(exe, startup)
    want = [exe.run(main, feed=f, fetch_list=fetch, scope=single) for f in feeds]
    scope = fresh_scope(exe, startup)
    cp = k_program(main)
    got = []
    for i in (0, K):  # two calls: the second continues state and the run counter
        chunk = feeds[i:i + K]
        feed = chunk if form == "list" else {n: np.stack([f[n] for f in chunk])
                                             for n in chunk[0]}
        got.append(exe.run(cp, feed=feed, fetch_list=fetch, scope=scope))
    for j, name in enumerate(["loss", "fc_0.w_0", "dropout mask"]):
        stacked = np.concatenate([g[j] for g in got])
        expected = np.stack([w[j] for w in want])
        assert stacked.shape == expected.shape == (2 * K, *want[0][j].shape), name
        np.testing.assert_allclose(stacked, expected, rtol=1e-5, atol=1e-6, err_msg=name)
    masks = np.stack([w[2] for w in want]) != 0
    assert not all(np.array_equal(masks[0], m) for m in masks[1:])  # masks vary per step
    assert scope._run_counters[main] == single._run_counters[main] == 2 * K
    for name in single.keys():
        np.testing.assert_allclose(scope[name], single[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_k_iterations_through_the_build_strategy_pipeline_and_jax_arrays():
    import jax.numpy as jnp
    main, startup, loss = build("momentum")
    exe = fluid.Executor()
    feeds = batches(K)
    single = fresh_scope(exe, startup)
    want = [exe.run(main, feed=f, fetch_list=[loss], scope=single)[0] for f in feeds]
    scope = fresh_scope(exe, startup)
    cp = k_program(main, memory_optimize=True, enable_sequential_execution=True)
    stacked = {n: jnp.asarray(np.stack([f[n] for f in feeds])) for n in feeds[0]}
    (got,) = exe.run(cp, feed=stacked, fetch_list=[loss], scope=scope, return_numpy=False)
    np.testing.assert_allclose(np.asarray(got), np.stack(want), rtol=1e-5, atol=1e-6)
    step = exe.compile(cp, feed=stacked, fetch_list=[loss])
    assert step.num_iterations == K and "stablehlo.while" in step.lowered_text()
    with pytest.raises(fluid.GraphcError, match="memory plans describe one iteration"):
        step.memory_report()


def test_changing_k_between_runs_recompiles():
    main, startup, loss = build("sgd")
    exe = fluid.Executor()
    feeds = batches(K + 1)
    single = fresh_scope(exe, startup)
    want = [exe.run(main, feed=f, fetch_list=[loss], scope=single)[0] for f in feeds]
    scope = fresh_scope(exe, startup)
    cp = k_program(main)
    a = exe.run(cp, feed=feeds[:K], fetch_list=[loss], scope=scope)[0]
    cp.exec_strategy.num_iteration_per_run = 1
    b = exe.run(cp, feed=feeds[K], fetch_list=[loss], scope=scope)[0]
    np.testing.assert_allclose(np.concatenate([a, b[None]]), np.stack(want), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("bad, message", [
    (lambda f: f[:K - 1], f"num_iteration_per_run is {K} but {K - 1} feed dicts"),
    (lambda f: f[:K - 1] + [{"x": f[0]["x"][:2], "label": f[0]["label"][:2]}],
     r"feed dicts 0 and 2 differ in names or shapes \('label' \[4, 1\], 'x' \[4, 6\] vs "
     r"'label' \[2, 1\], 'x' \[2, 6\]\)"),
    (lambda f: f[:K - 1] + [{"x": f[0]["x"]}], f"feed dict {K - 1} of {K}: missing feed "
                                               "'label'"),
    (lambda f: f[:K - 1] + [{"x": f[0]["x"].astype("float64"), "label": f[0]["label"]}],
     f"feed dict {K - 1} of {K}: feed 'x' has dtype float64"),
    (lambda f: f[:K - 1] + ["x"], f"feed list item {K - 1} is a str"),
    (lambda f: f[0], rf"feed 'x' has shape \[4, 6\] but num_iteration_per_run is {K}: stack "
                     rf"the iterations on a new leading axis, shape \[{K}, -1, 6\]"),
    (lambda f: {n: np.stack([g[n] for g in f[:K + 1]]) for n in f[0]},
     rf"feed 'x' has shape \[{K + 1}, 4, 6\] but num_iteration_per_run is {K}"),
    (lambda f: {"x": np.zeros((K, 4, 7), "float32"),
                "label": np.stack([g["label"] for g in f[:K]])},
     r"feed 'x' has shape \[4, 7\] per iteration but the program declares \[-1, 6\]"),
    (lambda f: "x", f"num_iteration_per_run is {K}: feed must be a list of {K} feed dicts"),
])
def test_feed_errors_for_k_iterations_leave_the_scope_unchanged(bad, message):
    main, startup, loss = build("momentum")
    exe = fluid.Executor()
    scope = fresh_scope(exe, startup)
    before = snapshot(scope)
    with pytest.raises(fluid.FeedError, match=message):
        exe.run(k_program(main), feed=bad(batches(K + 1)), fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert scope._run_counters.get(main, 0) == 0


def test_a_list_of_feed_dicts_needs_k_iterations():
    main, startup, loss = build("sgd")
    exe = fluid.Executor()
    scope = fresh_scope(exe, startup)
    with pytest.raises(fluid.FeedError, match="got a list of 2 feed dicts, but this program "
                                              "runs one iteration per call"):
        exe.run(main, feed=batches(2), fetch_list=[loss], scope=scope)


def test_state_whose_type_changes_cannot_be_iterated():
    from graphc.backends.jax import CompiledStep
    main, startup, loss = build("sgd")
    graph = lower(main)
    with pytest.raises(fluid.GraphcError, match="num_iterations must be an int >= 1"):
        CompiledStep(graph, [loss.name], num_iterations=0)
    w = graph.value("fc_0.w_0")
    w_new = graph.latest("fc_0.w_0")
    w_new.type = w_new.type._replace(dtype="float64")  # as a cast of the update would
    with pytest.raises(fluid.GraphcError, match="state 'fc_0.w_0' is read as f32\\[6,5\\] "
                                                "but written as f64\\[6,5\\]"):
        CompiledStep(graph, [loss.name], num_iterations=2)
    assert w.type.dtype == "float32"


# -- num_iteration_per_drop_scope ------------------------------------------------------------

def test_drop_scope_is_validated_and_keeps_nothing_between_runs():
    with pytest.raises(fluid.StrategyError, match="num_iteration_per_drop_scope"):
        fluid.ExecutionStrategy(num_iteration_per_drop_scope=0)
    with pytest.raises(fluid.StrategyError, match="num_threads"):
        fluid.ExecutionStrategy(num_threads=0)
    with pytest.raises(fluid.GraphcError, match="exec_strategy must be a graphc."
                                                "ExecutionStrategy, got dict"):
        fluid.CompiledProgram(fluid.Program(), exec_strategy={"num_threads": 2})
    main, startup, loss = build("momentum")
    exe = fluid.Executor()
    results = []
    for drop in (1, 100):
        scope = fresh_scope(exe, startup)
        names = set(scope.keys())
        cp = fluid.CompiledProgram(main, exec_strategy=fluid.ExecutionStrategy(
            num_iteration_per_drop_scope=drop))
        results.append([exe.run(cp, feed=f, fetch_list=[loss], scope=scope)[0]
                        for f in batches(3)])
        assert set(scope.keys()) == names  # only persistables live in the scope
    np.testing.assert_array_equal(results[0], results[1])


# -- num_threads: the interpreter's thread pool ---------------------------------------------

def two_branches():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        a = layers.relu(layers.scale(x, 2.0))
        b = layers.sigmoid(layers.scale(x, 3.0))
        out = layers.elementwise_add(a, b)
    return main, out


def test_the_thread_pool_runs_independent_ops_concurrently(monkeypatch):
    main, out = two_branches()
    graph = lower(main)
    feeds = {"x": np.arange(8, dtype="float32").reshape(2, 4)}
    barrier = threading.Barrier(2, timeout=10)
    lock = threading.Lock()
    done: set = set()
    real = interpreter.evaluate_op

    def instrumented(graph, op, env, step=0, axis_name=None):
        with lock:  # every value it reads, data or control, was computed before it started
            for v in op.input_values():
                assert v.producer is None or v.producer in done, (op, v)
        if op.type == "scale":  # the two scales only pass this barrier together
            barrier.wait()
        real(graph, op, env, step, axis_name)
        with lock:
            done.add(op)

    monkeypatch.setattr(interpreter, "evaluate_op", instrumented)
    _, (got,) = run_graph(graph, {}, feeds, [out], num_threads=2)
    monkeypatch.undo()
    _, (want,) = run_graph(graph, {}, feeds, [out])
    np.testing.assert_array_equal(got, want)
    assert len(done) == graph.num_ops


def test_the_thread_pool_honours_control_dependencies(monkeypatch):
    main, out = two_branches()
    graph = lower(main)
    PassManager([make_pass("sequential-execution")], verify_each=True).run(graph)
    assert any(graph.op_inputs(op).get(CONTROL_SLOT) for op in graph.ops())
    order, real = [], interpreter.evaluate_op

    def record(graph, op, env, step=0, axis_name=None):
        order.append(op)
        real(graph, op, env, step, axis_name)

    monkeypatch.setattr(interpreter, "evaluate_op", record)
    feeds = {"x": np.ones((2, 4), "float32")}
    run_graph(graph, {}, feeds, [out], num_threads=4)
    assert order == graph.ops()  # the chain leaves one order, whatever the pool size


def test_a_failing_op_in_the_pool_names_the_op(monkeypatch):
    main, out = two_branches()
    graph = lower(main)
    real = interpreter.evaluate_op

    def fail_on_sigmoid(graph, op, env, step=0, axis_name=None):
        if op.type == "sigmoid":
            raise fluid.GraphcError(f"while executing {op.where}: boom")
        real(graph, op, env, step, axis_name)

    monkeypatch.setattr(interpreter, "evaluate_op", fail_on_sigmoid)
    with pytest.raises(fluid.GraphcError, match="while executing op sigmoid.*boom"):
        run_graph(graph, {}, {"x": np.ones((2, 4), "float32")}, [out], num_threads=3)
    with pytest.raises(InterpreterError, match="num_threads must be an int >= 1"):
        run_graph(graph, {}, {"x": np.ones((2, 4), "float32")}, [out], num_threads=0)


def test_thread_pool_trains_like_the_sequential_interpreter():
    model = models.mlp(input_dim=6, hidden=(5,), num_classes=3)
    with fluid.program_guard(model.main, model.startup):
        optimizer.Momentum(0.1, 0.9).minimize(model.loss)
    graph = lower(model.main)
    state, _ = run_graph(lower(model.startup))
    feed = batches(1)[0]
    fetch = [model.loss, "fc_0.w_0@GRAD"]
    want_state, want = run_graph(graph, state, feed, fetch, step=2)
    got_state, got = run_graph(graph, state, feed, fetch, step=2, num_threads=4)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for name in want_state:
        np.testing.assert_array_equal(got_state[name], want_state[name], err_msg=name)


@settings(max_examples=10 * SCALE)
@given(random_programs(max_ops=8))
def test_thread_pool_equals_sequential_on_random_programs(gen):
    graph = gen.graph()
    state, _ = run_graph(gen.startup_graph(), num_threads=2)
    feeds = feeds_for(gen)
    want_state, want = run_graph(graph, state, feeds, gen.fetch, step=1)
    got_state, got = run_graph(graph, state, feeds, gen.fetch, step=1, num_threads=3)
    for name, a, b in zip(gen.fetch, got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
    for name in want_state:
        np.testing.assert_array_equal(got_state[name], want_state[name], err_msg=name)
