"""Issue 24, entries graphc refused that run on XLA: layers.py_func and layers.Print (host
callbacks inside the one jitted step), WeightNormParamAttr and DGCMomentumOptimizer."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError


def _run_both(fetch, feed):
    """The jitted Executor's and the interpreter's values of ``fetch``."""
    (jit,) = graphc.Executor().run(feed=feed, fetch_list=[fetch])
    _, (ref,) = run_graph(graphc.lower(graphc.default_main_program()), {}, feed, [fetch.name])
    return np.asarray(jit), np.asarray(ref)


# -- py_func -----------------------------------------------------------------------------------
def test_py_func_values_on_both_backends_and_a_leading_batch_dimension():
    x = graphc.data("x", [-1, 3], "float32")
    y = graphc.data("y", [3], "float32")
    block = graphc.default_main_program().global_block()
    out = block.create_var("out", [-1, 3], "float32")
    idx = block.create_var("idx", [-1], "int64")
    got = layers.py_func(lambda a, b: (a * b + 1, np.argmax(a, 1)), [x, y], [out, idx])
    assert got == [out, idx]
    xv = np.arange(12, dtype="float32").reshape(4, 3) % 5
    yv = np.array([1.0, -2.0, 0.5], "float32")
    feed = {"x": xv, "y": yv}
    for value in _run_both(out, feed):
        np.testing.assert_allclose(value, xv * yv + 1)
    for value in _run_both(idx, feed):
        np.testing.assert_array_equal(value, np.argmax(xv, 1))


def test_py_func_gradient_is_backward_funcs_and_the_step_is_one_jitted_call():
    calls = {"forward": 0, "backward": 0}

    def forward(a):
        calls["forward"] += 1
        return np.sin(a)

    def backward(a, o, g):  # Paddle's order: x, out, out@GRAD
        calls["backward"] += 1
        return g * np.cos(a)

    x = graphc.data("x", [2, 3], "float64")
    x.stop_gradient = False
    out = graphc.default_main_program().global_block().create_var("o", [2, 3], "float64")
    layers.py_func(forward, x, out, backward_func=backward)
    loss = layers.reduce_sum(layers.square(out))
    graphc.append_backward(loss)
    xv = np.linspace(-1, 1, 6).reshape(2, 3)
    exe = graphc.Executor()
    step = exe.compile(graphc.default_main_program(), feed={"x": xv},
                       fetch_list=[loss, "x@GRAD"])
    text = step.lowered_text()
    assert text.count("func.func public") == 1 and "callback" in text
    loss_v, grad = exe.run(feed={"x": xv}, fetch_list=[loss, "x@GRAD"])
    np.testing.assert_allclose(grad, 2 * np.sin(xv) * np.cos(xv), rtol=1e-12)
    np.testing.assert_allclose(loss_v, [np.sum(np.sin(xv) ** 2)], rtol=1e-12)
    assert calls["forward"] >= 1 and calls["backward"] >= 1
    before = dict(calls)
    exe.run(feed={"x": xv}, fetch_list=[loss, "x@GRAD"])
    assert calls == {"forward": before["forward"] + 1, "backward": before["backward"] + 1}


def test_py_func_skipped_inputs_and_no_backward_func_stops_the_gradient():
    x = graphc.data("x", [3], "float64")
    x.stop_gradient = False
    block = graphc.default_main_program().global_block()
    o1 = block.create_var("o1", [3], "float64")
    seen = []

    def backward(*args):
        seen.append(len(args))
        return 3 * args[-1]  # only the out grad is passed: x and out skipped

    layers.py_func(lambda a: 2 * a, x, o1, backward_func=backward,
                   skip_vars_in_backward_input=[x, o1])
    o2 = block.create_var("o2", [3], "float64")
    layers.py_func(lambda a: a * a, x, o2)  # no backward_func: no gradient through it
    assert o2.stop_gradient
    loss = layers.reduce_sum(layers.elementwise_add(o1, o2))
    graphc.append_backward(loss)
    (grad,) = graphc.Executor().run(feed={"x": np.ones(3)}, fetch_list=["x@GRAD"])
    np.testing.assert_allclose(grad, [3.0, 3.0, 3.0])
    assert seen and seen[-1] == 1


def test_py_func_without_outputs_still_runs_and_bad_arguments_are_refused():
    x = graphc.data("x", [2], "float32")
    seen = []
    layers.py_func(lambda a: seen.append(a.copy()), x, None)
    y = layers.scale(x, 2.0)
    graphc.Executor().run(feed={"x": np.array([1.0, 2.0], "float32")}, fetch_list=[y])
    assert len(seen) == 1 and seen[0].tolist() == [1.0, 2.0]
    with pytest.raises(ProgramError, match="neither in x nor in out"):
        layers.py_func(np.tanh, x, None, skip_vars_in_backward_input=[y])
    with pytest.raises(ProgramError, match="func must be callable"):
        layers.py_func(3, x, None)


# -- Print ---------------------------------------------------------------------------------------
def test_print_passes_the_value_and_prints_it(capfd):
    x = graphc.data("x", [2, 3], "float32")
    p = layers.Print(x, message="look here", summarize=4)
    assert p.shape == x.shape and p.dtype == x.dtype
    xv = np.arange(6, dtype="float32").reshape(2, 3)
    (got,) = graphc.Executor().run(feed={"x": xv}, fetch_list=[p])
    np.testing.assert_array_equal(got, xv)
    text = capfd.readouterr().out
    assert "Variable: x" in text and "  - message: look here" in text
    assert "  - shape: [2, 3]" in text and "  - dtype: float" in text
    assert "  - data: [0 1 2 3]" in text  # summarize=4


def test_print_unused_output_first_n_and_phases(capfd):
    x = graphc.data("x", [3], "float64")
    x.stop_gradient = False
    layers.Print(x, message="unused", first_n=2, summarize=-1,
                 print_tensor_type=False)  # output unread: still printed (as Paddle)
    p = layers.Print(x, message="grad only", print_phase="backward")
    loss = layers.reduce_sum(layers.square(p))
    graphc.append_backward(loss)
    exe = graphc.Executor()
    xv = np.array([1.0, 2.0, 3.0])
    for _ in range(3):
        (grad,) = exe.run(feed={"x": xv}, fetch_list=["x@GRAD"])
        np.testing.assert_allclose(grad, 2 * xv)  # the gradient passes through unchanged
    text = capfd.readouterr().out
    assert text.count("  - message: unused") == 2  # first_n=2 of 3 runs
    assert "dtype" not in text.split("grad only")[0]
    assert text.count("  - message: grad only") == 3
    assert "@GRAD" in text and "  - data: [2 4 6]" in text  # the printed gradient
    with pytest.raises(ProgramError, match="print_phase"):
        layers.Print(x, print_phase="sideways")


def test_print_of_a_lod_value_shows_its_tokens_and_lod_and_its_gradient(capfd):
    x = graphc.data("x", [-1, 2], "float32", lod_level=1)
    x.stop_gradient = False
    p = layers.Print(x, message="seq")
    assert p.lod_level == 1
    pooled = layers.sequence_pool(p, "sum")
    graphc.append_backward(layers.reduce_sum(pooled))
    tokens = np.arange(10, dtype="float32").reshape(5, 2)
    t = fluid.create_lod_tensor(tokens, [[2, 0, 3]], fluid.CPUPlace())
    (got,) = graphc.Executor().run(feed={"x": t}, fetch_list=[pooled])  # x@GRAD not fetched
    np.testing.assert_allclose(got, [[2, 4], [0, 0], [18, 21]])
    text = capfd.readouterr().out
    forward, backward = text.split("Variable: x@GRAD")
    assert "  - lod: {{0, 2, 2, 5}}" in forward and "  - shape: [5, 2]" in forward
    assert "  - data: [0 1 2 3 4 5 6 7 8 9]" in forward  # the real tokens, no padding
    assert "  - lod: {{0, 2, 2, 5}}" in backward and "  - data: [1 1 1 1 1 1" in backward


def test_print_and_py_func_on_two_replicas(capfd):
    """Each replica prints (first_n counts per replica, as Paddle's per-device op copies)
    and calls the function on its half of the batch; training matches one device."""
    xv = np.linspace(-1, 1, 16, dtype="float32").reshape(4, 4)
    results = []
    for n in (1, 2):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [-1, 4], "float32")
            h = layers.fc(x, 4, param_attr=fluid.ParamAttr(name="w"))
            o = main.global_block().create_var("o", [-1, 4], "float32")
            layers.py_func(np.tanh, layers.Print(h, first_n=1, message=f"n{n}",
                                                 print_phase="forward"), o,
                           backward_func=lambda a, out, g: g * (1 - out * out))
            loss = layers.reduce_mean(layers.square(o))
            fluid.optimizer.SGD(0.5).minimize(loss)
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        prog = main if n == 1 else fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(n))
        for _ in range(3):
            exe.run(prog, feed={"x": xv}, fetch_list=[loss], scope=scope)
        results.append(np.asarray(scope["w"]))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-6)
    text = capfd.readouterr().out
    assert text.count("  - message: n1") == 1 and text.count("  - message: n2") == 2
    assert "  - shape: [2, 4]" in text.split("message: n2")[1]  # a replica's half batch


def test_print_and_py_func_resolve_under_fluid():
    assert fluid.layers.Print is layers.Print and fluid.layers.py_func is layers.py_func


# -- WeightNormParamAttr -----------------------------------------------------------------------
@pytest.mark.parametrize("dim", [None, 0, 1])
def test_weight_norm_fc_parameters_names_init_and_gradients(dim):
    from tests.test_gradients import GradCheck
    c = GradCheck(7)
    x = c.data("x", c.randn(4, 3), grad=False)
    y = layers.fc(x, 5, param_attr=fluid.WeightNormParamAttr(dim=dim, name="w"),
                  bias_attr=False)
    names = [p.name for p in c.program.global_block().all_parameters()]
    assert names == ["w_v", "w_g"]  # Paddle: <name>_v and <name>_g, no <name> parameter
    g = c.program.global_block().var("w_g")
    assert list(g.shape) == ([1, 1] if dim is None else [3 if dim == 0 else 1,
                                                            5 if dim == 1 else 1])
    startup = graphc.Executor()
    scope = graphc.Scope()
    startup.run(graphc.default_startup_program(), scope=scope)
    v0, g0 = np.asarray(scope["w_v"]), np.asarray(scope["w_g"])
    axes = None if dim is None else tuple(a for a in range(2) if a != dim)
    np.testing.assert_allclose(g0, np.sqrt((v0 ** 2).sum(axis=axes, keepdims=True)),
                               rtol=1e-6)
    c.check(layers.tanh(y))  # finite differences to w_v and w_g through w = g v / ||v||


def test_weight_norm_conv2d_trains_and_matches_the_formula():
    x = fluid.data("x", [-1, 2, 5, 5], "float32")
    h = layers.conv2d(x, 3, 3, param_attr=fluid.param_attr.WeightNormParamAttr(dim=0),
                      bias_attr=False)
    loss = layers.reduce_mean(layers.square(h - 1.0))
    fluid.optimizer.SGD(0.05).minimize(loss)
    main = fluid.default_main_program()
    assert [p.name for p in main.global_block().all_parameters()] == [
        "conv2d_0.w_0_v", "conv2d_0.w_0_g"]
    exe = fluid.Executor()
    scope = fluid.Scope()
    exe.run(fluid.default_startup_program(), scope=scope)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 2, 5, 5)).astype("float32")
    losses = [float(exe.run(main, feed={"x": xv}, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(8)]
    assert losses[-1] < losses[0]
    v, g = np.asarray(scope["conv2d_0.w_0_v"]), np.asarray(scope["conv2d_0.w_0_g"])
    assert g.shape == (3, 1, 1, 1)
    w = g * v / np.sqrt((v ** 2).sum(axis=(1, 2, 3), keepdims=True))
    # the forward uses w: a direct conv with w gives the same loss
    xw = np.lib.stride_tricks.sliding_window_view(xv, (3, 3), axis=(2, 3))
    out = np.einsum("nchwij,ocij->nohw", xw, w)
    (now,) = exe.run(main, feed={"x": xv}, fetch_list=[h], scope=scope)
    np.testing.assert_allclose(now, out, rtol=1e-4, atol=1e-5)


# -- DGCMomentumOptimizer ----------------------------------------------------------------------
def _dgc_reference(w, grads_of, steps, lr, mu, begin, rampup, sparsity, nesterov, l2=0.0,
                   clip=None):
    """NumPy DGC (Paddle's dgc + dgc_momentum with one trainer) on a single parameter."""
    u, v = np.zeros_like(w), np.zeros_like(w)
    for step in range(steps):
        g = grads_of(w)
        if clip is not None and step >= begin and np.linalg.norm(g) > clip:
            g = g * (clip / np.linalg.norm(g))  # the local clip, from the ramp-up on
        g = g + l2 * w
        if step < begin:
            u = mu * u + g
            w = w - lr * ((g + mu * u) if nesterov else u)
            continue
        if nesterov:
            u = mu * (u + g)
            v = u + v + g
        else:
            u = mu * u + g
            v = u + v
        idx = min(int((step - begin) * len(sparsity) / rampup), len(sparsity) - 1)
        k = int(v.size * (1 - sparsity[idx]))
        order = np.argsort(-np.abs(v).reshape(-1), kind="stable")
        mask = np.zeros(v.size, bool)
        mask[order[:k]] = True
        mask = mask.reshape(v.shape)
        w = w - lr * np.where(mask, v, 0)
        u, v = np.where(mask, 0, u), np.where(mask, 0, v)
    return w


@pytest.mark.parametrize("nesterov, l2, clip", [(False, 0.0, None), (True, 0.0, None),
                                                (False, 0.01, None), (False, 0.0, 20.0)])
def test_dgc_momentum_matches_numpy_across_the_rampup(nesterov, l2, clip):
    rng = np.random.default_rng(1)
    n_in, n_out = 128, 128  # 16384 weights: Paddle's smallest DGC parameter
    xv = rng.standard_normal((8, n_in)).astype("float32")
    tv = rng.standard_normal((8, n_out)).astype("float32")
    x = fluid.data("x", [8, n_in], "float32")
    t = fluid.data("t", [8, n_out], "float32")
    y = layers.fc(x, n_out, bias_attr=False, param_attr=fluid.ParamAttr(name="w"))
    loss = layers.reduce_sum(layers.square(y - t)) * 0.5
    opt = fluid.optimizer.DGCMomentumOptimizer(
        0.01, 0.9, rampup_begin_step=2, rampup_step=3, sparsity=[0.5, 0.9, 0.99],
        use_nesterov=nesterov, regularization=fluid.regularizer.L2Decay(l2) if l2 else None,
        num_trainers=4, grad_clip=fluid.clip.GradientClipByNorm(clip) if clip else None)
    opt.minimize(loss)
    main = fluid.default_main_program()
    assert "dgc_momentum" in [op.type for op in main.global_block().ops]
    exe = fluid.Executor()
    scope = fluid.Scope()
    exe.run(fluid.default_startup_program(), scope=scope)
    w0 = np.asarray(scope["w"]).astype(np.float64)
    steps = 7
    for _ in range(steps):
        exe.run(main, feed={"x": xv, "t": tv}, fetch_list=[loss], scope=scope)

    def grads_of(w):
        return xv.T.astype(np.float64) @ (xv.astype(np.float64) @ w - tv)

    ref = _dgc_reference(w0, grads_of, steps, 0.01, 0.9, 2, 3, [0.5, 0.9, 0.99], nesterov, l2,
                         clip / 2 if clip else None)  # clip_norm / sqrt(num_trainers)
    np.testing.assert_allclose(np.asarray(scope["w"]), ref, rtol=2e-3, atol=2e-4)
    assert float(np.asarray(scope["__g_dgc_counter__"])[0]) == steps - 1
    # the interpreter runs the same rule: same parameters after the same steps
    graph = graphc.lower(main)
    _, fetched = run_graph(graphc.lower(fluid.default_startup_program()), {}, {},
                           [v.name for v in graph.inputs if v.var.persistable])
    state = {v.name: a for v, a in zip([v for v in graph.inputs if v.var.persistable],
                                       fetched)}
    state["w"] = w0.astype("float32")
    for _ in range(steps):
        state, _ = run_graph(graph, state, {"x": xv, "t": tv})
    np.testing.assert_allclose(state["w"], np.asarray(scope["w"]), rtol=1e-4, atol=1e-6)


def test_dgc_small_parameters_use_momentum_and_bad_arguments_are_refused():
    x = fluid.data("x", [4, 3], "float32")
    loss = layers.reduce_mean(layers.fc(x, 2))
    fluid.optimizer.DGCMomentumOptimizer(0.1, 0.9, rampup_begin_step=0).minimize(loss)
    types = [op.type for op in fluid.default_main_program().global_block().ops]
    assert "momentum" in types and "dgc_momentum" not in types
    with pytest.raises(ProgramError, match="GradientClipByNorm"):
        fluid.optimizer.DGCMomentumOptimizer(0.1, 0.9, 0, grad_clip=object())
    with pytest.raises(ProgramError, match="num_trainers"):
        fluid.optimizer.DGCMomentumOptimizer(
            0.1, 0.9, 0, grad_clip=fluid.clip.GradientClipByNorm(1.0))
    with pytest.raises(ProgramError, match="rampup_begin_step"):
        fluid.optimizer.DGCMomentumOptimizer(0.1, 0.9, -1)


@pytest.mark.parametrize("reduce_mode", [False, True])
def test_dgc_on_two_replicas_compresses_the_mean_gradient(reduce_mode):
    """graphc's documented multi-replica DGC: the dense gradient is all-reduced (mean) first,
    so two replicas give what one device gives on the whole batch (Reduce mode keeps the
    update whole: its top-k reads the whole parameter)."""
    rng = np.random.default_rng(2)
    xv = rng.standard_normal((8, 128)).astype("float32")
    tv = rng.standard_normal((8, 128)).astype("float32")
    results = []
    for n in (1, 2):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [-1, 128], "float32")
            t = fluid.data("t", [-1, 128], "float32")
            y = layers.fc(x, 128, bias_attr=False, param_attr=fluid.ParamAttr(name="w"))
            loss = layers.reduce_mean(layers.square(y - t))
            fluid.optimizer.DGCMomentumOptimizer(
                0.5, 0.9, rampup_begin_step=1, sparsity=[0.9]).minimize(loss)
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        prog = main
        if n > 1:
            bs = fluid.BuildStrategy()
            if reduce_mode:
                bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
            prog = fluid.CompiledProgram(main, build_strategy=bs).with_data_parallel(
                loss_name=loss.name, places=fluid.cpu_places(n))
        for _ in range(4):
            exe.run(prog, feed={"x": xv, "t": tv}, fetch_list=[loss], scope=scope)
        results.append(np.asarray(scope["w"]))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-5)


def test_host_ops_under_amp_see_float32_and_keep_their_dtypes():
    """The amp pass leaves host callbacks alone: the function gets float32 arrays, and its
    declared output dtype holds."""
    x = fluid.data("x", [-1, 4], "float32")
    h = layers.fc(x, 4)
    o = fluid.default_main_program().global_block().create_var("o", [-1, 4], "float32")
    seen = []

    def double(a):
        seen.append(a.dtype)
        return a * 2

    layers.py_func(double, h, o, backward_func=lambda a, out, g: 2 * g)
    loss = layers.reduce_mean(layers.fc(layers.Print(o, summarize=2), 1))
    fluid.optimizer.SGD(0.1).minimize(loss)
    bs = fluid.BuildStrategy()
    bs.amp = True
    cp = fluid.CompiledProgram(fluid.default_main_program(), build_strategy=bs)
    exe = fluid.Executor()
    exe.run(fluid.default_startup_program())
    (got,) = exe.run(cp, feed={"x": np.ones((2, 4), "float32")}, fetch_list=[loss])
    assert np.isfinite(got).all() and seen == [np.dtype("float32")]
