"""hierarchical_allreduce_inter_nranks that forms no groups (the seeds' 8 on a 4-device job)
falls back to a flat all-reduce as docs/strategies.md promises: the pass declines with its
reason, the step's mesh is flat, and training equals the flat all-reduce's exactly."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.io import DataLoader

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph, run_replicas
from graphc.backends.lowering import replica_groups
from graphc.ir import lower
from graphc.passes import PassManager, make_pass

N, STEPS, BATCH = 4, 3, 16


def build():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 6], "float32")
        y = layers.data("y", [-1, 1], "int64")
        logits = layers.fc(layers.fc(x, 8, act="relu"), 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        optimizer.Momentum(0.2, 0.9).minimize(loss)
    return main, startup, x, y, loss


def batches():
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(size=(BATCH, 6)).astype("float32"),
             "y": rng.integers(0, 3, (BATCH, 1)).astype("int64")} for _ in range(STEPS)]


def train(inter: int | None, loader: bool = False):
    """(losses, params, report stats, step's replicas) on N devices; inter None: flat."""
    main, startup, x, y, loss = build()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    bs = graphc.BuildStrategy()
    if inter is not None:
        bs.use_hierarchical_allreduce = True
        bs.hierarchical_allreduce_inter_nranks = inter
    cp = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(N))
    feeds = batches()
    if loader:  # the DataLoader places batches with the step's feed sharding, ahead of it
        dl = DataLoader.from_generator(feed_list=[x, y], capacity=2)
        dl.set_batch_generator(lambda: iter([(f["x"], f["y"]) for f in feeds]), places=cp)
        feeds = list(dl())
    losses = [exe.run(cp, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
    params = {p.name: np.asarray(scope[p.name]) for p in main.global_block().all_parameters()}
    step = exe.compile(cp, feed=batches()[0], fetch_list=[loss])
    return losses, params, cp.last_report.stats().get("hierarchical-allreduce", {}), step


def assert_same(got, want):
    for a, b in zip(got[0], want[0]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert got[1].keys() == want[1].keys()
    for name in want[1]:
        np.testing.assert_allclose(got[1][name], want[1][name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


@pytest.mark.parametrize("inter", [8, 3])
def test_group_size_that_forms_no_groups_trains_as_flat(inter):
    want = train(None)
    got = train(inter)
    assert_same(got, want)
    assert len(got[0]) == STEPS and all(np.isfinite(v).all() for v in got[0])
    reason = ("inter_nranks=8 is more than nranks=4: no group can form, the all-reduce "
              "stays flat" if inter == 8 else "nranks=4 is not divisible by inter_nranks=3")
    assert got[2] == {f"skipped: {reason}": 4}  # one per parameter's all-reduce
    step = got[3]
    assert step.replicas.local == N and step.mesh.devices.shape == (1, N)


def test_fallback_with_the_dataloader_placing_feeds():
    assert_same(train(8, loader=True), train(None))


def test_a_group_size_that_forms_groups_still_does():
    step = train(2)[3]
    assert step.replicas.local == 2 and step.mesh.devices.shape == (2, 2)


def test_replica_groups():
    assert [replica_groups(4, k) for k in (0, 1, 2, 3, 4, 8)] == [None, None, 2, None, None,
                                                                   None]
    assert replica_groups(8, 4) == 4


def test_interpreter_falls_back_too():
    main, startup, _, _, loss = build()
    graph = lower(main)
    PassManager([make_pass("data-parallel", nranks=N),
                 make_pass("hierarchical-allreduce", inter_nranks=8)]).run(
        graph, keep=[graph.latest(loss.name)])
    state, _ = run_graph(lower(startup))
    feed = batches()[0]
    want = run_replicas(graph, state, feed, [loss.name], num_replicas=N)
    got = run_replicas(graph, state, feed, [loss.name], num_replicas=N, inter_nranks=8)
    np.testing.assert_array_equal(got[1][0], want[1][0])
    for name in want[0]:
        np.testing.assert_array_equal(got[0][name], want[0][name])
