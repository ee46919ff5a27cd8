"""fuse-elewise-add-act: golden IR for each pattern (forward and training), exact numerical
equality with the unfused graph, the decline statistics, random programs before and after
SGD.minimize, and Paddle's own test: simple_fc_net and fc_with_batchnorm trained 5 steps
through a CompiledProgram with fuse_elewise_add_act_ops on and off."""

from __future__ import annotations

import os

import numpy as np
import pytest
from graphc.initializer import Constant, Uniform
from graphc.regularizer import L2Decay
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import layers, models, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.layers.helper import LayerHelper
from graphc.ops.fused_elementwise.defs import FUSED_GRAD_OP, FUSED_OP
from graphc.passes import PassError, PassManager, make_pass, parse_pipeline
from graphc.testing import (
    GeneratedProgram,
    assert_same_results,
    check_golden,
    check_pass,
    random_programs,
)

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "fuse-elewise-add-act")
PASS = "fuse-elewise-add-act"


# ----------------------------------------------------------------------------- helpers
def build(fn, train: bool, fetch_intermediate: bool = False):
    """Run ``fn() -> (feed shapes, out)`` in fresh programs; the loss is mean(out), minimised
    with SGD when ``train``. Returns (main, startup, feeds, fetch names)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        feeds, out, extra = fn()
        loss = layers.mean(out)
        if train:
            optimizer.SGD(0.1).minimize(loss)
    fetch = [loss.name, out.name] + (extra if fetch_intermediate else [])
    return main, startup, feeds, fetch


def fuse(main, fetch, **options):
    """Lower ``main``, run the pass (verifying) with ``fetch`` kept; (graph, stats)."""
    g = graphc.lower(main)
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(
        g, keep=[resolve_fetch(g, f) for f in fetch])
    return g, report.passes[0]


def assert_exactly_equal(main, startup, feeds, fetch, after, seed=0):
    """The fused graph gives bit-identical fetches and updated parameters (the fused rules
    call the unfused ones, so the interpreter computes exactly the same)."""
    rng = np.random.default_rng(seed)
    arrays = {name: rng.uniform(-1, 1, [3 if d == -1 else d for d in shape]).astype("float32")
              for name, shape in feeds.items()}
    state, _ = run_graph(graphc.lower(startup))
    assert_same_results(graphc.lower(main), after, state, arrays, fetch, rtol=0, atol=0)


def check_case(name, fn, train, expect_stats, fetch_intermediate=False):
    main, startup, feeds, fetch = build(fn, train, fetch_intermediate)
    g, result = fuse(main, fetch)
    check_golden(os.path.join(GOLDEN, f"{name}.ir"), g.to_text())
    assert result.stats == expect_stats
    assert graphc.parse(g.to_text()).structurally_equal(g)
    assert_exactly_equal(main, startup, feeds, fetch, g)
    return g


def x_data(shape, grad=True):
    x = graphc.data("x", list(shape))
    x.stop_gradient = not grad
    return x


def act_on_y():
    """out = b + gelu(a): the act feeds the add's Y, as in Paddle's own form."""
    x = x_data([-1, 3, 4])
    a = layers.fc(x, 4, num_flatten_dims=2, bias_attr=False)
    b = layers.fc(x, 4, num_flatten_dims=2, bias_attr=False)
    return {"x": (-1, 3, 4)}, layers.elementwise_add(b, layers.gelu(a, approximate=True)), []


def act_on_x():
    """out = scale(a) + b with b of shape [3] at axis=1: the act feeds X, the smaller operand
    is Y; swapping them would change what axis=1 means."""
    x = x_data([-1, 3, 4])
    a = layers.fc(x, 4, num_flatten_dims=2, bias_attr=False)
    b = layers.reduce_mean(layers.fc(layers.reduce_mean(x, dim=[2]), 3, bias_attr=False),
                           dim=[0])
    s = layers.scale(a, 2.0, 0.5, bias_after_scale=False)
    return {"x": (-1, 3, 4)}, layers.elementwise_add(s, b, axis=1), []


def same_operand():
    """sigmoid(a + a): both add operands are one value."""
    a = layers.fc(x_data([-1, 4]), 4)
    return {"x": (-1, 4)}, layers.sigmoid(layers.elementwise_add(a, a)), []


def axis_broadcast():
    """leaky_relu(b + a) with X = b of shape [3] broadcast at axis=1 into Y = a [-1, 3, 4]:
    the smaller operand comes first."""
    x = x_data([-1, 3, 4])
    a = layers.fc(x, 4, num_flatten_dims=2, bias_attr=False)
    b = layers.reduce_mean(layers.reduce_mean(a, dim=[2]), dim=[0])
    return {"x": (-1, 3, 4)}, layers.leaky_relu(layers.elementwise_add(b, a, axis=1),
                                                alpha=0.1), []


def shared_intermediate():
    """t = x + y read by relu and by tanh: add->act declined (two users)."""
    x, y = x_data([-1, 4]), graphc.data("y", [-1, 4])
    t = layers.elementwise_add(layers.fc(x, 4), y)
    return {"x": (-1, 4), "y": (-1, 4)}, layers.elementwise_mul(layers.relu(t),
                                                                 layers.tanh(t)), []


def act_twice_into_add():
    """t = relu(a); out = t + t: t is read twice by the add (act->add declined), and the
    add's own output feeds tanh (add->act fused)."""
    a = layers.fc(x_data([-1, 4]), 4)
    t = layers.relu(a)
    return {"x": (-1, 4)}, layers.tanh(layers.elementwise_add(t, t)), [t.name]


# ----------------------------------------------------------------------------- golden IR
def mlp():
    m = models.mlp(input_dim=6, hidden=(5, 4), num_classes=3, batch_norm=False)
    return m


def test_mlp_forward_golden():
    m = mlp()
    g, result = fuse(m.main, [m.loss.name])
    check_golden(os.path.join(GOLDEN, "mlp_forward.ir"), g.to_text())
    assert result.stats == {"fused add->act": 2}
    assert g.stats()[FUSED_OP] == 2 and "relu" not in g.stats()


def test_mlp_training_golden():
    m = mlp()
    with graphc.program_guard(m.main, m.startup):
        optimizer.SGD(0.1).minimize(m.loss)
    g, result = fuse(m.main, [m.loss.name])
    check_golden(os.path.join(GOLDEN, "mlp_training.ir"), g.to_text())
    assert result.stats == {"fused add->act": 2, "fused add->act grad": 2}
    stats = g.stats()
    assert stats[FUSED_OP] == 2 and stats[FUSED_GRAD_OP] == 2
    assert "relu" not in stats and "relu_grad" not in stats
    # relu_grad reads Out, so the intermediate (the add's output) is no longer computed
    fused = [op for op in g.ops() if op.type == FUSED_OP]
    assert all(op.output("IntermediateOut") is None for op in fused)
    assert all(not op.attrs["save_intermediate_out"] for op in fused)
    # provenance: the fused op names the two ops it replaces and the pass
    first = fused[0]
    kinds = [p[0] for p in first.provenance]
    assert kinds == ["elementwise_add", "relu", "pass"] and first.provenance[-1][1] == PASS
    unfused_add = next(op for op in graphc.lower(m.main).ops() if op.type == "elementwise_add")
    assert first.source == unfused_add.source  # the user's line, of the first fused op
    grad = next(op for op in g.ops() if op.type == FUSED_GRAD_OP)
    assert [p[0] for p in grad.provenance] == ["relu_grad", "elementwise_add_grad", "pass"]
    assert grad.role == "backward"
    assert graphc.parse(g.to_text()).structurally_equal(g)


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_act_on_y(train):
    stats = {"fused act->add": 1} | ({"fused act->add grad": 1} if train else {})
    g = check_case(f"act_on_y_{'training' if train else 'forward'}", act_on_y, train, stats)
    op = next(op for op in g.ops() if op.type == FUSED_OP)
    assert op.attrs["functor_list"] == ["elementwise_add", "gelu"]
    assert op.attrs["unary_operand"] == "Y" and op.attrs["approximate"] is True
    # gelu_grad reads gelu's input and the add's grad reads Y's shape: in training the
    # intermediate is saved for the fused grad op, forward-only it is not computed at all
    assert (op.output("IntermediateOut") is not None) == train


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_act_on_x(train):
    stats = {"fused act->add": 1} | ({"fused act->add grad": 1} if train else {})
    g = check_case(f"act_on_x_{'training' if train else 'forward'}", act_on_x, train, stats)
    op = next(op for op in g.ops() if op.type == FUSED_OP)
    x, y = op.input("X"), op.input("Y")
    assert op.attrs["unary_operand"] == "X" and op.attrs["axis"] == 1
    assert x.shape == (-1, 3, 4) and y.shape == (3,)  # operands kept in place
    assert (op.attrs["scale"], op.attrs["bias"], op.attrs["bias_after_scale"]) == \
        (2.0, 0.5, False)


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_same_operand(train):
    stats = {"fused add->act": 1} | ({"fused add->act grad": 1} if train else {})
    g = check_case(f"same_operand_{'training' if train else 'forward'}", same_operand, train,
                   stats)
    op = next(op for op in g.ops() if op.type == FUSED_OP)
    assert op.input("X") is op.input("Y")


@pytest.mark.parametrize("train", [False, True], ids=["forward", "training"])
def test_axis_broadcast_smaller_x(train):
    stats = {"fused add->act": 1} | ({"fused add->act grad": 1} if train else {})
    g = check_case(f"axis_broadcast_{'training' if train else 'forward'}", axis_broadcast,
                   train, stats)
    op = next(op for op in g.ops() if op.type == FUSED_OP)
    assert op.input("X").shape == (3,) and op.attrs["axis"] == 1
    assert op.attrs["alpha"] == 0.1


def test_declined_two_users():
    main, startup, feeds, fetch = build(shared_intermediate, train=False)
    g, result = fuse(main, fetch)
    check_golden(os.path.join(GOLDEN, "declined_two_users.ir"), g.to_text())
    assert result.stats_text() == "skipped: intermediate has 2 users: 1"
    assert not result.changed and FUSED_OP not in g.stats()
    assert_exactly_equal(main, startup, feeds, fetch, g)


def test_declined_in_training_when_grad_reads_the_intermediate():
    """Paddle's rule: a backward reader is a user. relu->add fuses forward-only, but in
    training elementwise_add_grad reads relu's output (for Y's shape) and, with no relu_grad
    to pair it with, is a second user."""
    main, startup, feeds, fetch = build(_relu_into_add_without_act_input_grad, train=False)
    assert fuse(main, fetch)[1].stats == {"fused act->add": 1}
    main, startup, feeds, fetch = build(_relu_into_add_without_act_input_grad, train=True)
    g, result = fuse(main, fetch)
    assert result.stats == {"skipped: intermediate has 2 users": 1}
    assert FUSED_OP not in g.stats()
    assert_exactly_equal(main, startup, feeds, fetch, g)


def _relu_into_add_without_act_input_grad():
    """relu of a feed that needs no gradient: the backward has elementwise_add_grad reading
    relu's output for Y's shape but no relu_grad, so there is no grad pair to fuse with."""
    x = x_data([-1, 4], grad=False)
    b = layers.fc(x, 4, bias_attr=False)
    return {"x": (-1, 4)}, layers.elementwise_add(b, layers.relu(x)), []


def test_declined_same_act_output_twice_and_fetched():
    main, startup, feeds, fetch = build(act_twice_into_add, train=False)
    g, result = fuse(main, fetch)
    check_golden(os.path.join(GOLDEN, "declined_act_twice.ir"), g.to_text())
    assert result.stats == {"fused add->act": 2, "skipped: intermediate has 2 users": 1}
    assert_exactly_equal(main, startup, feeds, fetch, g)
    # fetching the intermediate of fc's add+relu keeps it unfused too
    main, startup, feeds, fetch = build(act_twice_into_add, train=True)
    g, result = fuse(main, fetch + ["fc_0.tmp_1"])
    assert result.stats == {"fused add->act": 1, "fused add->act grad": 2,
                            "skipped: intermediate is fetched": 1,
                            "skipped: intermediate has 5 users": 1}
    assert_exactly_equal(main, startup, feeds, fetch + ["fc_0.tmp_1"], g)


# ------------------------------------------------------------------------ grad op, options
def _unary(act, x, attrs):
    block = graphc.default_main_program().global_block()
    out = block.create_var(f"{act}_{x.name}", None, x.dtype)
    block.append_op(act, {"X": x}, {"Out": out}, attrs)
    return out


@pytest.mark.parametrize("functors, operand, use_intermediate", [
    (["relu", "elementwise_add"], "Y", False), (["gelu", "elementwise_add"], "Y", True),
    (["elementwise_add", "tanh"], "Y", False), (["elementwise_add", "leaky_relu"], "X", True),
    (["elementwise_add", "scale"], "Y", False)])
def test_fused_op_in_a_program_differentiates_like_the_unfused_ops(functors, operand,
                                                                  use_intermediate):
    """A fused op built directly gets its grad op from its grad maker; gradients equal the
    unfused program's exactly (those are finite-difference checked in test_gradients),
    also when the loss reads IntermediateOut too (its gradient enters the grad op)."""
    add_first = functors[1] == "elementwise_add"
    act = functors[0] if add_first else functors[1]
    rng = np.random.default_rng(1)
    xv, yv = rng.standard_normal((2, 3, 4)), rng.standard_normal((3,))
    if operand == "X" and not add_first:
        xv, yv = yv, xv  # the act on the smaller operand
    results = []
    for fused in (False, True):
        main, startup = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, startup), graphc.unique_name.guard():
            x = graphc.data("x", list(xv.shape), "float64")
            y = graphc.data("y", list(yv.shape), "float64")
            x.stop_gradient = y.stop_gradient = False
            attrs = {"alpha": 0.1} if act == "leaky_relu" else (
                {"scale": 2.0, "bias": 0.5} if act == "scale" else {})
            axis = 1 if xv.ndim != yv.ndim else -1
            block = main.global_block()
            if fused:
                out = block.create_var("out", None, "float64")
                inter = block.create_var("inter", None, "float64")
                block.append_op(FUSED_OP, {"X": x, "Y": y}, {"Out": out, "IntermediateOut": inter},
                                {"functor_list": functors, "unary_operand": operand,
                                 "axis": axis, **attrs})
            elif add_first:
                inter = layers.elementwise_add(x, y, axis=axis)
                out = _unary(act, inter, attrs)
            else:
                inter = _unary(act, y if operand == "Y" else x, attrs)
                x_, y_ = (x, inter) if operand == "Y" else (inter, y)
                out = layers.elementwise_add(x_, y_, axis=axis)
            loss = layers.reduce_sum(layers.elementwise_mul(out, out))
            if use_intermediate:
                loss = layers.elementwise_add(loss, layers.reduce_sum(inter))
            graphc.append_backward(loss)
        g = graphc.lower(main)
        _, fetched = run_graph(g, {}, {"x": xv, "y": yv}, [loss.name, "x@GRAD", "y@GRAD"])
        results.append(fetched)
        if fused:
            grad = next(op for op in g.ops() if op.type == FUSED_GRAD_OP)
            assert ("IntermediateOut@GRAD" in grad.inputs) == use_intermediate
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_options_and_pipeline_text():
    p = parse_pipeline('fuse-elewise-add-act{act_types=["relu","tanh"]}')[0]
    assert p.act_types == ["relu", "tanh"]
    assert str(p) == 'fuse-elewise-add-act{act_types=["relu", "tanh"]}'
    assert str(make_pass(PASS)) == PASS
    with pytest.raises(PassError, match="unsupported activations \\['exp'\\]"):
        make_pass(PASS, act_types=["exp"])


def test_bad_functor_list_is_a_verify_error():
    op = ('(Out=%o: f32[-1,4]) = fused_elemwise_activation(X=%x, Y=%x) '
          '{functor_list=["exp", "elementwise_add"]}')
    g = graphc.parse(f"graph @main {{\n  input %x: f32[-1,4] {{feed}}\n  {op}\n}}\n")
    with pytest.raises(graphc.VerifyError, match="functor_list activation must be one of"):
        g.verify()


# --------------------------------------------------------------------------- properties
ACTS = {"relu": [{}], "tanh": [{}], "sigmoid": [{}],
        "gelu": [{"approximate": False}, {"approximate": True}],
        "leaky_relu": [{"alpha": 0.1}], "scale": [{"scale": -1.5, "bias": 0.5},
                                                  {"scale": 2.0, "bias_after_scale": False}]}


@st.composite
def add_act_chains(draw, train: bool):
    """Programs made of add->act and act->add chains over one feed and some parameters:
    operands of full or Paddle-axis-broadcast shape in either order, the same value on both
    sides, intermediates read twice or fetched, inputs with and without gradients."""
    main, startup = graphc.Program(), graphc.Program()
    fetch = []
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        # few distinct shapes: the interpreter compiles each primitive once per shape
        dims = [draw(st.sampled_from([3, 2])) for _ in range(draw(st.integers(1, 2)))]
        x = graphc.data("x", [-1, *dims])
        x.stop_gradient = draw(st.booleans())
        full = [x, layers.fc(x, dims[-1], num_flatten_dims=len(dims), bias_attr=False)]
        helper = LayerHelper("p")

        def operand(v):
            kind = draw(st.sampled_from(["full", "same", "small"]))
            if kind == "same":
                return v, -1
            if kind == "full":
                return draw(st.sampled_from(full)), -1
            start = draw(st.integers(1, len(dims)))  # Y covers dims[start-1:...]
            length = draw(st.integers(1, len(dims) - start + 1))
            shape = [d if draw(st.booleans()) else 1 for d in dims[start - 1:start - 1 + length]]
            trailing = start - 1 + length == len(dims)
            axis = -1 if trailing and draw(st.booleans()) else start
            p = helper.create_parameter(graphc.ParamAttr(initializer=Uniform(-1.0, 1.0)),
                                        shape)
            return p, axis

        def act(v):
            name = draw(st.sampled_from(list(ACTS)))
            attrs = draw(st.sampled_from(ACTS[name]))
            block = graphc.default_main_program().global_block()
            out = block.create_var(graphc.unique_name.generate(f"{name}.tmp"), None, v.dtype)
            block.append_op(name, {"X": v}, {"Out": out}, attrs)
            return out

        for _ in range(draw(st.integers(1, 3))):
            v = draw(st.sampled_from(full))
            w, axis = operand(v)
            swap = draw(st.booleans())
            if draw(st.booleans()):  # add -> act
                t = layers.elementwise_add(*((w, v) if swap else (v, w)), axis=axis)
                out = act(t)
            else:  # act -> add, the act on the full operand or on the other one
                if w.shape == v.shape or draw(st.booleans()):
                    v = act(v)
                else:
                    w = act(w)
                t = v
                out = layers.elementwise_add(*((w, v) if swap else (v, w)), axis=axis)
            if draw(st.integers(0, 4)) == 0:  # a second reader of the intermediate
                out = layers.elementwise_mul(out, t)
            if draw(st.integers(0, 5)) == 0:
                fetch.append(t.name)
            full.append(out)
        loss = layers.mean(layers.sums(full[1:]) if len(full) > 2 else full[-1])
        if train:
            optimizer.SGD(0.1).minimize(loss)
    return GeneratedProgram(main, startup, {"x": ((-1, *dims), "float32")},
                            [loss.name, *fetch], loss.name)


@settings(max_examples=12)
@given(add_act_chains(train=False))
def test_add_act_chains_forward(gen):
    check_pass(make_pass(PASS), gen)


@settings(max_examples=8)
@given(add_act_chains(train=True))
def test_add_act_chains_training(gen):
    check_pass(make_pass(PASS), gen)


@settings(max_examples=6)
@given(random_programs(max_ops=6, with_loss=False))
def test_random_forward_programs(gen):
    check_pass(make_pass(PASS), gen)


@settings(max_examples=4)
@given(random_programs(max_ops=5, with_loss=True))
def test_random_training_programs(gen):
    with graphc.program_guard(gen.main, gen.startup):
        optimizer.SGD(0.1).minimize(gen.main.global_block().var(gen.loss))
    check_pass(make_pass(PASS), gen)


# ----------------------------------------------------------------- Paddle's own loss test
def simple_fc_net(img, label):
    hidden = img
    for _ in range(2):
        hidden = layers.fc(hidden, 100, act="relu",
                           bias_attr=graphc.ParamAttr(initializer=Constant(1.0)))
    prediction = layers.fc(hidden, 10, act="softmax")
    return layers.mean(layers.cross_entropy(prediction, label))


def fc_with_batchnorm(img, label):
    hidden = img
    for _ in range(2):
        hidden = layers.fc(hidden, 200, act="relu",
                           bias_attr=graphc.ParamAttr(initializer=Constant(1.0)))
        hidden = layers.batch_norm(hidden)
    prediction = layers.fc(hidden, 10, act="softmax")
    return layers.mean(layers.cross_entropy(prediction, label))


@pytest.mark.parametrize("model", [simple_fc_net, fc_with_batchnorm], ids=lambda f: f.__name__)
def test_paddle_loss_equality(model):
    """Paddle's test_fuse_elewise_add_act_pass: first and last of 5 SGD steps within 1e-6."""
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 1
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        img = graphc.data("image", [-1, 784])
        label = graphc.data("label", [-1, 1], "int64")
        loss = model(img, label)
        optimizer.SGD(0.001, regularization=L2Decay(1e-4)).minimize(loss)
    rng = np.random.default_rng(5)
    feed = {"image": rng.random((32, 784), dtype="float32"),
            "label": rng.integers(0, 9, (32, 1)).astype("int64")}
    losses = {}
    for fused in (False, True):
        program = graphc.CompiledProgram(
            main, build_strategy=graphc.BuildStrategy(fuse_elewise_add_act_ops=fused))
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        losses[fused] = [float(exe.run(program, feed=feed, fetch_list=[loss], scope=scope)[0][0])
                         for _ in range(6)]
        stats = program.graph(fetch_list=[loss]).stats()
        assert stats.get(FUSED_OP, 0) == stats.get(FUSED_GRAD_OP, 0) == (2 if fused else 0)
        if fused:
            report = program.last_report.stats()[PASS]
            assert report == {"fused add->act": 2, "fused add->act grad": 2}
    plain, fused = losses[False], losses[True]
    assert plain[-1] < plain[0]  # it trains
    assert abs(plain[0] - fused[0]) <= 1e-6 and abs(plain[-1] - fused[-1]) <= 1e-6
