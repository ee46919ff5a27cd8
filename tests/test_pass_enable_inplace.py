"""enable-inplace: golden plans (a forward chain with a fetched middle, a Momentum step with
and without donated state), the declines it names, an unchanged graph and results, and the
plan checked by executing every value in its planned buffer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from test_pass_inplace import run_with_buffers

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.passes import PassManager, make_pass
from graphc.testing import assert_same_results, check_golden, check_pass, random_programs

GOLDEN = Path(__file__).parent / "golden" / "enable-inplace"
PASS = "enable-inplace"


def chain():
    """x -> scale -> relu -> tanh -> sigmoid -> mean; tanh's result is fetched too."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        t = layers.tanh(layers.relu(layers.scale(x, 2.0)))
        out = layers.mean(layers.sigmoid(t))
    return main, startup, [out.name, t.name]


def momentum_step():
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        loss = layers.mean(layers.fc(x, 2, act="relu"))
        optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, [loss.name]


def plan(main, fetch, **options):
    """(graph with its plan, the pass's stats)."""
    graph = lower(main)
    keep = [resolve_fetch(graph, f) for f in fetch]
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(graph, keep=keep)
    return graph, report.stats()[PASS]


def golden_text(graph, stats) -> str:
    return "\n".join([f"# pass: {PASS}", "# stats: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(stats.items())), graph.to_text() + graph.memory_plan
        .to_text()])


CASES = {"chain_fetched_middle": (chain, {"batch_size": 4}),
         "momentum_donated": (momentum_step, {"batch_size": 4}),
         "momentum_not_donated": (momentum_step, {"batch_size": 4, "donate_state": False})}


def test_golden():
    for case, (build, options) in CASES.items():
        main, _, fetch = build()
        graph, stats = plan(main, fetch, **options)
        check_golden(GOLDEN / f"{case}.ir", golden_text(graph, stats))
        assert graph.structurally_equal(lower(main)), case  # an analysis: the graph stays
        p = graph.memory_plan
        assert p.count("pool") == 0 and stats["in-place pairs"] == p.count("inplace")
        assert stats["predicted peak bytes (batch 4)"] == p.peak_bytes <= \
            p.peak_bytes_without_reuse
    main, _, fetch = chain()
    graph, _ = plan(main, fetch)
    pairs = {(r.op, r.input, r.output) for r in graph.memory_plan.reuse}
    # scale reads the feed (the caller's): relu takes scale's buffer, tanh relu's; sigmoid
    # may not take tanh's (fetched)
    assert pairs == {("relu", "scale_0.tmp_0", "relu_0.tmp_0"),
                     ("tanh", "relu_0.tmp_0", "tanh_0.tmp_0")}
    main, _, fetch = momentum_step()
    donated, _ = plan(main, fetch)
    kept, stats = plan(main, fetch, donate_state=False)
    assert donated.memory_plan.count("donated") == 4  # 2 parameters, 2 velocities
    assert kept.memory_plan.count("donated") == 0
    assert stats["skipped: input is persistable state (not donated)"] == 4


def test_declines_name_their_reasons():
    main, _, fetch = chain()
    _, stats = plan(main, fetch)
    assert stats["skipped: input is a feed (the caller owns it)"] == 1  # scale of x
    assert stats["skipped: input is fetched"] == 1  # sigmoid of the fetched tanh
    assert stats["in-place pairs"] == 2


def test_results_unchanged_and_the_plan_holds():
    for build in (chain, momentum_step):
        main, startup, fetch = build()
        graph, _ = plan(main, fetch)
        state, _ = run_graph(lower(startup))
        feeds = {"x": np.random.default_rng(0).normal(size=(4, 3)).astype("float32")}
        assert_same_results(lower(main), graph, state, feeds, fetch, rtol=0, atol=0)
        run_with_buffers(graph, graph.memory_plan, state, feeds, fetch)


@settings(max_examples=5)
@given(random_programs(max_ops=5, with_loss=True))
def test_random_training_programs(gen):
    with program_guard(gen.main, gen.startup):
        optimizer.SGD(0.1).minimize(gen.main.global_block().var(gen.loss))
    report = check_pass(make_pass(PASS), gen)
    assert "pool reuses" not in report.stats()[PASS]
