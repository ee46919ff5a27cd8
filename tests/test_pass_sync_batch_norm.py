"""sync-batch-norm: golden IR, declines, N devices equal one device on the global batch (JAX),
the interpreter's simulated replicas equal the JAX run, and finite differences of the
cross-replica gradient against the gradient of the whole-batch loss."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from pass_harness import build
from pass_harness import golden_text as _golden_text
from pass_harness import run_pass as _run_pass

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph, run_replicas
from graphc.backends.lowering import Replicas, apply_cross_replica
from graphc.ir import lower
from graphc.ir.text import parse
from graphc.ir.types import TensorType
from graphc.passes import PassManager, make_pass, pipeline_for
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "sync-batch-norm"
PASS = "sync-batch-norm"
STEPS, BATCH = 4, 16


def run_pass(main, fetch, **options):
    return _run_pass(PASS, main, fetch, **options)


def bn_net(layout="NCHW", x_grad=False, act=None, **bn):
    def body():
        shape = [-1, 3, 4, 4] if layout == "NCHW" else [-1, 4, 4, 3]
        x = layers.data("x", shape, "float32")
        x.stop_gradient = not x_grad
        return layers.mean(layers.batch_norm(x, data_layout=layout, act=act, **bn))
    return body


CASES = {
    "train_nchw": (bn_net(x_grad=True), True),
    "train_nhwc_relu": (bn_net("NHWC", act="relu"), True),
    "forward_only": (bn_net(), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    body, train = CASES[case]
    main, _, loss = build(body, train)
    before, after, stats = run_pass(main, [loss.name], nranks=4)
    check_golden_text(case, before, after, stats)
    assert stats["synced"] == 1 and stats.get("synced grad", 0) == int(train)
    ops = after.stats()
    assert "batch_norm" not in ops and "batch_norm_grad" not in ops
    assert parse(after.to_text()).structurally_equal(after)


def check_golden_text(case, before, after, stats):
    check_golden(GOLDEN / f"{case}.ir", _golden_text(PASS, before, after, stats))


def test_declines_with_reasons():
    main, _, loss = build(bn_net(is_test=True), False)
    _, after, stats = run_pass(main, [loss.name], nranks=4)
    assert stats == {"skipped: is_test or use_global_stats: running statistics, "
                     "nothing to sync": 1}
    assert after.stats()["batch_norm"] == 1
    main, _, loss = build(bn_net(use_global_stats=True), True)
    _, after, stats = run_pass(main, [loss.name], nranks=4)
    assert list(stats) == ["skipped: is_test or use_global_stats: running statistics, "
                           "nothing to sync"]
    assert after.stats()["batch_norm_grad"] == 1
    main, _, loss = build(bn_net(), True)
    _, after, stats = run_pass(main, [loss.name])  # nranks 0: the device count, here 1
    assert stats == {"skipped: one replica: batch statistics are already global": 1}
    _, after, stats = run_pass(main, [loss.name], nranks=1)
    assert stats == {"skipped: one replica: batch statistics are already global": 1}


def test_fuse_bn_act_leaves_sync_ones_and_says_so():
    main, _, loss = build(bn_net(act="relu", x_grad=True), True)
    graph = lower(main)
    pm = PassManager([make_pass(PASS, nranks=2), make_pass("fuse-bn-act")], verify_each=True)
    report = pm.run(graph, keep=[graph.latest(loss.name)])
    ops = graph.stats()
    assert ops["sync_batch_norm"] == 1 and ops["sync_batch_norm_grad"] == 1
    assert "fused_batch_norm_act" not in ops
    assert report.stats()["fuse-bn-act"] == {
        "skipped: sync_batch_norm is not fused (its statistics span replicas)": 2}


# -- the reference gradient: finite differences of the whole-batch loss ------------------------
def _cross(op_type, attrs, per_replica, out_types, nranks):
    return apply_cross_replica(op_type, {"momentum": 0.9, "epsilon": 1e-5, "is_test": False,
                                         "data_layout": attrs.get("data_layout", "NCHW"),
                                         "use_global_stats": False,
                                         "trainable_statistics": False, "nranks": nranks},
                               per_replica, out_types, "test", Replicas(nranks))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_reference_gradient_by_finite_differences(layout):
    """Each replica's loss is sum(Y_r * W_r); the replicas' X@GRAD are the gradient of the
    total loss (every replica's) with respect to their X, and the Scale/Bias shares add up to
    the total loss's gradient: what a sum all-reduce of local-loss gradients expects."""
    n, b, c = 3, 2, 3
    rng = np.random.default_rng(0)
    shape = (b, c, 2, 2) if layout == "NCHW" else (b, 2, 2, c)
    xs = [rng.normal(size=shape) for _ in range(n)]
    ws = [rng.normal(size=shape) for _ in range(n)]
    scale, bias = rng.normal(size=c), rng.normal(size=c)
    mean, var = np.zeros(c), np.ones(c)
    vec = TensorType((c,), "float64")
    xt = TensorType(shape, "float64")
    fwd_types = {"Y": [xt], "MeanOut": [vec], "VarianceOut": [vec], "SavedMean": [vec],
                 "SavedVariance": [vec]}
    attrs = {"data_layout": layout}

    def forward(xs, scale, bias):
        ins = [{"X": [x], "Scale": [scale], "Bias": [bias], "Mean": [mean], "Variance": [var]}
               for x in xs]
        return _cross("sync_batch_norm", attrs, ins, fwd_types, n)

    def loss(xs, scale=scale, bias=bias):
        return sum(float(np.sum(np.asarray(o["Y"][0]) * w))
                   for o, w in zip(forward(xs, scale, bias), ws))

    outs = forward(xs, scale, bias)
    grad_ins = [{"X": [x], "Scale": [scale], "Bias": [bias], "Mean": [mean], "Variance": [var],
                 "SavedMean": o["SavedMean"], "SavedVariance": o["SavedVariance"],
                 "Y@GRAD": [w]} for x, o, w in zip(xs, outs, ws)]
    grads = _cross("sync_batch_norm_grad", attrs, grad_ins,
                   {"X@GRAD": [xt], "Scale@GRAD": [vec], "Bias@GRAD": [vec]}, n)
    eps = 1e-6
    for r in range(n):
        for idx in [(0, 0, 0, 0), (1, 1, 0, 1), (0, 1, 1, 1)]:
            plus = [x.copy() for x in xs]
            minus = [x.copy() for x in xs]
            plus[r][idx] += eps
            minus[r][idx] -= eps
            numeric = (loss(plus) - loss(minus)) / (2 * eps)
            np.testing.assert_allclose(np.asarray(grads[r]["X@GRAD"][0])[idx], numeric,
                                       rtol=1e-5, atol=1e-7)
    for name, base in (("Scale", scale), ("Bias", bias)):
        total = sum(np.asarray(g[name + "@GRAD"][0]) for g in grads)
        for k in range(c):
            d = np.zeros(c)
            d[k] = eps
            kw_p = {name.lower(): base + d}
            kw_m = {name.lower(): base - d}
            numeric = (loss(xs, **kw_p) - loss(xs, **kw_m)) / (2 * eps)
            np.testing.assert_allclose(total[k], numeric, rtol=1e-5, atol=1e-7)
    # each replica's share is its own samples' part: Bias@GRAD_r = sum of its W_r per channel
    axes = (0, 2, 3) if layout == "NCHW" else (0, 1, 2)
    for g, w in zip(grads, ws):
        np.testing.assert_allclose(np.asarray(g["Bias@GRAD"][0]), w.sum(axis=axes), rtol=1e-12)


def test_one_rank_without_replicas_is_batch_norm():
    """nranks = 1 outside a data-parallel step: exactly batch_norm (forward and gradient)."""
    main, startup, loss = build(bn_net(x_grad=True), True)
    fetch = [loss.name, "x@GRAD", "batch_norm_0.w_0@GRAD", "batch_norm_0.w_1"]
    before = lower(main)
    after = lower(main)
    rw = after.rewriter()
    for op in list(after.ops()):
        if op.type in ("batch_norm", "batch_norm_grad"):
            ins = {s: list(v) for s, v in op.inputs.items()}
            outs = {s: list(v) for s, v in op.outputs.items()}
            rw.erase_op(op, erase_outputs=False)
            rw.create_op("sync_" + op.type, ins, outs, {**op.attrs, "nranks": 1},
                         derived_from=[op])
    state, _ = run_graph(lower(startup))
    feeds = {"x": np.random.default_rng(1).normal(size=(6, 3, 4, 4)).astype("float32")}
    for a, b in zip(run_graph(after, state, feeds, fetch)[1],
                    run_graph(before, state, feeds, fetch)[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# -- training: N devices with sync_batch_norm == one device on the global batch ---------------
def build_cnn():
    """conv, batch_norm + relu, fc, batch_norm + tanh, fc, softmax; Momentum."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 2, 6, 6], "float32")
        y = layers.data("y", [-1, 1], "int64")
        h = layers.conv2d(x, num_filters=4, filter_size=3, padding=1, bias_attr=False)
        h = layers.batch_norm(h, act="relu")
        h = layers.fc(h, 8)
        h = layers.batch_norm(h, act="tanh")
        logits = layers.fc(h, 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def batches(steps=STEPS, batch=BATCH, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": (rng.normal(size=(batch, 2, 6, 6)) * 2 + 1).astype("float32"),
             "y": rng.integers(0, 3, (batch, 1)).astype("int64")} for _ in range(steps)]


def persistables(main, scope) -> dict:
    return {v.name: np.asarray(scope[v.name]) for v in main.global_block().vars.values()
            if v.persistable and v.name in scope}


@functools.cache
def train(n: int, sync: bool = True, hierarchical: int = 0):
    main, startup, loss = build_cnn()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    if n == 0:  # plain single-device executor
        prog = main
    else:
        bs = graphc.BuildStrategy(sync_batch_norm=sync)
        if hierarchical:
            bs.use_hierarchical_allreduce = True
            bs.hierarchical_allreduce_inter_nranks = hierarchical
        prog = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(n))
    losses = [float(np.mean(exe.run(prog, feed=f, fetch_list=[loss], scope=scope)[0]))
              for f in batches()]
    return losses, persistables(main, scope), prog


def assert_close(got: dict, want: dict, tol=1e-5):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_n_devices_equal_one_device(n):
    want_losses, want_state, _ = train(0)
    losses, state, cp = train(n)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    assert_close(state, want_state)  # parameters, velocities and running statistics
    ops = cp.graph(fetch_list=[cp.loss_name]).stats()
    assert ops["sync_batch_norm"] == 2 and ops["sync_batch_norm_grad"] == 2
    assert "batch_norm" not in ops


def test_without_sync_the_statistics_differ():
    """The comparison is not vacuous: per-device statistics give other running means."""
    _, want_state, _ = train(0)
    _, state, _ = train(4, sync=False)
    assert not np.allclose(state["batch_norm_0.w_1"], want_state["batch_norm_0.w_1"],
                           rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [2, 4])
def test_interpreter_replicas_equal_jax(n):
    """run_replicas of the graph after the data-parallel pipeline == the JAX run, one step."""
    main, startup, loss = build_cnn()
    bs = graphc.BuildStrategy(sync_batch_norm=True)
    graph = lower(main)
    pm = pipeline_for(bs, num_devices=n, loss_name=loss.name, verify_each=True)
    pm.run(graph, keep=[graph.latest(loss.name)], num_devices=n)
    assert graph.stats()["sync_batch_norm_grad"] == 2
    state, _ = run_graph(lower(startup))
    feed = batches(1)[0]
    new_state, (ref_loss,) = run_replicas(graph, state, feed, [loss.name], num_replicas=n)

    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    got_loss, = exe.run(cp, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-5, atol=1e-6)
    for name, value in new_state.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-5, atol=1e-6,
                                   err_msg=name)
