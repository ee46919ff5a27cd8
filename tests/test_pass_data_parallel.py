"""data-parallel: golden IR (Adam all-reduced, Adam sharded ZeRO-1 style), its declines with
reasons (one replica, inference, and reduce-mode optimizers it all-reduces instead), and N
simulated replicas equal to one device on the whole batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dp_pass_harness import NRANKS, classifier, data_parallel, feeds, run_passes
from pass_harness import golden_text

from graphc.backends.interpreter import run_graph, run_replicas
from graphc.ir import lower
from graphc.ir.text import parse
from graphc.passes import make_pass
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "data-parallel"
PASS = "data-parallel"


@pytest.mark.parametrize("mode", ["all_reduce", "reduce"])
def test_golden_adam(mode):
    main, _, loss = classifier("adam")
    before, after, stats = run_passes(main, [loss.name], data_parallel(mode=mode))
    check_golden(GOLDEN / f"classifier_adam_{mode}.ir", golden_text(PASS, before, after, stats))
    if mode == "all_reduce":
        assert stats == {"all_reduce": 4} and after.stats()["c_allreduce"] == 4
    else:
        # 4 parameters; each has two moments of its shape (sharded) and two scalar beta
        # powers (kept whole)
        assert stats == {"sharded optimizer ops": 4, "sharded state": 8}
        assert after.stats()["c_reduce_scatter"] == after.stats()["c_allgather"] == 4
        sharded = {v.var.name for v in after.inputs if v.var.shard is not None}
        assert sharded == {f"fc_{i}.{p}_0_moment{m}_0" for i in (0, 1) for p in "wb"
                           for m in (1, 2)}
    assert parse(after.to_text()).structurally_equal(after)


def test_declines_with_reasons():
    main, _, loss = classifier("sgd")
    before, after, stats = run_passes(main, [loss.name], data_parallel(), num_devices=1)
    assert stats == {"all_reduce": 4}  # nranks given explicitly wins over the device count
    before, after, stats = run_passes(main, [loss.name], make_pass(PASS), num_devices=1)
    assert stats == {"skipped: one replica: nothing to exchange": 1}
    assert after.to_text() == before.to_text()
    forward, _, out = classifier(None)
    _, after, stats = run_passes(forward, [out.name], data_parallel())
    assert stats == {"skipped: no optimizer ops (inference: replicas run independently)": 1}
    lamb, _, loss = classifier("lamb")
    _, after, stats = run_passes(lamb, [loss.name], data_parallel(mode="reduce"))
    assert stats == {"all_reduce": 4, "skipped: lamb: its update reads norms of the whole "
                     "parameter, so a shard's update is not a shard of the update; all-reduced "
                     "instead": 4}
    clipped, _, loss = classifier("sgd", clip=True)
    _, after, stats = run_passes(clipped, [loss.name], data_parallel(mode="reduce"))
    assert stats == {"all_reduce": 4, "skipped: sgd: its gradient passes clip after backward "
                     "(clipping); all-reduced instead": 4}
    assert "c_reduce_scatter" not in after.stats()


@pytest.mark.parametrize("opt, mode, clip", [("adam", "all_reduce", False),
                                             ("adam", "reduce", False),
                                             ("momentum", "reduce", False),
                                             ("sgd", "reduce", True)])
def test_replicas_equal_one_device_on_the_whole_batch(opt, mode, clip):
    main, startup, loss = classifier(opt, clip)
    before, after, _ = run_passes(main, [loss.name], data_parallel(mode=mode))
    state, _ = run_graph(lower(startup))
    want_state, (want,) = run_graph(before, state, feeds(), [loss.name])
    got_state, (got,) = run_replicas(after, state, feeds(), [loss.name], num_replicas=NRANKS)
    assert got.shape == (NRANKS,)
    np.testing.assert_allclose(got.mean(), want.reshape(()), rtol=1e-5, atol=1e-6)
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        np.testing.assert_allclose(got_state[name], want_state[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
