"""Conditionals whose branches return different types, and while_loop bodies that change a loop
variable's type once: exact when the predicate is known while building (host_fold.py)."""

from __future__ import annotations

import numpy as np
import pytest
from test_control_flow_cond import Both, _fd_check, fresh_programs  # noqa: F401 (autouse fixture)

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.ir.errors import ShapeError
from graphc.layers.host_fold import host_value

RNG = np.random.default_rng(2626)


def _const(value, dtype="int32"):
    return layers.fill_constant([1], dtype, value)


def _ops(name: str) -> int:
    return sum(op.type == name for op in graphc.default_main_program().global_block().ops)


# -- host_value: what folds -----------------------------------------------------------------
def test_host_value_folds_constants_through_the_ops_own_rules():
    a, b = _const(7), _const(3)
    # elementwise_mod/floordiv of negative ints: the rule's own arithmetic decides
    c = layers.elementwise_mod(layers.scale(a, -1.0), b)
    d = layers.elementwise_floordiv(layers.scale(a, -1.0), b)
    p = layers.logical_and(layers.less_than(b, a), layers.equal(c, _const(2)))
    np.testing.assert_array_equal(host_value(c), [(-7) % 3])
    np.testing.assert_array_equal(host_value(d), [(-7) // 3])
    np.testing.assert_array_equal(host_value(p), [True])
    assert host_value(layers.cast(p, "float32")).dtype == np.float32
    # a shape read from a fed value's static type is known; its -1 batch dimension is not
    x = fluid.data("x", [-1, 5, 2], "float32")
    dims = layers.shape(fluid.data("y", [3, 5], "float32"))
    np.testing.assert_array_equal(host_value(layers.elementwise_mul(dims, dims)), [9, 25])
    assert host_value(layers.shape(x)) is None


def test_host_value_refuses_fed_state_in_place_writes_and_loop_bodies():
    x = fluid.data("x", [1], "int32")
    assert host_value(layers.less_than(x, _const(1))) is None  # fed
    g = layers.create_global_var([1], 1, "int32", persistable=True)
    assert host_value(layers.scale(g, 2.0)) is None  # state changes from step to step
    i = _const(0)
    before = layers.less_than(i, _const(3))
    layers.increment(i, in_place=True)  # i has two writers now: its value depends on where
    assert host_value(layers.less_than(i, _const(3))) is None
    assert host_value(before) is None  # its input i is written twice
    j, n = _const(0), _const(3)
    cond = layers.less_than(j, n)
    loop = layers.While(cond)
    with loop.block():
        # inside a loop body an outer value may be written later in the body
        assert host_value(layers.less_than(n, _const(5))) is None
        # a value made in the body is made anew before each iteration reads it
        np.testing.assert_array_equal(host_value(layers.less_than(_const(4), _const(5))),
                                      [True])
        layers.increment(j, in_place=True)
        layers.less_than(j, n, cond=cond)


# -- conditionals ---------------------------------------------------------------------------
@pytest.mark.parametrize("taken", [True, False])
def test_cond_of_a_constant_returns_the_taken_branchs_own_type(taken):
    x = fluid.data("x", [2, 3], "float32")
    pred = layers.less_than(_const(1), _const(2 if taken else 0))
    out, flag = layers.cond(pred, lambda: (layers.scale(x, 2.0), _const(1, "int64")),
                            lambda: (layers.transpose(x, [1, 0]), layers.fill_constant(
                                [2], "bool", True)))
    assert _ops("cond") == 0  # the branch was picked while building
    assert (out.shape, out.dtype) == (((2, 3), "float32") if taken else ((3, 2), "float32"))
    xv = RNG.standard_normal((2, 3)).astype("float32")
    got, f = Both().run({"x": xv}, [out, flag])
    np.testing.assert_allclose(got, 2 * xv if taken else xv.T, rtol=1e-6)
    np.testing.assert_array_equal(f, [1] if taken else [True, True])
    assert f.dtype == (np.int64 if taken else np.bool_)


def test_case_and_switch_case_pick_while_building_nested_inside_a_runtime_switch():
    def inner(k):  # its branches differ in shape; its index is a constant
        return layers.switch_case(_const(k), {1: lambda: layers.fill_constant([4, 3], "int32", 1),
                                              2: lambda: layers.fill_constant([2], "int32", 7)},
                                  default=lambda: layers.fill_constant([5], "int64", 0))

    def by_case(v):
        return layers.case([(layers.equal(_const(v), _const(0)), lambda: _const(9)),
                            (layers.equal(_const(v), _const(v)),
                             lambda: layers.fill_constant([2], "int32", 5))],
                           default=lambda: layers.fill_constant([3, 3], "int32", 0))

    i = fluid.data("i", [1], "uint8")
    # a fed index: one switch_case op whose branches agree once the inner ones are picked
    out = layers.switch_case(i, {0: lambda: inner(2), 1: lambda: by_case(4)},
                             default=lambda: layers.fill_constant([2], "int32", -1))
    default = inner(9)  # no key: the default
    assert _ops("switch_case") == 1 and _ops("case") == 0
    both = Both()
    for iv, want in ((0, [7, 7]), (1, [5, 5]), (5, [-1, -1])):
        got, d = both.run({"i": np.array([iv], "uint8")}, [out, default])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(d, [0] * 5)
        assert d.dtype == np.int64
    assert both.compiles == 1


def test_case_needs_every_pred_before_the_first_true_one():
    p = fluid.data("p", [1], "bool")
    known = layers.less_than(_const(1), _const(2))
    # known true first: the fed pred after it does not matter
    out = layers.case([(known, lambda: _const(3)), (p, lambda: layers.fill_constant(
        [2, 2], "float32", 1.0))])
    assert out.shape == (1,) and _ops("case") == 0
    with pytest.raises(ShapeError, match=r"known while building"):
        layers.case([(p, lambda: _const(3)), (known, lambda: layers.fill_constant(
            [2, 2], "float32", 1.0))])


def test_runtime_predicate_with_branches_of_different_types_names_the_rule():
    p = fluid.data("p", [1], "bool")
    with pytest.raises(ShapeError, match=r"op cond at .*test_control_flow_host_fold.py.*"
                                         r"i32\[3,2\] but branch 0 as i32\[2,3\].*known while"):
        layers.cond(p, lambda: layers.fill_constant([2, 3], "int32", 1),
                    lambda: layers.fill_constant([3, 2], "int32", 1))


def test_picked_branch_gradient_by_finite_differences_and_its_writes():
    x = fluid.data("x", [2, 3], "float64")
    x.stop_gradient = False
    w = fluid.data("w", [2, 2], "float64")
    counter = layers.fill_constant([1], "int64", 0)
    pred = layers.greater_than(_const(4), _const(3))

    def taken():
        layers.increment(counter, in_place=True)  # an outer write: kept, as it runs
        return layers.fc(x, 2, act="tanh", param_attr="w_taken")

    out = layers.cond(pred, taken, lambda: layers.fc(x, 5, param_attr="w_other"))
    same = layers.cond(pred, lambda: counter, lambda: _const(0))  # an outer value as it is
    assert same.name != counter.name
    loss = layers.reduce_sum(out * w)
    main = graphc.default_main_program()
    assert main.global_block().has_var("w_other")  # built, as Paddle builds it, never run
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    feeds = {"x": RNG.standard_normal((2, 3)), "w": RNG.standard_normal((2, 2))}
    got = _fd_check(loss, x, feeds, exe, main)
    assert np.abs(got).max() > 0
    c, s = exe.run(main, feed=feeds, fetch_list=[counter, same])
    np.testing.assert_array_equal(c, [1])
    np.testing.assert_array_equal(s, [1])


# -- while_loop: a first iteration that changes a loop variable's type ----------------------
def test_while_loop_first_iteration_changes_the_shape_numpy_reference():
    x = fluid.data("x", [1, 4], "float32")
    i, n = layers.zeros([1], "int64"), layers.fill_constant([1], "int64", 3)

    def body(i, v):
        v = layers.reshape(v, [2, -1]) * 2.0 + 1.0
        return [layers.increment(i, in_place=False), v]

    i_out, v_out = layers.while_loop(lambda i, v: layers.less_than(i, n), body, [i, x])
    assert v_out.shape == (2, 2) and _ops("while") == 1
    xv = RNG.standard_normal((1, 4)).astype("float32")
    want = xv.reshape(2, 2)
    for _ in range(3):
        want = want * 2 + 1
    got, iv = Both().run({"x": xv}, [v_out, i_out])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(iv, [3])


def test_while_loop_peeled_gradient_by_finite_differences():
    x = fluid.data("x", [1, 4], "float64")
    x.stop_gradient = False
    i, n = layers.zeros([1], "int64"), layers.fill_constant([1], "int64", 2)

    def body(i, v):
        return [layers.increment(i, in_place=False), layers.tanh(layers.reshape(v, [2, 2]))]

    _, v_out = layers.while_loop(lambda i, v: layers.less_than(i, n), body, [i, x],
                                 is_test=False)
    loss = layers.reduce_sum(v_out * fluid.data("w", [2, 2], "float64"))
    main = graphc.default_main_program()
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    feeds = {"x": RNG.standard_normal((1, 4)), "w": RNG.standard_normal((2, 2))}
    got = _fd_check(loss, x, feeds, exe, main)
    w = feeds["w"]
    t1 = np.tanh(feeds["x"].reshape(2, 2))
    t2 = np.tanh(t1)
    np.testing.assert_allclose(got, (w * (1 - t2 ** 2) * (1 - t1 ** 2)).reshape(1, 4),
                               rtol=1e-6)


@pytest.mark.parametrize("case", ["fed_condition", "keeps_changing", "makes_state"])
def test_while_loop_type_change_refused_with_the_reason(case):
    x = fluid.data("x", [1, 4], "float32")
    i = fluid.data("i", [1], "int64") if case == "fed_condition" else layers.zeros([1], "int64")
    n = layers.fill_constant([1], "int64", 3)

    def body(i, v):
        if case == "keeps_changing":
            v = layers.concat([v, v], axis=0)  # [1, 4] -> [2, 4] -> [4, 4] ...
        elif case == "makes_state":
            v = layers.fc(v, 3)  # a second build would make a second weight
        else:
            v = layers.reshape(v, [2, 2])
        return [layers.increment(i, in_place=False), v]

    reason = {"fed_condition": "not known while building", "keeps_changing": "changes again",
              "makes_state": "creates state"}[case]
    with pytest.raises(ShapeError, match=rf"while_loop: the body turns loop variable 1 .*"
                                         rf"{reason}"):
        layers.while_loop(lambda i, v: layers.less_than(i, n), body, [i, x])


def test_cond_inside_a_loop_body_picks_on_values_made_in_the_body():
    x = fluid.data("x", [2, 3], "float32")
    i, n = layers.zeros([1], "int64"), layers.fill_constant([1], "int64", 3)

    def body(i, acc):
        wide = layers.cond(layers.less_than(_const(0), _const(1)),
                           lambda: layers.reduce_sum(x, dim=0),
                           lambda: layers.fill_constant([2], "float32", 0.0))
        return [layers.increment(i, in_place=False), acc + wide]

    _, acc = layers.while_loop(lambda i, a: layers.less_than(i, n), body,
                               [i, layers.zeros([3], "float32")])
    assert _ops("while") == 1 and _ops("cond") == 0
    xv = RNG.standard_normal((2, 3)).astype("float32")
    (got,) = Both().run({"x": xv}, [acc])
    np.testing.assert_allclose(got, 3 * xv.sum(0), rtol=1e-5)
