"""What porting Paddle 1.8's own book and unit tests (tests/book, test_optimizer.py,
test_learning_rate_scheduler.py) by the rule needed: programs built op by op with Paddle's
keywords, the optimisation pass's ops and accumulators as Paddle returns and names them."""

from __future__ import annotations

import numpy as np
import pytest
from porting import port

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.fluid import framework, optimizer
from graphc.fluid.backward import append_backward
from graphc.ir.errors import ProgramError

LR = 0.01


def op_built_net(param_lr: float):
    """Paddle's unit-test idiom: variables and ops appended to a block by hand; mul.x is a
    parameter with its own learning-rate factor, mul.y a persistable the test sets."""
    startup, main = framework.Program(), framework.Program()
    block = main.global_block()
    x = block.create_parameter(dtype="float32", shape=[5, 10], lod_level=0, name="mul.x",
                               optimize_attr={"learning_rate": param_lr})
    y = block.create_var(dtype="float32", shape=[10, 8], lod_level=0, name="mul.y",
                         persistable=True)
    out = block.create_var(dtype="float32", shape=[5, 8], lod_level=0, name="mul.out")
    mean = block.create_var(dtype="float32", shape=[1], lod_level=0, name="mean.out")
    block.append_op(type="mul", inputs={"X": x, "Y": y}, outputs={"Out": out},
                    attrs={"x_num_col_dims": 1})
    block.append_op(type="mean", inputs={"X": out}, outputs={"Out": mean})
    return startup, main, x, mean


def test_create_parameter_takes_paddles_keywords():
    _, _, x, _ = op_built_net(1.1)
    assert x.optimize_attr == {"learning_rate": 1.1} and x.lod_level == 0
    block = framework.Program().global_block()
    p = block.create_parameter(name="p", shape=[2], dtype="float32", do_model_average=True,
                               gradient_clip_attr=None, error_clip=None)
    assert p.do_model_average and p.persistable and not p.stop_gradient
    with pytest.raises(ProgramError, match="'q': lod_level=1; a parameter is a dense"):
        block.create_parameter(name="q", shape=[2], dtype="float32", lod_level=1)
    with pytest.raises(ProgramError, match=r"'r': optimize_attr keys \['lr'\]"):
        block.create_parameter(name="r", shape=[2], dtype="float32", optimize_attr={"lr": 2})


@pytest.mark.parametrize("param_lr, types", [(1.1, ["scale", "sgd"]), (1.0, ["sgd"])])
def test_minimize_returns_the_whole_optimisation_pass_and_it_updates(param_lr, types):
    startup, main, x, mean = op_built_net(param_lr)
    opts, params_grads = optimizer.SGDOptimizer(learning_rate=LR).minimize(mean, startup)
    assert [op.type for op in opts] == types
    assert [p.name for p, _ in params_grads] == ["mul.x"]

    rng = np.random.RandomState(0)
    x0 = rng.uniform(-1, 1, (5, 10)).astype("float32")
    y = rng.uniform(-1, 1, (10, 8)).astype("float32")
    # d mean(x @ y) / dx = ones(5, 8) / 40 @ y.T; the step is lr * param_lr * grad
    want = x0 - LR * param_lr * (np.ones((5, 8), "float32") / 40) @ y.T

    scope = graphc.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        scope["mul.x"], scope["mul.y"] = x0, y
        (loss,) = exe.run(main, fetch_list=[mean])
        np.testing.assert_allclose(loss, [np.mean(x0 @ y)], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.asarray(scope["mul.x"]), want, rtol=1e-5, atol=1e-7)

    state, _ = run_graph(graphc.lower(startup))
    state["mul.x"], state["mul.y"] = x0, y
    state, _ = run_graph(graphc.lower(main), state, {}, [mean.name])
    np.testing.assert_allclose(np.asarray(state["mul.x"]), want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make, update, acc_strs", [
    (lambda: optimizer.MomentumOptimizer(learning_rate=LR, momentum=0.2), ["momentum"],
     ["_velocity_acc_str"]),
    (lambda: optimizer.AdagradOptimizer(learning_rate=LR, epsilon=1e-6), ["adagrad"],
     ["_moment_acc_str"]),
    (lambda: optimizer.AdamOptimizer(learning_rate=LR), ["adam"],
     ["_moment1_acc_str", "_moment2_acc_str", "_beta1_pow_acc_str", "_beta2_pow_acc_str"]),
    # Adamax advances its beta1 power after the update (a scale), as Paddle 1.8 does
    (lambda: optimizer.AdamaxOptimizer(learning_rate=LR), ["adamax", "scale"],
     ["_moment_acc_str", "_inf_norm_acc_str", "_beta1_pow_acc_str"]),
    (lambda: optimizer.RMSPropOptimizer(learning_rate=LR), ["rmsprop"],
     ["_momentum_acc_str", "_mean_square_acc_str", "_mean_grad_acc_str"]),
    (lambda: optimizer.FtrlOptimizer(learning_rate=LR), ["ftrl"],
     ["_squared_acc_str", "_linear_acc_str"]),
])
def test_accumulators_by_paddles_names_and_the_learning_rate_initialised_last(make, update,
                                                                              acc_strs):
    startup, main, x, mean = op_built_net(1.1)
    opt = make()
    params_grads = append_backward(mean)
    assert opt._accumulators == {}
    with framework.program_guard(main, startup):
        opts = opt.apply_gradients(params_grads)
    assert [op.type for op in opts] == ["scale", *update]
    assert sorted(opt._accumulators) == sorted(getattr(opt, s) for s in acc_strs)
    for s in acc_strs:
        assert list(opt._accumulators[getattr(opt, s)]) == ["mul.x"]
    init = startup.global_block().ops
    assert [op.type for op in init] == ["fill_constant"] * (len(acc_strs) + 1)
    assert init[-1].attr("value") == pytest.approx(LR)  # the learning rate comes last
    lr_name = init[-1].output("Out")[0]
    assert lr_name.startswith("learning_rate")
    acc_names = {v.name for acc in opt._accumulators.values() for v in acc.values()}
    assert {op.output("Out")[0] for op in init[:-1]} == acc_names


def test_a_second_minimize_reuses_the_learning_rate_and_returns_its_own_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        a = fluid.layers.fc(x, 2, param_attr=fluid.ParamAttr(learning_rate=0.5))
        loss = fluid.layers.mean(a)
        opts, _ = optimizer.SGD(learning_rate=0.1).minimize(loss)
    # fc's weight has lr 0.5 (a scale, then sgd), its bias 1.0 (sgd only)
    assert [op.type for op in opts] == ["scale", "sgd", "sgd"]
    assert all(op.attr("op_role") == "optimize" for op in opts
               if "op_role" in getattr(op, "attrs", {}))
    assert startup.global_block().ops[-1].type == "fill_constant"
    assert startup.global_block().ops[-1].attr("value") == pytest.approx(0.1)


def test_the_rule_keeps_the_alias_of_an_aliased_import():
    # PaddlePaddle/book's chapter 04 spells `import paddle as paddle`
    assert port("import paddle as paddle\nimport paddle.fluid as fluid\n") == (
        "import graphc as paddle\nimport graphc.fluid as fluid\n")
    assert port("import paddle.fluid.layers as layers\n") == (
        "import graphc.fluid.layers as layers\n")


def test_a_dynamic_rnn_inference_model_saves_in_graphcs_format_and_reloads(tmp_path):
    # Paddle's test_rnn_encoder_decoder saves a DynamicRNN decoder with save_inference_model
    # and loads it back; Paddle's format has no dynamic_rnn op, graphc's own format keeps it
    main, startup, hidden = fluid.Program(), fluid.Program(), 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=1)
        rnn = fluid.layers.DynamicRNN()
        with rnn.block():
            x_t = rnn.step_input(x)
            h_prev = rnn.memory(value=0.0, shape=[hidden])
            h = fluid.layers.fc(input=[x_t, h_prev], size=hidden, act="tanh")
            rnn.update_memory(h_prev, h)
            rnn.output(h)
        out = rnn()
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.RandomState(1)
    xs = rng.uniform(-1, 1, (5, 2)).astype("float32")
    feed = fluid.create_lod_tensor(xs, [[2, 3]], fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        w0, w1, b = (np.asarray(fluid.global_scope()[n]) for n in
                     ("fc_0.w_0", "fc_0.w_1", "fc_0.b_0"))
        with pytest.warns(UserWarning, match="'dynamic_rnn' has no form in Paddle's format"):
            fluid.io.save_inference_model(str(tmp_path), ["x"], [out], exe, main_program=main)
    want = []
    for seq in (xs[:2], xs[2:]):
        h = np.zeros(hidden, "float32")
        for row in seq:
            h = np.tanh(row @ w0 + h @ w1 + b)
            want.append(h)
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetch = fluid.io.load_inference_model(str(tmp_path), exe)
        (got,) = exe.run(program, feed={feeds[0]: feed}, fetch_list=fetch, return_numpy=False)
    assert got.recursive_sequence_lengths() == [[2, 3]]
    np.testing.assert_allclose(np.array(got), np.stack(want), rtol=1e-5, atol=1e-6)


def test_hsigmoid_refuses_a_label_of_several_ids_per_row_at_build_time():
    # Paddle's TestBook.make_hsigmoid feeds a [N, 2] label; Paddle's kernel reads the first N
    # ids of it and drops the rest, graphc names the label instead of failing inside XLA
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        y = fluid.layers.data(name="y", shape=[2], dtype="int64")
        with pytest.raises(graphc.ShapeError, match=r"Label must be int \[N\] or \[N, 1\] with "
                                                    r"X's N, got int64 \[-1, 2\]"):
            fluid.layers.hsigmoid(input=x, label=y, num_classes=2)
        y1 = fluid.layers.data(name="y1", shape=[1], dtype="int64")
        out = fluid.layers.hsigmoid(input=x, label=y1, num_classes=2)
    assert list(out.shape) == [-1, 1]


def np_bpr(x, label):
    """Paddle's bpr_loss per row: -mean over j != label of log sigmoid(x[label] - x[j])."""
    rows, classes = x.reshape(-1, x.shape[-1]), x.shape[-1]
    out = []
    for r, lab in zip(rows, label.reshape(-1)):
        d = r[lab] - np.delete(r, lab)
        out.append(-np.sum(-np.log1p(np.exp(-d))) / (classes - 1))
    return np.array(out).reshape(*x.shape[:-1], 1)


def run_both(main, startup, feed, fetch):
    """The fetched values from the jitted Executor and from the interpreter."""
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        jitted = exe.run(main, feed=feed, fetch_list=fetch)
    state, _ = run_graph(graphc.lower(startup))
    _, interp = run_graph(graphc.lower(main), state, feed, [v.name for v in fetch])
    return jitted, interp


def test_bpr_loss_of_scores_with_leading_dims_is_one_loss_per_row():
    # Paddle's shape rule: X [..., C], Label [..., 1], Y [..., 1] (test_layers: [N, 30, 10])
    rng = np.random.RandomState(3)
    x = rng.randn(2, 3, 5)
    label = rng.randint(0, 5, (2, 3, 1)).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.layers.data(name="x", shape=[3, 5], dtype="float64")
        lv = fluid.layers.data(name="label", shape=[3, 1], dtype="int64")
        y = fluid.layers.bpr_loss(xv, lv)
        with pytest.raises(graphc.ShapeError, match=r"Label must be \[N, 1\] for X \[-1, 3, 5\]"):
            fluid.layers.bpr_loss(xv, fluid.layers.data(name="l2", shape=[1], dtype="int64"))
    assert list(y.shape) == [-1, 3, 1]
    for (got,) in run_both(main, startup, {"x": x, "label": label}, [y]):
        np.testing.assert_allclose(got, np_bpr(x, label), rtol=1e-10)


def test_pad2d_takes_paddings_from_a_variable_the_build_knows():
    rng = np.random.RandomState(4)
    x = rng.randn(2, 3, 4, 5).astype("float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.layers.data(name="x", shape=[3, 4, 5], dtype="float32")
        paddings = fluid.layers.fill_constant(shape=[4], dtype="int32", value=2)
        out = fluid.layers.pad2d(xv, paddings=paddings, mode="reflect")
        fed = fluid.layers.data(name="p", shape=[4], dtype="int32", append_batch_size=False)
        with pytest.raises(graphc.ShapeError, match=r"pad2d: argument paddings \('p'\) is "
                                                    r"computed from data values"):
            fluid.layers.pad2d(xv, paddings=fed)
    assert list(out.shape) == [-1, 3, 8, 9]
    want = np.pad(x, [(0, 0), (0, 0), (2, 2), (2, 2)], mode="reflect")
    for (got,) in run_both(main, startup, {"x": x}, [out]):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_plain_variable_no_op_writes_is_fed_as_paddle_feeds_any_variable():
    # Paddle's unit tests build inputs with block.create_var and feed them (its executor
    # prepends a feed op for any name); graphc makes such a variable a feed when fed
    main, startup = framework.Program(), framework.Program()
    block = main.global_block()
    x = block.create_var(dtype="float32", shape=[2, 3], name="plain.x")
    y = block.create_var(dtype="float32", shape=[2, 3], name="plain.y")
    block.append_op(type="scale", inputs={"X": x}, outputs={"Out": y},
                    attrs={"scale": 2.0, "bias": 1.0})
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        (got,) = exe.run(main, feed={"plain.x": xs}, fetch_list=[y])
        np.testing.assert_allclose(got, xs * 2 + 1)
        # another shape: Paddle checks no feed of a variable without need_check_feed, and
        # graphc re-types the program for it (runtime/feed_shapes.py)
        (got,) = exe.run(main, feed={"plain.x": xs[:1]}, fetch_list=[y])
        np.testing.assert_allclose(got, xs[:1] * 2 + 1)
    assert x.is_data
    _, (interp,) = run_graph(graphc.lower(main), {}, {"plain.x": xs}, ["plain.y"])
    np.testing.assert_allclose(interp, xs * 2 + 1)
    # not fed: the lowering's error, naming the variable, as before
    main2 = framework.Program()
    b2 = main2.global_block()
    z = b2.create_var(dtype="float32", shape=[1], name="plain.z")
    b2.append_op(type="scale", inputs={"X": z}, outputs={"Out": b2.create_var(
        dtype="float32", shape=[1], name="plain.w")}, attrs={"scale": 1.0})
    with pytest.raises(ProgramError, match="reads 'plain.z' before any op writes it"):
        exe.run(main2, fetch_list=["plain.w"])
