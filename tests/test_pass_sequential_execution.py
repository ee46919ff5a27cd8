"""sequential-execution: golden IR (a branchy forward program, a training program), every
neighbour ordered afterwards, a chain that is already ordered, and results unchanged (with
the interpreter's thread pool too)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from pass_harness import build, golden_text, run_pass

import graphc as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.ir.text import parse
from graphc.passes import PassManager, make_pass
from graphc.passes.infra.control_deps import depends
from graphc.testing import assert_same_results, check_golden, check_pass, random_programs

GOLDEN = Path(__file__).parent / "golden" / "sequential-execution"
PASS = "sequential-execution"


def branches():
    """Two independent branches of x joined at the end: program order is not data order."""
    x = fluid.data("x", [-1, 3])
    a = layers.relu(x)
    b = layers.tanh(x)
    c = layers.fc(a, 3)
    return layers.mean(layers.elementwise_add(c, b))


def chain():
    x = fluid.data("x", [-1, 3])
    return layers.mean(layers.scale(layers.tanh(layers.relu(x)), 2.0))


def assert_in_program_order(graph):
    ops = graph.ops()
    for prev, op in zip(ops, ops[1:]):
        assert depends(graph, op, prev), f"{op.where} does not wait for {prev.where}"


def test_golden():
    for case, body, train in (("branches_forward", branches, False),
                              ("branches_training", branches, True)):
        main, _, loss = build(body, train)
        before, after, stats = run_pass(PASS, main, [loss.name])
        check_golden(GOLDEN / f"{case}.ir", golden_text(PASS, before, after, stats))
        assert stats["dependencies added"] >= 2 and stats["already ordered"] >= 1
        assert stats["dependencies added"] + stats["already ordered"] == after.num_ops - 1
        assert_in_program_order(after)
        assert [op.type for op in after.ops()] == [op.type for op in before.ops()]
        assert parse(after.to_text()).structurally_equal(after)


def test_a_chain_is_already_ordered():
    """Nothing to add when each op reads its predecessor: the pass says so, changes nothing."""
    main, _, loss = build(chain, False)
    before, after, stats = run_pass(PASS, main, [loss.name])
    assert stats == {"already ordered": 3}  # relu, tanh, scale, mean
    assert after.to_text() == before.to_text()


def test_results_unchanged_also_on_threads():
    main, startup, loss = build(branches, True)
    fetch = [loss.name, "fc_0.w_0@GRAD"]
    before, after, _ = run_pass(PASS, main, fetch)
    state, _ = run_graph(lower(startup))
    feeds = {"x": np.random.default_rng(3).normal(size=(4, 3)).astype("float32")}
    assert_same_results(before, after, state, feeds, fetch, rtol=0, atol=0)
    want = run_graph(before, state, feeds, fetch)[1]
    got = run_graph(after, state, feeds, fetch, num_threads=4)[1]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=10)
@given(random_programs(max_ops=5, with_loss=False))
def test_random_programs(gen):
    check_pass(make_pass(PASS), gen)
    graph = gen.graph()
    PassManager([make_pass(PASS)]).run(graph)
    assert_in_program_order(graph)
