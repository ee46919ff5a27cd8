"""What stopped PaddleCV 1.8 detection/pose/video programs ported by the rule alone (cvdet),
each checked against Paddle's documented behaviour, never against the program itself."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.fluid.initializer import Constant
from graphc.fluid.layer_helper import LayerHelper
from graphc.fluid.param_attr import ParamAttr

pytestmark = pytest.mark.timeout(120)


# -- LayerHelper keeps the layer's keyword arguments ------------------------------------------
def test_layer_helper_exposes_param_and_bias_attr_from_its_keywords():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        named = LayerHelper("Scale", param_attr=ParamAttr(name="s_w"), bias_attr=False)
        assert named.param_attr.name == "s_w" and named.bias_attr is False
        assert named.kwargs["param_attr"].name == "s_w"
        plain = LayerHelper("Scale")
        # no keyword: Paddle's default attribute (a fresh ParamAttr, named by the helper)
        assert isinstance(plain.param_attr, ParamAttr) and plain.param_attr.name is None
        assert isinstance(plain.bias_attr, ParamAttr)
        assert LayerHelper("Scale", param_attr="by_name").param_attr.name == "by_name"


def test_a_script_built_scale_layer_trains_through_helper_param_attr():
    """PyramidBox's ``_l2_norm_scale``: a per-channel parameter created with
    ``attr=helper.param_attr`` multiplies an l2-normalised input along axis 1."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3, 2, 2], "float32")
        helper = LayerHelper("Scale")
        scale = helper.create_parameter(attr=helper.param_attr, shape=[3], dtype=x.dtype,
                                        default_initializer=Constant(2.5))
        out = fluid.layers.elementwise_mul(fluid.layers.l2_normalize(x, axis=1), scale, axis=1)
    assert scale.persistable and list(scale.shape) == [3]
    xv = np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype("float32")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    (got,) = exe.run(main, feed={"x": xv}, fetch_list=[out], scope=scope)
    ref = 2.5 * xv / np.sqrt(np.maximum((xv * xv).sum(1, keepdims=True), 1e-10))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


# -- piecewise_decay / linear_lr_warmup write Paddle's persistable globals ---------------------
@pytest.fixture(scope="module")
def lr_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2], "float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        lr = fluid.layers.piecewise_decay([2, 4], [0.1, 0.01, 0.001])
        warm = fluid.layers.linear_lr_warmup(lr, 3, 0.0, 0.3)
        fluid.optimizer.SGD(warm).minimize(loss)
    return main, startup, lr, warm


def _paddle_rates(step):
    """Paddle's piecewise_decay (values[i] while step < boundaries[i]) under its
    linear_lr_warmup (start + (end - start) * step / warmup while step < warmup)."""
    piece = 0.1 if step < 2 else 0.01 if step < 4 else 0.001
    warm = 0.3 * step / 3 if step < 3 else piece
    return np.float32(piece), np.float32(warm)


def test_piecewise_decay_is_the_persistable_global_learning_rate(lr_program):
    main, startup, lr, warm = lr_program
    assert (lr.name, warm.name) == ("learning_rate", "learning_rate_warmup")
    for prog in (main, startup):
        for name in ("learning_rate", "learning_rate_warmup"):
            v = prog.global_block().var(name)
            assert v.persistable and list(v.shape) == [1]
    # the first schedule of its kind in a program takes Paddle's name; a later one keeps its
    # own value under a fresh persistable name (Paddle's would overwrite the first's)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        first = fluid.layers.piecewise_decay([1], [1.0, 0.5])
        second = fluid.layers.piecewise_decay([2], [1.0, 0.5])
        assert first.name == "learning_rate" and second.name != first.name
        assert second.persistable


@pytest.mark.parametrize("interpreter", [False, True], ids=["jax", "interpreter"])
def test_global_learning_rate_is_zero_after_startup_then_the_schedule(lr_program, interpreter):
    main, startup, _, _ = lr_program
    main = main.clone()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    # read before the first step, as PaddleCV's pose/video trainers do
    assert np.array(scope.find_var("learning_rate").get_tensor()).tolist() == [0.0]
    assert np.array(scope.find_var("learning_rate_warmup").get_tensor()).tolist() == [0.0]
    feed = {"x": np.ones((2, 2), "float32")}
    state = {k: np.asarray(scope[k]) for k in scope.keys()}
    graph = graphc.lower(main) if interpreter else None
    for step in range(6):
        if interpreter:
            state, _ = run_graph(graph, state, feed, [], step)
            got = (state["learning_rate"], state["learning_rate_warmup"])
        else:
            exe.run(main, feed=feed, scope=scope)
            got = tuple(np.array(scope.find_var(n).get_tensor())
                        for n in ("learning_rate", "learning_rate_warmup"))
        want = _paddle_rates(step)
        np.testing.assert_allclose(np.asarray(got[0]).reshape(-1), [want[0]], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(got[1]).reshape(-1), [want[1]], rtol=1e-6)


# -- StaticRNN's step reads LoD values from outside (an attention decoder, ETS) ----------------
_ENC_LENGTHS = [2, 3, 1]


def _attention_rnn(dtype="float64"):
    """h_t = tanh(x_t + sum_j softmax_j(<h_{t-1}, e_j>) e_j) over each sequence's tokens e,
    h_0 = the sequence sum: the step reads the LoD ``enc`` from outside."""
    enc = fluid.data("enc", [-1, 3], dtype, lod_level=1)
    enc.stop_gradient = False
    x = fluid.data("x", [4, 3, 3], dtype)
    x.stop_gradient = False
    boot = fluid.layers.sequence_pool(enc, "sum")
    rnn = fluid.layers.StaticRNN()
    with rnn.step():
        xt = rnn.step_input(x)
        h = rnn.memory(init=boot)
        e = fluid.layers.sequence_expand(h, enc)
        score = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(e, enc), dim=1,
                                        keep_dim=True)
        att = fluid.layers.reshape(fluid.layers.sequence_softmax(score), [-1])
        ctx = fluid.layers.sequence_pool(fluid.layers.elementwise_mul(enc, att, axis=0), "sum")
        new = fluid.layers.tanh(fluid.layers.elementwise_add(ctx, xt))
        rnn.update_memory(h, new)
        rnn.step_output(new)
    return rnn()


def _attention_reference(enc, x):
    seqs = np.split(enc, np.cumsum(_ENC_LENGTHS)[:-1])
    h = np.stack([s.sum(0) for s in seqs])
    outs = []
    for xt in x:
        ctx = []
        for hi, s in zip(h, seqs):
            a = np.exp(s @ hi - (s @ hi).max())
            ctx.append((a / a.sum()) @ s)
        h = np.tanh(np.stack(ctx) + xt)
        outs.append(h)
    return np.stack(outs)


def test_static_rnn_step_reads_an_outer_lod_value_on_both_backends():
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod import as_feed
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = _attention_rnn()
    rng = np.random.default_rng(1)
    encv, xv = rng.standard_normal((6, 3)), rng.standard_normal((4, 3, 3))
    feed = {"enc": create_lod_tensor(encv, [_ENC_LENGTHS]), "x": xv}
    ref = _attention_reference(encv, xv)
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out])
    np.testing.assert_allclose(got, ref, rtol=1e-10)
    ifeed = {k: as_feed(main, k, v) for k, v in feed.items()}
    _, (interp,) = run_graph(graphc.lower(main), {}, ifeed, [out.name])
    np.testing.assert_allclose(np.asarray(interp), ref, rtol=1e-10)


def test_static_rnn_gradient_through_an_outer_lod_value_matches_finite_differences():
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod import lod_grad_check
    main, startup = fluid.Program(), fluid.Program()
    rng = np.random.default_rng(2)
    with fluid.program_guard(main, startup):
        out = _attention_rnn()
        w = fluid.data("w", [4, 3, 3], "float64")
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, w))
    feeds = {"enc": create_lod_tensor(rng.standard_normal((6, 3)), [_ENC_LENGTHS]),
             "x": rng.standard_normal((4, 3, 3)), "w": rng.standard_normal((4, 3, 3))}
    grads = lod_grad_check(main, loss, feeds, ["enc", "x"], rng)
    assert np.abs(np.asarray(grads["enc"])).max() > 0


# -- fetched arrays belong to the caller -------------------------------------------------------
@pytest.mark.parametrize("compiled", [False, True], ids=["executor", "compiled"])
def test_fetched_numpy_arrays_are_writable(compiled):
    """Paddle copies each fetch out of its tensor: a program may edit it in place."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2, 3], "float32")
        y = fluid.layers.scale(x, 2.0)
        fluid.layers.create_global_var([1], 3.0, "float32", persistable=True, name="g")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    prog = fluid.CompiledProgram(main) if compiled else main
    xv = np.ones((2, 2, 3), "float32")
    got, g = exe.run(prog, feed={"x": xv}, fetch_list=[y, "g"], scope=scope)
    got[:, 0] = got[:, 1][:, ::-1]
    got[0, 0, 0] = -1.0
    g[0] = 5.0
    assert got[0, 0, 0] == -1.0 and got[1, 0, 0] == 2.0 and g[0] == 5.0
    # the scope's value is not the caller's copy; later runs (the cached fast path) too
    for _ in range(2):
        again, g2 = exe.run(prog, feed={"x": xv}, fetch_list=[y, "g"], scope=scope)
        assert again[0, 0, 0] == 2.0 and g2[0] == 3.0
        again[0, 0, 0] = -1.0
        g2[0] = 5.0
