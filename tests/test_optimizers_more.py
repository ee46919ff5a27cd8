"""Paddle 1.8's other optimizers (Adagrad, DecayedAdagrad, Adamax, Adadelta, RMSProp, Lamb,
LarsMomentum, Ftrl) and parameter averages (ModelAverage, ExponentialMovingAverage): several
steps against NumPy versions of Paddle's kernels, accumulator names, row-sparse gradients,
training, 4 devices == 1, fuse-all-optimizer-ops declining them, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.param_attr import ParamAttr

import graphc
from graphc import layers, optimizer
from graphc.ir.errors import GraphcError
from graphc.passes import PassManager, make_pass

STEPS = 4


# -- NumPy versions of Paddle 1.8's kernels (written from the formulas, not from graphc) -------
def np_adagrad(p, g, s, lr, epsilon=1e-6, **_):
    s["moment"] = s["moment"] + g * g
    return p - lr * g / (np.sqrt(s["moment"]) + epsilon)


def np_decayed_adagrad(p, g, s, lr, decay=0.95, epsilon=1e-6, **_):
    s["moment"] = decay * s["moment"] + (1 - decay) * g * g
    return p - lr * g / (np.sqrt(s["moment"]) + epsilon)


def np_adamax(p, g, s, lr, beta1=0.9, beta2=0.999, epsilon=1e-8, **_):
    s["moment"] = beta1 * s["moment"] + (1 - beta1) * g
    s["inf_norm"] = np.maximum(beta2 * s["inf_norm"] + epsilon, np.abs(g))
    out = p - lr / (1 - s["beta1_pow_acc"]) * s["moment"] / s["inf_norm"]
    s["beta1_pow_acc"] = s["beta1_pow_acc"] * beta1
    return out


def np_adadelta(p, g, s, lr, rho=0.95, epsilon=1e-6, **_):
    s["_avg_squared_grad"] = rho * s["_avg_squared_grad"] + (1 - rho) * g * g
    d = -np.sqrt((s["_avg_squared_update"] + epsilon) / (s["_avg_squared_grad"] + epsilon)) * g
    s["_avg_squared_update"] = rho * s["_avg_squared_update"] + (1 - rho) * d * d
    return p + d


def np_rmsprop(p, g, s, lr, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False, **_):
    s["mean_square"] = rho * s["mean_square"] + (1 - rho) * g * g
    if centered:
        s["mean_grad"] = rho * s["mean_grad"] + (1 - rho) * g
        denom = np.sqrt(s["mean_square"] - s["mean_grad"] ** 2 + epsilon)
    else:
        denom = np.sqrt(s["mean_square"] + epsilon)
    s["momentum"] = momentum * s["momentum"] + lr * g / denom
    return p - s["momentum"]


def np_lamb(p, g, s, lr, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, **_):
    s["moment1"] = beta1 * s["moment1"] + (1 - beta1) * g
    s["moment2"] = beta2 * s["moment2"] + (1 - beta2) * g * g
    r = s["moment1"] / (np.sqrt(s["moment2"]) + epsilon) + lamb_weight_decay * p
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    ratio = pn / rn if pn > 0 and rn > 0 else 1.0
    return p - lr * ratio * r


def np_lars(p, g, s, lr, momentum=0.9, lars_coeff=0.001, lars_weight_decay=0.0005, **_):
    pn, gn = np.linalg.norm(p), np.linalg.norm(g)
    local = lr * lars_coeff * pn / (gn + lars_weight_decay * pn) if pn > 0 and gn > 0 else lr
    s["velocity"] = momentum * s["velocity"] + local * (g + lars_weight_decay * p)
    return p - s["velocity"]


def np_ftrl(p, g, s, lr, l1=0.0, l2=0.0, lr_power=-0.5, **_):
    l1, l2 = l1 + 1e-10, l2 + 1e-10
    sq, lin = s["squared"], s["linear"]
    new_sq = sq + g * g
    if lr_power == -0.5:
        old_step, new_step = np.sqrt(sq), np.sqrt(new_sq)
    else:
        old_step, new_step = sq ** -lr_power, new_sq ** -lr_power
    lin = lin + g - (new_step - old_step) / lr * p
    out = np.where(np.abs(lin) > l1, (l1 * np.sign(lin) - lin) / (new_step / lr + 2 * l2), 0.0)
    s["squared"], s["linear"] = new_sq, lin
    return out


# name: (constructor, kwargs, NumPy step, accumulators and their initial values)
CASES = {
    "adagrad": (optimizer.Adagrad, {"learning_rate": 0.2, "initial_accumulator_value": 0.1},
                np_adagrad, {"moment": 0.1}),
    "decayed_adagrad": (optimizer.DecayedAdagrad, {"learning_rate": 0.05, "decay": 0.9},
                        np_decayed_adagrad, {"moment": 0.0}),
    "adamax": (optimizer.Adamax, {"learning_rate": 0.05, "beta1": 0.8, "beta2": 0.99},
               np_adamax, {"moment": 0.0, "inf_norm": 0.0, "beta1_pow_acc": 0.8}),
    "adadelta": (optimizer.Adadelta, {"learning_rate": 0.5, "rho": 0.9, "epsilon": 1e-4},
                 np_adadelta, {"_avg_squared_grad": 0.0, "_avg_squared_update": 0.0}),
    "rmsprop": (optimizer.RMSProp, {"learning_rate": 0.05, "momentum": 0.5},
                np_rmsprop, {"momentum": 0.0, "mean_square": 0.0, "mean_grad": 0.0}),
    "rmsprop_centered": (optimizer.RMSProp, {"learning_rate": 0.05, "rho": 0.9,
                                             "centered": True, "epsilon": 1e-4},
                         np_rmsprop, {"momentum": 0.0, "mean_square": 0.0, "mean_grad": 0.0}),
    "lamb": (optimizer.Lamb, {"learning_rate": 0.05, "lamb_weight_decay": 0.1}, np_lamb,
             {"moment1": 0.0, "moment2": 0.0}),
    "lars_momentum": (optimizer.LarsMomentum, {"learning_rate": 0.5, "momentum": 0.9,
                                               "lars_coeff": 0.01}, np_lars, {"velocity": 0.0}),
    "ftrl": (optimizer.Ftrl, {"learning_rate": 0.1, "l1": 0.001, "l2": 0.01}, np_ftrl,
             {"squared": 0.0, "linear": 0.0}),
    "ftrl_power": (optimizer.Ftrl, {"learning_rate": 0.1, "lr_power": -0.7}, np_ftrl,
                   {"squared": 0.0, "linear": 0.0}),
}


def _batches(steps, batch=6, seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(batch, 3)).astype(dtype),
             "c": rng.normal(size=(batch, 4)).astype(dtype)} for _ in range(steps)]


def _linear_program(make_opt, dtype="float64", lr_factor=1.0):
    """loss = mean((x @ w) * c), so d loss / d w = x^T c / (batch * 4), known in NumPy."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [-1, 3], dtype)
        c = layers.data("c", [-1, 4], dtype)
        out = layers.fc(x, 4, param_attr=ParamAttr(name="w", learning_rate=lr_factor),
                        bias_attr=False)
        loss = layers.mean(layers.elementwise_mul(out, c))
        opt = make_opt()
        opt.minimize(loss)
    return main, startup, opt


@pytest.mark.parametrize("case", sorted(CASES))
def test_steps_equal_numpy_reference(case):
    cls, kwargs, step, accs = CASES[case]
    main, startup, opt = _linear_program(lambda: cls(**kwargs))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"], dtype=np.float64)
    state = {name: np.full([1] if "pow" in name else w.shape, value) for name, value in
             accs.items()}
    # the learning rate is a float32 [1] variable, as in Paddle
    lr = float(np.float32(kwargs["learning_rate"]))
    params = {k: v for k, v in kwargs.items() if k != "learning_rate"}
    for feed in _batches(STEPS):
        exe.run(main, feed=feed, scope=scope)
        g = feed["x"].T @ feed["c"] / feed["c"].size
        w = step(w, g, state, lr, **params)
        np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6, atol=1e-9)
        for name, want in state.items():
            var = opt.get_accumulator(name, "w")
            assert var.name == f"w_{name}_0"  # Paddle's accumulator names
            np.testing.assert_allclose(np.asarray(scope[var.name]), want, rtol=1e-6,
                                       atol=1e-9, err_msg=name)


@pytest.mark.parametrize("case", ["adagrad", "rmsprop", "lamb"])
def test_parameter_learning_rate_multiplier(case):
    """ParamAttr(learning_rate=f) scales the step size, as for the other optimizers."""
    cls, kwargs, step, accs = CASES[case]
    main, startup, _ = _linear_program(lambda: cls(**kwargs), lr_factor=0.5)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"], dtype=np.float64)
    state = {name: np.full(w.shape, value) for name, value in accs.items()}
    lr = float(np.float32(kwargs["learning_rate"])) * 0.5
    for feed in _batches(2):
        exe.run(main, feed=feed, scope=scope)
        w = step(w, feed["x"].T @ feed["c"] / feed["c"].size, state, lr,
                 **{k: v for k, v in kwargs.items() if k != "learning_rate"})
    np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6, atol=1e-9)


def test_regularization_and_lamb_exclusion():
    """L2Decay adds c * w to the gradient first; Lamb's exclude_from_weight_decay_fn gets the
    Parameter and turns its weight decay off."""
    seen = []

    def exclude(param):
        seen.append(param.name)
        return True

    main, startup, opt = _linear_program(lambda: optimizer.Lamb(
        0.05, lamb_weight_decay=0.3, regularization=graphc.regularizer.L2Decay(0.1),
        exclude_from_weight_decay_fn=exclude))
    assert seen == ["w"]
    lamb_op, = [op for op in main.global_block().ops if op.type == "lamb"]
    assert lamb_op.attrs["weight_decay"] == 0.0
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"], dtype=np.float64)
    state = {"moment1": np.zeros_like(w), "moment2": np.zeros_like(w)}
    for feed in _batches(3):
        exe.run(main, feed=feed, scope=scope)
        g = feed["x"].T @ feed["c"] / feed["c"].size + 0.1 * w
        w = np_lamb(w, g, state, float(np.float32(0.05)), lamb_weight_decay=0.0)
    np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("case", ["adagrad", "ftrl"])
def test_grad_clip_clips_before_the_update(case):
    """grad_clip= (graphc.fluid.clip's, applied by the base class) reaches these optimizers."""
    from graphc.fluid.clip import GradientClipByValue
    cls, kwargs, step, accs = CASES[case]
    clip = GradientClipByValue(0.02)
    main, startup, _ = _linear_program(lambda: cls(**kwargs, grad_clip=clip))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["w"], dtype=np.float64)
    state = {name: np.full(w.shape, value) for name, value in accs.items()}
    for feed in _batches(2):
        exe.run(main, feed=feed, scope=scope)
        g = np.clip(feed["x"].T @ feed["c"] / feed["c"].size, -0.02, 0.02)
        w = step(w, g, state, float(np.float32(kwargs["learning_rate"])),
                 **{k: v for k, v in kwargs.items() if k != "learning_rate"})
    np.testing.assert_allclose(np.asarray(scope["w"]), w, rtol=1e-6, atol=1e-9)


# -- row-sparse gradients -------------------------------------------------------------------
def _embedding_program(make_opt, is_sparse):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        main.random_seed = startup.random_seed = 3
        ids = layers.data("ids", [-1, 1], "int64")
        c = layers.data("c", [-1, 4], "float32")
        emb = layers.embedding(ids, size=[10, 4], is_sparse=is_sparse,
                               param_attr=ParamAttr(name="emb"))
        loss = layers.mean(layers.elementwise_mul(emb, c))
        make_opt().minimize(loss)
    return main, startup, loss


def _embedding_feeds(steps=3):
    rng = np.random.default_rng(1)
    # ids repeat within a batch and rows 7..9 are never looked up
    return [{"ids": np.array([[0], [3], [3], [5], [1], [0]], "int64"),
             "c": rng.normal(size=(6, 4)).astype("float32")} for _ in range(steps)]


def _train_embedding(make_opt, is_sparse):
    main, startup, _ = _embedding_program(make_opt, is_sparse)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    start = np.asarray(scope["emb"]).copy()
    for feed in _embedding_feeds():
        exe.run(main, feed=feed, scope=scope)
    return start, np.asarray(scope["emb"])


DENSE_EQUAL = ["adagrad", "decayed_adagrad", "adamax", "adadelta", "rmsprop",
               "rmsprop_centered", "lamb", "lars_momentum"]


@pytest.mark.parametrize("case", DENSE_EQUAL)
def test_sparse_gradient_equals_dense(case):
    """Adagrad's sparse kernel (its rows), RMSProp's and Lamb's (every row, g = 0 elsewhere)
    and the densified rest all equal the dense update."""
    cls, kwargs, _, _ = CASES[case]
    _, dense = _train_embedding(lambda: cls(**kwargs), is_sparse=False)
    start, sparse = _train_embedding(lambda: cls(**kwargs), is_sparse=True)
    np.testing.assert_allclose(sparse, dense, rtol=1e-5, atol=1e-6)
    assert not np.allclose(sparse, start)


def test_sparse_ftrl_updates_only_its_rows():
    """Paddle's sparse FTRL kernel: looked-up rows as the dense formula, the others untouched
    (the dense update would reset a row without gradient from its zero linear accumulator)."""
    kwargs = CASES["ftrl"][1]
    main, startup, _ = _embedding_program(lambda: optimizer.Ftrl(**kwargs), is_sparse=True)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.asarray(scope["emb"], dtype=np.float64)
    state = {"squared": np.zeros_like(w), "linear": np.zeros_like(w)}
    lr = float(np.float32(kwargs["learning_rate"]))
    for feed in _embedding_feeds():
        exe.run(main, feed=feed, scope=scope)
        g = np.zeros_like(w)
        np.add.at(g, feed["ids"][:, 0], feed["c"] / feed["c"].size)
        rows = np.unique(feed["ids"][:, 0])
        sub = {k: v[rows] for k, v in state.items()}
        w[rows] = np_ftrl(w[rows], g[rows], sub, lr, **{k: v for k, v in kwargs.items()
                                                        if k != "learning_rate"})
        for k in state:
            state[k][rows] = sub[k]
    np.testing.assert_allclose(np.asarray(scope["emb"]), w, rtol=1e-5, atol=1e-6)
    _, dense = _train_embedding(lambda: optimizer.Ftrl(**kwargs), is_sparse=False)
    assert np.all(dense[7:] == 0) and not np.allclose(w[7:], 0)  # the two semantics differ


def _eight_ids(feed):
    """The batch with two more ids (9, with c = 0): 8 ids, 2 per device on 4 devices."""
    return {"ids": np.concatenate([feed["ids"], [[9], [9]]]),
            "c": np.concatenate([feed["c"], np.zeros((2, 4), "float32")])}


@pytest.mark.parametrize("case", ["adagrad", "ftrl", "rmsprop"])
def test_sparse_gradient_four_devices_equal_one(case):
    """Every replica's rows all-gathered, then merged by the update, give one device's step."""
    cls, kwargs, _, _ = CASES[case]
    results = []
    for devices in (1, 4):
        main, startup, loss = _embedding_program(lambda: cls(**kwargs), is_sparse=True)
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        program = main if devices == 1 else graphc.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(devices))
        for feed in _embedding_feeds():
            exe.run(program, feed=_eight_ids(feed), scope=scope)
        results.append(np.asarray(scope["emb"]))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)


# -- training and data parallelism ----------------------------------------------------------
def _mlp(make_opt):
    main, startup = graphc.Program(), graphc.Program()
    # fresh name counters: both builds name (and so initialise) their weights alike
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 8], "float32")
        y = layers.data("y", [-1, 1], "int64")
        h = layers.fc(x, 16, act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, 4), y))
        make_opt().minimize(loss)
    return main, startup, loss


def _task(steps, batch=32):
    rng = np.random.default_rng(0)
    w = np.random.default_rng(123).normal(size=(8, 4))
    out = []
    for _ in range(steps):
        x = rng.normal(size=(batch, 8)).astype("float32")
        out.append({"x": x, "y": np.argmax(x @ w, axis=1)[:, None].astype("int64")})
    return out


TRAIN = {
    "adagrad": lambda: optimizer.AdagradOptimizer(0.1),
    "decayed_adagrad": lambda: optimizer.DecayedAdagradOptimizer(0.02),
    "adamax": lambda: optimizer.AdamaxOptimizer(0.02),
    "adadelta": lambda: optimizer.AdadeltaOptimizer(1.0, epsilon=1e-3),
    "rmsprop": lambda: optimizer.RMSPropOptimizer(0.01),
    "lamb": lambda: optimizer.LambOptimizer(0.02),
    "lars_momentum": lambda: optimizer.LarsMomentumOptimizer(1.0, 0.9, lars_coeff=0.01),
    "ftrl": lambda: optimizer.FtrlOptimizer(0.1),
}


@pytest.mark.parametrize("name", sorted(TRAIN))
def test_trains_and_four_devices_equal_one(name):
    steps = 12
    feeds = _task(steps)
    main, startup, loss = _mlp(TRAIN[name])
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    single = [float(exe.run(main, feed=f, fetch_list=[loss], scope=scope)[0].mean())
              for f in feeds]
    assert np.mean(single[-3:]) < np.mean(single[:3])  # it trains

    main, startup, loss = _mlp(TRAIN[name])
    dp_scope = graphc.Scope()
    exe.run(startup, scope=dp_scope)
    cp = graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                         places=graphc.cpu_places(4))
    multi = [float(np.mean(exe.run(cp, feed=f, fetch_list=[loss], scope=dp_scope)[0]))
             for f in feeds]
    np.testing.assert_allclose(multi, single, rtol=1e-5, atol=1e-5)
    for p in main.global_block().all_parameters():
        np.testing.assert_allclose(np.asarray(dp_scope[p.name]), np.asarray(scope[p.name]),
                                   rtol=1e-5, atol=1e-5, err_msg=p.name)


# -- fuse-all-optimizer-ops -----------------------------------------------------------------
def test_fuse_all_optimizer_ops_declines_them_with_a_reason():
    main, _, _ = _mlp(lambda: optimizer.RMSProp(0.01))
    graph = graphc.lower(main)
    before = graph.to_text()
    report = PassManager([make_pass("fuse-all-optimizer-ops")], verify_each=True).run(graph)
    stats = report.passes[0].stats
    assert stats == {"skipped: rmsprop: no fused form (fused: sgd, momentum, adam, adamw)": 4}
    assert graph.to_text() == before


@pytest.mark.parametrize("case", sorted(CASES))
def test_text_form_round_trips_and_verifies(case):
    cls, kwargs, _, _ = CASES[case]
    main, _, _ = _linear_program(lambda: cls(**kwargs))
    graph = graphc.lower(main)
    graphc.verify(graph)
    assert graphc.parse(graph.to_text()).structurally_equal(graph)


# -- ModelAverage and ExponentialMovingAverage ----------------------------------------------
def _averaged_program(make_average, **average_kwargs):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [-1, 3], "float64")
        c = layers.data("c", [-1, 4], "float64")
        out = layers.fc(x, 4, param_attr=ParamAttr(name="w"), bias_attr=False)
        loss = layers.mean(layers.elementwise_mul(out, c))
        optimizer.SGD(0.5).minimize(loss)
        average = make_average(**average_kwargs)
    return main, startup, average, out


def test_model_average_apply_and_restore():
    """Paddle's windowed sums: with min = max window 3, the average applied after 7 updates
    is that of the parameters after updates 4..7 (sum_3 holds updates 1..3's sum only until
    the window restarts, then 4..6, and sum_1 keeps update 7)."""
    main, startup, average, _ = _averaged_program(
        optimizer.ModelAverage, average_window_rate=0.5, min_average_window=3,
        max_average_window=3)
    exe = graphc.Executor()
    with graphc.scope_guard(graphc.Scope()):
        scope = graphc.global_scope()
        exe.run(startup)
        history = []
        for feed in _batches(7):
            exe.run(main, feed=feed)
            history.append(np.asarray(scope["w"]).copy())
        # NumPy version of average_accumulates (sum_1 += p; window restart moves sums)
        s1 = s2 = s3 = np.zeros_like(history[0])
        acc = old = 0
        for n, p in enumerate(history, 1):
            s1, acc = s1 + p, acc + 1
            if acc >= 3 and acc >= min(3, int(np.float32(n) * np.float32(0.5))):
                s3, s1, s2, old, acc = s1 + s2, 0 * s1, 0 * s1, acc, 0
        want = (s1 + s2 + s3) / (acc + old)
        np.testing.assert_allclose(want, np.mean(history[3:], axis=0), rtol=1e-12)
        with average.apply(exe):
            np.testing.assert_allclose(np.asarray(scope["w"]), want, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(scope["w"]), history[-1])
        with average.apply(exe, need_restore=False):
            pass
        np.testing.assert_allclose(np.asarray(scope["w"]), want, rtol=1e-6)
        average.restore(exe)
        np.testing.assert_array_equal(np.asarray(scope["w"]), history[-1])


def test_averaging_programs_round_trip():
    main, _, average, _ = _averaged_program(optimizer.ModelAverage, average_window_rate=0.1)
    for program in (main, average.apply_program, average.restore_program):
        graph = graphc.lower(program)
        assert graphc.parse(graph.to_text()).structurally_equal(graph)
    main, _, ema, _ = _averaged_program(optimizer.ExponentialMovingAverage, decay=0.99)
    ema.update()
    assert [op.type for op in main.global_block().ops][-2:] == ["increment", "ema_update"]
    for program in (main, ema.apply_program):
        graph = graphc.lower(program)
        assert graphc.parse(graph.to_text()).structurally_equal(graph)


@pytest.mark.parametrize("thres", [False, True])
def test_exponential_moving_average(thres):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [-1, 3], "float64")
        c = layers.data("c", [-1, 4], "float64")
        out = layers.fc(x, 4, param_attr=ParamAttr(name="w"), bias_attr=False)
        loss = layers.mean(layers.elementwise_mul(out, c))
        optimizer.SGD(0.5).minimize(loss)
        steps = layers.learning_rate_scheduler._step_counter() if thres else None
        ema = optimizer.ExponentialMovingAverage(0.9, thres_steps=steps)
        ema.update()
    exe = graphc.Executor()
    with graphc.scope_guard(graphc.Scope()):
        scope = graphc.global_scope()
        exe.run(startup)
        avg, decay = np.zeros((3, 4)), 0.9
        for t, feed in enumerate(_batches(5)):
            exe.run(main, feed=feed)
            decay = min(0.9, np.float32(t + 1) / np.float32(t + 10)) if thres else 0.9
            decay = float(np.float32(decay))
            avg = avg * decay + np.asarray(scope["w"]) * (1 - decay)
        w = np.asarray(scope["w"]).copy()
        want = avg / (1 - float(np.float32(decay) ** np.float32(5)))
        with ema.apply(exe):
            np.testing.assert_allclose(np.asarray(scope["w"]), want, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(scope["w"]), w)
        ema_var = ema._ema_vars["w"].name
        np.testing.assert_allclose(np.asarray(scope[ema_var]), avg, rtol=1e-6)  # untouched


# -- construction -------------------------------------------------------------------------
def test_grad_clip_and_parameter_list_are_accepted():
    for cls, args in [(optimizer.Adagrad, (0.1,)), (optimizer.RMSProp, (0.1,)),
                      (optimizer.LarsMomentum, (0.1, 0.9)), (optimizer.SGD, (0.1,)),
                      (optimizer.Adam, (0.1,)), (optimizer.Momentum, (0.1, 0.9))]:
        opt = cls(*args, grad_clip=None, parameter_list=None)
        assert opt._grad_clip is None


@pytest.mark.parametrize("make", [
    lambda: optimizer.Adagrad("fast"),
    lambda: optimizer.RMSProp(0.1, rho="x"),
    lambda: optimizer.Lamb(0.1, lamb_weight_decay=None),
    lambda: optimizer.ModelAverage(0.1, min_average_window=10, max_average_window=5),
    lambda: optimizer.ExponentialMovingAverage(decay="0.9"),
])
def test_bad_arguments_raise_graphc_errors(make):
    with pytest.raises(GraphcError):
        make()


@pytest.mark.parametrize("name", ["lamb", "lars_momentum", "adagrad"])
def test_reduce_mode_equals_one_device(name):
    """Reduce mode shards element-wise updates; LAMB and LARS read norms of the whole
    parameter, so the data-parallel pass keeps their update whole (and says why)."""
    feeds = _task(4)
    results = []
    for devices in (1, 4):
        main, startup, loss = _mlp(TRAIN[name])
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        program = main
        if devices > 1:
            bs = graphc.BuildStrategy()
            bs.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
            program = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
                loss_name=loss.name, places=graphc.cpu_places(devices))
        for f in feeds:
            exe.run(program, feed=f, scope=scope)
        results.append({p.name: np.asarray(scope[p.name])
                        for p in main.global_block().all_parameters()})
        if devices > 1:  # adagrad is sharded; the layer-wise ones are all-reduced whole
            sharded = "c_reduce_scatter" in program.graph().to_text()
            assert sharded == (name == "adagrad")
    for pname, value in results[0].items():
        np.testing.assert_allclose(results[1][pname], value, rtol=1e-5, atol=1e-6,
                                   err_msg=pname)
