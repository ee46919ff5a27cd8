"""Paddle 1.8's conditionals (cond, case, switch_case, ConditionalBlock, Switch, IfElse) against
NumPy references: both outcomes in one compiled step, interpreter == jitted, gradients."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.ir.text import parse

RNG = np.random.default_rng(26)


@pytest.fixture(autouse=True)
def fresh_programs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        yield main, startup


def _compiles(exe, main) -> int:
    """XLA compiles the executor made for ``main`` (every fetch list, every feed shape)."""
    return sum(step.traces for prep in exe._prepared[main][1].values()
               for step in prep.steps.values())


class Both:
    """One executor and the interpreter over the current programs: ``run`` gives the jitted
    step's fetches and checks the interpreter's equal them."""

    def __init__(self):
        self.main = graphc.default_main_program()
        self.exe = graphc.Executor()
        self.exe.run(graphc.default_startup_program())
        self.state, _ = run_graph(graphc.lower(graphc.default_startup_program()))

    def run(self, feeds, fetch):
        names = [v.name for v in fetch]
        jitted = [np.asarray(v) for v in self.exe.run(self.main, feed=feeds, fetch_list=names)]
        _, interp = run_graph(graphc.lower(self.main), dict(self.state), feeds, names)
        for j, i in zip(jitted, interp):
            np.testing.assert_allclose(j, np.asarray(i), rtol=1e-6, atol=1e-6)
        return jitted

    @property
    def compiles(self):
        return _compiles(self.exe, self.main)


def _bool(v):
    return np.array([v])


# -- cond -----------------------------------------------------------------------------------
def test_cond_nested_structure_both_outcomes_one_compile():
    x = fluid.data("x", [-1, 3], "float32")
    p = fluid.data("p", [1], "bool")
    out = layers.cond(p, lambda: (layers.scale(x, 2.0), {"s": [layers.reduce_sum(x)]}),
                      lambda: (x * x, {"s": [layers.reduce_max(x)]}))
    assert isinstance(out, tuple) and isinstance(out[1]["s"], list)
    a, s = out[0], out[1]["s"][0]
    both = Both()
    xv = RNG.standard_normal((4, 3)).astype("float32")
    ra, rs = both.run({"x": xv, "p": _bool(True)}, [a, s])
    np.testing.assert_allclose(ra, 2 * xv, rtol=1e-6)
    np.testing.assert_allclose(rs, [xv.sum()], rtol=1e-5)
    ra, rs = both.run({"x": xv, "p": _bool(False)}, [a, s])
    np.testing.assert_allclose(ra, xv * xv, rtol=1e-6)
    np.testing.assert_allclose(rs, [xv.max()], rtol=1e-6)
    assert both.compiles == 1


def test_cond_none_branches_and_carried_writes():
    x = fluid.data("x", [2], "float32")
    p = fluid.data("p", [1], "bool")
    acc = layers.fill_constant([2], "float32", 1.0)

    def bump():
        layers.assign(x + acc, acc)  # an outer value written in place: carried

    assert layers.cond(p, bump) is None
    assert [op.type for op in graphc.default_main_program().global_block().ops][-1] == "cond"
    both = Both()
    xv = np.array([3.0, 4.0], "float32")
    np.testing.assert_allclose(both.run({"x": xv, "p": _bool(True)}, [acc])[0], xv + 1)
    np.testing.assert_allclose(both.run({"x": xv, "p": _bool(False)}, [acc])[0], [1, 1])
    assert both.compiles == 1


def test_nested_cond():
    x = fluid.data("x", [1], "float32")
    p = layers.greater_than(x, layers.fill_constant([1], "float32", 0.0))
    q = layers.greater_than(x, layers.fill_constant([1], "float32", 10.0))
    out = layers.cond(p, lambda: layers.cond(q, lambda: x * 100.0, lambda: x + 1.0),
                      lambda: layers.scale(x, -1.0))
    text = graphc.lower(graphc.default_main_program()).to_text()
    assert text.count("= cond(") == 2
    both = Both()
    for xv, want in ((-2.0, 2.0), (3.0, 4.0), (20.0, 2000.0)):
        got = both.run({"x": np.array([xv], "float32")}, [out])[0]
        np.testing.assert_allclose(got, [want], rtol=1e-6)
    assert both.compiles == 1


# -- case and switch_case -------------------------------------------------------------------
def test_case_first_true_pred_else_default():
    x = fluid.data("x", [1], "float32")
    zero = layers.fill_constant([1], "float32", 0.0)
    ten = layers.fill_constant([1], "float32", 10.0)
    p1, p2 = layers.less_than(x, zero), layers.less_than(x, ten)
    out = layers.case([(p1, lambda: x * -1.0), (p2, lambda: x * 2.0)], lambda: x + 1000.0)
    last = layers.case([(p1, lambda: x * -1.0), (p2, lambda: x * 2.0)])  # default: last fn
    both = Both()
    for xv in (-3.0, 4.0, 50.0):
        want = -xv if xv < 0 else 2 * xv if xv < 10 else xv + 1000
        want_last = -xv if xv < 0 else 2 * xv
        got, got_last = both.run({"x": np.array([xv], "float32")}, [out, last])
        np.testing.assert_allclose(got, [want])
        np.testing.assert_allclose(got_last, [want_last])
    assert both.compiles == 1


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_switch_case_dict_list_and_default(dtype):
    i = fluid.data("i", [1], dtype)
    x = fluid.data("x", [2], "float32")
    fns = {1: lambda: x + 1.0, 3: lambda: x * 3.0, 7: lambda: x * 7.0}
    with_default = layers.switch_case(i, fns, default=lambda: x * 0.0)
    max_key = layers.switch_case(i, [(1, fns[1]), (3, fns[3]), (7, fns[7])])
    listed = layers.switch_case(i, [lambda: x - 1.0, lambda: x - 2.0])  # index = position
    both = Both()
    xv = np.array([1.0, 2.0], "float32")
    for iv in (0, 1, 3, 7, 9):
        a, b, c = both.run({"i": np.array([iv], dtype), "x": xv},
                           [with_default, max_key, listed])
        ref = {1: xv + 1, 3: xv * 3, 7: xv * 7}
        np.testing.assert_allclose(a, ref.get(iv, xv * 0))
        np.testing.assert_allclose(b, ref.get(iv, xv * 7))  # the largest key's fn
        np.testing.assert_allclose(c, xv - 1 if iv == 0 else xv - 2)
    assert both.compiles == 1


# -- ConditionalBlock and Switch ------------------------------------------------------------
def test_conditional_block_scalar_and_non_empty_condition():
    x = fluid.data("x", [-1, 2], "float32")
    p = fluid.data("p", [1], "bool")
    out = layers.fill_constant([1], "float32", -1.0)
    seen = layers.fill_constant([1], "float32", 0.0)
    with layers.ConditionalBlock([p], is_scalar_condition=True).block():
        layers.assign(layers.reduce_sum(x, keep_dim=False, dim=[0, 1]), out)
    with layers.ConditionalBlock([x]).block():  # runs when x has elements
        layers.assign(layers.fill_constant([1], "float32", 5.0), seen)
    both = Both()
    xv = RNG.standard_normal((3, 2)).astype("float32")
    got, s = both.run({"x": xv, "p": _bool(True)}, [out, seen])
    np.testing.assert_allclose(got, [xv.sum()], rtol=1e-5)
    np.testing.assert_allclose(s, [5.0])
    got, _ = both.run({"x": xv, "p": _bool(False)}, [out, seen])
    np.testing.assert_allclose(got, [-1.0])
    assert both.compiles == 1


def test_switch_updates_only_the_taken_branch():
    x = fluid.data("x", [1], "float32")
    lr = layers.create_global_var([1], 0.0, "float32", persistable=True, name="lr")
    other = layers.fill_constant([1], "float32", 7.0)
    with layers.Switch() as switch:
        with switch.case(x < layers.fill_constant([1], "float32", 1.0)):
            layers.assign(layers.fill_constant([1], "float32", 10.0), lr)
        with switch.case(x < layers.fill_constant([1], "float32", 2.0)):
            layers.assign(layers.fill_constant([1], "float32", 20.0), lr)
            layers.assign(x, other)
        with switch.default():
            layers.assign(layers.fill_constant([1], "float32", 30.0), lr)
    ops = [op.type for op in graphc.default_main_program().global_block().ops]
    assert ops.count("case") == 1
    both = Both()
    for xv, want, want_other in ((0.5, 10, 7), (1.5, 20, 1.5), (5.0, 30, 7)):
        got, o = both.run({"x": np.array([xv], "float32")}, [lr, other])
        np.testing.assert_allclose(got, [want])
        np.testing.assert_allclose(o, [want_other])
    assert both.compiles == 1


def _switch_piecewise_decay(boundaries, values):
    """Paddle's own piecewise_decay, written with Switch over the global step."""
    step = layers.learning_rate_scheduler._decay_step_counter()
    lr = layers.create_global_var([1], 0.0, "float32", persistable=True,
                                  name="switch_learning_rate")
    with layers.Switch() as switch:
        for b, v in zip(boundaries, values):
            with switch.case(step < layers.fill_constant([1], "float32", float(b))):
                layers.assign(layers.fill_constant([1], "float32", float(v)), lr)
        with switch.default():
            layers.assign(layers.fill_constant([1], "float32", float(values[-1])), lr)
    return lr


def test_piecewise_decay_equals_a_switch_written_one():
    boundaries, values = [3, 6], [1.0, 0.5, 0.1]
    graphc_lr = layers.piecewise_decay(boundaries, values)
    switch_lr = _switch_piecewise_decay(boundaries, values)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    seen = []
    for _ in range(9):
        a, b = exe.run(graphc.default_main_program(), fetch_list=[graphc_lr, switch_lr])
        np.testing.assert_allclose(a, b)
        seen.append(float(a[0]))
    np.testing.assert_allclose(seen, [1.0] * 3 + [0.5] * 3 + [0.1] * 3, rtol=1e-6)


# -- IfElse ---------------------------------------------------------------------------------
def test_ifelse_paddle_example_rows_merged():
    x = fluid.data("x", [-1, 1], "float32")
    y = fluid.data("y", [-1, 1], "float32")
    ie = layers.IfElse(layers.greater_than(x, y))
    with ie.true_block():
        ie.output(ie.input(x) - 10.0)
    with ie.false_block():
        ie.output(ie.input(x) + 10.0)
    out = ie()[0]
    total = layers.reduce_sum(out)
    both = Both()
    xv = np.array([[3], [1], [-2], [-3]], "float32")
    got, s = both.run({"x": xv, "y": np.zeros((4, 1), "float32")}, [out, total])
    np.testing.assert_allclose(got, [[-7], [-9], [8], [7]])
    np.testing.assert_allclose(s, [-1])


def test_ifelse_branch_never_sees_the_other_rows_gradient_is_finite():
    x = fluid.data("x", [-1, 1], "float32")
    x.stop_gradient = False
    ie = layers.IfElse(layers.greater_than(x, layers.fill_constant([1], "float32", 0.0)))
    with ie.true_block():
        ie.output(layers.log(ie.input(x)))  # NaN on the other rows, were they computed
    with ie.false_block():
        ie.output(ie.input(x) * 2.0)
    out = ie()[0]
    loss = layers.reduce_sum(out)
    (gx,) = fluid.gradients(loss, [x])
    both = Both()
    xv = np.array([[2.0], [-1.0], [0.5]], "float32")
    got, g = both.run({"x": xv}, [out, gx])
    np.testing.assert_allclose(got, [[np.log(2)], [-2], [np.log(0.5)]], rtol=1e-6)
    np.testing.assert_allclose(g, [[0.5], [2.0], [2.0]], rtol=1e-6)


def _ifelse_classifier(image, label, cond):
    """graphc's Paddle-spelled IfElse MNIST classifier: rows split by a per-row condition,
    each part through its own fc stack, merged, one loss."""
    ie = layers.IfElse(cond)
    with ie.true_block():
        hidden = layers.fc(ie.input(image), 32, act="relu")
        ie.output(layers.fc(hidden, 10, act="softmax"))
    with ie.false_block():
        hidden = layers.fc(ie.input(image), 32, act="tanh")
        ie.output(layers.fc(hidden, 10, act="softmax"))
    prob = ie()[0]
    return layers.mean(layers.cross_entropy(prob, label)), prob


def test_ifelse_mnist_style_classifier_trains():
    image = fluid.data("image", [-1, 64], "float32")
    label = fluid.data("label", [-1, 1], "int64")
    limit = layers.fill_constant([1], "int64", 5)
    cond = layers.less_than(label, limit)  # [N, 1] bool: digits 0-4 one way, 5-9 the other
    loss, _ = _ifelse_classifier(image, label, cond)
    fluid.optimizer.Adam(0.01).minimize(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    centers = RNG.standard_normal((10, 64)).astype("float32")
    labels = RNG.integers(0, 10, (64, 1))
    images = (centers[labels[:, 0]] + 0.5 * RNG.standard_normal((64, 64))).astype("float32")
    losses = [float(exe.run(feed={"image": images, "label": labels}, fetch_list=[loss])[0][0])
              for _ in range(30)]
    assert losses[-1] < 0.3 * losses[0], losses


def test_ifelse_refuses_ops_that_mix_rows():
    x = fluid.data("x", [-1, 4], "float32")
    ie = layers.IfElse(layers.fill_constant_batch_size_like(x, [-1, 1], "bool", 1.0))
    with ie.true_block():
        ie.output(x_rows := ie.input(x))
        del x_rows
    with ie.false_block():
        rows = ie.input(x)
        ie.output(layers.elementwise_sub(rows, layers.mean(rows)))
    with pytest.raises(ProgramError, match=r"op mean at .*test_control_flow_cond.py.*mix the "
                                           r"rows"):
        ie()


# -- gradients ------------------------------------------------------------------------------
def _fd_check(loss, wrt, feeds, exe, main, eps=1e-3):
    """d loss / d wrt (fed) by finite differences against fluid.gradients."""
    (g,) = fluid.gradients(loss, [wrt])
    base = dict(feeds)
    got = np.asarray(exe.run(main, feed=base, fetch_list=[g])[0])
    num = np.zeros_like(base[wrt.name])
    for idx in np.ndindex(num.shape):
        for sign in (1, -1):
            f = dict(base)
            f[wrt.name] = base[wrt.name].copy()
            f[wrt.name][idx] += sign * eps
            num[idx] += sign * float(exe.run(main, feed=f, fetch_list=[loss])[0][0]) / (2 * eps)
    np.testing.assert_allclose(got, num, rtol=2e-3, atol=2e-3)
    return got


def test_cond_gradient_by_finite_differences_untaken_branch_gets_zero():
    x = fluid.data("x", [2, 3], "float64")
    x.stop_gradient = False
    p = fluid.data("p", [1], "bool")
    out = layers.cond(p, lambda: layers.fc(x, 2, act="tanh", param_attr="w_true"),
                      lambda: layers.fc(x, 2, act="sigmoid", param_attr="w_false"))
    loss = layers.reduce_sum(layers.square(out))
    main = graphc.default_main_program()
    gw = fluid.gradients(loss, [main.global_block().var("w_true"),
                                main.global_block().var("w_false")])
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    xv = RNG.standard_normal((2, 3))
    for pv in (True, False):
        _fd_check(loss, x, {"x": xv, "p": _bool(pv)}, exe, main)
        g_true, g_false = exe.run(main, feed={"x": xv, "p": _bool(pv)}, fetch_list=gw)
        assert np.abs(g_true if pv else g_false).max() > 0
        assert not np.any(g_false if pv else g_true)  # the untaken branch's parameter


def test_switch_case_gradient_by_finite_differences():
    x = fluid.data("x", [3], "float64")
    x.stop_gradient = False
    i = fluid.data("i", [1], "int32")
    out = layers.switch_case(i, {0: lambda: layers.exp(x), 1: lambda: x * x},
                             default=lambda: layers.sin(x))
    loss = layers.reduce_sum(out * fluid.data("w", [3], "float64"))
    main = graphc.default_main_program()
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    xv = RNG.standard_normal(3)
    w = np.array([1.0, -2.0, 0.5])
    for iv, ref in ((0, np.exp(xv) * w), (1, 2 * xv * w), (5, np.cos(xv) * w)):
        got = _fd_check(loss, x, {"x": xv, "i": np.array([iv], "int32"), "w": w}, exe, main)
        np.testing.assert_allclose(got, ref, rtol=1e-6)


# -- text round trip ------------------------------------------------------------------------
def test_text_round_trip_of_every_conditional_op():
    x = fluid.data("x", [-1, 3], "float32")
    p = fluid.data("p", [1], "bool")
    i = fluid.data("i", [1], "int64")
    a = layers.cond(p, lambda: layers.cond(p, lambda: x + 1.0, lambda: x - 1.0),
                    lambda: layers.fc(x, 3))
    b = layers.case([(p, lambda: a * 2.0)], lambda: a)
    c = layers.switch_case(i, {2: lambda: b, 4: lambda: layers.relu(b)})
    ie = layers.IfElse(layers.fill_constant_batch_size_like(x, [-1, 1], "bool", 0.0))
    with ie.true_block():
        ie.output(layers.fc(ie.input(c), 3))
    with ie.false_block():
        ie.output(ie.input(c) * 0.5)
    fluid.backward.append_backward(layers.reduce_sum(ie()[0]))
    g = graphc.lower(graphc.default_main_program())
    text = g.to_text()
    for op in ("cond", "case", "switch_case", "ifelse"):
        assert f"= {op}(" in text and f"= {op}_grad(" in text  # grad ops hold the regions too
    assert "} false_body @" in text and "} branches @" in text
    assert parse(text).to_text() == text
    shown = g.to_text(show_source=True)
    assert parse(shown).to_text(show_source=True) == shown


# -- bad input ------------------------------------------------------------------------------
# -- portut: argument errors are TypeError/ValueError where Paddle raises those (and stay
# graphc's ProgramError)
@pytest.mark.parametrize("bad, error", [
    (lambda p, x: layers.cond(p, x, lambda: x), TypeError),
    (lambda p, x: layers.cond(p, lambda: x, np.asarray([3])), TypeError),
    (lambda p, x: layers.cond(x, lambda: x, lambda: x), TypeError),
    (lambda p, x: layers.cond(True, lambda: x, lambda: x), TypeError),
    (lambda p, x: layers.case(p, default=lambda: x), TypeError),
    (lambda p, x: layers.case([], default=lambda: x), ValueError),
    (lambda p, x: layers.case([(p, lambda: x, 1)]), TypeError),
    (lambda p, x: layers.case([(p, x)]), TypeError),
    (lambda p, x: layers.switch_case(layers.fill_constant([1], "int32", 0), {"a": lambda: x}),
     TypeError),
    (lambda p, x: layers.switch_case(layers.fill_constant([1], "int32", 0), lambda: x),
     TypeError),
    (lambda p, x: layers.switch_case(layers.fill_constant([1], "int32", 0), {}), ValueError),
    (lambda p, x: layers.switch_case(layers.fill_constant([1], "int32", 0),
                                     [(1, lambda: x), (1, lambda: x)]), ValueError),
], ids=["true_fn", "false_fn", "pred_shape", "pred_python", "pairs_type", "pairs_empty",
        "pair_len", "pair_fn", "key_type", "fns_type", "fns_empty", "key_twice"])
def test_argument_errors_are_type_and_value_errors_as_in_paddle(bad, error):
    p = fluid.data("p", [1], "bool")
    x = fluid.data("x", [2, 3], "float32")
    with pytest.raises(error) as raised:
        bad(p, x)
    assert isinstance(raised.value, ProgramError)


def test_bad_inputs_are_build_time_errors_naming_the_layer_and_line():
    x = fluid.data("x", [2, 3], "float32")
    f = fluid.data("f", [1], "float32")
    p = fluid.data("p", [1], "bool")
    here = r"test_control_flow_cond.py:\d+"
    with pytest.raises(ProgramError, match=rf"cond: pred must be a bool .*'f' float32 .*{here}"):
        layers.cond(f, lambda: x, lambda: x)
    with pytest.raises(ProgramError, match=rf"cond: pred must be a bool .*\[2, 3\].*{here}"):
        layers.cond(layers.cast(x, "bool"), lambda: x, lambda: x)
    with pytest.raises(ProgramError, match=rf"incompatible return values.*{here}"):
        layers.cond(p, lambda: (x, x), lambda: x)
    with pytest.raises(ProgramError, match=rf"true_fn return\(s\) None.*{here}"):
        layers.cond(p, lambda: None, lambda: x)
    with pytest.raises(ShapeError, match=r"cond: branch 1 returns output 0 as f32\[3,3\] but "
                                         r"branch 0 as f32\[2,3\]"):
        layers.cond(p, lambda: x, lambda: layers.fill_constant([3, 3], "float32", 0.0))
    with pytest.raises(ShapeError, match=r"branch 1 returns output 0 as i32"):
        layers.cond(p, lambda: x, lambda: layers.cast(x, "int32"))
    with pytest.raises(ProgramError, match=rf"switch_case: branch_index must be a int32/int64/"
                                           rf"uint8 .*'f' float32.*{here}"):
        layers.switch_case(f, {0: lambda: x})
    with pytest.raises(ProgramError, match=r"Switch.case: condition must be a bool"):
        with layers.Switch() as switch:
            switch.case(f)
    with pytest.raises(ProgramError, match=r"IfElse: cond must be a bool \[N, 1\]"):
        layers.IfElse(f)
    # nothing of the refused layers stays in the program
    assert [op.type for op in graphc.default_main_program().global_block().ops] == ["cast"]


def test_paddle_conditional_block_test_program():
    """Paddle's ConditionalBlock unit test: a non-scalar condition on a batch, an output
    variable with no value before the block, and the gradient through it."""
    data = layers.data(name="X", shape=[1], dtype="float32")
    data.stop_gradient = False
    cond_block = layers.ConditionalBlock(inputs=[data])
    out = layers.create_tensor(dtype="float32")
    with cond_block.block():
        hidden = layers.fc(input=data, size=10)
        layers.assign(hidden, out)
    loss = layers.mean(out)
    fluid.backward.append_backward(loss=loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    x = RNG.random((10, 1)).astype("float32")
    got, gx, w, b = exe.run(feed={"X": x}, fetch_list=[out, "X@GRAD", "fc_0.w_0", "fc_0.b_0"])
    np.testing.assert_allclose(got, x @ w + b, rtol=1e-5)
    np.testing.assert_allclose(gx, np.full((10, 1), w.sum() / 100), rtol=1e-5)


def test_more_refusals_name_the_construct():
    x = fluid.data("x", [-1, 3], "float32")
    p = fluid.data("p", [1], "bool")
    seq = fluid.data("seq", [-1, 3], "float32", lod_level=1)
    with pytest.raises(ShapeError, match=r"op cond at .*: input 'Input' of op cond is a LoD"):
        layers.cond(p, lambda: seq, lambda: layers.scale(seq, 2.0))
    ie = layers.IfElse(layers.fill_constant_batch_size_like(x, [-1, 1], "bool", 1.0))
    with ie.true_block():
        ie.output(ie.input(x))
    with pytest.raises(ProgramError, match="only the true block gives outputs"):
        ie()
    ie = layers.IfElse(layers.fill_constant_batch_size_like(x, [-1, 1], "bool", 1.0))
    with ie.true_block():
        ie.output(layers.scale(x, 2.0))  # the whole batch, not the block's rows
    with pytest.raises(ProgramError, match=r"reads the batch value 'x' directly"):
        with ie.false_block():
            ie.output(ie.input(x))
        ie()
    rows = layers.fill_constant_batch_size_like(x, [-1, 1], "bool", 1.0)
    with pytest.raises(ProgramError, match="IfElse: name must be a str or None, got set"):
        layers.IfElse(rows, set())
    ie = layers.IfElse(rows)
    with pytest.raises(ProgramError, match="a block cannot be opened inside another"):
        with ie.true_block():
            with ie.false_block():
                pass
    v = layers.fill_constant([1], "float32", 0.0)
    with pytest.raises(ProgramError, match=r"Switch: op scale at .* reads \['fill_constant"):
        with layers.Switch() as switch:
            with switch.case(p):
                layers.assign(layers.fill_constant([1], "float32", 1.0), v)
            layers.scale(v, 2.0)
            with switch.case(layers.logical_not(p)):
                layers.assign(layers.fill_constant([1], "float32", 2.0), v)


def test_training_through_cond_leaves_the_untaken_head_alone():
    x = fluid.data("x", [-1, 4], "float32")
    y = fluid.data("y", [-1, 1], "float32")
    p = fluid.data("p", [1], "bool")
    pred = layers.cond(p, lambda: layers.fc(x, 1, param_attr="head_a"),
                       lambda: layers.fc(x, 1, param_attr="head_b"))
    loss = layers.mean(layers.square_error_cost(pred, y))
    fluid.optimizer.SGD(0.1).minimize(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    xv = RNG.standard_normal((16, 4)).astype("float32")
    yv = xv @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    scope = graphc.global_scope()
    b0 = np.array(scope.find_var("head_b").get_tensor())
    losses = [float(exe.run(feed={"x": xv, "y": yv, "p": _bool(True)},
                            fetch_list=[loss])[0][0]) for _ in range(20)]
    assert losses[-1] < 0.2 * losses[0], losses
    np.testing.assert_array_equal(np.array(scope.find_var("head_b").get_tensor()), b0)


def test_region_text_errors_name_the_line():
    from graphc.ir.errors import ParseError
    x = fluid.data("x", [-1, 3], "float32")
    p = fluid.data("p", [1], "bool")
    layers.cond(p, lambda: x + 1.0, lambda: x)
    text = graphc.lower(graphc.default_main_program()).to_text()
    junk = text.replace("} false_body @", "} junk false_body @")
    with pytest.raises(ParseError, match="unexpected text"):
        parse(junk)
    twice = text.replace("} false_body @", "} true_body @")
    with pytest.raises(ParseError, match="attribute 'true_body' given twice"):
        parse(twice)
    unclosed = text.rsplit("  }", 1)[0] + "}\n"
    with pytest.raises(ParseError):
        parse(unclosed)


def test_ifelse_all_rows_one_way_runs_one_block():
    x = fluid.data("x", [-1, 1], "float64")
    x.stop_gradient = False
    ie = layers.IfElse(layers.greater_than(x, layers.fill_constant([1], "float64", 0.0)))
    with ie.true_block():
        ie.output(layers.sqrt(ie.input(x)))  # an infinite slope at the false rows' values
    with ie.false_block():
        ie.output(ie.input(x) * 3.0)
    out = ie()[0]
    (gx,) = fluid.gradients(layers.reduce_sum(out), [x])
    both = Both()
    for xv in (np.array([[-1.0], [-4.0]]), np.array([[4.0], [9.0]])):
        got, g = both.run({"x": xv}, [out, gx])
        pos = xv > 0
        np.testing.assert_allclose(got, np.where(pos, np.sqrt(np.abs(xv)), 3 * xv))
        np.testing.assert_allclose(g, np.where(pos, 0.5 / np.sqrt(np.abs(xv)), 3.0))
    assert both.compiles == 1


def test_amp_keeps_a_conditional_in_float32():
    from graphc.passes import PassManager, make_pass
    x = fluid.data("x", [-1, 4], "float32")
    p = fluid.data("p", [1], "bool")
    h = layers.fc(x, 8, act="relu")  # bfloat16 under AMP: cast back for the cond
    out = layers.cond(p, lambda: layers.fc(h, 2), lambda: layers.fc(h, 2, act="tanh"))
    loss = layers.mean(out)
    fluid.optimizer.SGD(0.1).minimize(loss)
    main = graphc.default_main_program()
    g = graphc.lower(main)
    PassManager([make_pass("amp")], verify_each=True).run(g, keep=[loss.name])
    state, _ = run_graph(graphc.lower(graphc.default_startup_program()))
    feeds = {"x": RNG.standard_normal((3, 4)).astype("float32"), "p": _bool(False)}
    _, (amp,) = run_graph(g, dict(state), feeds, [loss.name])
    _, (fp32,) = run_graph(graphc.lower(main), dict(state), feeds, [loss.name])
    np.testing.assert_allclose(amp, fp32, rtol=5e-2, atol=1e-2)


def test_clone_for_test_reaches_the_ops_inside_branches():
    x = fluid.data("x", [-1, 8], "float32")
    p = fluid.data("p", [1], "bool")
    out = layers.cond(p, lambda: layers.dropout(x, 0.5),
                      lambda: layers.cond(p, lambda: x, lambda: layers.dropout(x, 0.25)))
    test_program = graphc.default_main_program().clone(for_test=True)
    exe = graphc.Executor()
    xv = np.ones((4, 8), "float32")
    for pv, keep in ((True, 0.5), (False, 0.75)):  # Paddle's downgrade_in_infer: x * (1 - p)
        got = exe.run(test_program, feed={"x": xv, "p": _bool(pv)}, fetch_list=[out])[0]
        np.testing.assert_allclose(got, xv * keep)
    trained = exe.run(graphc.default_main_program(), feed={"x": xv, "p": _bool(True)},
                      fetch_list=[out])[0]
    assert set(np.unique(trained)) <= {0.0, 1.0} and 0 < trained.sum() < xv.size
