"""The pass infrastructure: registry and pipeline text, instrumentation (print before/after,
on change, diffs, dumps, timing and statistics), failures that name the pass and leave a
reproducer, and the always-available passes (dce, sequential-execution,
backward-optimizer-op-deps) with golden IR and property tests."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from graphc.cli import main as cli_main
from graphc.models import mlp
from hypothesis import given, settings

import graphc as fluid
from graphc import layers, optimizer
from graphc.ir.graph import Graph
from graphc.passes import (
    Pass,
    PassContext,
    PassError,
    PassFailure,
    PassManager,
    all_passes,
    make_pass,
    parse_pipeline,
    pipeline_for,
    register_pass,
)
from graphc.testing import check_golden, check_pass, random_programs

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


@register_pass
class BreakGraph(Pass):
    """Test-only: corrupts the first op's attributes (to exercise failure handling)."""

    name = "test-break-graph"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        op = graph.ops()[0]
        op.attrs = {**op.attrs, "bogus": 1}  # deliberately bypasses the rewriter
        ctx.count("broken")


@register_pass
class Crash(Pass):
    """Test-only: raises a plain Python error."""

    name = "test-crash"
    message: str = "boom"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        raise ZeroDivisionError(self.message)


def small_training_program():
    model = mlp(input_dim=4, hidden=(3,), num_classes=2, batch_norm=False)
    with fluid.program_guard(model.main, model.startup):
        optimizer.SGD(0.1).minimize(model.loss)
    return model


def test_registry_and_pipeline_text_round_trip():
    assert {"dce", "sequential-execution", "backward-optimizer-op-deps"} <= set(all_passes())
    text = 'dce,backward-optimizer-op-deps{force=true},test-crash{message="a,b}"}'
    pm = PassManager.parse(text)
    assert str(pm) == text
    assert [p.name for p in pm.passes] == ["dce", "backward-optimizer-op-deps", "test-crash"]
    assert pm.passes[2].message == "a,b}"
    assert str(PassManager.parse(str(pm))) == text


@pytest.mark.parametrize("text, message", [
    ("dce,nope", "unknown pass 'nope'"),
    ("dce,,dce", "empty pass name"),
    ("backward-optimizer-op-deps{force=1}", "force: Input should be a valid boolean"),
    ("backward-optimizer-op-deps{speed=2}", "speed: Extra inputs are not permitted"),
    ("backward-optimizer-op-deps{force=yes}", "bad value for option 'force'"),
])
def test_pipeline_text_errors(text, message):
    with pytest.raises(PassError, match=message):
        parse_pipeline(text)


def test_passes_are_immutable_and_documented():
    p = make_pass("backward-optimizer-op-deps", force=True)
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="frozen"):
        p.force = False
    for name, cls in all_passes().items():
        assert cls.summary(), f"pass {name} has no docstring"


def test_print_before_after_only_on_change_and_diff():
    model = small_training_program()
    g = fluid.lower(model.main)
    out = io.StringIO()
    PassManager.parse("dce,backward-optimizer-op-deps,sequential-execution",
                      print_ir_before=["dce"], print_after_change=True, stream=out).run(g)
    text = out.getvalue()
    assert text.count("// ----- IR before dce -----") == 1
    assert "IR after dce" in text  # dce removed the accuracy ops
    assert "IR after backward-optimizer-op-deps" not in text  # declined: single device
    assert "IR after sequential-execution" in text
    out = io.StringIO()
    PassManager.parse("sequential-execution", print_ir_after="all", print_diff=True,
                      stream=out).run(fluid.lower(model.main))
    diff = out.getvalue()
    assert diff.startswith("--- before sequential-execution\n+++ after sequential-execution")
    assert any(line.startswith("+") and "_deps=[" in line for line in diff.splitlines())


def test_report_has_timing_and_statistics():
    model = small_training_program()
    report = pipeline_for(fluid.BuildStrategy(enable_sequential_execution=True),
                          verify_each=True).run(fluid.lower(model.main))
    stats = report.stats()
    assert stats["dce"] == {"removed": 3}  # top_k, accuracy, and the unfetched loss's mean
    assert stats["backward-optimizer-op-deps"] == {"skipped: single device": 1}
    assert stats["sequential-execution"]["dependencies added"] > 0
    table = report.table()
    assert "skipped: single device: 1" in table and "(verify)" in table and "total" in table
    assert all(p.seconds >= 0 for p in report.passes) and report.changed


def test_numbered_dumps(tmp_path):
    model = small_training_program()
    PassManager.parse("dce,sequential-execution", dump_dir=str(tmp_path)).run(
        fluid.lower(model.main))
    assert sorted(os.listdir(tmp_path)) == ["00-input.ir", "01-dce.ir",
                                            "02-sequential-execution.ir"]
    dumped = (tmp_path / "02-sequential-execution.ir").read_text()
    assert dumped.startswith("// after sequential-execution (changed)")
    # every dump parses back into a graph that verifies
    fluid.parse(dumped).verify()


def test_a_pass_that_corrupts_the_graph_is_named_with_a_reproducer(tmp_path):
    model = small_training_program()
    g = fluid.lower(model.main)
    pm = PassManager.parse("dce,test-break-graph,sequential-execution", verify_each=True,
                           reproducer_dir=str(tmp_path))
    with pytest.raises(PassFailure) as info:
        pm.run(g)
    err = info.value
    assert err.pass_name == "test-break-graph" and err.before == ["dce"]
    assert "pass 'test-break-graph' (pass 2 of 3, after dce) left a graph that does not " \
           "verify" in str(err)
    assert "unknown attribute 'bogus'" in str(err)
    reproducer = (tmp_path / "reproducer.ir").read_text()
    assert reproducer.startswith("// graphc reproducer: run `test-break-graph` on this graph")
    assert "// pipeline: dce,test-break-graph,sequential-execution" in reproducer
    # the reproducer holds the failing pass's input: it parses, verifies, and fails again
    again = fluid.parse(reproducer).verify()
    with pytest.raises(PassFailure, match="first in the pipeline"):
        PassManager.parse("test-break-graph", verify_each=True).run(again)


def test_a_crashing_pass_keeps_its_traceback():
    g = fluid.lower(small_training_program().main)
    with pytest.raises(PassFailure) as info:
        PassManager.parse('dce,test-crash{message="bad pass"}').run(g)
    message = str(info.value)
    assert "ZeroDivisionError: bad pass" in message and "set reproducer_dir" in message
    assert 'raise ZeroDivisionError(self.message)' in message


def test_an_invalid_input_graph_is_reported_before_any_pass():
    g = fluid.lower(small_training_program().main)
    g.ops()[0].attrs = {**g.ops()[0].attrs, "bogus": 2}
    with pytest.raises(PassFailure, match="input graph does not verify"):
        PassManager.parse("dce", verify_each=True).run(g)


# -- the built-in passes --------------------------------------------------------------


def forward_program():
    x = fluid.data("x", [-1, 3])
    h = layers.relu(x)
    layers.tanh(x)  # dead: nobody reads it
    out = layers.scale(h, 2.0)
    layers.sigmoid(out)  # dead too
    return fluid.default_main_program(), out


def test_dce_golden_and_keep():
    program, out = forward_program()
    g = fluid.lower(program)
    PassManager([make_pass("dce")], verify_each=True).run(g, keep=[g.latest(out.name)])
    check_golden(os.path.join(GOLDEN, "dce", "forward.ir"), g.to_text())
    assert g.stats() == {"relu": 1, "scale": 1}
    g2 = fluid.lower(program)
    report = PassManager([make_pass("dce")]).run(g2)  # nothing fetched: all dead
    assert g2.num_ops == 0 and report.stats()["dce"] == {"removed": 4}


def test_sequential_execution_golden():
    program, out = forward_program()
    g = fluid.lower(program)
    PassManager([make_pass("sequential-execution")], verify_each=True).run(g)
    check_golden(os.path.join(GOLDEN, "sequential-execution", "forward.ir"), g.to_text())
    assert fluid.parse(g.to_text()).structurally_equal(g)


def test_backward_optimizer_op_deps_golden():
    model = small_training_program()
    g = fluid.lower(model.main)
    PassManager([make_pass("backward-optimizer-op-deps", force=True)], verify_each=True).run(g)
    check_golden(os.path.join(GOLDEN, "backward-optimizer-op-deps", "mlp.ir"), g.to_text())
    order = g.ops()
    last_backward = max(i for i, op in enumerate(order) if op.role == "backward")
    first_update = min(i for i, op in enumerate(order) if op.role == "optimize")
    assert last_backward < first_update


@settings(max_examples=10)
@given(random_programs(max_ops=5, with_loss=True))
def test_builtin_passes_preserve_results(gen):
    with fluid.program_guard(gen.main, gen.startup):
        optimizer.Momentum(0.1, 0.9).minimize(gen.main.global_block().var(gen.loss))
    check_pass([make_pass("dce"), make_pass("backward-optimizer-op-deps", force=True),
                make_pass("sequential-execution")], gen)


def test_compiled_program_runs_the_debug_preset_like_the_plain_program():
    model = small_training_program()
    feed = {"x": np.random.default_rng(0).standard_normal((4, 4)).astype("float32"),
            "label": np.array([[0], [1], [1], [0]], "int64")}
    losses = {}
    for name, program in (("plain", model.main),
                          ("debug", fluid.CompiledProgram(
                              model.main, build_strategy=fluid.BuildStrategy.load("debug")))):
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(model.startup, scope=scope)
        losses[name] = [exe.run(program, feed=feed, fetch_list=[model.loss], scope=scope)[0]
                        for _ in range(5)]
    np.testing.assert_allclose(losses["debug"], losses["plain"], rtol=1e-6, atol=1e-7)


def test_compiled_program_keeps_what_is_fetched():
    model = small_training_program()
    compiled = fluid.CompiledProgram(model.main)
    assert "accuracy" not in compiled.graph(fetch_list=[model.loss]).stats()
    assert "accuracy" in compiled.graph(fetch_list=[model.loss, model.metrics["accuracy"]]).stats()
    assert compiled.last_report.stats()["dce"] == {}
    with pytest.raises(fluid.GraphcError, match="CompiledProgram expects a Program"):
        fluid.CompiledProgram("main")


def test_cli_lists_passes(capsys):
    assert cli_main(["passes"]) == 0
    out = capsys.readouterr().out
    assert "sequential-execution" in out and "[BuildStrategy.enable_sequential_execution]" in out
    assert "options: force=False" in out
