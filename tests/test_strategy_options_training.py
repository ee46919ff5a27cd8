"""Paddle's pass tests, graphc style: for each BuildStrategy option, the first and last loss
of 5 training steps agree (1e-6) with and without it, on simple_fc_net, fc_with_batchnorm
and a conv + batch_norm + relu net, run through CompiledProgram on the XLA backend."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.initializer import Constant

import graphc as fluid
from graphc import layers, optimizer

OPTIONS = ["fuse_elewise_add_act_ops", "fuse_bn_act_ops", "fuse_relu_depthwise_conv",
           "fuse_all_optimizer_ops", "enable_inplace", "memory_optimize",
           "enable_sequential_execution"]


def simple_fc_net(x, label):
    h = x
    for _ in range(2):
        h = layers.fc(h, 32, act="relu", bias_attr=fluid.ParamAttr(initializer=Constant(1.0)))
    return layers.fc(h, 10)


def fc_with_batchnorm(x, label):
    h = x
    for _ in range(2):
        h = layers.batch_norm(layers.fc(h, 32, act="relu"))
    return layers.fc(h, 10)


def conv_bn_relu_net(x, label):
    img = layers.reshape(x, [-1, 1, 8, 8])
    h = layers.conv2d(img, 4, 3, padding=1, bias_attr=False)
    h = layers.batch_norm(h, act="relu")
    h = layers.conv2d(h, 4, 3, padding=1, groups=4, bias_attr=False)  # depthwise
    h = layers.batch_norm(h, act="relu")
    h = layers.pool2d(h, 2, "max", 2)
    return layers.fc(h, 10)


NETS = {"simple_fc_net": simple_fc_net, "fc_with_batchnorm": fc_with_batchnorm,
        "conv_bn_relu": conv_bn_relu_net}


def losses(net, flags: dict) -> list[float]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 64])
        label = fluid.data("label", [-1, 1], "int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(NETS[net](x, label), label))
        optimizer.SGD(0.05, regularization=fluid.regularizer.L2Decay(1e-3)).minimize(loss)
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((16, 64)).astype("float32"),
            "label": rng.integers(0, 9, (16, 1)).astype("int64")}
    program = fluid.CompiledProgram(main, build_strategy=fluid.BuildStrategy(**flags))
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    return [float(exe.run(program, feed=feed, fetch_list=[loss], scope=scope)[0][0])
            for _ in range(5)]


_BASELINE: dict[str, list[float]] = {}


@pytest.mark.parametrize("net", sorted(NETS))
@pytest.mark.parametrize("option", OPTIONS)
def test_first_and_last_loss_agree(net, option):
    if net not in _BASELINE:
        _BASELINE[net] = losses(net, {})
    base = _BASELINE[net]
    assert base[-1] < base[0]  # it trains
    got = losses(net, {option: True})
    np.testing.assert_allclose([got[0], got[-1]], [base[0], base[-1]], rtol=1e-6, atol=1e-6)
