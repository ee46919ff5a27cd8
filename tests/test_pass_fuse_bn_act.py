"""fuse-bn-act: golden IR (forward and training, NCHW/NHWC, float64), declines with their
reasons, bit-exact results, random programs, and Paddle's conv+bn+relu training comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from pass_harness import build
from pass_harness import golden_text as _golden_text
from pass_harness import run_pass as _run_pass

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.ir.text import parse
from graphc.passes import PassError, make_pass, parse_pipeline
from graphc.testing import assert_same_results, check_golden, check_pass, random_programs

GOLDEN = Path(__file__).parent / "golden" / "fuse-bn-act"
PASS = "fuse-bn-act"


def run_pass(main, fetch, **options):
    return _run_pass(PASS, main, fetch, **options)


def golden_text(before, after, stats) -> str:
    return _golden_text(PASS, before, after, stats)


def bn_net(layout="NCHW", dtype="float32", act="relu", x_grad=False, alpha=0.1, **bn):
    def body():
        shape = [-1, 3, 4, 4] if layout == "NCHW" else [-1, 4, 4, 3]
        x = layers.data("x", shape, dtype)
        x.stop_gradient = not x_grad
        y = layers.batch_norm(x, data_layout=layout, **bn)
        y = layers.leaky_relu(y, alpha=alpha) if act == "leaky_relu" else getattr(layers, act)(y)
        return layers.mean(y)
    return body


CASES = {
    "forward_nchw_relu_is_test": (bn_net(is_test=True), False),
    "forward_nhwc_float64_tanh": (bn_net("NHWC", "float64", "tanh"), False),
    "train_nchw_relu": (bn_net(x_grad=True), True),
    "train_nhwc_float64_leaky_relu": (bn_net("NHWC", "float64", "leaky_relu", x_grad=True),
                                      True),
    "train_nchw_sigmoid_global_stats": (bn_net(act="sigmoid", use_global_stats=True), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    body, train = CASES[case]
    main, startup, loss = build(body, train)
    before, after, stats = run_pass(main, [loss.name])
    check_golden(GOLDEN / f"{case}.ir", golden_text(before, after, stats))
    assert stats["fused"] == 1 and stats.get("fused grad", 0) == int(train)
    assert "batch_norm" not in after.stats() and "batch_norm_grad" not in after.stats()
    assert parse(after.to_text()).structurally_equal(after)  # the fused ops round-trip


def declined(body, train=False, fetch_extra=(), **options):
    main, startup, loss = build(body, train)
    return run_pass(main, [loss.name, *fetch_extra], **options)


def test_declines_with_reasons():
    # batch_norm's Y fetched: the forward stays; the backward still fuses
    before, after, stats = declined(bn_net(), True, ["batch_norm_0.tmp_2"])
    assert stats == {"skipped: batch_norm output is fetched": 1, "fused grad": 1}
    assert after.stats()["batch_norm"] == 1
    check_golden(GOLDEN / "declined_fetched.ir", golden_text(before, after, stats))

    def two_readers():
        x = layers.data("x", [-1, 3, 4, 4], "float32")
        y = layers.batch_norm(x)
        return layers.mean(layers.relu(y)) + layers.mean(y)
    _, after, stats = declined(two_readers)
    assert stats == {"skipped: batch_norm output has 2 users": 1}
    assert not after.stats().get("fused_batch_norm_act")

    _, _, stats = declined(bn_net(act="relu"), act_types=["tanh"])
    assert stats == {"skipped: activation relu not in act_types": 1}
    _, _, stats = declined(bn_net(act="leaky_relu", alpha=-0.5, x_grad=True), True)
    assert stats == {"skipped: leaky_relu_grad reads the pre-activation (alpha < 0)": 2}
    _, _, stats = declined(bn_net(act="leaky_relu", alpha=-0.5))  # inference: no grad, fuses
    assert stats == {"fused": 1}

    def gelu():
        return layers.mean(layers.gelu(layers.batch_norm(layers.data("x", [-1, 3], "float32"))))
    _, _, stats = declined(gelu, True)
    assert stats == {"skipped: activation gelu not in act_types": 1,
                     "skipped: activation gradient gelu_grad not in act_types": 1}


def test_options_round_trip_and_are_checked():
    p = make_pass(PASS, act_types=["relu"])
    assert str(p) == 'fuse-bn-act{act_types=["relu"]}'
    assert parse_pipeline(str(p)) == [p]
    with pytest.raises(PassError, match="unsupported activations"):
        make_pass(PASS, act_types=["gelu"])


@pytest.mark.parametrize("layout,dtype,act,bn", [
    ("NCHW", "float32", "relu", {}),
    ("NHWC", "float16", "relu", {}),  # Paddle's only case
    ("NHWC", "float64", "tanh", {"is_test": True}),
    ("NCHW", "float32", "leaky_relu", {"use_global_stats": True}),
    ("NHWC", "float32", "sigmoid", {"momentum": 0.5, "epsilon": 1e-3}),
])
def test_results_are_bit_exact(layout, dtype, act, bn):
    """Interpreter results (loss, every gradient, updated state) equal to the last bit."""
    main, startup, loss = build(bn_net(layout, dtype, act, x_grad=True, **bn), True)
    fetch = [loss.name, "x@GRAD", "batch_norm_0.w_0@GRAD", "batch_norm_0.b_0@GRAD"]
    before, after, stats = run_pass(main, fetch)
    assert stats["fused"] == 1 and stats["fused grad"] == 1
    state, _ = run_graph(lower(startup))
    shape = (5, 3, 4, 4) if layout == "NCHW" else (5, 4, 4, 3)
    feeds = {"x": np.random.default_rng(1).normal(size=shape).astype(dtype)}
    assert_same_results(before, after, state, feeds, fetch, rtol=0, atol=0)  # same bits


def test_leaky_relu_forward_fused_alone_is_exact():
    """With the backward declined (its intermediate fetched), leaky_relu_grad keeps reading
    the fused op's output in place of its input: the gradient is still the same bits."""
    main, startup, loss = build(bn_net("NCHW", "float64", "leaky_relu", x_grad=True), True)
    fetch = [loss.name, "x@GRAD", "batch_norm_0.tmp_2@GRAD"]
    before, after, stats = run_pass(main, fetch)
    assert stats == {"fused": 1, "rewired leaky_relu_grad": 1,
                     "skipped: activation gradient is fetched": 1}
    state, _ = run_graph(lower(startup))
    feeds = {"x": np.random.default_rng(4).normal(size=(5, 3, 4, 4))}
    for a, b in zip(run_graph(after, state, feeds, fetch)[1],
                    run_graph(before, state, feeds, fetch)[1]):
        np.testing.assert_array_equal(a, b)


def test_fused_program_trains_through_append_backward():
    """A fused forward graph, turned back into a Program and minimised, builds the fused grad
    op from fused_batch_norm_act's grad maker and trains exactly as the unfused program."""
    main, startup, loss = build(bn_net("NHWC", "float64", "leaky_relu", x_grad=True), False)
    _, fused, _ = run_pass(main, [loss.name])
    fused_main = fused.to_program()
    # each minimize in its own name guard: both programs call their learning rate the same
    with program_guard(fused_main, startup), unique_name.guard():
        optimizer.SGD(0.1).minimize(fused_main.global_block().var(loss.name))
    with program_guard(main, startup), unique_name.guard():
        optimizer.SGD(0.1).minimize(loss)
    types = [op.type for op in fused_main.global_block().ops]
    assert "fused_batch_norm_act_grad" in types and "batch_norm_grad" not in types
    state, _ = run_graph(lower(startup))
    feeds = {"x": np.random.default_rng(2).normal(size=(4, 4, 4, 3))}
    fetch = [loss.name, "x@GRAD"]
    assert_same_results(lower(main), lower(fused_main), state, feeds, fetch, rtol=0, atol=0)


STEPS = ["batch_norm", "activation", "fc", "elementwise"]


@settings(max_examples=15)
@given(random_programs(max_ops=5, steps=STEPS, with_loss=False))
def test_random_forward_programs(gen):
    check_pass(make_pass(PASS), gen)


@settings(max_examples=15)
@given(random_programs(max_ops=4, steps=STEPS, with_loss=True))
def test_random_training_programs(gen):
    with program_guard(gen.main, gen.startup):
        _, params_grads = optimizer.SGD(0.1).minimize(gen.main.global_block().var(gen.loss))
    check_pass(make_pass(PASS), gen, fetch=[gen.loss] + [g.name for _, g in params_grads])


# -- Paddle's test_fuse_bn_act_pass: conv NHWC -> bn+relu -> fc32 relu -> bn+relu -> fc10 ------
def paddle_net():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with program_guard(main, startup), unique_name.guard():
        x = layers.data("x", [-1, 8, 8, 1], "float32")
        label = layers.data("y", [-1, 1], "int64")
        h = layers.conv2d(x, num_filters=16, filter_size=3, padding=1, bias_attr=False,
                          data_format="NHWC")
        h = layers.batch_norm(h, act="relu", data_layout="NHWC")
        h = layers.fc(h, size=32, act="relu")
        h = layers.batch_norm(h, act="relu", data_layout="NHWC")
        prediction = layers.fc(h, size=10, act="softmax")
        loss = layers.mean(layers.cross_entropy(prediction, label))
        optimizer.SGD(1e-3).minimize(loss)
    return main, startup, loss


def train(fuse: bool, steps: int = 5):
    main, startup, loss = paddle_net()
    compiled = fluid.CompiledProgram(main, build_strategy=fluid.BuildStrategy(
        fuse_bn_act_ops=fuse))
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(5)
    losses = []
    for _ in range(steps):
        feed = {"x": rng.uniform(-1, 1, (16, 8, 8, 1)).astype("float32"),
                "y": rng.integers(0, 10, (16, 1)).astype("int64")}
        losses.append(exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)[0])
    return compiled, loss, losses


def test_paddle_conv_bn_relu_net_trains_the_same():
    fused, loss, with_fusion = train(True)
    _, _, without = train(False)
    for a, b in zip(with_fusion, without):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    ops = fused.graph(fetch_list=[loss]).stats()
    assert ops["fused_batch_norm_act"] == 2 and ops["fused_batch_norm_act_grad"] == 2
    assert "batch_norm" not in ops and ops["relu_grad"] == 1  # fc32's relu stays
    assert fused.last_report.stats()[PASS] == {"fused": 2, "fused grad": 2}
