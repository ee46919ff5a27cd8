"""ps-slice-variables: golden IR with the recorded plan (round robin and hash placement), the
slicing rule on the plan, its decline, and a graph that computes exactly what it did (the
pass records a plan and changes no op)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from ps_pass_harness import EPS, build, feeds, golden_text, plan_of, run_ps, slicer

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import PassError, make_pass
from graphc.testing import assert_same_results, check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-slice-variables"
PASS = "ps-slice-variables"


def plan_text(graph) -> str:
    return "".join(f"# plan {name}: {blocks}\n" for name, blocks in plan_of(graph).items())


@pytest.mark.parametrize("method", ["round_robin", "hash_name"])
def test_golden(method):
    main, _, _ = build()
    before, after, stats = run_ps(main, slicer(split_method=method))
    check_golden(GOLDEN / f"mlp_momentum_l2.{method}.ir",
                 golden_text(PASS, before, after, stats) + plan_text(after))
    assert stats == {"parameters": 4, "blocks": 5, "split parameters": 1}
    assert after.to_text() == before.to_text()  # no op changes: the plan is on the variables
    plan = plan_of(after)
    # 8x8 = 64 elements, two servers, min_block_size 16: two blocks of 4 whole rows
    assert [b[1:5] for b in plan["fc_0.w_0"]] == [["fc_0.w_0.block0", "fc_0.w_0@GRAD.block0",
                                                   0, 4], ["fc_0.w_0.block1",
                                                           "fc_0.w_0@GRAD.block1", 4, 8]]
    assert [b[1:5] for b in plan["fc_1.b_0"]] == [["fc_1.b_0", "fc_1.b_0@GRAD", 0, 1]]
    blocks = [b for bs in plan.values() for b in bs]
    if method == "round_robin":
        assert [b[5] for b in blocks] == [EPS[k % 2] for k in range(len(blocks))]
    else:
        assert all(b[5] == EPS[zlib.crc32(b[1].encode()) % 2] for b in blocks)


def test_whole_parameters_when_not_sliced_up():
    main, _, _ = build()
    _, after, stats = run_ps(main, slicer(slice_var_up=False))
    assert stats == {"parameters": 4, "blocks": 4}
    assert all(len(bs) == 1 and bs[0][1] == name for name, bs in plan_of(after).items())


def test_declines_and_checks_options():
    forward, _, _ = build(None)
    before, after, stats = run_ps(forward, slicer())
    assert stats == {"skipped: no optimizer ops: nothing for parameter servers to update": 1}
    assert plan_of(after) == {} and after.to_text() == before.to_text()
    with pytest.raises(PassError, match="endpoints must be distinct"):
        make_pass(PASS, endpoints=[EPS[0], EPS[0]])
    with pytest.raises(PassError, match="min_block_size must be >= 1"):
        make_pass(PASS, min_block_size=0)


def test_results_unchanged():
    main, startup, loss = build()
    before, after, _ = run_ps(main, slicer())
    state, _ = run_graph(lower(startup))
    assert_same_results(before, after, state, feeds(), [loss.name], rtol=0, atol=0)
