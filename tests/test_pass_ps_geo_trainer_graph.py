"""ps-geo-trainer-graph: golden IR (the whole step kept, one geo_sgd_exchange after the last
update), its decline, and a step whose exchange hands back what it was given computing
exactly the local step, the exchange seeing each parameter before and after the update."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ps_pass_harness import build, channel, feeds, golden_text, run_ps, slicer

from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-geo-trainer-graph"
PASS = "ps-geo-trainer-graph"
PARAMS = ["fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"]


def geo(**options):
    return make_pass(PASS, trainers=2, push_nums=5, **options)


def test_golden():
    main, _, _ = build("sgd")
    before, after, stats = run_ps(main, slicer(), geo(trainer_id=1))
    check_golden(GOLDEN / "mlp_sgd_l2.trainer1.ir", golden_text(PASS, before, after, stats))
    assert stats == {"parameters exchanged": 4}
    ops = after.ops()
    assert [op.type for op in ops[:-1]] == [op.type for op in before.ops()]  # step kept
    exchange = ops[-1]
    assert exchange.type == "geo_sgd_exchange" and exchange.role == "optimize"
    assert exchange.attrs["params"] == PARAMS and exchange.attrs["counts"] == [2, 1, 1, 1]
    assert exchange.attrs["blocks"] == ["fc_0.w_0.block0", "fc_0.w_0.block1", "fc_0.b_0",
                                        "fc_1.w_0", "fc_1.b_0"]
    assert exchange.attrs["starts"] == [0, 4, 0, 0, 0] and exchange.attrs["ends"] == [4, 8, 8,
                                                                                        8, 1]
    assert (exchange.attrs["push_nums"], exchange.attrs["trainer_id"]) == (5, 1)
    # the exchange's results are the parameters' final values
    assert [v.name for v in after.outputs[:4]] == [v.name for v in exchange.outputs["Out"]]


def test_declines_without_optimizer():
    forward, _, _ = build(None)
    before, after, stats = run_ps(forward, slicer(), geo())
    assert stats == {"skipped: no optimizer ops: nothing to exchange": 1}
    assert after.to_text() == before.to_text()


class Echo:
    """A GEO channel that records what it is given and answers the updated parameters (a
    step on which nothing is pushed)."""

    def geo_exchange(self, spec, olds, xs):
        self.spec, self.olds, self.xs = spec, olds, xs
        return xs


def test_a_step_equals_the_local_step():
    main, startup, loss = build("momentum")
    _, after, _ = run_ps(main, slicer(), geo())
    state, _ = run_graph(lower(startup))
    want_state, (want,) = run_graph(lower(main), state, feeds(), [loss.name])
    with channel(Echo()) as echo:
        got_state, (got,) = run_graph(after, state, feeds(), [loss.name])
    np.testing.assert_array_equal(got, want)
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        np.testing.assert_array_equal(got_state[name], want_state[name], err_msg=name)
    assert echo.spec["params"] == PARAMS and echo.spec["push_nums"] == 5
    for i, name in enumerate(PARAMS):
        np.testing.assert_array_equal(echo.olds[i], state[name])
        np.testing.assert_array_equal(echo.xs[i], want_state[name])
