"""all-reduce-deps: golden IR after data-parallel's Reduce mode (reduce-scatters and gathers
chained, local c_shard ops left out), its decline, and simulated replicas computing the same
bits with and without the chain."""

from __future__ import annotations

from pathlib import Path

import pytest
from dp_pass_harness import assert_replicas_agree, classifier, data_parallel, run_passes
from pass_harness import golden_text

from graphc.ir.text import parse
from graphc.passes import PassManager, make_pass
from graphc.passes.all_reduce_deps import LOCAL_ONLY
from graphc.passes.infra.control_deps import depends
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "all-reduce-deps"
PASS = "all-reduce-deps"


def chained(graph):
    return [op for op in graph.ops() if op.type.startswith("c_") and op.type not in LOCAL_ONLY]


def test_golden_reduce_mode():
    main, _, loss = classifier("momentum")
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode="reduce"),
                                      make_pass(PASS))
    check_golden(GOLDEN / "classifier_momentum_reduce.ir",
                 golden_text(PASS, before, after, stats))
    chain = chained(after)
    # 4 reduce-scatters and 4 all-gathers (the c_shard ops stay out), each waiting directly
    # for the one before it: 7 edges (an edge is added even where data flow already orders)
    assert [op.type for op in chain] == ["c_reduce_scatter", "c_allgather"] * 4
    assert all(depends(after, op, prev) for prev, op in zip(chain, chain[1:]))
    assert stats == {"dependencies added": 7}
    assert not any(op.type in LOCAL_ONLY and op.inputs.get("_deps") for op in after.ops())
    assert parse(after.to_text()).structurally_equal(after)


def test_declines_fewer_than_two_collectives():
    main, _, loss = classifier("sgd")
    before, after, stats = run_passes(main, [loss.name], make_pass(PASS))
    assert stats == {"skipped: fewer than two collective ops": 1}
    assert after.to_text() == before.to_text()
    # Reduce mode's c_shard ops do not communicate: they never count towards the chain
    one = parse("""graph @main {
  input %x: f32[4,3] {feed}
  %s: f32[1,3] = c_shard(X=%x) {nranks=4}
  %a: f32[4,3] = c_allreduce(X=%x) {nranks=4, reduce="sum"}
  output %x
}""")
    report = PassManager([make_pass(PASS)], verify_each=True).run(one)
    assert report.stats()[PASS] == {"skipped: fewer than two collective ops": 1}


@pytest.mark.parametrize("mode", ["all_reduce", "reduce"])
def test_replicas_compute_the_same_bits(mode):
    main, startup, loss = classifier("adam")
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode=mode),
                                      make_pass(PASS))
    assert stats["dependencies added"] >= 3
    assert_replicas_agree(before, after, startup, [loss.name, "fc_0.w_0@GRAD"])
