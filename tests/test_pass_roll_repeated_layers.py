"""roll-repeated-layers: golden IR (a forward stack rolled into one scan, a Momentum stack
with per-name state and its optimizer left unrolled), declines with their reasons, and the
interpreter's results bit for bit the same with and without the scan."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pass_harness import golden_text, run_pass

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.ir.text import parse
from graphc.passes import PassManager, make_pass
from graphc.testing import assert_same_results, check_golden

GOLDEN = Path(__file__).parent / "golden" / "roll-repeated-layers"
PASS = "roll-repeated-layers"


def stack(k: int, act: str = "tanh", train: bool = True, dropout: bool = False):
    """(main, startup, loss): k x fc(3, act) on x[3], mean, Momentum when ``train``."""
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), unique_name.guard():
        h = layers.data("x", [3])
        for _ in range(k):
            h = layers.fc(h, 3, act=act)
            if dropout:
                h = layers.dropout(h, 0.5)
        loss = layers.mean(h)
        if train:
            optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def scan_ops(graph):
    return [op for op in graph.ops() if op.type == "scan_layers"]


def test_golden_forward_stack():
    main, _, loss = stack(4, train=False)
    before, after, stats = run_pass(PASS, main, [loss.name])
    check_golden(GOLDEN / "fc4_tanh_forward.ir", golden_text(PASS, before, after, stats))
    assert stats["rolled runs"] == 1 and stats["rolled layers"] == 4
    (scan,) = scan_ops(after)
    assert scan.attrs["iterations"] == 4
    body = parse(scan.attrs["body"]).verify()
    assert sorted(body.stats().items()) == [("elementwise_add", 1), ("mul", 1), ("tanh", 1)]
    # the parameters live stacked ([4, ...] per family): no stack op is left in the step
    assert after.stats() == {"scan_layers": 1, "mean": 1}
    assert stats["stacked state families"] == 2
    assert parse(after.to_text()).structurally_equal(after)


def test_golden_momentum_stack_without_optimizer_rolling():
    main, _, loss = stack(5)
    before, after, stats = run_pass(PASS, main, [loss.name], roll_optimizer=False,
                                    stack_state=False)
    check_golden(GOLDEN / "fc5_momentum_optimizer_unrolled.ir",
                 golden_text(PASS, before, after, stats))
    assert stats["rolled runs"] == 2  # forward and backward
    assert stats["skipped: optimizer ops are not rolled (roll_optimizer=false)"] >= 1
    assert after.stats()["momentum"] == 10  # every parameter's update stays its own op
    assert "stacked state families" not in stats
    assert all(not v.var.extra.get("stack_of") for v in after.outputs)


def test_declines_with_reasons():
    main, _, loss = stack(2, train=False)  # 7 ops: not 2 x min_repeats
    before, after, stats = run_pass(PASS, main, [loss.name])
    assert stats == {"skipped: graph too small to hold repeated layers": 1}
    assert after.to_text() == before.to_text()
    dropout = "skipped: layer has a random op (dropout: per-layer seeds differ)"
    main, _, loss = stack(5, train=False, dropout=True)
    before, after, stats = run_pass(PASS, main, [loss.name])
    assert stats == {dropout: 1} and after.to_text() == before.to_text()
    # backward-optimizer-op-deps first: the updates wait on control dependencies, so the
    # optimizer run is declined while forward and backward still roll
    main, _, loss = stack(5)
    graph = lower(main)
    report = PassManager([make_pass("backward-optimizer-op-deps", force=True), make_pass(PASS)],
                         verify_each=True).run(graph, keep=[resolve_fetch(graph, loss.name)])
    stats = report.stats()[PASS]
    assert stats["skipped: layer op has control dependencies"] >= 1
    assert stats["rolled runs"] == 2 and graph.stats()["momentum"] == 10


def test_interpreter_results_are_bit_exact():
    for k, train, options in ((4, False, {}), (5, True, {}),
                              (5, True, {"roll_optimizer": False, "stack_state": False})):
        main, startup, loss = stack(k, train=train)
        fetch = [loss.name, "fc_1.w_0@GRAD"] if train else [loss.name]
        before, after, stats = run_pass(PASS, main, fetch, **options)
        assert stats["rolled runs"] >= 1
        state, _ = run_graph(lower(startup))
        feeds = {"x": np.random.default_rng(k).uniform(-1, 1, (5, 3)).astype("float32")}
        assert_same_results(before, after, state, feeds, fetch, rtol=0, atol=0)


def test_resnet50_with_l2_decay_rolls_and_keeps_results():
    """ResNet-50's bottleneck stages with Momentum + L2Decay: folding one stack into a slice
    of another erased a stack that a later fold still read ('... .stack is not a value of
    this graph', found porting PaddleCV's image_classification). Small widths and images."""
    from graphc.build.regularizer import L2Decay
    from graphc.tools import models

    model = models.resnet(50, num_classes=4, image_shape=(3, 16, 16), base_width=2)
    with program_guard(model.main, model.startup), unique_name.guard("opt_"):
        optimizer.Momentum(0.01, 0.9, regularization=L2Decay(1e-4)).minimize(model.loss)
    before, after, stats = run_pass(PASS, model.main, [model.loss.name])
    assert stats["rolled runs"] >= 1 and stats.get("stacks folded", 0) >= 1, stats
    state, _ = run_graph(lower(model.startup))
    rng = np.random.default_rng(0)
    feeds = {v.name: (rng.standard_normal((2, *v.shape[1:])).astype(v.dtype)
                      if v.dtype == "float32" else
                      rng.integers(0, 4, (2, *v.shape[1:])).astype(v.dtype))
             for v in model.feeds}
    assert_same_results(before, after, state, feeds, [model.loss.name], rtol=0, atol=0)
