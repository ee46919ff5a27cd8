"""ps-server-graph: golden IR of each server (two trainers, sync), only its own blocks with
their cut optimizer state, its decline, and a server's update of two trainers' gradient
blocks equal to the rows of the local update on the whole batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ps_pass_harness import (
    EPS,
    build,
    feeds,
    golden_text,
    plan_of,
    run_ps,
    server_state,
    slicer,
)

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.passes.pserver.server_graph import SOURCE_KEY
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-server-graph"
PASS = "ps-server-graph"


@pytest.mark.parametrize("server", [0, 1])
def test_golden_two_trainers(server):
    main, _, _ = build()
    before, after, stats = run_ps(main, slicer(), make_pass(PASS, endpoint=EPS[server],
                                                            trainers=2))
    check_golden(GOLDEN / f"mlp_momentum_l2.server{server}.ir",
                 golden_text(PASS, before, after, stats))
    mine = [b for bs in plan_of(before).values() for b in bs if b[5] == EPS[server]]
    assert [op.type for op in after.ops()].count("momentum") == len(mine)
    feeds_ = sorted(v.var.name for v in after.inputs if v.var.kind == "feed")
    assert feeds_ == sorted(f"{b[2]}.trainer_{i}" for b in mine for i in (0, 1))
    # every new state variable says where its initial value comes from
    cut = {v.var.name: v.var.extra[SOURCE_KEY] for v in after.inputs
           if v.var.extra.get(SOURCE_KEY)}
    if server == 1:
        assert cut["fc_0.w_0.block1"] == ["fc_0.w_0", 4, 8]
        assert cut["fc_0.w_0_velocity_0.block1"] == ["fc_0.w_0_velocity_0", 4, 8]
    assert not {"mul", "tanh", "mean"} & set(after.stats())


def test_declines_a_server_without_blocks():
    main, _, _ = build()
    _, after, stats = run_ps(main, slicer(), make_pass(PASS, endpoint="10.0.0.9:1"))
    assert stats["skipped: this server owns no block"] == 1
    assert after.num_ops == 0 and not after.outputs


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_two_trainers_gradients_update_as_the_local_step(optimizer):
    main, startup, loss = build(optimizer)
    plain, _, _ = build(optimizer, l2=False)  # same names; its gradients are the backward's
    state, _ = run_graph(lower(startup))
    halves = [feeds(seed=1), feeds(seed=2)]
    names = [f"{p}@GRAD" for p in ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")]
    grads = [dict(zip(names, run_graph(lower(plain), state, h, names)[1])) for h in halves]
    whole = {k: np.concatenate([h[k] for h in halves]) for k in halves[0]}
    local, _ = run_graph(lower(main), state, whole)
    plan = plan_of(run_ps(main, slicer())[1])
    for ep in EPS:
        server, server_init = server_state(main, startup, ep, trainers=2)
        feed = {f"{b[2]}.trainer_{i}": grads[i][f"{p}@GRAD"][b[3]:b[4]]
                for p, bs in plan.items() for b in bs if b[5] == ep for i in (0, 1)}
        new, _ = run_graph(server, server_init, feed)
        for p, bs in plan.items():
            for b in bs:
                if b[5] == ep:
                    np.testing.assert_allclose(new[b[1]], local[p][b[3]:b[4]], rtol=1e-6,
                                               atol=1e-7, err_msg=b[1])
