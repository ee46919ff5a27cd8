"""enable-inplace and memory-optimize: the buffer plan they store is valid (no value is read
after its buffer was given away), they leave results unchanged, their declines are
reported, and their predicted bytes line up with XLA's memory_analysis where they can."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as fluid
from graphc import layers, models, optimizer
from graphc.backends.evaluate import evaluate_op
from graphc.backends.interpreter import bind_inputs, resolve_fetch, run_graph
from graphc.ir.graph import Graph, lower
from graphc.ir.opdef import CONTROL_SLOT
from graphc.passes import PassManager, make_pass
from graphc.passes.enable_inplace import EnableInplace, MemoryPlan, inplace_candidates
from graphc.passes.memory_optimize import MemoryOptimize
from graphc.testing import check_golden, check_pass, feeds_for, random_programs

GOLDEN = Path(__file__).parent / "golden" / "enable-inplace"
SCALE = 1 if os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci" else 4


def small_mlp(opt=None, batch_norm=False):
    model = models.mlp(input_dim=4, hidden=(3,), num_classes=2, batch_norm=batch_norm)
    with fluid.program_guard(model.main, model.startup):
        (opt or optimizer.SGD(0.1)).minimize(model.loss)
    return model


def plan_for(program, pass_=None, fetch=()) -> tuple[Graph, MemoryPlan, dict]:
    graph = lower(program)
    keep = [resolve_fetch(graph, getattr(f, "name", f)) for f in fetch]
    report = PassManager([pass_ or EnableInplace()], verify_each=True).run(graph, keep=keep)
    return graph, graph.memory_plan, report.passes[0].stats


def run_with_buffers(graph: Graph, plan: MemoryPlan, state: dict, feeds: dict, fetch,
                     step: int = 0) -> None:
    """Execute op by op with each value in its planned buffer: a value read (or fetched,
    or left as state) after another value took its buffer is a wrong plan."""
    env = bind_inputs(graph, state, feeds)
    owner = {plan.buffer_of[v.name]: v for v in env if v.name in plan.buffer_of}

    def check(v, what):
        b = plan.buffer_of[v.name]
        assert owner.get(b) is v, (f"{what} %{v.name}: its buffer {b} now holds "
                                   f"%{getattr(owner.get(b), 'name', None)}")

    for op in graph.ops():
        for slot, vals in graph.op_inputs(op).items():
            if slot != CONTROL_SLOT:
                for v in vals:
                    check(v, f"{op.where} reads")
        evaluate_op(graph, op, env, step)
        for v in op.output_values():
            owner[plan.buffer_of[v.name]] = v
    for v in list(graph.outputs) + [resolve_fetch(graph, f) for f in fetch]:
        check(v, "the step returns")


# -- golden ------------------------------------------------------------------------------

@pytest.mark.parametrize("pass_name", ["enable-inplace", "memory-optimize"])
def test_golden_plan_of_a_small_mlp(pass_name):
    model = small_mlp()
    graph, plan, stats = plan_for(model.main, make_pass(pass_name, batch_size=8),
                                  [model.loss])
    check_golden(GOLDEN / f"mlp_sgd.{pass_name}.ir", graph.to_text() + plan.to_text())
    # the graph itself is untouched: the plan is an analysis for XLA's buffer assignment
    assert graph.structurally_equal(lower(model.main))
    assert stats["in-place pairs"] == plan.count("inplace") > 0
    assert stats["donated state reused"] == 4  # every sgd: ParamOut in Param's buffer
    assert stats["predicted peak bytes (batch 8)"] == plan.peak_bytes
    # this MLP peaks where no pair applies (inside the backward pass), so reuse lowers the
    # buffers needed and the donated outputs, not the peak
    assert plan.peak_bytes <= plan.peak_bytes_without_reuse
    assert plan.with_reuse.total < plan.without_reuse.total
    assert plan.with_reuse.allocated < plan.without_reuse.allocated
    assert (pass_name == "memory-optimize") == ("pool reuses" in stats)


def test_plan_pairs_and_declines_on_the_mlp():
    model = small_mlp()
    graph, plan, stats = plan_for(model.main, fetch=[model.loss, "fc_0.tmp_2"])
    pairs = {(r.op, r.slots): r for r in plan.reuse}
    assert ("elementwise_add_grad", "Out@GRAD -> X@GRAD") in pairs  # derived for grads
    assert pairs[("sgd", "Param -> ParamOut")].kind == "donated"
    # the relu output is fetched, so nothing may overwrite it, and the forward
    # elementwise_add's X is read again by its grad op
    assert plan.declined["input is read after the op"] >= 1
    assert ("relu", "X -> Out") in pairs
    assert stats["skipped: input is read after the op"] == plan.declined[
        "input is read after the op"]
    fetched = graph.value("fc_0.tmp_2")
    assert all(r.input != fetched.name for r in plan.reuse)
    assert inplace_candidates("relu_grad") == {"X@GRAD": "Out@GRAD"}
    assert inplace_candidates("mul_grad") == {}


def test_declines_name_each_rule():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 3])
        a = layers.relu(x)  # X is a feed
        sq = layers.elementwise_mul(a, a)  # reads its input twice (no pair declared anyway)
        b = layers.scale(sq, 2.0)
        c = layers.relu(b)  # b is fetched
        d = layers.elementwise_add(c, layers.fill_constant([1, 3], "float32", 1.0))
        layers.sigmoid(layers.scale(d, 3.0))
    _, plan, stats = plan_for(main, fetch=[b, "sigmoid_0.tmp_0"])
    assert plan.declined["input is a feed (the caller owns it)"] == 1
    assert plan.declined["input is fetched"] == 1
    # elementwise_add's X is [-1,3] like Out; its broadcast Y is not a candidate
    kinds = {(r.op, r.kind) for r in plan.reuse}
    assert ("scale", "inplace") in kinds and ("sigmoid", "inplace") in kinds
    assert ("elementwise_add", "inplace") in kinds
    main2, startup2 = fluid.Program(), fluid.Program()
    with fluid.program_guard(main2, startup2), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 3])
        s = layers.scale(x, 2.0)
        layers.elementwise_add(s, s)  # X and Y are the same value
    _, plan2, _ = plan_for(main2)
    assert plan2.declined["the op reads the input more than once"] == 1


def test_state_is_not_reused_when_not_donated():
    model = small_mlp(optimizer.Momentum(0.1, 0.9), batch_norm=True)
    _, donated, _ = plan_for(model.main, EnableInplace(), [model.loss])
    _, kept, stats = plan_for(model.main, EnableInplace(donate_state=False), [model.loss])
    # 6 parameters (2 fc weights and biases, bn scale and bias) with their velocities,
    # and batch_norm's running mean and variance
    assert donated.count("donated") == 6 * 2 + 2
    assert kept.count("donated") == 0 and kept.with_reuse.donated == 0
    assert kept.declined["input is persistable state (not donated)"] == 6 * 2 + 2
    assert donated.with_reuse.donated == donated.with_reuse.outputs - 4  # all but the loss
    assert kept.peak_bytes > donated.peak_bytes


def test_predictions_scale_with_the_batch():
    model = small_mlp()
    _, plan, _ = plan_for(model.main, fetch=[model.loss])
    p1, p8 = plan.predict(1), plan.predict(8)
    assert p8.arguments - p1.arguments == 7 * (4 * 4 + 8)  # x f32[-1,4], label i64[-1,1]
    assert plan.predict(8) == plan.with_reuse or plan.batch_size != 8
    assert plan.predict(8, reuse=False).peak >= p8.peak
    assert p8.total == p8.arguments + p8.outputs - p8.donated + p8.temp_peak


def test_a_later_change_makes_the_plan_stale():
    model = small_mlp()
    graph, plan, _ = plan_for(model.main, fetch=[model.loss])
    assert plan.is_current(graph)
    accuracy = next(op for op in graph.ops() if op.type == "accuracy")
    graph.rewriter().erase_op(accuracy)  # its results are not read
    assert not plan.is_current(graph)


def test_the_plan_is_valid_when_executed_buffer_by_buffer():
    for opt in (optimizer.SGD(0.1), optimizer.Momentum(0.1, 0.9), optimizer.Adam(0.01)):
        with fluid.unique_name.guard():
            model = small_mlp(opt, batch_norm=True)
        state, _ = run_graph(lower(model.startup))
        feeds = {"x": np.ones((3, 4), "float32"), "label": np.zeros((3, 1), "int64")}
        for p in (EnableInplace(), MemoryOptimize()):
            graph, plan, _ = plan_for(model.main, p, [model.loss])
            run_with_buffers(graph, plan, state, feeds, [model.loss.name])


# -- properties over random programs ------------------------------------------------------

@settings(max_examples=10 * SCALE)
@given(random_programs(max_ops=6, with_loss=True), st.sampled_from(["sgd", "momentum"]),
       st.sampled_from(["enable-inplace", "memory-optimize"]))
def test_random_programs_keep_results_and_get_valid_plans(gen, opt_name, pass_name):
    opt = {"sgd": optimizer.SGD(0.1), "momentum": optimizer.Momentum(0.1, 0.9)}[opt_name]
    with fluid.program_guard(gen.main, gen.startup):
        opt.minimize(gen.main.global_block().var(gen.loss))
    report = check_pass(make_pass(pass_name), gen)
    stats = report.passes[0].stats
    # a step that updates state (an optimizer ran: some parameter is trainable and on the
    # loss's path) reuses a donated buffer for it
    updates_state = any(v.version > 0 for v in lower(gen.main).outputs)
    assert stats["donated state reused"] >= 1 or not updates_state
    graph, plan, _ = plan_for(gen.main, make_pass(pass_name), gen.fetch)
    state, _ = run_graph(lower(gen.startup))
    run_with_buffers(graph, plan, state, feeds_for(gen), gen.fetch)
    assert plan.with_reuse.peak <= plan.without_reuse.peak
    assert plan.with_reuse.allocated <= plan.without_reuse.allocated


@settings(max_examples=8 * SCALE)
@given(random_programs(max_ops=6, with_loss=False))
def test_forward_programs_get_valid_plans(gen):
    check_pass(MemoryOptimize(), gen)
    graph, plan, _ = plan_for(gen.main, MemoryOptimize(), gen.fetch)
    state, _ = run_graph(lower(gen.startup))
    run_with_buffers(graph, plan, state, feeds_for(gen), gen.fetch)


# -- the runtime: the plan travels with the compiled step, state stays donated -----------

def compiled_step(model, batch: int, feed_name: str, feed_shape, **build):
    cp = fluid.CompiledProgram(model.main, build_strategy=fluid.BuildStrategy(**build))
    feed = {feed_name: np.zeros((batch, *feed_shape), "float32"),
            "label": np.zeros((batch, 1), "int64")}
    return cp, feed, fluid.Executor().compile(cp, feed=feed, fetch_list=[model.loss])


@pytest.mark.parametrize("name", ["mlp", "demo_cnn"])
def test_predicted_bytes_beside_xla_memory_analysis(name, capsys):
    batch = 32
    if name == "mlp":
        model, feed_name, shape = models.mlp(input_dim=64, hidden=(32, 32)), "x", (64,)
    else:
        model, feed_name, shape = models.demo_cnn(channels=(4, 8)), "image", (1, 28, 28)
    with fluid.program_guard(model.main, model.startup):
        optimizer.Momentum(0.1, 0.9).minimize(model.loss)
    cp, _, step = compiled_step(model, batch, feed_name, shape, enable_inplace=True)
    assert "enable-inplace" in str(cp.pass_manager)
    r = step.memory_report()
    with capsys.disabled():
        print(f"\n{name} batch {batch}: " + ", ".join(f"{k}={v}" for k, v in r.items()))
    assert r["batch_size"] == batch
    # what XLA cannot rearrange, the plan gets exactly: arguments and donated state
    assert r["predicted_arguments"] == r["xla_arguments"]
    assert r["predicted_donated"] == r["xla_alias"]
    # XLA's outputs add a few bytes of tuple index tables
    assert 0 <= r["xla_outputs"] - r["predicted_outputs"] <= 512
    assert r["predicted_total"] < r["predicted_total_without_reuse"]
    # temporaries: XLA fuses elementwise chains (fewer temporaries) but convolutions and
    # their gradients take scratch space the op-level plan does not see; only report them
    assert r["predicted_temp_peak"] > 0 and r["xla_temp"] > 0


def test_runtime_keeps_donating_and_results_are_unchanged():
    model = small_mlp(optimizer.Momentum(0.1, 0.9), batch_norm=True)
    feed = {"x": np.ones((3, 4), "float32"), "label": np.zeros((3, 1), "int64")}
    plain_scope, scope, exe = fluid.Scope(), fluid.Scope(), fluid.Executor()
    exe.run(model.startup, scope=plain_scope)
    exe.run(model.startup, scope=scope)
    cp = fluid.CompiledProgram(model.main,
                               build_strategy=fluid.BuildStrategy(memory_optimize=True))
    for _ in range(2):
        want = exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=plain_scope)
        before = scope._vars["fc_0.w_0"]
        got = exe.run(cp, feed=feed, fetch_list=[model.loss], scope=scope)
        assert before.is_deleted()  # donated to the step, updated in place
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for name in plain_scope.keys():
        np.testing.assert_allclose(scope[name], plain_scope[name], rtol=1e-6, err_msg=name)
    stats = cp.last_report.stats()
    assert "enable-inplace" not in stats  # memory-optimize's plan includes the in-place pairs
    assert stats["memory-optimize"]["donated state reused"] > 0
    step = exe.compile(cp, feed=feed, fetch_list=[model.loss])
    assert step.memory_plan is not None and step.memory_analysis().alias_size_in_bytes > 0


def test_memory_report_needs_a_plan():
    model = small_mlp()
    _, feed, step = compiled_step(model, 2, "x", (4,))
    assert step.memory_plan is None
    with pytest.raises(fluid.GraphcError, match="enable_inplace=True"):
        step.memory_report()
