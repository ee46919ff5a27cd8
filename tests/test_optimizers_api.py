"""Issue 24's optimizer surface: Paddle 1.8's argument order and methods (apply_optimize,
backward callbacks, state_dict/set_dict, get_opti_var_name_list), Dpsgd, Lookahead and
Recompute against NumPy, L1Decay, fluid.gradients against finite differences, ParamAttr's
gradient_clip/do_model_average, unique_name.switch, and the refused optimizers."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from graphc.param_attr import ParamAttr

import graphc
import graphc.fluid as fluid
from graphc import layers, optimizer
from graphc.fluid._missing import MissingAPIError
from graphc.ir.errors import ProgramError

STEPS = 4


def _batches(steps, batch=6, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(batch, 3)), "c": rng.normal(size=(batch, 4))}
            for _ in range(steps)]


def _linear(make_opt, regularizer=None, minimize=True):
    """loss = mean((x @ w) * c): d loss / d w = x^T c / (batch * 4)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [-1, 3], "float64")
        c = layers.data("c", [-1, 4], "float64")
        out = layers.fc(x, 4, param_attr=ParamAttr(name="w", regularizer=regularizer),
                        bias_attr=False)
        loss = layers.mean(layers.elementwise_mul(out, c))
        opt = make_opt()
        if minimize:
            opt.minimize(loss)
    return main, startup, opt, loss


def _grad(feed):
    return feed["x"].T @ feed["c"] / feed["c"].size


LR = float(np.float32(0.1))  # the learning rate variable is float32, as Paddle's


# -- Paddle 1.8's signatures ----------------------------------------------------------------
@pytest.mark.parametrize("cls, expected", [
    (fluid.optimizer.SGDOptimizer, ["learning_rate", "parameter_list", "regularization",
                                    "grad_clip", "name"]),
    (fluid.optimizer.MomentumOptimizer, ["learning_rate", "momentum", "parameter_list",
                                         "use_nesterov", "regularization", "grad_clip",
                                         "name"]),
    (fluid.optimizer.AdamOptimizer, ["learning_rate", "beta1", "beta2", "epsilon",
                                     "parameter_list", "regularization", "grad_clip", "name",
                                     "lazy_mode"]),
    (fluid.optimizer.DpsgdOptimizer, ["learning_rate", "clip", "batch_size", "sigma",
                                      "parameter_list"]),
])
def test_init_takes_paddle_18_order(cls, expected):
    names = list(inspect.signature(cls.__init__).parameters)[1:]
    assert names[:len(expected)] == expected


def test_a_18_positional_call_is_served():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [-1, 3], "float32")
        layers.fc(x, 2)
        params = main.global_block().all_parameters()
    opt = fluid.optimizer.MomentumOptimizer(0.1, 0.9, params, True)
    assert opt._parameter_list == params and opt._use_nesterov is True


# -- methods ----------------------------------------------------------------------------------
def test_backward_calls_callbacks_and_apply_optimize_equals_minimize():
    seen = []
    results = []
    for split in (False, True):
        main, startup, opt, loss = _linear(lambda: optimizer.SGD(0.1), minimize=not split)
        if split:
            with graphc.program_guard(main, startup):
                pg = opt.backward(loss, callbacks=[lambda block, op: seen.append(op.type)])
                ops = opt.apply_optimize(loss, startup, pg)
            assert [op.type for op in ops] == ["sgd"]
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        for feed in _batches(2):
            exe.run(main, feed=feed, scope=scope)
        results.append(np.asarray(scope["w"]))
    assert seen  # one call per forward op differentiated
    np.testing.assert_array_equal(results[0], results[1])


def test_state_dict_round_trip_uses_paddles_names():
    main, startup, opt, _ = _linear(lambda: optimizer.Adam(0.01))
    exe = graphc.Executor()
    exe.run(startup)
    batches = _batches(3)
    for feed in batches[:2]:
        exe.run(main, feed=feed)
    names = opt.get_opti_var_name_list()
    assert {"w_moment1_0", "w_moment2_0", "w_beta1_pow_acc_0", "w_beta2_pow_acc_0"} <= set(names)
    state = opt.state_dict()
    assert {"w_moment1_0", "w_moment2_0", "w_beta1_pow_acc_0"} <= set(state)
    np.testing.assert_allclose(state["w_beta1_pow_acc_0"], [0.9 ** 3], rtol=1e-6)
    saved = {k: np.array(v) for k, v in state.items()}
    exe.run(main, feed=batches[2])
    assert not np.allclose(opt.state_dict()["w_moment1_0"], saved["w_moment1_0"])
    opt.set_dict(saved)
    for k, v in opt.state_dict().items():
        np.testing.assert_array_equal(v, saved[k], err_msg=k)
    with pytest.raises(ProgramError, match="not one of"):
        opt.set_dict({"nope": np.zeros(1)})


ROUND_TRIP = {
    "momentum": lambda: optimizer.Momentum(0.1, 0.9), "adagrad": lambda: optimizer.Adagrad(0.1),
    "adamax": lambda: optimizer.Adamax(0.1), "rmsprop": lambda: optimizer.RMSProp(0.1),
    "decayed_adagrad": lambda: optimizer.DecayedAdagrad(0.1),
    "adadelta": lambda: optimizer.Adadelta(0.1), "lamb": lambda: optimizer.Lamb(0.1),
    "lars": lambda: optimizer.LarsMomentum(0.1, 0.9), "ftrl": lambda: optimizer.Ftrl(0.1),
    "sgd": lambda: optimizer.SGD(0.1), "dpsgd": lambda: optimizer.Dpsgd(0.1, sigma=0.0),
}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_every_optimizer_state_round_trips(name):
    """state_dict after two steps, a third step, set_dict: the state is back, and a step from
    it gives what the third step gave."""
    main, startup, opt, _ = _linear(ROUND_TRIP[name])
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    batches = _batches(3)
    for feed in batches[:2]:
        exe.run(main, feed=feed, scope=scope)
    saved = {k: np.array(v) for k, v in opt.state_dict(scope).items()}
    assert set(saved) <= set(opt.get_opti_var_name_list()) and saved
    w = np.array(scope["w"])
    exe.run(main, feed=batches[2], scope=scope)
    after = np.array(scope["w"])
    opt.set_dict(saved, scope)
    scope["w"] = w
    for k, v in opt.state_dict(scope).items():
        np.testing.assert_array_equal(v, saved[k], err_msg=k)
    exe.run(main, feed=batches[2], scope=scope)
    np.testing.assert_array_equal(np.asarray(scope["w"]), after)


def test_state_dict_takes_an_explicit_scope():
    main, startup, opt, _ = _linear(lambda: optimizer.Momentum(0.1, 0.9))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    exe.run(main, feed=_batches(1)[0], scope=scope)
    state = opt.state_dict(scope)
    np.testing.assert_allclose(state["w_velocity_0"], _grad(_batches(1)[0]), rtol=1e-12)
    assert "w_velocity_0" not in opt.state_dict()  # the global scope never ran it


def test_model_average_has_the_optimizer_methods():
    main, startup, _, loss = _linear(lambda: optimizer.SGD(0.1))
    with graphc.program_guard(main, startup):
        avg = fluid.optimizer.ModelAverage(0.15, min_average_window=2, max_average_window=4)
    assert avg.apply_gradients([]) == []
    names = avg.get_opti_var_name_list()
    assert any(n.startswith("w_sum_1") for n in names)
    exe = graphc.Executor()
    exe.run(startup)
    exe.run(main, feed=_batches(1)[0])
    state = avg.state_dict()
    assert set(state) == set(names)
    avg.set_dict(state)


# -- Dpsgd -------------------------------------------------------------------------------------
@pytest.mark.parametrize("clip", [1e4, 0.05])
def test_dpsgd_without_noise_is_clipped_sgd(clip):
    main, startup, _, _ = _linear(lambda: fluid.optimizer.Dpsgd(0.1, clip=clip, batch_size=8.0,
                                                                sigma=0.0))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"])
    for feed in _batches(STEPS):
        exe.run(main, feed=feed, scope=scope)
        g = _grad(feed)
        norm = np.linalg.norm(g)
        scale = norm / clip if norm > clip else 1.0
        w = w - LR * g / scale
        np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6)


def test_dpsgd_noise_is_one_seeded_gaussian_draw_per_step():
    def run():
        main, startup, _, _ = _linear(lambda: optimizer.Dpsgd(0.1, clip=1e4, batch_size=2.0,
                                                              sigma=3.0))
        main.random_seed = startup.random_seed = 7
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        noises = []
        for feed in _batches(40):
            w = np.asarray(scope["w"])
            exe.run(main, feed=feed, scope=scope)
            n = (w - np.asarray(scope["w"]) - LR * _grad(feed)) / LR * 2.0
            np.testing.assert_allclose(n, n.flat[0], atol=1e-4)  # one draw, every element
            noises.append(n.flat[0])
        return np.array(noises)

    a, b = run(), run()
    np.testing.assert_array_equal(a, b)  # seeded
    assert len(set(np.round(a, 5))) == len(a)  # a new draw each step
    assert 1.5 < a.std() < 4.5 and abs(a.mean()) < 2.0  # N(0, 3^2)


# -- Lookahead ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k, alpha", [(2, 0.5), (3, 0.25), (1, 0.8)])
def test_lookahead_against_a_hand_computation(k, alpha):
    main, startup, opt, loss = _linear(lambda: optimizer.SGD(0.1), minimize=False)
    with graphc.program_guard(main, startup):
        look = fluid.optimizer.LookaheadOptimizer(opt, alpha=alpha, k=k)
        look.minimize(loss)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    fast = np.asarray(scope["w"])
    slow = fast.copy()
    np.testing.assert_array_equal(np.asarray(scope["w@SLOW"]), slow)
    for t, feed in enumerate(_batches(7), 1):
        exe.run(main, feed=feed, scope=scope)
        fast = fast - LR * _grad(feed)
        if t == 1:
            slow = fast.copy()
        elif t % k == 0:
            slow = alpha * fast + (1 - alpha) * slow
            fast = slow.copy()
        np.testing.assert_allclose(np.asarray(scope["w"]), fast, rtol=1e-10, err_msg=str(t))
        np.testing.assert_allclose(np.asarray(scope["w@SLOW"]), slow, rtol=1e-10)
    assert int(np.asarray(scope["@LOOKAHEAD_STEP_COUNTER@"])[0]) == 7


def test_lookahead_checks_its_arguments():
    with pytest.raises(ProgramError, match="alpha"):
        optimizer.Lookahead(optimizer.SGD(0.1), alpha=1.5)
    with pytest.raises(ProgramError, match="k must"):
        optimizer.Lookahead(optimizer.SGD(0.1), k=0)
    with pytest.raises(ProgramError, match="inner_optimizer"):
        optimizer.Lookahead("sgd")


# -- Recompute ---------------------------------------------------------------------------------
def test_recompute_equals_its_inner_optimizer():
    def run(recompute):
        main, startup = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, startup):
            x = layers.data("x", [-1, 3], "float64")
            c = layers.data("c", [-1, 4], "float64")
            h = layers.fc(x, 5, act="tanh", param_attr=ParamAttr(name="w1"))
            out = layers.fc(h, 4, param_attr=ParamAttr(name="w2"))
            loss = layers.mean(layers.elementwise_mul(out, c))
            opt = optimizer.Adam(0.05)
            if recompute:
                opt = fluid.optimizer.RecomputeOptimizer(opt)
                opt._set_checkpoints([h])
            opt.minimize(loss)
        assert main._recompute_checkpoints == [h.name] if recompute else True
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        for feed in _batches(3):
            exe.run(main, feed=feed, scope=scope)
        return [np.asarray(scope[n]) for n in ("w1", "w2")], opt.state_dict(scope)

    (plain, plain_state), (rec, rec_state) = run(False), run(True)
    for a, b in zip(plain, rec):
        np.testing.assert_array_equal(a, b)
    assert len(plain_state) == len(rec_state) == 17  # 4 parameters x 4 accumulators, the lr
    with pytest.raises(ProgramError, match="not supported"):
        fluid.optimizer.RecomputeOptimizer(optimizer.SGD(0.1)).load({})


def test_bad_checkpoints_are_refused():
    main, startup, opt, loss = _linear(lambda: optimizer.SGD(0.1), minimize=False)
    with graphc.program_guard(main, startup), pytest.raises(ProgramError, match="checkpoint"):
        fluid.backward.append_backward(loss, checkpoints=["no_such_var"])


def test_no_optimizer_is_refused():
    # -- issue 24: PipelineOptimizer, the last one refused, is real (test_pipeline_optimizer.py)
    assert fluid.optimizer.PipelineOptimizer is optimizer.PipelineOptimizer
    with pytest.raises(MissingAPIError, match="does not provide it"):
        fluid.optimizer.NoSuchOptimizer  # noqa: B018


# -- L1Decay -------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["param_attr", "optimizer"])
def test_l1_decay_adds_coeff_times_sign(where):
    reg = fluid.regularizer.L1DecayRegularizer(0.3)
    main, startup, _, _ = _linear(
        lambda: optimizer.SGD(0.1, regularization=reg if where == "optimizer" else None),
        regularizer=reg if where == "param_attr" else None)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"])
    for feed in _batches(STEPS):
        exe.run(main, feed=feed, scope=scope)
        w = w - LR * (_grad(feed) + 0.3 * np.sign(w))
        np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6)
    assert fluid.regularizer.L1Decay is fluid.regularizer.L1DecayRegularizer


# -- fluid.backward.gradients ---------------------------------------------------------------
def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_gradients_match_finite_differences():
    rng = np.random.default_rng(1)
    xv, wv, tg = rng.normal(size=(2, 3)), rng.normal(size=(3, 3)), rng.normal(size=(2, 3))
    x = graphc.data("x", [2, 3], "float64")
    x.stop_gradient = False
    w = graphc.data("w", [3, 3], "float64")
    w.stop_gradient = False
    h = layers.tanh(layers.matmul(x, w))
    y = layers.elementwise_mul(h, h)
    t = graphc.data("tg", [2, 3], "float64")
    gx, gw = fluid.backward.gradients([y], [x, w], target_gradients=[t])
    # a second call in the same program: its own gradient names, the first's kept
    (gx_ones,) = fluid.backward.gradients(y, x)
    assert gx_ones.name != gx.name
    got = graphc.Executor().run(feed={"x": xv, "w": wv, "tg": tg},
                                fetch_list=[gx, gw, gx_ones])

    def f(xx, ww, weights):
        return np.sum(np.tanh(xx @ ww) ** 2 * weights)

    np.testing.assert_allclose(got[0], _fd(lambda a: f(a, wv, tg), xv), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[1], _fd(lambda a: f(xv, a, tg), wv), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got[2], _fd(lambda a: f(a, wv, 1.0), xv), rtol=1e-6, atol=1e-8)


def test_gradients_is_also_top_level():
    assert fluid.gradients is fluid.backward.gradients


def test_gradients_with_respect_to_an_intermediate_value():
    xv = np.linspace(-1, 1, 6).reshape(2, 3)
    x = graphc.data("x", [2, 3], "float64")
    h = layers.tanh(x)  # x has stop_gradient: only h's own gradient is asked for
    y = layers.elementwise_mul(h, h)
    (gh,) = fluid.backward.gradients(y, h)
    (got,) = graphc.Executor().run(feed={"x": xv}, fetch_list=[gh])
    np.testing.assert_allclose(got, 2 * np.tanh(xv), rtol=1e-12)


def test_gradients_of_several_targets_sum_and_unknown_batch():
    xv = np.arange(6.0).reshape(2, 3) / 5
    x = graphc.data("x", [-1, 3], "float64")
    x.stop_gradient = False
    y1 = layers.square(x)
    y2 = layers.reduce_sum(layers.elementwise_mul(y1, x))  # y1 is also a target
    s = graphc.data("s", [-1, 3], "float64")  # stop_gradient: no gradient
    (gx, gs) = fluid.backward.gradients([y1, y2], [x, s])
    assert gs is None
    (got,) = graphc.Executor().run(feed={"x": xv, "s": xv}, fetch_list=[gx])
    # d/dx [sum(x^2) + sum(x^3)] (ones for y1) and d y2 / d y1 = x flows into y1's gradient
    np.testing.assert_allclose(got, 2 * xv + 3 * xv ** 2, rtol=1e-12)


# -- ParamAttr and unique_name --------------------------------------------------------------
def test_param_attr_gradient_clip_and_do_model_average():
    attr = fluid.ParamAttr(name="w", gradient_clip=fluid.clip.GradientClipByValue(0.01),
                           do_model_average=False)
    x = layers.data("x", [-1, 3], "float64")
    c = layers.data("c", [-1, 4], "float64")
    out = layers.fc(x, 4, param_attr=attr, bias_attr=False)
    loss = layers.mean(layers.elementwise_mul(out, c))
    param = graphc.default_main_program().global_block().var("w")
    assert param.do_model_average is False
    optimizer.SGD(0.1).minimize(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    w = np.asarray(graphc.global_scope()["w"])
    feed = _batches(1)[0]
    exe.run(feed=feed)
    np.testing.assert_allclose(np.asarray(graphc.global_scope()["w"]),
                               w - LR * np.clip(_grad(feed), -0.01, 0.01), rtol=1e-6)


def test_unique_name_switch_takes_a_name_checker():
    gen = fluid.unique_name.UniqueNameGenerator("p_")
    old = fluid.unique_name.switch(gen, new_para_name_checker=object())
    try:
        assert fluid.unique_name.generate("fc") == "p_fc_0"
    finally:
        fluid.unique_name.switch(old)
    assert fluid.unique_name.generate("fc") == "fc_0"
