"""fuse-relu-depthwise-conv: golden IR (forward and training, NCHW/NHWC, float64), declines with
their reasons, bit-exact results, random programs, and Paddle's depthwise-net comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_harness import build
from pass_harness import golden_text as _golden_text
from pass_harness import run_pass as _run_pass

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.ir.text import parse
from graphc.passes import make_pass
from graphc.testing import (
    GeneratedProgram,
    assert_same_results,
    check_golden,
    check_pass,
    random_programs,
)

GOLDEN = Path(__file__).parent / "golden" / "fuse-relu-depthwise-conv"
PASS = "fuse-relu-depthwise-conv"


def run_pass(main, fetch):
    return _run_pass(PASS, main, fetch)


def golden_text(before, after, stats) -> str:
    return _golden_text(PASS, before, after, stats)


def relu_dw_net(layout="NCHW", dtype="float32", x_grad=True, multiplier=1, extra_reader=None):
    def body():
        shape = [-1, 4, 5, 5] if layout == "NCHW" else [-1, 5, 5, 4]
        x = layers.data("x", shape, dtype)
        x.stop_gradient = not x_grad
        y = layers.relu(x)
        out = layers.conv2d(y, 4 * multiplier, 3, padding=1, groups=4, bias_attr=False,
                            data_format=layout)
        loss = layers.mean(out)
        if extra_reader == "mean":
            loss = loss + layers.mean(y)
        elif extra_reader == "conv":
            loss = loss + layers.mean(layers.conv2d(y, 4, 3, groups=4, bias_attr=False,
                                                    data_format=layout))
        return loss
    return body


CASES = {
    "forward_nchw": (relu_dw_net(), False),
    "forward_nhwc_float64": (relu_dw_net("NHWC", "float64"), False),
    "train_nchw": (relu_dw_net(), True),
    "train_nhwc_float64_multiplier2": (relu_dw_net("NHWC", "float64", multiplier=2), True),
    "train_relu_of_feed_without_grad": (relu_dw_net(x_grad=False), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    body, train = CASES[case]
    main, _, loss = build(body, train)
    before, after, stats = run_pass(main, [loss.name])
    check_golden(GOLDEN / f"{case}.ir", golden_text(before, after, stats))
    assert stats["fused"] == 1 and stats.get("fused grad", 0) == int(train)
    ops = after.stats()
    assert not {"relu", "relu_grad", "depthwise_conv2d", "depthwise_conv2d_grad"} & set(ops)
    assert parse(after.to_text()).structurally_equal(after)


def test_declines_with_reasons():
    main, _, loss = build(relu_dw_net(extra_reader="mean"), True)
    before, after, stats = run_pass(main, [loss.name])
    assert stats == {"skipped: relu output has 5 users": 1}
    assert after.structurally_equal(before)
    check_golden(GOLDEN / "declined_two_readers.ir", golden_text(before, after, stats))

    main, _, loss = build(relu_dw_net(), False)
    _, _, stats = run_pass(main, [loss.name, "relu_0.tmp_0"])
    assert stats == {"skipped: relu output is fetched": 1}
    main, _, loss = build(relu_dw_net(extra_reader="conv"), False)  # two convs, one relu
    _, _, stats = run_pass(main, [loss.name])
    assert stats == {"skipped: relu output has 2 users": 2}
    main, _, loss = build(relu_dw_net(), True)
    _, _, stats = run_pass(main, [loss.name, "relu_0.tmp_0@GRAD"])
    assert stats == {"skipped: relu output gradient is fetched": 1}


@pytest.mark.parametrize("layout,dtype,x_grad", [
    ("NCHW", "float32", True), ("NHWC", "float64", True), ("NHWC", "float16", False)])
def test_results_are_bit_exact(layout, dtype, x_grad):
    main, startup, loss = build(relu_dw_net(layout, dtype, x_grad, multiplier=2), True)
    fetch = [loss.name, "conv2d_0.w_0@GRAD"] + (["x@GRAD"] if x_grad else [])
    before, after, stats = run_pass(main, fetch)
    assert stats == {"fused": 1, "fused grad": 1}
    state, _ = run_graph(lower(startup))
    shape = (3, 4, 5, 5) if layout == "NCHW" else (3, 5, 5, 4)
    feeds = {"x": np.random.default_rng(3).normal(size=shape).astype(dtype)}
    assert_same_results(before, after, state, feeds, fetch, rtol=0, atol=0)  # same bits


STEPS = ["conv2d", "activation", "pool2d"]


def check_trained(gen):
    """check_pass after SGD's minimize, fetching the loss and every parameter gradient."""
    with program_guard(gen.main, gen.startup):
        _, params_grads = optimizer.SGD(0.1).minimize(gen.main.global_block().var(gen.loss))
    return check_pass(make_pass(PASS), gen, fetch=[gen.loss] + [g.name for _, g in params_grads])


@settings(max_examples=8)
@given(random_programs(max_ops=5, steps=STEPS, with_loss=False))
def test_random_forward_programs(gen):
    check_pass(make_pass(PASS), gen)


@settings(max_examples=6)
@given(random_programs(max_ops=4, steps=STEPS, with_loss=True))
def test_random_training_programs(gen):
    check_trained(gen)


@st.composite
def relu_depthwise_programs(draw):
    """relu -> depthwise_conv2d with drawn layout, dtype, window, stride, padding, dilation and
    channel multiplier; the relu's input may be a feed without gradient or an fc output, and
    the relu's output may have another reader (a decline). random_programs rarely draws the
    pattern (a relu then a conv with groups == channels), so this strategy targets it."""
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    ch, hw = draw(st.integers(2, 3)), draw(st.sampled_from([5, 6]))
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        shape = [-1, ch, hw, hw] if layout == "NCHW" else [-1, hw, hw, ch]
        x = layers.data("x0", shape, dtype)
        if draw(st.booleans()):  # an fc in front: relu's input then needs a gradient
            x = layers.reshape(layers.fc(x, ch * hw * hw, num_flatten_dims=1), [0] + shape[1:])
        y = layers.relu(x)
        out = layers.conv2d(y, ch * draw(st.integers(1, 2)), draw(st.integers(1, 3)),
                            stride=draw(st.integers(1, 2)),
                            padding=draw(st.sampled_from([0, 1, "SAME"])),
                            dilation=draw(st.integers(1, 2)), groups=ch,
                            bias_attr=draw(st.sampled_from([None, False])),
                            act=draw(st.sampled_from([None, "relu"])), data_format=layout)
        fetch = [out]
        if draw(st.integers(0, 3)) == 0:
            fetch.append(layers.scale(y, 2.0))
        loss = layers.mean(out) if draw(st.booleans()) else None
    fetch = [v.name for v in fetch] + ([loss.name] if loss is not None else [])
    return GeneratedProgram(main, startup, {"x0": (tuple(shape), dtype)}, fetch,
                            loss.name if loss is not None else None)


@settings(max_examples=8)
@given(relu_depthwise_programs())
def test_random_relu_depthwise_programs(gen):
    report = check_trained(gen) if gen.loss else check_pass(make_pass(PASS), gen)
    stats = report.stats()[PASS]
    assert stats.get("fused", 0) + sum(v for k, v in stats.items() if k.startswith("skipped"))


# -- Paddle's test_fuse_relu_depthwise_conv_pass: blocks of depthwise -> bn -> 1x1 conv -> bn ->
# relu, each relu feeding the next block's depthwise conv (smaller: 3 blocks, 8x8 input) ------
def depthwise_net(train: bool):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with program_guard(main, startup), unique_name.guard():
        image = layers.data("image", [-1, 1, 8, 8], "float32")
        label = layers.data("label", [-1, 1], "int64")
        hidden = image
        for _ in range(3):
            ch = hidden.shape[1]
            hidden = layers.conv2d(hidden, ch, 3, stride=2, padding=1, groups=ch,
                                   bias_attr=False, use_cudnn=False)
            hidden = layers.batch_norm(hidden)
            hidden = layers.conv2d(hidden, 8, 1, bias_attr=False)
            hidden = layers.relu(layers.batch_norm(hidden))
        prediction = layers.fc(hidden, size=10, act="softmax")
        loss = layers.mean(layers.cross_entropy(prediction, label))
        if train:
            optimizer.SGD(1e-3).minimize(loss)
    return main, startup, loss


def run_net(train: bool, **strategy):
    """(op counts of the compiled graph, the loss of each step): 5 SGD steps, or 1 forward."""
    main, startup, loss = depthwise_net(train)
    compiled = fluid.CompiledProgram(main, build_strategy=fluid.BuildStrategy(**strategy))
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(5 if train else 1):
        feed = {"image": rng.uniform(-1, 1, (8, 1, 8, 8)).astype("float32"),
                "label": rng.integers(0, 10, (8, 1)).astype("int64")}
        losses.append(exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)[0])
    return compiled.graph(fetch_list=[loss]).stats(), losses


def assert_same_losses(got, want):
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_paddle_depthwise_net_trains_the_same():
    _, plain = run_net(True)
    ops, fused = run_net(True, fuse_relu_depthwise_conv=True)
    assert_same_losses(fused, plain)
    assert ops["fused_relu_depthwise_conv2d"] == 2 and "depthwise_conv2d" not in ops
    assert ops["fused_relu_depthwise_conv2d_grad"] == 2 and "depthwise_conv2d_grad" not in ops
    assert ops["relu"] == 1  # the last block's relu feeds fc
    # With fuse-bn-act too, Paddle's order applies: relu+depthwise first, so those relus are
    # gone before fuse-bn-act looks; it fuses the remaining batch_norm -> relu (the last one).
    ops, both = run_net(True, fuse_relu_depthwise_conv=True, fuse_bn_act_ops=True)
    assert_same_losses(both, plain)
    assert ops["fused_relu_depthwise_conv2d"] == 2 and ops["fused_batch_norm_act"] == 1
    assert ops["fused_batch_norm_act_grad"] == 1 and "relu" not in ops


def test_paddle_depthwise_net_forward_only():
    _, plain = run_net(False)
    ops, fused = run_net(False, fuse_relu_depthwise_conv=True)
    assert_same_losses(fused, plain)
    assert ops["fused_relu_depthwise_conv2d"] == 2 and "depthwise_conv2d" not in ops
