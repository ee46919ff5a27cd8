"""ps-geo-server-graph: golden IR of each GEO server (``block += delta`` per owned block and
nothing else), its decline, and a server's blocks after the deltas equal to the rows of the
local initial values plus the deltas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ps_pass_harness import (
    EPS,
    apply,
    build,
    golden_text,
    plan_of,
    run_ps,
    server_startup_entries,
    slicer,
)

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-geo-server-graph"
PASS = "ps-geo-server-graph"


@pytest.mark.parametrize("server", [0, 1])
def test_golden(server):
    main, _, _ = build("sgd")
    before, after, stats = run_ps(main, slicer(), make_pass(PASS, endpoint=EPS[server]))
    check_golden(GOLDEN / f"mlp_sgd_l2.server{server}.ir",
                 golden_text(PASS, before, after, stats))
    mine = [b for bs in plan_of(before).values() for b in bs if b[5] == EPS[server]]
    assert stats == {"blocks": len(mine)}
    assert after.stats() == {"elementwise_add": len(mine)}
    assert sorted(v.var.name for v in after.inputs if v.var.kind == "feed") == sorted(
        f"{b[1]}@DELTA" for b in mine)
    assert all(op.role == "optimize" for op in after.ops())


def test_declines_a_server_without_blocks():
    main, _, _ = build("sgd")
    _, after, stats = run_ps(main, slicer(), make_pass(PASS, endpoint="10.0.0.9:1"))
    assert stats == {"skipped: this server owns no block": 1}
    assert after.num_ops == 0 and not after.outputs and not after.inputs


def test_blocks_add_the_deltas_to_the_local_initial_rows():
    main, startup, _ = build("sgd")
    local, _ = run_graph(lower(startup))
    plan = plan_of(run_ps(main, slicer())[1])
    rng = np.random.default_rng(4)
    for ep in EPS:
        server = lower(main)
        apply(server, slicer(), make_pass(PASS, endpoint=ep))
        sgraph = lower(startup)
        apply(sgraph, make_pass("ps-server-startup", blocks=server_startup_entries(server)))
        init, _ = run_graph(sgraph)
        mine = [(p, b) for p, bs in plan.items() for b in bs if b[5] == ep]
        deltas = {f"{b[1]}@DELTA": rng.standard_normal(local[p][b[3]:b[4]].shape)
                  .astype("float32") for p, b in mine}
        new, _ = run_graph(server, init, deltas)
        assert new.keys() == {b[1] for _, b in mine}
        for p, b in mine:
            np.testing.assert_array_equal(new[b[1]], local[p][b[3]:b[4]] +
                                          deltas[f"{b[1]}@DELTA"], err_msg=b[1])
