"""fuse-broadcast-ops: golden IR (Reduce mode's parameter all-gathers bucketed per layer),
its declines (no all-gathers; each one over the byte bound), option text, and simulated
replicas computing the same bits with and without the buckets."""

from __future__ import annotations

from pathlib import Path

import pytest
from dp_pass_harness import assert_replicas_agree, classifier, data_parallel, run_passes
from pass_harness import golden_text

from graphc.ir.text import parse
from graphc.passes import PassError, make_pass, parse_pipeline
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "fuse-broadcast-ops"
PASS = "fuse-broadcast-ops"


def test_golden_one_bucket_per_layer():
    main, _, loss = classifier("adam")
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode="reduce"),
                                      make_pass(PASS, max_layers=1))
    check_golden(GOLDEN / "classifier_adam_reduce_layers1.ir",
                 golden_text(PASS, before, after, stats))
    assert stats == {"buckets": 2, "fused": 4}
    fused = [op for op in after.ops() if op.type == "c_fused_allgather"]
    assert "c_allgather" not in after.stats() and len(fused) == 2
    # the members' outputs are the updated parameters, with their names and versions
    assert [[v.name for v in op.outputs["Out"]] for op in fused] == [
        ["fc_0.w_0#1", "fc_0.b_0#1"], ["fc_1.w_0#1", "fc_1.b_0#1"]]
    assert [op.attrs["shapes"] for op in fused] == [[6, 5, 5], [5, 3, 3]]
    assert [op.attrs["ranks"] for op in fused] == [[2, 1], [2, 1]]
    assert parse(after.to_text()).structurally_equal(after)


def test_declines():
    main, _, loss = classifier("adam")
    before, after, stats = run_passes(main, [loss.name], data_parallel(), make_pass(PASS))
    assert stats == {"skipped: no c_allgather ops": 1}
    assert after.to_text() == before.to_text()
    # a bound of a few bytes: every parameter is alone in its bucket, and each says why
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode="reduce"),
                                      make_pass(PASS, max_mb=1e-5))
    assert stats == {"buckets": 4, "skipped: c_allgather: larger than max_mb alone": 4}
    assert after.to_text() == before.to_text()


def test_options_round_trip_and_are_checked():
    p = make_pass(PASS, max_mb=0.5, max_layers=2)
    assert str(p) == "fuse-broadcast-ops{max_mb=0.5,max_layers=2}"
    assert parse_pipeline(str(p)) == [p]
    with pytest.raises(PassError, match="max_mb"):
        make_pass(PASS, max_mb=0.0)


@pytest.mark.parametrize("options", [{}, {"max_layers": 1}])
def test_replicas_compute_the_same_bits(options):
    main, startup, loss = classifier("momentum")
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode="reduce"),
                                      make_pass(PASS, **options))
    assert stats["fused"] == 4
    assert_replicas_agree(before, after, startup, [loss.name])
