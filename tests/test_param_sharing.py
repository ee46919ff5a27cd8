"""Sharing a parameter by naming it twice (``param_attr="shared_w"``), as Paddle does: one
parameter, one initializer, gradients summed over its uses; a mismatching redefinition is an
error naming the parameter, both shapes and both lines."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.param_attr import ParamAttr

import graphc
from graphc import layers, optimizer
from graphc.ir.errors import ProgramError

LR = 0.5


def two_fc(shared="shared_w"):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x1, x2 = layers.data("x1", [4]), layers.data("x2", [4])
        o1 = layers.fc(x1, 3, param_attr=shared, bias_attr=False)
        o2 = layers.fc(x2, 3, param_attr=ParamAttr(name=shared), bias_attr=False)
        loss = layers.mean(layers.elementwise_add(o1, layers.scale(o2, 2.0)))
        test = main.clone(for_test=True)
        optimizer.SGD(LR).minimize(loss)
    return main, startup, test, loss, o1, o2


def feeds():
    rng = np.random.default_rng(1)
    return {"x1": rng.standard_normal((5, 4)).astype("float32"),
            "x2": rng.standard_normal((5, 4)).astype("float32")}


def test_fc_layers_share_one_parameter_with_one_initializer():
    main, startup, *_ = two_fc()
    params = main.global_block().all_parameters()
    assert [p.name for p in params] == ["shared_w"]
    inits = [op for op in startup.global_block().ops if "shared_w" in op.output_arg_names]
    assert len(inits) == 1
    muls = [op for op in main.global_block().ops if op.type == "mul"]
    assert len(muls) == 2 and all(op.inputs["Y"] == ["shared_w"] for op in muls)


def test_gradient_is_the_sum_and_sgd_matches_numpy():
    main, startup, test, loss, o1, o2 = two_fc()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w = np.array(scope["shared_w"])
    f = feeds()
    grad, = exe.run(main, feed=f, fetch_list=["shared_w@GRAD"], scope=scope)
    # loss = mean(x1 W + 2 x2 W) over 5 x 3 elements: dW = (x1 + 2 x2)^T 1 / 15
    want = (f["x1"] + 2 * f["x2"]).T @ np.ones((5, 3), "float32") / 15
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scope["shared_w"], w - LR * want, rtol=1e-5, atol=1e-6)
    # finite differences on the loss agree with the summed gradient
    eps, i, j = 1e-2, 2, 1
    def loss_at(wv):
        return float(np.mean(f["x1"] @ wv + 2 * (f["x2"] @ wv)))
    bump = np.zeros_like(w)
    bump[i, j] = eps
    w1 = np.array(scope["shared_w"])
    fd = (loss_at(w1 + bump) - loss_at(w1 - bump)) / (2 * eps)
    g2, = exe.run(main, feed=f, fetch_list=["shared_w@GRAD"], scope=scope)
    np.testing.assert_allclose(g2[i, j], fd, rtol=1e-3)
    # the test program (cloned before minimize) reads the same, trained parameter
    a, b = exe.run(test, feed=f, fetch_list=[o1, o2], scope=scope)
    w2 = np.array(scope["shared_w"])
    np.testing.assert_allclose(a, f["x1"] @ w2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, f["x2"] @ w2, rtol=1e-5, atol=1e-6)


def test_redefinition_with_another_shape_names_both():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [4])
        layers.fc(x, 3, param_attr="shared_w")
        with pytest.raises(ProgramError) as err:
            layers.fc(x, 5, param_attr="shared_w")
    msg = str(err.value)
    assert "'shared_w'" in msg and "[4, 3]" in msg and "[4, 5]" in msg
    assert msg.count("test_param_sharing.py:") == 2  # both definitions' lines


def test_redefinition_with_another_dtype_is_an_error():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        layers.embedding(ids, [10, 3], param_attr="table")
        with pytest.raises(ProgramError, match=r"'table'.*float32.*float64"):
            layers.embedding(ids, [10, 3], param_attr="table", dtype="float64")


@pytest.mark.parametrize("is_sparse", [False, True])
def test_embeddings_share_a_table(is_sparse):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        a, b = layers.data("a", [1], dtype="int64"), layers.data("b", [1], dtype="int64")
        ea = layers.embedding(a, [6, 2], is_sparse=is_sparse, param_attr="emb")
        eb = layers.embedding(b, [6, 2], is_sparse=is_sparse, param_attr="emb")
        loss = layers.mean(layers.elementwise_add(ea, layers.scale(eb, 3.0)))
        optimizer.SGD(LR).minimize(loss)
    assert [p.name for p in main.global_block().all_parameters()] == ["emb"]
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    table = np.array(scope["emb"])
    ia, ib = np.array([[0], [2], [2]], "int64"), np.array([[2], [5], [0]], "int64")
    exe.run(main, feed={"a": ia, "b": ib}, fetch_list=[loss], scope=scope)
    grad = np.zeros_like(table)
    for i in ia.ravel():
        grad[i] += 1.0 / 6  # mean over 3 x 2 elements
    for i in ib.ravel():
        grad[i] += 3.0 / 6
    np.testing.assert_allclose(scope["emb"], table - LR * grad, rtol=1e-5, atol=1e-6)


def test_a_second_program_on_the_same_startup_shares_by_name():
    """Paddle's other idiom: build the net again into a test program with the same startup
    program; named parameters are initialised once and read from the scope by both."""
    main, test, startup = graphc.Program(), graphc.Program(), graphc.Program()

    def net():
        x = layers.data("x", [4])
        return layers.fc(x, 2, param_attr="w", bias_attr="b")

    with graphc.program_guard(main, startup):
        loss = layers.mean(net())
        optimizer.SGD(LR).minimize(loss)
    with graphc.program_guard(test, startup):
        out = net()
    inits = [op for op in startup.global_block().ops if op.output_arg_names[0] in ("w", "b")]
    assert len(inits) == 2
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    x = feeds()["x1"]
    exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope)
    got, = exe.run(test, feed={"x": x}, fetch_list=[out], scope=scope)
    np.testing.assert_allclose(got, x @ np.array(scope["w"]) + np.array(scope["b"]),
                               rtol=1e-5, atol=1e-6)
