"""ps-trainer-startup: golden IR of a trainer's startup graph (initialisers, then recv of
every block, one fetch_barrier, a concat per parameter), its decline, and a trainer starting
from the servers' blocks with exactly the parameters of a local startup run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ps_pass_harness import (
    Servers,
    build,
    channel,
    golden_text,
    plan_of,
    run_ps,
    slicer,
)

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-trainer-startup"
PASS = "ps-trainer-startup"


def params_of(main):
    """The pass's ``params`` option as the transpiler makes it from the plan."""
    return [[name, [[b[1], b[5], b[4] - b[3]] for b in blocks]]
            for name, blocks in plan_of(run_ps(main, slicer())[1]).items()]


def test_golden():
    main, startup, _ = build()
    before, after, stats = run_ps(startup, make_pass(PASS, params=params_of(main),
                                                     trainer_id=1))
    check_golden(GOLDEN / "mlp_momentum_l2.trainer1.ir", golden_text(PASS, before, after, stats))
    assert stats == {"recv": 4}
    types = [op.type for op in after.ops()]
    assert types[:before.num_ops] == [op.type for op in before.ops()]
    assert types[before.num_ops:] == ["recv"] * 4 + ["fetch_barrier"] + ["concat"] * 4
    assert all(op.attrs["initial"] and op.attrs["trainer_id"] == 1
               for op in after.ops() if op.type == "recv")


def test_declines_a_parameter_the_startup_does_not_initialise():
    main, startup, _ = build()
    params = [*params_of(main)[:1], ["ghost", [["ghost", "127.0.0.1:6170", 3]]]]
    _, after, stats = run_ps(startup, make_pass(PASS, params=params))
    assert stats == {"recv": 1, "skipped: ghost: not initialised by the startup program": 1}
    before, after, stats = run_ps(startup, make_pass(PASS))  # nothing to pull
    assert stats == {} and after.to_text() == before.to_text()


def test_a_trainer_starts_from_the_servers_blocks_as_a_local_run():
    main, startup, _ = build()
    local, _ = run_graph(lower(startup))
    _, after, _ = run_ps(startup, make_pass(PASS, params=params_of(main)))
    servers = Servers(main, startup)
    with channel(servers):
        state, _ = run_graph(after)
    assert servers.calls == ["fetch_barrier"]  # initial blocks need no step
    assert state.keys() == local.keys()
    for name in local:
        np.testing.assert_array_equal(state[name], local[name], err_msg=name)
