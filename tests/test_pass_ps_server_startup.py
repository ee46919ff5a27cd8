"""ps-server-startup: golden IR of a server's startup graph (blocks cut from the original
initialisers, scalar state copied per block), its decline, and every block equal to the rows
of a local startup run bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ps_pass_harness import (
    EPS,
    apply,
    build,
    golden_text,
    run_ps,
    server_startup_entries,
    slicer,
)

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-server-startup"
PASS = "ps-server-startup"


def entries(optimizer, endpoint):
    main, startup, _ = build(optimizer)
    server = lower(main)
    apply(server, slicer(), make_pass("ps-server-graph", endpoint=endpoint))
    return startup, server_startup_entries(server)


@pytest.mark.parametrize("optimizer, server", [("momentum", 1), ("adam", 0)])
def test_golden(optimizer, server):
    startup, blocks = entries(optimizer, EPS[server])
    before, after, stats = run_ps(startup, make_pass(PASS, blocks=blocks))
    check_golden(GOLDEN / f"mlp_{optimizer}_l2.server{server}.ir",
                 golden_text(PASS, before, after, stats))
    assert sorted(v.var.name for v in after.outputs) == sorted(b[0] for b in blocks)
    assert stats["blocks cut"] == sum(end >= 0 for _, _, _, end in blocks)
    if optimizer == "adam":  # fc_0.w_0.block0's beta powers: copies of the whole scalars
        assert stats["copies"] == 2
    # every initialiser stays (random ones keep their positions), each cut right after it
    assert [op.type for op in after.ops() if op.type not in ("split", "assign")] == \
        [op.type for op in before.ops()]


def test_declines_a_source_the_startup_does_not_initialise():
    _, startup, _ = build()
    before, after, stats = run_ps(startup, make_pass(PASS, blocks=[
        ["fc_0.w_0.block0", "fc_0.w_0", 0, 4], ["ghost.block0", "ghost", 0, 2]]))
    assert stats == {"blocks cut": 1,
                     "skipped: ghost: not initialised by the startup program": 1}
    assert [v.var.name for v in after.outputs] == ["fc_0.w_0.block0"]


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_blocks_equal_the_rows_of_a_local_init(optimizer):
    for ep in EPS:
        startup, blocks = entries(optimizer, ep)
        local, _ = run_graph(lower(startup))
        _, after, _ = run_ps(startup, make_pass(PASS, blocks=blocks))
        state, _ = run_graph(after)
        assert state.keys() == {b[0] for b in blocks}
        for name, source, start, end in blocks:
            want = local[source] if end < 0 else local[source][start:end]
            np.testing.assert_array_equal(state[name], want, err_msg=name)
