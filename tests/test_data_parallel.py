"""Data parallelism: N devices equal one device on the same global batch (AllReduce and
Reduce, SGD/Momentum/Adam), Reduce mode's sharded optimizer state in the scope and in
checkpoints, the JAX step against the interpreter's simulated replicas, the data-parallel
pass on random programs and in golden IR, feeds, share_vars_from and places."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pass_harness import golden_text

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import InterpreterError, run_graph, run_replicas
from graphc.ir import lower
from graphc.passes import PassManager, make_pass
from graphc.testing import check_golden, feeds_for, random_programs

GOLDEN = Path(__file__).parent / "golden"
Reduce = graphc.BuildStrategy.ReduceStrategy.Reduce
STEPS = 4
BATCH = 32


# -- programs and data ---------------------------------------------------------------------
def build_mlp(opt_name: str = "sgd", regularize: bool = False, train: bool = True):
    """A fresh 8 -> 16 -> 4 classifier with fixed seeds: (main, startup, loss)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 8], "float32")
        y = layers.data("y", [-1, 1], "int64")
        h = layers.fc(x, 16, act="relu")
        logits = layers.fc(h, 4)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        if train:
            reg = graphc.regularizer.L2Decay(1e-3) if regularize else None
            opt = {"sgd": lambda: optimizer.SGD(0.5, regularization=reg),
                   "momentum": lambda: optimizer.Momentum(0.2, 0.9, regularization=reg),
                   "adam": lambda: optimizer.Adam(0.02, regularization=reg)}[opt_name]()
            opt.minimize(loss)
    return main, startup, loss


def batches(steps: int = STEPS, batch: int = BATCH, seed: int = 0) -> list[dict]:
    """A learnable task: the label is the argmax of a fixed linear map of x."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(123).normal(size=(8, 4))
    out = []
    for _ in range(steps):
        x = rng.normal(size=(batch, 8)).astype("float32")
        out.append({"x": x, "y": np.argmax(x @ w, axis=1)[:, None].astype("int64")})
    return out


def params_of(main, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}


def persistables_of(main, scope) -> dict:
    return {v.name: np.asarray(scope[v.name]) for v in main.global_block().vars.values()
            if v.persistable and v.name in scope}


def dp_strategy(mode: str = "all_reduce") -> graphc.BuildStrategy:
    bs = graphc.BuildStrategy()
    if mode == "reduce":
        bs.reduce_strategy = Reduce
    return bs


def train_single(opt_name, regularize=False, steps=STEPS):
    """Plain single-device Executor: (losses, params, scope, (main, startup, loss))."""
    main, startup, loss = build_mlp(opt_name, regularize)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    losses = [float(np.mean(exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0]))
              for f in batches(steps)]
    return losses, params_of(main, scope), scope, (main, startup, loss)


def train_dp(opt_name, n, mode="all_reduce", regularize=False, steps=STEPS):
    """with_data_parallel on the first ``n`` CPU devices: (losses, params, scope, prog, cp)."""
    main, startup, loss = build_mlp(opt_name, regularize)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = graphc.CompiledProgram(main, build_strategy=dp_strategy(mode)).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    losses = []
    for f in batches(steps):
        fetched, = exe.run(cp, feed=f, fetch_list=[loss], scope=scope)
        assert fetched.shape == (n,)  # one loss per device, merged
        losses.append(float(np.mean(fetched)))
    return losses, params_of(main, scope), scope, (main, startup, loss), cp


@functools.cache
def single(opt_name, regularize=False):
    return train_single(opt_name, regularize)


@functools.cache
def dp(opt_name, n, mode="all_reduce", regularize=False):
    return train_dp(opt_name, n, mode, regularize)


def assert_params_close(got: dict, want: dict, tol: float = 1e-5):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=name)


# -- 1. N devices == one device ------------------------------------------------------------
OPTIMIZERS = [("sgd", False), ("momentum", True), ("adam", False)]


@pytest.mark.parametrize("opt_name, regularize", OPTIMIZERS)
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_n_devices_equal_one_device(opt_name, regularize, n):
    want_losses, want_params, _, _ = single(opt_name, regularize)
    losses, params, *_ = dp(opt_name, n, "all_reduce", regularize)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    assert_params_close(params, want_params)
    assert want_losses[-1] < want_losses[0]  # it trains, so equality is not vacuous


@pytest.mark.parametrize("opt_name, regularize", OPTIMIZERS)
def test_reduce_mode_equals_one_device(opt_name, regularize):
    want_losses, want_params, _, _ = single(opt_name, regularize)
    losses, params, *_ = dp(opt_name, 4, "reduce", regularize)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    assert_params_close(params, want_params)


# -- 2. AllReduce vs Reduce ------------------------------------------------------------------
def state_names(main, kind: str) -> list[str]:
    """Optimizer state variables of the parameters' shape (velocities / moments)."""
    block = main.global_block()
    params = {p.name: p.shape for p in block.all_parameters()}
    return sorted(v.name for v in block.vars.values()
                  if v.persistable and v.name not in params and kind in v.name
                  and tuple(v.shape) in {tuple(s) for s in params.values()})


@pytest.mark.parametrize("opt_name, kind", [("momentum", "velocity"), ("adam", "moment")])
def test_all_reduce_vs_reduce_and_sharded_state(opt_name, kind, tmp_path):
    n = 4
    regularize = opt_name == "momentum"
    ar_losses, ar_params, ar_scope, _, _ = dp(opt_name, n, "all_reduce", regularize)
    losses, params, scope, (main, startup, loss), _ = dp(opt_name, n, "reduce", regularize)
    assert abs(losses[-1] - ar_losses[-1]) <= 1e-3 * abs(ar_losses[-1])
    assert_params_close(params, ar_params)

    names = state_names(main, kind)
    assert names, f"no {kind} state found"
    for name in names:
        var = main.global_block().var(name)
        size = int(np.prod(var.shape))
        assert name in scope._shards, name
        assert scope._vars[name].shape == (n, -(-size // n)), name
        assert name not in ar_scope._shards
        whole = scope[name]
        assert whole.shape == tuple(var.shape)
        np.testing.assert_allclose(whole, ar_scope[name], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_array_equal(np.array(scope.find_var(name).get_tensor()), whole)
    # parameters themselves are whole on every device
    assert not set(scope._shards) & set(params)

    # checkpoint round trip with sharded state: saved whole, loaded into a fresh scope
    graphc.save(main, str(tmp_path), scope=scope)
    fresh = graphc.Scope()
    graphc.load(main, str(tmp_path), scope=fresh)
    want = persistables_of(main, scope)
    got = persistables_of(main, fresh)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)

    # a single-device program reads the parameters after Reduce-mode training
    test = main.clone(for_test=True)
    feed = batches(1, seed=7)[0]
    exe = graphc.Executor()
    got_loss, = exe.run(test, feed=feed, fetch_list=[loss.name], scope=scope)
    want_loss, = exe.run(test, feed=feed, fetch_list=[loss.name], scope=ar_scope)
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5, atol=1e-6)

    # training goes on (Reduce mode again, then AllReduce) from the loaded checkpoint
    bs = dp_strategy("reduce")
    cp = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    feed = batches(1, seed=9)[0]
    a, = exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)
    b, = exe.run(cp, feed=feed, fetch_list=[loss], scope=fresh)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert_params_close(params_of(main, fresh), params_of(main, scope), 1e-6)


# -- 3. the JAX data-parallel step == the interpreter's simulated replicas -------------------
def test_one_scope_across_layouts():
    """Reduce on 4 devices, Reduce on 8, one device, then Reduce on 8 again, in one scope:
    each step regroups the sharded optimizer state it finds; the result is one device's."""
    main, startup, loss = build_mlp("adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    on = {n: graphc.CompiledProgram(main, build_strategy=dp_strategy("reduce"))
          .with_data_parallel(loss_name=loss.name, places=graphc.cpu_places(n)) for n in (4, 8)}
    for target, f in zip((on[4], on[8], main, on[8]), batches()):
        exe.run(target, feed=f, fetch_list=[loss], scope=scope)
    assert scope._shards  # the last run left the moments as 8 rows
    want = single("adam")[2]
    for name in persistables_of(main, want):
        np.testing.assert_allclose(scope[name], want[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("mode", ["all_reduce", "reduce"])
def test_jax_step_equals_interpreter_replicas(mode):
    n = 4
    main, startup, loss = build_mlp("adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {name: np.asarray(scope[name]) for name in scope.keys()}
    cp = graphc.CompiledProgram(main, build_strategy=dp_strategy(mode)).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    graph = cp.graph([loss])
    collective = "c_allreduce" if mode == "all_reduce" else "c_reduce_scatter"
    assert graph.stats()[collective] == 4
    for step, feed in enumerate(batches(2)):
        state, (want,) = run_replicas(graph, state, feed, [loss.name], step=step,
                                      num_replicas=n)
        got, = exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)
        assert got.shape == want.shape == (n,)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert state.keys() <= set(scope.keys())
    for name, value in state.items():  # sharded state comes back whole from both
        np.testing.assert_allclose(scope[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_interpreter_catches_a_missing_all_reduce():
    main, startup, loss = build_mlp("sgd")
    state, _ = run_graph(lower(startup))
    graph = lower(main)
    PassManager([make_pass("data-parallel", nranks=4)], verify_each=True).run(graph,
                                                                              num_devices=4)
    feed = batches(1)[0]
    run_replicas(graph, state, feed, [loss.name], num_replicas=4)  # intact: fine
    op = next(op for op in graph.ops() if op.type == "c_allreduce"
              and op.inputs["X"][0].var.name == "fc_1.w_0@GRAD")
    rw = graph.rewriter()
    rw.replace_all_uses(op.output("Out"), op.inputs["X"][0])
    rw.erase_op(op)
    graph.verify()
    with pytest.raises(InterpreterError, match="parameter 'fc_1.w_0' differs between replica"):
        run_replicas(graph, state, feed, [loss.name], num_replicas=4)


# -- 4. the data-parallel pass on random training programs ------------------------------------
BATCH_LOCAL_STEPS = ["activation", "scale", "elementwise", "fc", "split", "cast", "assign",
                     "sums", "layer_norm", "softmax_with_cross_entropy", "cross_entropy",
                     "embedding", "fill_constant", "lr_schedule", "topk"]
RANDOM_OPTIMIZERS = {"sgd": lambda: optimizer.SGD(0.1),
                     "momentum": lambda: optimizer.Momentum(0.1, 0.9),
                     "adam": lambda: optimizer.Adam(0.01)}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(gen=random_programs(max_ops=4, steps=BATCH_LOCAL_STEPS, with_loss=True),
       opt_name=st.sampled_from(sorted(RANDOM_OPTIMIZERS)),
       mode=st.sampled_from(["all_reduce", "reduce"]))
def test_pass_on_random_programs_equals_global_batch(gen, opt_name, mode):
    # Ops whose per-replica meaning differs by design (batch statistics, random masks) are
    # left out by the steps; every feed must have the batch dimension to be split.
    assume(all(shape and shape[0] == -1 for shape, _ in gen.feeds.values()))
    with graphc.program_guard(gen.main, gen.startup):
        RANDOM_OPTIMIZERS[opt_name]().minimize(gen.main.global_block().var(gen.loss))
    state, _ = run_graph(lower(gen.startup))
    feeds = feeds_for(gen, batch=8)
    before, after = lower(gen.main), lower(gen.main)
    report = PassManager([make_pass("data-parallel", nranks=4, mode=mode)],
                         verify_each=True).run(after, num_devices=4)
    after.verify()
    want_state, (want,) = run_graph(before, state, feeds, [gen.loss])
    got_state, (got,) = run_replicas(after, state, feeds, [gen.loss], num_replicas=4)
    assert got.shape == (4,)
    np.testing.assert_allclose(got.mean(), want.reshape(()), rtol=1e-5, atol=1e-5)
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        np.testing.assert_allclose(got_state[name], want_state[name], rtol=1e-5, atol=1e-5,
                                   err_msg=name)
    stats = report.stats()["data-parallel"]
    assert stats, "the pass must report what it did or why it declined"


# -- 5. golden IR ----------------------------------------------------------------------------
def run_passes(main, fetch, *passes):
    """(graph before the last pass, after it, the last pass's stats)."""
    from graphc.backends.interpreter import resolve_fetch

    def apply(graph, ps):
        keep = [resolve_fetch(graph, f) for f in fetch]
        return PassManager(list(ps), verify_each=True).run(graph, keep=keep, num_devices=4)

    before, after = lower(main), lower(main)
    if passes[:-1]:
        apply(before, passes[:-1])
        apply(after, passes[:-1])
    report = apply(after, passes[-1:])
    return before, after, report.stats()[passes[-1].name]


@pytest.mark.parametrize("case, options", [
    ("all_reduce_mean", {"mode": "all_reduce"}),
    ("all_reduce_sum", {"mode": "all_reduce", "reduce": "sum"}),
    ("reduce_mean", {"mode": "reduce"}),
    ("reduce_sum", {"mode": "reduce", "reduce": "sum"}),
])
def test_golden_data_parallel(case, options):
    main, _, loss = build_mlp("momentum", regularize=True)
    before, after, stats = run_passes(main, [loss.name],
                                      make_pass("data-parallel", nranks=4, **options))
    check_golden(GOLDEN / "data-parallel" / f"mlp_momentum_l2_{case}.ir",
                 golden_text("data-parallel", before, after, stats))
    if options["mode"] == "all_reduce":
        assert stats == {"all_reduce": 4}
        assert all(op.attrs["reduce"] == options.get("reduce", "mean")
                   for op in after.ops() if op.type == "c_allreduce")
    elif options.get("reduce") == "sum":  # the decay would be summed nranks times
        assert stats == {"all_reduce": 4, "skipped: momentum: regularised gradient with "
                         "reduce=sum; all-reduced instead": 4}
    else:
        assert stats == {"sharded optimizer ops": 4, "sharded state": 4}


@pytest.mark.parametrize("opt_name", ["sgd", "momentum"])
def test_reduce_sum_with_regularisation_equals_all_reduce_sum(opt_name):
    main, startup, loss = build_mlp(opt_name, regularize=True)
    state, _ = run_graph(lower(startup))
    results = []
    for mode in ("all_reduce", "reduce"):
        graph = lower(main)
        PassManager([make_pass("data-parallel", nranks=4, mode=mode, reduce="sum")],
                    verify_each=True).run(graph, num_devices=4)
        results.append(run_replicas(graph, state, batches(1)[0], [loss.name],
                                    num_replicas=4)[0])
    assert_params_close(results[1], results[0], 1e-6)


def test_golden_all_reduce_deps():
    main, _, loss = build_mlp("sgd")
    before, after, stats = run_passes(main, [loss.name],
                                      make_pass("data-parallel", nranks=4),
                                      make_pass("all-reduce-deps"))
    check_golden(GOLDEN / "all-reduce-deps" / "mlp_sgd_all_reduce.ir",
                 golden_text("all-reduce-deps", before, after, stats))
    assert stats == {"dependencies added": 3}


def test_data_parallel_declines():
    main, _, loss = build_mlp(train=False)
    _, after, stats = run_passes(main, [loss.name], make_pass("data-parallel", nranks=4))
    assert stats == {"skipped: no optimizer ops (inference: replicas run independently)": 1}
    assert "c_allreduce" not in after.stats()
    main, _, loss = build_mlp("sgd")
    before, after, stats = run_passes(main, [loss.name], make_pass("data-parallel", nranks=1))
    assert stats == {"skipped: one replica: nothing to exchange": 1}
    assert after.to_text() == before.to_text()
    _, _, stats = run_passes(main, [loss.name], make_pass("all-reduce-deps"))
    assert stats == {"skipped: fewer than two collective ops": 1}


# -- 6. feeds ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inference_pair():
    """A trained-parameter-free inference program, its startup state, and a 4-device copy."""
    main, startup, loss = build_mlp(train=False)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = graphc.CompiledProgram(main).with_data_parallel(places=graphc.cpu_places(4))
    return main, loss, scope, exe, cp


def test_feed_batch_not_divisible_is_a_clear_error():
    main, startup, loss = build_mlp("sgd")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                         places=graphc.cpu_places(4))
    feed = batches(1, batch=30)[0]
    before = {k: np.asarray(scope[k]) for k in scope.keys()}
    with pytest.raises(graphc.FeedError, match=r"feed '(x|y)' has batch 30, which does not "
                                               r"split evenly over 4 devices"):
        exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)
    for k, v in before.items():  # nothing changed
        np.testing.assert_array_equal(scope[k], v)


def test_per_device_feed_list_equals_one_dict():
    n = 4
    feeds = batches(2)
    results = []
    for as_list in (False, True):
        main, startup, loss = build_mlp("momentum")
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        cp = graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                             places=graphc.cpu_places(n))
        losses = []
        for f in feeds:
            feed = ([{k: v[i * 8:(i + 1) * 8] for k, v in f.items()} for i in range(n)]
                    if as_list else f)
            losses.append(exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)[0])
        results.append((np.stack(losses), params_of(main, scope)))
        if as_list:
            with pytest.raises(graphc.FeedError, match="got a list of 3 feed dicts for 4 "
                                                       "devices"):
                exe.run(cp, feed=feed[:3], fetch_list=[loss], scope=scope)
            bad = [dict(d) for d in feed]
            bad[2] = {k: v[:4] for k, v in bad[2].items()}
            with pytest.raises(graphc.FeedError, match="devices 0 and 2 differ"):
                exe.run(cp, feed=bad, fetch_list=[loss], scope=scope)
    (a_loss, a_params), (b_loss, b_params) = results
    np.testing.assert_array_equal(a_loss, b_loss)
    assert_params_close(b_params, a_params, 0)


def test_inference_devices_run_independently(inference_pair):
    main, loss, scope, exe, cp = inference_pair
    feed = batches(1)[0]
    logits_name = main.global_block().ops[-3].output_arg_names[0]  # fc_1's output
    got = exe.run(cp, feed=feed, fetch_list=[loss, logits_name], scope=scope)
    want = exe.run(main, feed=feed, fetch_list=[logits_name], scope=scope)
    assert got[0].shape == (4,)  # one mean per device's 8 samples
    assert got[1].shape == (BATCH, 4)  # rows concatenated in device order
    np.testing.assert_allclose(got[1], want[0], rtol=1e-5, atol=1e-6)
    # each device's loss is the loss of its own slice
    for i in range(4):
        part = {k: v[i * 8:(i + 1) * 8] for k, v in feed.items()}
        one, = exe.run(main, feed=part, fetch_list=[loss], scope=scope)
        np.testing.assert_allclose(got[0][i], one.reshape(()), rtol=1e-5, atol=1e-6)
    assert "c_allreduce" not in cp.graph([loss]).stats()


# -- 7. share_vars_from: the seeds' train/test pair ----------------------------------------------
def test_seed_parallel_executor_train_test_pair(caplog, monkeypatch):
    import graphc as fluid

    monkeypatch.setenv("CPU_NUM", "4")  # the seed's way to pick the CPU replicas
    use_cuda, memory_opt, dev_count = False, False, 4
    main, startup, loss = build_mlp("adam")
    test_program = main.clone(for_test=True)
    train_program = main
    feeds = batches(5)
    with fluid.scope_guard(fluid.Scope()), fluid.program_guard(main, startup):
        # as written in the seed (000_*.txt), with graphc for fluid
        place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
        exe = fluid.Executor(place)
        exe.run(fluid.default_startup_program())
        exec_strategy = fluid.ExecutionStrategy()
        exec_strategy.num_threads = dev_count * 4  # the size of thread pool.
        build_strategy = fluid.BuildStrategy()
        build_strategy.memory_optimize = True if memory_opt else False
        train_exe = fluid.ParallelExecutor(use_cuda=use_cuda,
                                           main_program=train_program,
                                           build_strategy=build_strategy,
                                           exec_strategy=exec_strategy,
                                           loss_name=loss.name)
        with caplog.at_level(logging.WARNING, logger="graphc.runtime"):
            test_exe = fluid.ParallelExecutor(use_cuda=True,
                                              main_program=test_program,
                                              build_strategy=build_strategy,
                                              exec_strategy=exec_strategy,
                                              share_vars_from=train_exe)
        assert "use_cuda=True differs from the executor shared from" in caplog.text
        assert test_exe.device_count == train_exe.device_count == 4
        held_out = batches(1, seed=42)[0]
        test_losses = []
        for feed_dict in feeds:
            train_loss, = train_exe.run(fetch_list=[loss.name], feed=feed_dict)
            test_loss, = test_exe.run(fetch_list=[loss.name], feed=held_out)
            assert train_loss.shape == test_loss.shape == (train_exe.device_count,)
            # the test program on one device, reading the same (just trained) parameters
            want, = exe.run(test_program, feed=held_out, fetch_list=[loss.name])
            np.testing.assert_allclose(test_loss.mean(), want.reshape(()), rtol=1e-5)
            test_losses.append(float(test_loss.mean()))
    assert test_losses[-1] < test_losses[0]  # the test loss follows training


def test_compiled_program_share_vars_from():
    n = 4
    main, startup, loss = build_mlp("sgd")
    test = main.clone(for_test=True)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp_train = graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    cp_test = graphc.CompiledProgram(test).with_data_parallel(share_vars_from=cp_train)
    assert cp_test.devices == cp_train.devices and cp_test.num_devices == n
    feed = batches(1, seed=3)[0]
    before, = exe.run(cp_test, feed=feed, fetch_list=[loss], scope=scope)
    for f in batches(3):
        exe.run(cp_train, feed=f, fetch_list=[loss], scope=scope)
    after, = exe.run(cp_test, feed=feed, fetch_list=[loss], scope=scope)
    want, = exe.run(test, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(after.mean(), want.reshape(()), rtol=1e-5)
    assert after.mean() < before.mean()

    plain = graphc.CompiledProgram(main)
    with pytest.raises(graphc.GraphcError, match="share_vars_from must be a CompiledProgram "
                                                 "that runs with data parallelism"):
        graphc.CompiledProgram(test).with_data_parallel(share_vars_from=plain)
    with pytest.raises(graphc.GraphcError, match="runs on other devices"):
        graphc.CompiledProgram(test).with_data_parallel(share_vars_from=cp_train,
                                                        places=graphc.cpu_places(2))
    with pytest.raises(graphc.GraphcError, match="share_vars_from must be a ParallelExecutor"):
        graphc.ParallelExecutor(use_cuda=False, main_program=test, share_vars_from=cp_train)


# -- 8. places -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_cpu_places_after_jax_started(n):
    import jax
    assert len(jax.devices("cpu")) == 8  # started (conftest asks for 8)
    places = graphc.cpu_places(n)
    assert places == [graphc.CPUPlace(i) for i in range(n)]


def test_repeated_cpu_places_are_cpu_replicas():
    """Paddle's CPUPlace() has no id, and its tests ask for n CPU replicas by
    ``[fluid.CPUPlace()] * n``: graphc gives them n distinct CPU devices."""
    import jax
    main, _, loss = build_mlp("sgd")
    compiled = graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=[graphc.CPUPlace()] * 3)
    assert compiled.devices == list(jax.devices("cpu"))[:3]
    with pytest.raises(graphc.DeviceError, match="places is empty"):
        graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name, places=[])
