"""hierarchical-allreduce: golden IR, declines with reasons, and on 8 CPU devices groups of 2
and 4 train exactly as the flat all-reduce (1e-6), also with sync_batch_norm."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from pass_harness import golden_text

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph, run_replicas
from graphc.ir import lower
from graphc.passes import PassManager, make_pass, parse_pipeline
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "hierarchical-allreduce"
PASS = "hierarchical-allreduce"
N, STEPS, BATCH = 8, 3, 32


def build_mlp(bn: bool = False):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 1
        x = layers.data("x", [-1, 8], "float32")
        y = layers.data("y", [-1, 1], "int64")
        h = layers.fc(x, 16, act="relu")
        if bn:
            h = layers.batch_norm(h)
        logits = layers.fc(h, 4)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        optimizer.Momentum(0.2, 0.9).minimize(loss)
    return main, startup, loss


def batches(steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(123).normal(size=(8, 4))
    out = []
    for _ in range(steps):
        x = rng.normal(size=(BATCH, 8)).astype("float32")
        out.append({"x": x, "y": np.argmax(x @ w, axis=1)[:, None].astype("int64")})
    return out


def dp_graph(nranks=N, fused=False):
    """(graph after data-parallel [+ fuse-all-reduce-ops], startup, loss)."""
    main, startup, loss = build_mlp()
    graph = lower(main)
    passes = [make_pass("data-parallel", nranks=nranks)]
    if fused:
        passes.append(make_pass("fuse-all-reduce-ops"))
    PassManager(passes, verify_each=True).run(graph, keep=[graph.latest(loss.name)])
    return graph, startup, loss


def run(graph, loss, **options):
    before = graph.to_text()
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(
        graph, keep=[graph.latest(loss.name)])
    return before, report.stats()[PASS]


@pytest.mark.parametrize("inter", [2, 4])
def test_golden(inter):
    graph, _, loss = dp_graph()
    before = graph.to_text()
    report = PassManager([make_pass(PASS, inter_nranks=inter)], verify_each=True).run(
        graph, keep=[graph.latest(loss.name)])
    stats = report.stats()[PASS]
    check_golden(GOLDEN / f"mlp_inter{inter}.ir",
                 golden_text(PASS, _Text(before), graph, stats))
    assert stats == {"hierarchical": 4}
    assert all(op.attrs["inter_nranks"] == inter for op in graph.ops()
               if op.type == "c_allreduce")


class _Text:
    """A graph's text taken before the pass ran (golden_text prints ``.to_text()``)."""

    def __init__(self, text):
        self.text = text

    def to_text(self):
        return self.text


def test_fused_buckets_become_hierarchical():
    graph, _, loss = dp_graph(fused=True)
    _, stats = run(graph, loss, inter_nranks=2)
    fused = [op for op in graph.ops() if op.type == "c_fused_allreduce"]
    assert fused and stats == {"hierarchical": len(fused)}
    assert all(op.attrs["inter_nranks"] == 2 for op in fused)


@pytest.mark.parametrize("inter, nranks, reason", [
    (0, 8, "inter_nranks=0: groups of one are a flat all-reduce"),
    (1, 8, "inter_nranks=1: groups of one are a flat all-reduce"),
    (8, 8, "inter_nranks=8 equals nranks: one group is a flat all-reduce"),
    (3, 8, "nranks=8 is not divisible by inter_nranks=3"),
    (4, 6, "nranks=6 is not divisible by inter_nranks=4"),
])
def test_declines_with_reasons(inter, nranks, reason):
    graph, _, loss = dp_graph(nranks)
    before, stats = run(graph, loss, inter_nranks=inter)
    assert stats == {f"skipped: {reason}": 4}
    assert graph.to_text() == before


def test_declines_without_all_reduce_and_round_trips():
    main, _, loss = build_mlp()
    graph = lower(main)
    _, stats = run(graph, loss, inter_nranks=2)
    assert stats == {"skipped: no all-reduce ops": 1}
    p = make_pass(PASS, inter_nranks=4)
    assert str(p) == "hierarchical-allreduce{inter_nranks=4}"
    assert parse_pipeline(str(p)) == [p]


def test_interpreter_sum_is_unchanged():
    """The reference meaning of a hierarchical all-reduce is the flat one."""
    graph, startup, loss = dp_graph(4)
    state, _ = run_graph(lower(startup))
    feed = batches(1)[0]
    want = run_replicas(graph, state, feed, [loss.name], num_replicas=4)
    run(graph, loss, inter_nranks=2)
    got = run_replicas(graph, state, feed, [loss.name], num_replicas=4, inter_nranks=2)
    np.testing.assert_allclose(got[1][0], want[1][0], rtol=1e-6, atol=1e-7)
    for name in want[0]:
        np.testing.assert_allclose(got[0][name], want[0][name], rtol=1e-6, atol=1e-7)


@functools.cache
def train(inter: int, bn: bool = False, fuse: bool = False):
    main, startup, loss = build_mlp(bn)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    bs = graphc.BuildStrategy(sync_batch_norm=bn, fuse_all_reduce_ops=fuse)
    if inter:
        bs.use_hierarchical_allreduce = True
        bs.hierarchical_allreduce_inter_nranks = inter
    cp = graphc.CompiledProgram(main, build_strategy=bs).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(N))
    losses = [exe.run(cp, feed=f, fetch_list=[loss], scope=scope)[0] for f in batches()]
    params = {v.name: np.asarray(scope[v.name]) for v in main.global_block().vars.values()
              if v.persistable and v.name in scope}
    graph = cp.graph(fetch_list=[loss])
    inters = {op.attrs["inter_nranks"] for op in graph.ops()
              if op.type in ("c_allreduce", "c_fused_allreduce")}
    return losses, params, graph.stats(), inters


@pytest.mark.parametrize("bn, fuse", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("inter", [2, 4])
def test_hierarchical_equals_flat_on_8_devices(inter, bn, fuse):
    want_losses, want_params, flat_ops, flat_inters = train(0, bn, fuse)
    losses, params, ops, inters = train(inter, bn, fuse)
    assert flat_inters == {0} and inters == {inter}
    for a, b in zip(losses, want_losses):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert params.keys() == want_params.keys()
    for name in want_params:
        np.testing.assert_allclose(params[name], want_params[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    assert ops == flat_ops  # same ops; only the all-reduces' attribute differs
