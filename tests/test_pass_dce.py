"""dce: golden IR (dead branches of a forward program, unfetched metrics of a training
program, dead ops inside a DynamicRNN's body), the collective-op decline, and results
unchanged for what is kept (random programs with and without regions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from pass_harness import golden_text, run_pass

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.ir.text import parse
from graphc.passes import PassManager, make_pass
from graphc.testing import assert_same_results, check_golden, check_pass, random_programs
from graphc.tools.models import mlp

GOLDEN = Path(__file__).parent / "golden" / "dce"
PASS = "dce"


def dead_branches():
    """x -> relu -> scale is fetched; tanh(x) and exp(sigmoid(scale)) are read by nobody."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        out = layers.scale(layers.relu(x), 2.0)
        layers.tanh(x)
        layers.exp(layers.sigmoid(out))
    return main, startup, out


def mlp_sgd():
    """A small classifier trained with SGD; its accuracy metric is not fetched."""
    model = mlp(input_dim=4, hidden=(3,), num_classes=2, batch_norm=False)
    with program_guard(model.main, model.startup):
        optimizer.SGD(0.1).minimize(model.loss)
    return model.main, model.startup, model.loss


def dynamic_rnn_dead_in_body():
    """A DynamicRNN whose step block computes exp(h) for nobody (dead inside the region),
    and a tanh of the input nobody reads (dead outside it)."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 2], lod_level=1)
        layers.tanh(x)
        drnn = layers.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(x)
            prev = drnn.memory(shape=[3], value=0.0)
            h = layers.fc([word, prev], 3, act="tanh")
            layers.exp(h)
            drnn.update_memory(prev, h)
            drnn.output(h)
        out = layers.sequence_pool(drnn(), "last")
    return main, startup, out


CASES = {"forward_dead_branches": (dead_branches, 3),  # tanh, exp, sigmoid
         "mlp_sgd_metrics_unfetched": (mlp_sgd, 2)}  # top_k, accuracy


def test_golden():
    for case, (build, removed) in CASES.items():
        main, startup, out = build()
        before, after, stats = run_pass(PASS, main, [out.name])
        check_golden(GOLDEN / f"{case}.ir", golden_text(PASS, before, after, stats))
        assert stats == {"removed": removed}, case
        assert before.num_ops - after.num_ops == removed
        assert not {"tanh", "exp", "sigmoid", "top_k", "accuracy"} & set(after.stats())
        assert parse(after.to_text()).structurally_equal(after)


def test_golden_dead_ops_inside_a_region():
    """Inside the DynamicRNN's body exp(h) goes and the step's fc stays; outside, the dead
    tanh goes and the region op (whose result is read) stays."""
    main, _, out = dynamic_rnn_dead_in_body()
    before, after, stats = run_pass(PASS, main, [out.name])
    check_golden(GOLDEN / "region_body_dead_ops.ir", golden_text(PASS, before, after, stats))
    assert stats == {"removed": 1, "removed (in regions)": 1}
    (rnn,) = [op for op in after.ops() if op.type == "dynamic_rnn"]
    body = parse(rnn.attrs["body"])
    assert "exp" not in body.stats() and {"mul", "tanh", "sum"} <= set(body.stats())
    assert "exp" in parse(next(op for op in before.ops() if op.type == "dynamic_rnn")
                          .attrs["body"]).stats()
    assert "tanh" not in after.stats()
    assert parse(after.to_text()).structurally_equal(after)


def test_declines_collective_ops_and_keeps_what_they_read():
    graph = parse("""graph @main {
  input %x: f32[-1,3] {feed}
  %a: f32[-1,3] = relu(X=%x)
  %b: f32[-1,3] = c_allreduce(X=%a) {nranks=2, reduce="sum"}
  %c: f32[-1,3] = tanh(X=%x)
  output %x
}""")
    report = PassManager([make_pass(PASS)], verify_each=True).run(graph)
    stats = report.stats()[PASS]
    assert stats["removed"] == 1 and stats["skipped: collective op"] == 1  # once, not per sweep
    assert set(stats) == {"removed", "skipped: collective op"}
    assert graph.stats() == {"relu": 1, "c_allreduce": 1}  # relu feeds the collective


def test_nothing_dead_leaves_the_graph_alone():
    main, _, out = dead_branches()
    graph = lower(main)
    keep = [v for op in graph.ops() for v in op.output_values()]
    report = PassManager([make_pass(PASS)], verify_each=True).run(graph, keep=keep)
    assert report.stats()[PASS] == {} and not report.changed
    assert graph.structurally_equal(lower(main))


def test_results_unchanged():
    for build in (dead_branches, mlp_sgd):
        main, startup, out = build()
        before, after, _ = run_pass(PASS, main, [out.name])
        state, _ = run_graph(lower(startup))
        rng = np.random.default_rng(0)
        feeds = {"x": rng.normal(size=(5, main.global_block().var("x").shape[1]))
                 .astype("float32")}
        if "label" in main.global_block().vars:
            feeds["label"] = rng.integers(0, 2, (5, 1)).astype("int64")
        assert_same_results(before, after, state, feeds, [out.name], rtol=0, atol=0)


@settings(max_examples=10)
@given(random_programs(max_ops=5, with_loss=False))
def test_random_programs_keep_the_first_fetch(gen):
    """Only the first fetch is kept: everything else that leads nowhere goes, and what is
    fetched computes as before."""
    report = check_pass(make_pass(PASS), gen, fetch=gen.fetch[:1])
    assert set(report.stats()[PASS]) <= {"removed"}


@settings(max_examples=10)
@given(random_programs(max_ops=5, with_loss=False, regions=True))
def test_random_programs_with_regions_keep_the_first_fetch(gen):
    """The same over programs where a run of steps is a region body (scan_layers or while):
    dead body values (results the body does not return) go inside it, and the fetch computes
    as before."""
    report = check_pass(make_pass(PASS), gen, fetch=gen.fetch[:1])
    assert set(report.stats()[PASS]) <= {"removed", "removed (in regions)"}
