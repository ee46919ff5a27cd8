"""roll-repeated-layers: golden IR, check_pass over deep repeated stacks and random programs,
interpreter and JAX step equal with and without the pass, declines, data parallelism."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_harness import golden_text, run_pass

import graphc
from graphc import layers, optimizer
from graphc.ir import lower, program_guard, unique_name
from graphc.ir.text import parse
from graphc.passes import make_pass
from graphc.testing import check_golden, check_pass, random_programs
from graphc.testing.programs import GeneratedProgram

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "roll-repeated-layers")
ROLL = "roll-repeated-layers"


def deep(k: int, size: int = 4, act: str = "relu", opt: str = "sgd", dropout: bool = False,
         first: int | None = None):
    """(main, startup, loss): k x fc(size, act) on an input of ``first`` (default size)."""
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), unique_name.guard():
        h = layers.data("x", [first or size])
        for _ in range(k):
            h = layers.fc(h, size, act=act)
            if dropout:
                h = layers.dropout(h, 0.5)
        loss = layers.mean(h)
        {"sgd": lambda: optimizer.SGD(0.1),
         "momentum": lambda: optimizer.Momentum(0.1, 0.9),
         "adam": lambda: optimizer.Adam(0.01)}[opt]().minimize(loss)
    return main, startup, loss


@st.composite
def deep_stacks(draw) -> GeneratedProgram:
    """Deep repeated stacks: k x fc with a drawn size, activation and optimizer."""
    k = draw(st.integers(5, 7))  # 4 alike layers even when the first one differs
    size = draw(st.integers(1, 5))
    act = draw(st.sampled_from(["relu", "tanh", "sigmoid"]))
    opt = draw(st.sampled_from(["sgd", "momentum", "adam"]))
    first = draw(st.sampled_from([None, size + 1]))
    main, startup, loss = deep(k, size, act, opt, first=first)
    return GeneratedProgram(main, startup, {"x": ((-1, first or size), "float32")},
                            [loss.name], loss.name, steps=[f"{k}x fc({size},{act}) {opt}"])


def test_golden_training_stack():
    main, _, loss = deep(5)
    before, after, stats = run_pass(ROLL, main, [loss.name])
    check_golden(os.path.join(GOLDEN, "fc5_sgd.ir"), golden_text(ROLL, before, after, stats))
    assert stats["rolled runs"] == 3  # forward, backward, optimizer
    assert after.stats()["scan_layers"] == 3
    # parameters live stacked, and the stacked variables list every member by name
    assert stats["stacked state families"] == 2
    names = {n for v in after.outputs for n in v.var.extra.get("stack_of") or (v.var.name,)}
    assert names == {v.var.name for v in before.outputs}
    assert not {"stack", "unstack"} & {op.type for op in after.ops()
                                       if any(v.var.persistable for v in op.input_values())}
    # the body is graphc text IR that parses and verifies on its own
    scan = next(op for op in after.ops() if op.type == "scan_layers")
    parse(scan.attrs["body"]).verify()


@settings(max_examples=8, deadline=None)
@given(deep_stacks())
def test_check_pass_deep_stacks(gen):
    report = check_pass(make_pass(ROLL), gen)
    assert report.stats()[ROLL].get("rolled runs", 0) >= 2


@settings(max_examples=10, deadline=None)
@given(random_programs(max_ops=8, with_loss=True))
def test_check_pass_random_programs(gen):
    check_pass(make_pass(ROLL, min_repeats=2), gen)


def test_interpreter_bitwise():
    from graphc.backends.interpreter import run_graph
    main, startup, loss = deep(6, first=3)
    state, _ = run_graph(lower(startup))
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype("float32")}
    _, after, _ = run_pass(ROLL, main, [loss.name])
    want_state, want = run_graph(lower(main), state, feeds, [loss.name])
    got_state, got = run_graph(after, state, feeds, [loss.name])
    assert np.array_equal(want[0], got[0])
    for name in want_state:
        assert np.array_equal(want_state[name], got_state[name]), name


def _train(main, startup, loss, roll: bool, steps: int = 4, places=None, reduce=False):
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    bs = graphc.BuildStrategy(roll_repeated_layers=roll)
    if reduce:
        bs.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
    cp = graphc.CompiledProgram(main, build_strategy=bs)
    if places is not None:
        cp = cp.with_data_parallel(loss_name=loss.name, places=places)
    rng = np.random.default_rng(3)
    losses = [exe.run(cp, feed={"x": rng.uniform(-1, 1, (8, 4)).astype("float32")},
                      fetch_list=[loss], scope=scope)[0] for _ in range(steps)]
    params = {p.name: np.asarray(scope.find_var(p.name).get_tensor())
              for p in main.all_parameters()}
    return losses, params, cp


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_jax_steps_equal(opt):
    main, startup, loss = deep(6, opt=opt)
    want_losses, want_params, _ = _train(main, startup, loss, roll=False)
    got_losses, got_params, cp = _train(main, startup, loss, roll=True)
    assert cp.last_report.stats()[ROLL]["rolled runs"] == 3
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-6, atol=1e-6)
    assert got_params.keys() == want_params.keys()
    for name in want_params:
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("reduce", [False, True])
def test_data_parallel_4_devices_equal(reduce):
    main, startup, loss = deep(5, opt="momentum")
    places = graphc.cpu_places(4)
    want_losses, want_params, _ = _train(main, startup, loss, False, 3, places, reduce)
    got_losses, got_params, cp = _train(main, startup, loss, True, 3, places, reduce)
    stats = cp.last_report.stats()[ROLL]
    assert stats["rolled runs"] == 2  # optimizer ops stay for the data-parallel pass
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-6, atol=1e-6)
    for name in want_params:
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_declines_random_ops():
    main, _, loss = deep(5, dropout=True)
    _, after, stats = run_pass(ROLL, main, [loss.name])
    assert any(k.startswith("skipped: layer has a random op (dropout") for k in stats), stats
    assert "scan_layers" not in after.stats() or stats.get("rolled runs", 0) >= 1


def test_declines_short_runs():
    main, _, loss = deep(3)
    before, after, stats = run_pass(ROLL, main, [loss.name])
    assert "rolled runs" not in stats
    assert after.structurally_equal(before)
    main, _, loss = deep(3)
    _, after, stats = run_pass(ROLL, main, [loss.name], min_repeats=3)
    # forward and optimizer; the backward's first layer computes no input gradient, so
    # the backward run has only 2 layers
    assert stats["rolled runs"] == 2


def test_pipeline_switch_and_print_after_change():
    from graphc.passes import passes_for
    names = [p.name for p in passes_for(graphc.BuildStrategy(roll_repeated_layers=True))]
    assert names.index(ROLL) > names.index("dce")
    assert ROLL in [p.name for p in passes_for(graphc.BuildStrategy())]  # on by default
    assert ROLL not in [p.name for p in passes_for(
        graphc.BuildStrategy(roll_repeated_layers=False))]
    dp = passes_for(graphc.BuildStrategy(roll_repeated_layers=True), 4, loss_name="loss")
    assert next(p for p in dp if p.name == ROLL).roll_optimizer is False


def test_print_after_change_shows_the_scan():
    import io

    from graphc.passes import PassManager
    main, _, loss = deep(4)
    g = lower(main)
    out = io.StringIO()
    PassManager([make_pass(ROLL)], print_after_change=True, stream=out).run(
        g, keep=[g.latest(loss.name)])
    assert "scan_layers(" in out.getvalue()


def test_resnet50_residual_blocks_roll_exactly():
    """ResNet-50's third stage repeats one bottleneck block (residual add: the carry is read
    twice) five times; tiny sizes keep the interpreter quick."""
    from graphc import models
    m = models.resnet(50, num_classes=3, image_shape=(3, 8, 8), base_width=2)
    with program_guard(m.main, m.startup):
        optimizer.SGD(0.1).minimize(m.loss)
    image, label = m.feeds
    gen = GeneratedProgram(m.main, m.startup, {image.name: ((-1, 3, 8, 8), "float32"),
                                               label.name: ((-1, 1), label.dtype)},
                           [m.loss.name], m.loss.name, int_feed_high={label.name: 3})
    report = check_pass(make_pass(ROLL), gen)
    assert report.stats()[ROLL]["rolled runs"] >= 2


@pytest.mark.parametrize("others", [{"fuse_elewise_add_act_ops": True},
                                    {"enable_inplace": True, "memory_optimize": True},
                                    {"fuse_all_optimizer_ops": True,
                                     "enable_sequential_execution": True}])
def test_with_other_passes(others):
    """Rolled after the fusions (fused layers roll), before the memory plan and the
    optimizer fusion; the whole pipeline's results equal the unrolled pipeline's."""
    from graphc.passes import pipeline_for
    main, startup, loss = deep(5, opt="momentum", first=3)
    gen = GeneratedProgram(main, startup, {"x": ((-1, 3), "float32")}, [loss.name],
                           loss.name)
    report = check_pass(pipeline_for(graphc.BuildStrategy(roll_repeated_layers=True,
                                                          **others)), gen)
    assert report.stats()[ROLL]["rolled runs"] >= 2


# -- hlo28: how XLA is given a scan_layers (issue 28) ----------------------------------------
@pytest.mark.parametrize("budget", [0, None])
def test_scans_lower_to_loops_only_past_the_unroll_budget(budget, monkeypatch):
    """Adam's rolled updates (no carry) run batched with no loop; the forward and backward
    scans are unrolled within UNROLL_BUDGET body ops (the default here) and stay while loops
    past it (budget 0); the steps equal the unrolled program's either way."""
    from graphc.ops.scan import lowering as scan_lowering
    if budget is not None:
        monkeypatch.setattr(scan_lowering, "UNROLL_BUDGET", budget)
    main, startup, loss = deep(6, opt="adam")
    want_losses, want_params, _ = _train(main, startup, loss, roll=False)
    got_losses, got_params, cp = _train(main, startup, loss, roll=True)
    assert cp.last_report.stats()[ROLL]["rolled runs"] == 3
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-6, atol=1e-6)
    for name in want_params:
        np.testing.assert_allclose(got_params[name], want_params[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    text = exe.compile(cp, feed={"x": np.ones((8, 4), "float32")},
                       fetch_list=[loss]).compiled_text({"x": (8, 4)})
    assert text.count(" while(") == (2 if budget == 0 else 0), text.count(" while(")
