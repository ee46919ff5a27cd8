"""backward-optimizer-op-deps: golden IR (forced on one device, and on two devices), every
update after the last backward op, its two declines, and results unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pass_harness import golden_text

import graphc as fluid
from graphc import layers, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.ir import lower, program_guard, unique_name
from graphc.passes import PassManager, make_pass
from graphc.passes.infra.control_deps import depends
from graphc.testing import assert_same_results, check_golden

GOLDEN = Path(__file__).parent / "golden" / "backward-optimizer-op-deps"
PASS = "backward-optimizer-op-deps"


def net(opt=None, train=True):
    """x[3] -> fc(2, tanh) -> mean, minimised by ``opt`` (Momentum) when ``train``."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        loss = layers.mean(layers.fc(x, 2, act="tanh"))
        if train:
            (opt or optimizer.Momentum(0.1, 0.9)).minimize(loss)
    return main, startup, loss


def run(main, fetch, num_devices=1, **options):
    before, after = lower(main), lower(main)
    keep = [resolve_fetch(after, f) for f in fetch]
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(
        after, keep=keep, num_devices=num_devices)
    return before, after, report.stats()[PASS]


def test_golden():
    cases = {"momentum_forced": (None, 1, {"force": True}),
             "adam_two_devices": (optimizer.Adam(0.01), 2, {})}
    for case, (opt, devices, options) in cases.items():
        main, _, loss = net(opt)
        before, after, stats = run(main, [loss.name], devices, **options)
        check_golden(GOLDEN / f"{case}.ir", golden_text(PASS, before, after, stats))
        ops = after.ops()
        last = [op for op in ops if op.role == "backward"][-1]
        updates = [op for op in ops if op.role == "optimize"]
        assert updates and all(depends(after, op, last) for op in updates), case
        # the last backward op makes fc_0.w_0@GRAD: w's update reads it already, b's waits
        assert stats == {"dependencies added": 1}, case
        assert [v.name for v in after.op_inputs(updates[1]).get("_deps", [])] == \
            ["fc_0.w_0@GRAD"]
        assert max(i for i, op in enumerate(ops) if op.role == "backward") < \
            min(i for i, op in enumerate(ops) if op.role == "optimize")


def test_declines():
    main, _, loss = net()
    before, after, stats = run(main, [loss.name])
    assert stats == {"skipped: single device": 1}
    assert after.to_text() == before.to_text()
    forward, _, out = net(train=False)
    before, after, stats = run(forward, [out.name], force=True)
    assert stats == {"skipped: no backward or no optimizer ops": 1}
    assert after.to_text() == before.to_text()


def test_results_unchanged():
    for opt in (optimizer.SGD(0.1), optimizer.Adam(0.01)):
        main, startup, loss = net(opt)
        fetch = [loss.name, "fc_0.w_0@GRAD"]
        before, after, stats = run(main, fetch, force=True)
        assert stats["dependencies added"] > 0
        state, _ = run_graph(lower(startup))
        feeds = {"x": np.random.default_rng(0).normal(size=(4, 3)).astype("float32")}
        assert_same_results(before, after, state, feeds, fetch, rtol=0, atol=0)
