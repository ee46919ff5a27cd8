"""memory-optimize: golden plans (a chain of squares whose outputs take dead temporaries'
buffers from the pool, a Momentum step), pool reuse only between equal sizes and never of
feeds, state or fetched values, the declines it names, and results unchanged with every
value executed in its planned buffer."""

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

GOLDEN = Path(__file__).parent / "golden" / "memory-optimize"
PASS = "memory-optimize"


def squares():
    """a = 2x; b = a*a; c = b*b; d = c*c; mean(d): a square reads its input twice (no in-place
    pair), so only the pool can hand c and d the buffers a and b left."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        h = layers.scale(x, 2.0)
        for _ in range(3):
            h = layers.elementwise_mul(h, h)
        out = layers.mean(h)
    return main, startup, [out.name]


def momentum_step():
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        loss = layers.mean(layers.fc(layers.fc(x, 3, act="relu"), 3, act="tanh"))
        optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, [loss.name]


def plan(main, fetch, name=PASS, **options):
    graph = lower(main)
    keep = [resolve_fetch(graph, f) for f in fetch]
    report = PassManager([make_pass(name, **options)], verify_each=True).run(graph, keep=keep)
    return graph, report.stats()[name]


def golden_text(graph, stats) -> str:
    return "\n".join([f"# pass: {PASS}", "# stats: " + ", ".join(
        f"{k}: {v}" for k, v in sorted(stats.items())), graph.to_text() + graph.memory_plan
        .to_text()])


def test_golden():
    for case, build in (("squares", squares), ("momentum", momentum_step)):
        main, _, fetch = build()
        graph, stats = plan(main, fetch, batch_size=4)
        check_golden(GOLDEN / f"{case}.ir", golden_text(graph, stats))
        assert graph.structurally_equal(lower(main)), case
        p = graph.memory_plan
        assert stats["pool reuses"] == p.count("pool") > 0, case
        assert p.with_reuse.allocated < p.without_reuse.allocated
    main, _, fetch = squares()
    graph, _ = plan(main, fetch)
    pool = {(r.output, r.input) for r in graph.memory_plan.reuse if r.kind == "pool"}
    assert pool == {("elementwise_mul_1.tmp_0", "scale_0.tmp_0"),
                    ("elementwise_mul_2.tmp_0", "elementwise_mul_0.tmp_0")}


def test_pool_reuse_beyond_enable_inplace():
    main, _, fetch = squares()
    inplace, stats = plan(main, fetch, "enable-inplace")
    pooled, _ = plan(main, fetch)
    assert inplace.memory_plan.reuse == [] and "pool reuses" not in stats
    assert len(set(pooled.memory_plan.buffer_of.values())) < len(
        set(inplace.memory_plan.buffer_of.values()))


def test_declines_and_what_never_enters_the_pool():
    main, _, fetch = squares()
    graph, stats = plan(main, [*fetch, "elementwise_mul_0.tmp_0"])
    # b fetched: d may not take its buffer, and nothing may overwrite it
    assert stats["skipped: the op reads the input more than once"] == 3
    assert stats["skipped: input is a feed (the caller owns it)"] == 1
    p = graph.memory_plan
    protected = {"x", "elementwise_mul_0.tmp_0"}
    assert all(r.input not in protected for r in p.reuse)
    assert {(r.output, r.input) for r in p.reuse if r.kind == "pool"} == {
        ("elementwise_mul_1.tmp_0", "scale_0.tmp_0")}
    main, _, fetch = momentum_step()
    graph, _ = plan(main, fetch, donate_state=False)
    state = {v.name for v in graph.inputs if v.var.persistable}
    assert all(r.input not in state for r in graph.memory_plan.reuse)


def test_results_unchanged_and_the_plan_holds():
    for build in (squares, momentum_step):
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
        optimizer.Momentum(0.1, 0.9).minimize(gen.main.global_block().var(gen.loss))
    report = check_pass(make_pass(PASS), gen)
    assert "pool reuses" in report.stats()[PASS]
