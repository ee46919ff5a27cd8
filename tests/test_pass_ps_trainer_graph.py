"""ps-trainer-graph: golden IR (sync and async), the optimizer gone and one send / recv per
step, its decline, and one trainer step whose exchange is answered by the servers' graphs
(run in process) equal to the local step to the last bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ps_pass_harness import Servers, build, channel, feeds, golden_text, run_ps, slicer

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-trainer-graph"
PASS = "ps-trainer-graph"


@pytest.mark.parametrize("sync_mode", [True, False])
def test_golden(sync_mode):
    main, _, _ = build()
    before, after, stats = run_ps(main, slicer(), make_pass(PASS, sync_mode=sync_mode))
    mode = "sync" if sync_mode else "async"
    check_golden(GOLDEN / f"mlp_momentum_l2.{mode}.ir", golden_text(PASS, before, after, stats))
    # 4 momentum ops, 4 L2 decays (scale + sum each) leave for the servers with 4 velocities
    assert stats == {"split": 1, "send": 1, "recv": 1, "optimize ops moved to servers": 12,
                     "state left to servers": 4}
    types = [op.type for op in after.ops()]
    assert "momentum" not in types and not any(op.role == "optimize" and op.type == "scale"
                                               for op in after.ops())
    tail = types[types.index("send"):]
    barrier = ["send_barrier"] if sync_mode else []  # async: recv waits on the send alone
    assert tail == ["send", *barrier, "recv", "fetch_barrier"] + ["concat"] * 4
    (send,) = [op for op in after.ops() if op.type == "send"]
    assert send.attrs["varnames"] == ["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1",
                                      "fc_0.b_0@GRAD", "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"]
    assert not any("velocity" in v.var.name for v in after.inputs)


def test_declines_without_optimizer():
    forward, _, _ = build(None)
    before, after, stats = run_ps(forward, slicer(), make_pass(PASS))
    assert stats == {"skipped: no optimizer ops: nothing to send": 1}
    assert after.to_text() == before.to_text()


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_a_step_through_the_servers_equals_the_local_step(optimizer):
    main, startup, loss = build(optimizer)
    _, after, _ = run_ps(main, slicer(), make_pass(PASS))
    state, _ = run_graph(lower(startup))
    want_state, (want,) = run_graph(lower(main), state, feeds(), [loss.name])
    servers = Servers(main, startup)
    with channel(servers):
        got_state, (got,) = run_graph(after, state, feeds(), [loss.name])
    assert servers.calls == ["send", "send_barrier", "recv", "fetch_barrier"]
    np.testing.assert_array_equal(got, want)
    params = {"fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"}
    assert params <= got_state.keys()
    for name in params:  # the servers' updated blocks, concatenated: the local update
        np.testing.assert_allclose(got_state[name], want_state[name], rtol=0, atol=1e-7,
                                   err_msg=name)
