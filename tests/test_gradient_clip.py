"""Gradient clipping (fluid.clip): by value, by norm and by global norm, through the
optimizer's grad_clip, minimize(grad_clip=) and set_gradient_clip, against NumPy clipping of
closed-form gradients; need_clip; and 4 devices == 1 device with global-norm clipping."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers, optimizer
from graphc.fluid.clip import (
    ErrorClipByValue,
    GradientClipByGlobalNorm,
    GradientClipByNorm,
    GradientClipByValue,
    set_gradient_clip,
)
from graphc.ir.errors import ProgramError

RNG = np.random.default_rng(8)
X = RNG.standard_normal((4, 3)).astype("float32")
C = (RNG.standard_normal((4, 2)) * 2).astype("float32")
X2 = RNG.standard_normal((4, 5)).astype("float32")
C2 = (RNG.standard_normal((4, 1)) * 0.1).astype("float32")
FEED = {"x": X, "c": C, "x2": X2, "c2": C2}
# loss = sum(fc_a(x) * c) + sum(fc_b(x2) * c2): closed-form gradients
GRADS = {"wa": X.T @ C, "ba": C.sum(0), "wb": X2.T @ C2, "bb": C2.sum(0)}


def build(need_clip_b=True):
    x, c = graphc.data("x", [4, 3]), graphc.data("c", [4, 2])
    x2, c2 = graphc.data("x2", [4, 5]), graphc.data("c2", [4, 1])
    a = layers.fc(x, 2, param_attr="wa", bias_attr="ba")
    b = layers.fc(x2, 1, param_attr=graphc.ParamAttr(name="wb", need_clip=need_clip_b),
                  bias_attr=graphc.ParamAttr(name="bb", need_clip=need_clip_b))
    return layers.sums([layers.reduce_sum(layers.elementwise_mul(a, c)),
                        layers.reduce_sum(layers.elementwise_mul(b, c2))])


def step(minimize):
    """Build, run one step, return (params before, params after)."""
    loss = build()
    minimize(loss)
    return run_step()


def run_step():
    main = graphc.default_main_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    names = [p.name for p in main.global_block().all_parameters()]
    before = {n: np.array(scope[n]) for n in names}
    exe.run(main, feed=FEED, scope=scope)
    return before, {n: np.array(scope[n]) for n in names}


def check_update(before, after, clipped, lr, decay=0.0):
    for name, g in clipped.items():
        want = before[name] - lr * (g + decay * before[name])
        np.testing.assert_allclose(after[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def by_norm(g, limit):
    norm = np.sqrt(np.sum(g.astype("float64") ** 2))
    return g * (limit / norm) if norm > limit else g


def global_scale(grads, limit):
    norm = np.sqrt(sum(np.sum(g.astype("float64") ** 2) for g in grads))
    return limit / max(limit, norm)


def test_clip_by_value_through_the_optimizer():
    before, after = step(lambda loss: optimizer.SGD(0.5).minimize(
        loss, grad_clip=GradientClipByValue(0.7)))
    check_update(before, after, {k: np.clip(g, -0.7, 0.7) for k, g in GRADS.items()}, 0.5)


def test_grad_clip_given_to_the_optimizer_constructor():
    before, after = step(lambda loss: optimizer.SGD(
        0.5, grad_clip=GradientClipByGlobalNorm(1.0)).minimize(loss))
    scale = global_scale(GRADS.values(), 1.0)
    check_update(before, after, {k: g * scale for k, g in GRADS.items()}, 0.5)


def test_minimize_grad_clip_overrides_the_constructors():
    before, after = step(lambda loss: fluid.optimizer.SGDOptimizer(
        0.5, grad_clip=GradientClipByValue(0.01)).minimize(
            loss, grad_clip=GradientClipByValue(0.3)))
    check_update(before, after, {k: np.clip(g, -0.3, 0.3) for k, g in GRADS.items()}, 0.5)


def test_clip_by_value_with_min():
    before, after = step(lambda loss: optimizer.SGD(0.5).minimize(
        loss, grad_clip=GradientClipByValue(max=1.0, min=-0.1)))
    check_update(before, after, {k: np.clip(g, -0.1, 1.0) for k, g in GRADS.items()}, 0.5)


def test_clip_by_norm_clips_each_gradient_by_its_own_norm():
    before, after = step(lambda loss: optimizer.SGD(0.1).minimize(
        loss, grad_clip=GradientClipByNorm(clip_norm=1.0)))
    clipped = {k: by_norm(g, 1.0) for k, g in GRADS.items()}
    assert np.linalg.norm(GRADS["wa"]) > 1.0 > np.linalg.norm(GRADS["bb"])  # both cases
    check_update(before, after, clipped, 0.1)


def test_clip_by_global_norm_then_l2_decay():
    reg = graphc.regularizer.L2Decay(0.01)
    before, after = step(lambda loss: optimizer.SGD(0.1, regularization=reg).minimize(
        loss, grad_clip=GradientClipByGlobalNorm(clip_norm=2.0)))
    scale = global_scale(GRADS.values(), 2.0)
    assert scale < 0.5
    # Paddle 1.8's order: clip the gradient, then add the decay term
    check_update(before, after, {k: g * scale for k, g in GRADS.items()}, 0.1, decay=0.01)


def test_global_norm_large_enough_leaves_gradients_alone():
    before, after = step(lambda loss: optimizer.SGD(0.1).minimize(
        loss, grad_clip=GradientClipByGlobalNorm(clip_norm=1e4)))
    check_update(before, after, GRADS, 0.1)


def test_param_attr_need_clip_false_is_left_out_of_the_norm_and_the_clip():
    loss = build(need_clip_b=False)
    optimizer.SGD(0.1).minimize(loss, grad_clip=GradientClipByGlobalNorm(1.0))
    before, after = run_step()
    scale = global_scale([GRADS["wa"], GRADS["ba"]], 1.0)
    check_update(before, after, {"wa": GRADS["wa"] * scale, "ba": GRADS["ba"] * scale,
                                 "wb": GRADS["wb"], "bb": GRADS["bb"]}, 0.1)


def test_need_clip_function_filters_parameters():
    clip = GradientClipByValue(0.05, need_clip=lambda p: p.name.startswith("w"))
    before, after = step(lambda loss: optimizer.SGD(1.0).minimize(loss, grad_clip=clip))
    check_update(before, after, {"wa": np.clip(GRADS["wa"], -0.05, 0.05),
                                 "wb": np.clip(GRADS["wb"], -0.05, 0.05),
                                 "ba": GRADS["ba"], "bb": GRADS["bb"]}, 1.0)


def test_set_gradient_clip_on_some_parameters_and_groups():
    loss = build()
    with pytest.warns(DeprecationWarning):
        set_gradient_clip(GradientClipByGlobalNorm(1.5), param_list=["wa", "wb"])
    optimizer.SGD(0.1).minimize(loss)
    before, after = run_step()
    scale = global_scale([GRADS["wa"], GRADS["wb"]], 1.5)
    check_update(before, after, {"wa": GRADS["wa"] * scale, "wb": GRADS["wb"] * scale,
                                 "ba": GRADS["ba"], "bb": GRADS["bb"]}, 0.1)


def test_optimizer_grad_clip_wins_over_set_gradient_clip():
    loss = build()
    with pytest.warns(DeprecationWarning):
        set_gradient_clip(GradientClipByValue(0.01))
    optimizer.SGD(0.1).minimize(loss, grad_clip=GradientClipByValue(0.5))
    before, after = run_step()
    check_update(before, after, {k: np.clip(g, -0.5, 0.5) for k, g in GRADS.items()}, 0.1)


def test_clip_ops_sit_between_backward_and_the_update_with_the_optimize_role():
    loss = build()
    optimizer.SGD(0.1).minimize(loss, grad_clip=GradientClipByGlobalNorm(1.0))
    ops = graphc.default_main_program().global_block().ops
    roles = [(op.type, op.role) for op in ops]
    first_clip = next(i for i, (t, _) in enumerate(roles) if t == "square")
    assert all(r == "backward" for _, r in roles[first_clip - 1:first_clip])
    assert all(r == "optimize" for _, r in roles[first_clip:])
    assert [t for t, _ in roles].count("sgd") == 4
    assert max(i for i, (t, _) in enumerate(roles) if t == "elementwise_mul"
               and ops[i].role == "optimize") < min(i for i, (t, _) in enumerate(roles)
                                                    if t == "sgd")


# -- data parallelism: the clip sees the all-reduced gradient ---------------------------------
def _mlp_losses(n, clip_norm=0.1, fuse=False, reduce=False, clip=None):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 3
        x = layers.data("x", [-1, 8], "float32")
        y = layers.data("y", [-1, 1], "int64")
        logits = layers.fc(layers.fc(x, 16, act="relu"), 4)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        optimizer.Momentum(0.5, 0.9).minimize(
            loss, grad_clip=clip or GradientClipByGlobalNorm(clip_norm))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    program = main
    if n > 1:
        strategy = graphc.BuildStrategy()
        strategy.fuse_all_optimizer_ops = strategy.fuse_all_reduce_ops = strategy.enable_inplace \
            = fuse
        if reduce:
            strategy.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
        program = graphc.CompiledProgram(main, build_strategy=strategy).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(n))
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(4):
        xv = rng.normal(size=(16, 8)).astype("float32")
        feed = {"x": xv, "y": (xv[:, :4].argmax(1)[:, None]).astype("int64")}
        losses.append(float(np.mean(exe.run(program, feed=feed, fetch_list=[loss],
                                            scope=scope)[0])))
    params = {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}
    return losses, params


@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "fused-optimizer-allreduce-inplace"])
def test_four_devices_equal_one_device_with_global_norm_clipping(fuse):
    want_losses, want_params = _mlp_losses(1)
    losses, params = _mlp_losses(4, fuse=fuse)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    for name, value in want_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    assert want_losses[-1] < want_losses[0]
    # the clip is active: without it (a norm limit never reached) training differs
    _, unclipped = _mlp_losses(1, clip_norm=1e6)
    assert not np.allclose(unclipped["fc_0.w_0"], want_params["fc_0.w_0"], rtol=1e-3)


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda: GradientClipByValue(-1.0), "max must be > 0"),
    (lambda: GradientClipByValue(1.0, min=2.0), "min 2.0 must not exceed max 1.0"),
    (lambda: GradientClipByValue("a"), "max must be a finite number, got 'a'"),
    (lambda: GradientClipByValue(float("nan")), "max must be a finite number, got nan"),
    (lambda: GradientClipByValue(1.0, min="x"), "min must be a finite number"),
    (lambda: GradientClipByNorm(0), "clip_norm must be a positive number"),
    (lambda: GradientClipByGlobalNorm("1"), "clip_norm must be a positive number"),
    (lambda: GradientClipByGlobalNorm(1.0, need_clip=True), "need_clip must be a function"),
    (lambda: ErrorClipByValue(1.0), "ErrorClipByValue is not supported"),
])
def test_bad_clips_raise(make, message):
    with pytest.raises(ProgramError, match=message):
        make()


def test_set_gradient_clip_refuses_what_is_not_a_clip():
    with pytest.warns(DeprecationWarning), pytest.raises(ProgramError,
                                                         match="clip must be GradientClipBy"):
        set_gradient_clip("norm")
    with pytest.warns(DeprecationWarning), pytest.raises(ProgramError,
                                                         match="'nope' is not a parameter"):
        set_gradient_clip(GradientClipByNorm(1.0), param_list=["nope"])


def test_bad_grad_clip_and_sparse_gradients_raise():
    loss = build()
    with pytest.raises(ProgramError, match="grad_clip must be GradientClipByValue"):
        optimizer.SGD(0.1).minimize(loss, grad_clip=0.5)
    ids = graphc.data("ids", [4, 1], dtype="int64")
    emb = layers.embedding(ids, [10, 3], is_sparse=True, param_attr="emb")
    # every clip takes a row-sparse gradient (tests/test_nlpport.py checks the values); the
    # global norm merges its rows before squaring and scaling them
    optimizer.SGD(0.1).minimize(layers.mean(emb), grad_clip=GradientClipByGlobalNorm(1.0))
    types = [op.type for op in emb.block.program.global_block().ops]
    assert "squared_l2_norm" in types and "merge_selected_rows" in types


def test_fluid_clip_is_the_module():
    assert fluid.clip.GradientClipByGlobalNorm is GradientClipByGlobalNorm


@pytest.mark.parametrize("clip", ["global_norm", "norm", "value"])
def test_reduce_mode_with_clipping_equals_one_device(clip):
    """Reduce mode shards the update only where the gradient reaches it unchanged or through
    L2 decay; clipped gradients are all-reduced whole, so the clip sees the mean."""
    from graphc.fluid.clip import GradientClipByNorm, GradientClipByValue
    make = {"global_norm": lambda: GradientClipByGlobalNorm(0.1),
            "norm": lambda: GradientClipByNorm(0.05),
            "value": lambda: GradientClipByValue(0.01)}[clip]
    want_losses, want_params = _mlp_losses(1, clip=make())
    losses, params = _mlp_losses(4, reduce=True, clip=make())
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    for name, value in want_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)

