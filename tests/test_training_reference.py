"""Training matches a NumPy re-implementation of Paddle's formulas, step by step.

An MLP, an MLP with batch_norm and the demo CNN are trained 5 steps with SGD, Momentum
(plain and Nesterov), Adam and AdamW (with and without L2Decay); every step's loss, and the
parameters, running statistics and optimizer accumulators after the last step, must equal
those of `tests/numpy_reference.py`, which starts from the same initial parameters.

Tolerances: the reference runs in float64 and graphc in float32, so the comparison measures
float32 rounding accumulated over 5 forward/backward/update steps. Losses (~2.3) compare at
rtol 1e-5, as the issue asks (the worst case seen is 9e-7, the CNN with Adam). Parameters and
accumulators compare at rtol 1e-4 with atol 1e-6: an element of a weight gradient is a long
float32 sum (over the batch, the conv windows, through batch_norm's statistics) whose error
scales with its largest terms, not with the element, and Adam divides by sqrt(moment2), so
small elements carry relative errors of up to ~1e-3 (seen: 2e-2 on a 1e-5 velocity); the
absolute floor covers them (the largest excess over rtol 1e-4 seen is 3e-7). Formula errors
are far larger: Nesterov with the old velocity, beta-pow accumulators that do not advance,
epsilon without the sqrt(1 - beta2^t) factor, a halved L2 or AdamW coefficient, or a missing
ParamAttr learning-rate factor each fail these tests.

One exception: with Adam, the fc biases right before a batch_norm are not compared (see
`_train_both`); their exact gradient is 0, so their updates are float32 noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import graphc.demo
import numpy as np
import numpy_reference as ref
import pytest
from graphc.param_attr import ParamAttr
from graphc.regularizer import L2Decay

import graphc
from graphc import layers, models, optimizer

STEPS = 5
LOSS_RTOL = 1e-5
PARAM_RTOL, PARAM_ATOL = 1e-4, 1e-6

# ----------------------------------------------------------------------------- set-up


def _mlp(batch_norm):
    def build():
        m = models.mlp(input_dim=6, hidden=(16, 16), batch_norm=batch_norm)
        return m, ref.MLP(2, batch_norm), "x", (8, 6)
    return build


def _cnn():
    m = models.demo_cnn(image_shape=(1, 8, 8), channels=(4, 8))
    return m, ref.DemoCNN(2), "image", (4, 1, 8, 8)


MODELS = {"mlp": _mlp(False), "mlp_bn": _mlp(True), "cnn": _cnn}

# name -> (graphc optimizer, reference optimizer), built fresh per test
OPTIMIZERS = {
    "sgd": (lambda: optimizer.SGD(0.1), lambda: ref.SGD(0.1)),
    "momentum": (lambda: optimizer.Momentum(0.05, momentum=0.9),
                 lambda: ref.Momentum(0.05, 0.9)),
    "nesterov": (lambda: optimizer.Momentum(0.05, momentum=0.9, use_nesterov=True),
                 lambda: ref.Momentum(0.05, 0.9, use_nesterov=True)),
    "adam": (lambda: optimizer.Adam(0.01), lambda: ref.Adam(0.01)),
    # A large decay, so that a missing or mis-scaled decay shows well above tolerance, and a
    # large epsilon, so that Paddle's epsilon * sqrt(1 - beta2^t) matters (gradients ~1e-3).
    "adamw": (lambda: optimizer.AdamW(0.01, epsilon=1e-4, weight_decay=0.5),
              lambda: ref.AdamW(0.01, epsilon=1e-4, weight_decay=0.5)),
    "sgd_l2": (lambda: optimizer.SGD(0.1, regularization=L2Decay(1e-3)),
               lambda: ref.SGD(0.1, l2_decay=1e-3)),
    "momentum_l2": (lambda: optimizer.Momentum(0.05, momentum=0.9,
                                               regularization=L2Decay(1e-3)),
                    lambda: ref.Momentum(0.05, 0.9, l2_decay=1e-3)),
    "adam_l2": (lambda: optimizer.Adam(0.01, epsilon=1e-4, regularization=L2Decay(1e-3)),
                lambda: ref.Adam(0.01, epsilon=1e-4, l2_decay=1e-3)),
}


def _feeds(feed_name, shape, seed=0, steps=STEPS):
    rng = np.random.default_rng(seed)
    return [{feed_name: rng.standard_normal(shape).astype("float32"),
             "label": rng.integers(0, 10, (shape[0], 1)).astype("int64")}
            for _ in range(steps)]


def _start(model):
    """Run startup on a private scope; returns (executor, scope, float64 copy of params)."""
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(model.startup, scope=scope)
    names = [p.name for p in model.main.global_block().all_parameters()]
    return exe, scope, ref.as_float64({n: scope[n] for n in names})


@dataclass
class Run:
    losses: list[float]
    ref_losses: list[float]
    scope: graphc.Scope
    initial: dict  # the parameters after startup, float64
    params: dict  # the reference's parameters after training
    lrs: list[float]  # graphc's learning rate of each step, when fetched
    skipped: set  # reference names not compared with the scope


def _train_both(model, ref_model, ref_opt, feeds, lr_var=None, ref_lrs=None) -> Run:
    """Train graphc and the reference side by side from the same initial parameters."""
    exe, scope, params = _start(model)
    initial = {k: v.copy() for k, v in params.items()}
    # Biases that a batch_norm cancels have an exact gradient of 0, so graphc's is float32
    # rounding noise (~1e-9) where the reference's is ~1e-17. SGD and Momentum scale that
    # noise by lr (harmless), but Adam normalises it to a step of about +-lr in a random
    # direction. The loss does not see these biases; the running mean does, so the reference
    # adopts graphc's values for them after every step and their Adam state is not compared.
    adopted = ref_model.cancelled_by_batch_norm() if isinstance(ref_opt, ref.Adam) else []
    fetch = [model.loss] + ([lr_var] if lr_var is not None else [])
    losses, ref_losses, lrs = [], [], []
    for step, feed in enumerate(feeds):
        out = exe.run(model.main, feed=feed, fetch_list=fetch, scope=scope)
        losses.append(float(out[0][0]))
        if lr_var is not None:
            lrs.append(float(out[1].reshape(-1)[0]))
        x = next(v for k, v in feed.items() if k != "label")
        loss, grads = ref_model.loss_and_grads(params, x, feed["label"])
        ref_losses.append(loss)
        ref_opt.step(params, grads, None if ref_lrs is None else ref_lrs[step])
        for name in adopted:
            params[name] = np.array(scope[name], np.float64)
    skipped = {n for n in {**params, **ref_opt.state} if n.startswith(tuple(adopted))}
    return Run(losses, ref_losses, scope, initial, params, lrs, skipped)


def _assert_matches(run: Run, ref_opt):
    """Every step's loss, then every parameter and accumulator after the last step."""
    np.testing.assert_allclose(run.losses, run.ref_losses, rtol=LOSS_RTOL)
    expected = {**run.params, **ref_opt.state}
    for name in sorted(set(expected) - run.skipped):
        np.testing.assert_allclose(run.scope[name], expected[name], rtol=PARAM_RTOL,
                                   atol=PARAM_ATOL, err_msg=name)


# ----------------------------------------------------------------------------- the oracle


@pytest.mark.parametrize("model_name", ["mlp_bn", "cnn"])
def test_reference_gradients_match_finite_differences(model_name):
    """The oracle itself: its backward agrees with central differences of its forward."""
    rng = np.random.default_rng(1)
    if model_name == "cnn":
        net = ref.DemoCNN(2)
        params = {"conv2d_0.w_0": rng.normal(0, 0.5, (2, 1, 3, 3)),
                  "conv2d_1.w_0": rng.normal(0, 0.5, (3, 2, 3, 3)),
                  "fc_0.w_0": rng.normal(0, 0.5, (3, 5)), "fc_0.b_0": rng.normal(0, 0.1, 5)}
        for i, c in enumerate((2, 3)):
            params |= {f"batch_norm_{i}.w_0": rng.uniform(0.5, 1.5, c),
                       f"batch_norm_{i}.b_0": rng.normal(0, 0.1, c),
                       f"batch_norm_{i}.w_1": np.zeros(c), f"batch_norm_{i}.w_2": np.ones(c)}
        x = rng.standard_normal((3, 1, 4, 4))
    else:
        net = ref.MLP(1, True)
        params = {"fc_0.w_0": rng.normal(0, 0.5, (4, 6)), "fc_0.b_0": rng.normal(0, 0.1, 6),
                  "batch_norm_0.w_0": rng.uniform(0.5, 1.5, 6),
                  "batch_norm_0.b_0": rng.normal(0, 0.1, 6),
                  "batch_norm_0.w_1": np.zeros(6), "batch_norm_0.w_2": np.ones(6),
                  "fc_1.w_0": rng.normal(0, 0.5, (6, 5)), "fc_1.b_0": rng.normal(0, 0.1, 5)}
        x = rng.standard_normal((5, 4))
    label = rng.integers(0, 5, (x.shape[0], 1))
    _, grads = net.loss_and_grads(dict(params), x, label)
    assert sorted(grads) == sorted(net.trainable(params))
    h = 1e-6
    for name, g in grads.items():
        numeric = np.zeros_like(g)
        for idx in np.ndindex(g.shape):
            plus, minus = dict(params), dict(params)
            plus[name], minus[name] = params[name].copy(), params[name].copy()
            plus[name][idx] += h
            minus[name][idx] -= h
            numeric[idx] = (net.loss_and_grads(plus, x, label)[0]
                            - net.loss_and_grads(minus, x, label)[0]) / (2 * h)
        np.testing.assert_allclose(g, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_reference_adam_first_step_is_lr_times_sign():
    """Paddle's bias correction makes Adam's first step lr * g / (|g| + eps')."""
    opt = ref.Adam(0.1)
    params = {"w": np.array([1.0, 2.0, -3.0])}
    opt.step(params, {"w": np.array([0.5, -2.0, 1e-3])})
    np.testing.assert_allclose(params["w"], [0.9, 2.1, -3.1], rtol=1e-6)
    assert opt.state["w_beta1_pow_acc_0"][0] == pytest.approx(0.81)
    assert opt.state["w_beta2_pow_acc_0"][0] == pytest.approx(0.999 ** 2)


# ----------------------------------------------------------------------------- training


# Every model with SGD, Momentum and Adam (the matrix); Nesterov, AdamW and L2Decay
# on some models only: each case compiles two XLA programs, and the file must stay fast.
CASES = [(m, o) for m in MODELS for o in ("sgd", "momentum", "adam")] + [
    ("mlp", "nesterov"), ("mlp", "adamw"), ("mlp", "sgd_l2"),
    ("mlp_bn", "adam_l2"), ("cnn", "momentum_l2")]


@pytest.mark.parametrize(("model_name", "opt_name"), CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_training_matches_numpy_reference(model_name, opt_name):
    model, ref_model, feed_name, shape = MODELS[model_name]()
    make_opt, make_ref_opt = OPTIMIZERS[opt_name]
    with graphc.program_guard(model.main, model.startup):
        make_opt().minimize(model.loss)
    ref_opt = make_ref_opt()
    run = _train_both(model, ref_model, ref_opt, _feeds(feed_name, shape))

    _assert_matches(run, ref_opt)
    assert abs(run.losses[-1] - run.losses[0]) > 1e-3, "training did not move the loss"
    scope = run.scope
    for name in run.skipped & set(run.params):  # Adam moves each by at most ~lr a step
        assert np.abs(scope[name]).max() <= STEPS * 0.01 * 1.01
    # the state compared above carries Paddle's names
    if opt_name.startswith(("momentum", "nesterov")):
        assert "fc_0.w_0_velocity_0" in ref_opt.state
    if opt_name.startswith("adam"):
        assert "fc_0.w_0_moment1_0" in ref_opt.state
        assert scope["fc_0.w_0_beta1_pow_acc_0"][0] == pytest.approx(0.9 ** (STEPS + 1))
    if model_name != "mlp":
        assert "batch_norm_0.w_1" not in run.skipped
        assert not np.allclose(scope["batch_norm_0.w_1"], 0.0)


# ----------------------------------------------------------------------------- LR schedules

# (graphc schedule, reference schedule, documented LRs of runs 0..5)
SCHEDULES = {
    "piecewise": (lambda: layers.piecewise_decay([2, 4], [0.1, 0.05, 0.01]),
                  lambda s: ref.piecewise_decay(s, [2, 4], [0.1, 0.05, 0.01]),
                  [0.1, 0.1, 0.05, 0.05, 0.01, 0.01]),
    # epoch = floor(step / 2); lr = 0.1 * (cos(epoch * pi / 3) + 1) / 2
    "cosine": (lambda: layers.cosine_decay(0.1, step_each_epoch=2, epochs=3),
               lambda s: ref.cosine_decay(s, 0.1, 2, 3),
               [0.1, 0.1, 0.075, 0.075, 0.025, 0.025]),
    "warmup": (lambda: layers.linear_lr_warmup(0.1, warmup_steps=3, start_lr=0.0, end_lr=0.1),
               lambda s: ref.linear_lr_warmup(s, 0.1, 3, 0.0, 0.1),
               [0.0, 0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.1]),
    # warm-up in front of another schedule: after warm-up the inner schedule's value
    "warmup_piecewise": (
        lambda: layers.linear_lr_warmup(layers.piecewise_decay([4], [0.1, 0.01]),
                                        warmup_steps=2, start_lr=0.02, end_lr=0.1),
        lambda s: ref.linear_lr_warmup(s, ref.piecewise_decay(s, [4], [0.1, 0.01]),
                                       2, 0.02, 0.1),
        [0.02, 0.06, 0.1, 0.1, 0.01, 0.01]),
}


def test_lr_schedules_give_documented_rates():
    lr_vars = {name: make() for name, (make, _, _) in SCHEDULES.items()}
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(graphc.default_startup_program(), scope=scope)
    names = list(lr_vars)
    got = {name: [] for name in names}
    for _ in range(6):
        out = exe.run(graphc.default_main_program(), fetch_list=[lr_vars[n] for n in names],
                      scope=scope)
        for name, value in zip(names, out):
            got[name].append(float(np.asarray(value).reshape(-1)[0]))
    for name, (_, ref_fn, documented) in SCHEDULES.items():
        np.testing.assert_allclose(got[name], documented, rtol=1e-6, atol=1e-8, err_msg=name)
        np.testing.assert_allclose([ref_fn(s) for s in range(6)], documented, rtol=1e-12,
                                   atol=1e-15, err_msg=name)
    assert scope["@LR_DECAY_COUNTER@"][0] == 5.0


@pytest.mark.parametrize("schedule", ["cosine", "warmup_piecewise"])
def test_sgd_with_scheduled_lr_matches_reference(schedule):
    make, ref_fn, documented = SCHEDULES[schedule]
    model, ref_model, feed_name, shape = MODELS["mlp"]()
    with graphc.program_guard(model.main, model.startup):
        lr = make()
        optimizer.SGD(lr).minimize(model.loss)
    ref_opt = ref.SGD(None)
    ref_lrs = [ref_fn(s) for s in range(STEPS)]
    run = _train_both(model, ref_model, ref_opt, _feeds(feed_name, shape), lr_var=lr,
                      ref_lrs=ref_lrs)
    np.testing.assert_allclose(run.lrs, documented[:STEPS], rtol=1e-6, atol=1e-8)
    _assert_matches(run, ref_opt)


def test_param_attr_learning_rate_scales_that_parameter():
    x = graphc.data("x", [-1, 6], "float32")
    label = graphc.data("label", [-1, 1], "int64")
    hidden = layers.fc(x, 16, act="relu", param_attr=ParamAttr(learning_rate=0.5))
    loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(hidden, 10), label))
    optimizer.Momentum(0.05, momentum=0.9).minimize(loss)
    model = models.Model(graphc.default_main_program(), graphc.default_startup_program(),
                         [x, label], loss)
    ref_opt = ref.Momentum(0.05, 0.9, param_lr={"fc_0.w_0": 0.5})
    feeds = _feeds("x", (8, 6))
    run = _train_both(model, ref.MLP(1, False), ref_opt, feeds)
    _assert_matches(run, ref_opt)

    # The factor matters: without it, the reference ends far outside the tolerance.
    unscaled, unscaled_opt = run.initial, ref.Momentum(0.05, 0.9)
    for feed in feeds:
        _, grads = ref.MLP(1, False).loss_and_grads(unscaled, feed["x"], feed["label"])
        unscaled_opt.step(unscaled, grads)
    assert not np.allclose(run.scope["fc_0.w_0"], unscaled["fc_0.w_0"], rtol=1e-3)


# ----------------------------------------------------------------------------- convergence


def test_demo_converges():
    """The demo CNN on the 8x8 digits reaches ~0.97 test accuracy after 3 epochs (~0.98
    after the default 8); 0.9 leaves room for platform-dependent float differences while
    still failing for a model that does not learn (chance is 0.1, a broken update or
    gradient stays far below 0.9)."""
    result = graphc.demo.train_demo(epochs=3, progress=False, log=None)
    assert result.test_accuracy >= 0.9
    assert result.losses[-1] < result.losses[0]
    assert all(math.isfinite(v) for v in result.losses)
