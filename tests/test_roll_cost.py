"""roll-repeated-layers' cost rule (issue 28, small28): optimizer updates that repeat alone
are left unrolled below ``min_update_only_ops``; layers with a carry still roll."""

from __future__ import annotations

import numpy as np
from pass_harness import run_pass

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph
from graphc.ir import program_guard, unique_name

PASS = "roll-repeated-layers"
ALONE = "skipped: only optimizer updates repeat"


def net(acts):
    """fc(4, act) per act on x[4], mean, Momentum: with distinct acts only the updates of
    the equal-shaped parameters repeat."""
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), unique_name.guard():
        h = layers.data("x", [4])
        for act in acts:
            h = layers.fc(h, 4, act=act)
        loss = layers.mean(h)
        optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def scans(graph) -> int:
    return sum(op.type == "scan_layers" for op in graph.ops())


def test_updates_repeating_alone_stay_unrolled():
    main, _, loss = net(["relu", "tanh", "sigmoid", "softsign", "relu", "tanh"])
    _, after, stats = run_pass(PASS, main, [loss.name])
    assert scans(after) == 0
    assert any(k.startswith(ALONE) for k in stats), stats
    # the rule alone declined them: without it the updates roll (one batched scan)
    _, rolled, stats0 = run_pass(PASS, main, [loss.name], min_update_only_ops=0)
    assert scans(rolled) >= 1 and not any(k.startswith(ALONE) for k in stats0)
    # past the bound they roll again
    _, big, _ = run_pass(PASS, main, [loss.name], min_update_only_ops=4)
    assert scans(big) >= 1


def test_layers_with_a_carry_still_roll_with_their_updates():
    main, startup, loss = net(["tanh"] * 5)
    before, after, stats = run_pass(PASS, main, [loss.name])
    assert scans(after) == 3 and not any(k.startswith(ALONE) for k in stats)  # fwd, bwd, opt
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {n: np.array(scope[n]) for n in scope.keys()}
    feed = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)}
    a = run_graph(before, state, feed, [resolve_fetch(before, loss.name)])[1]
    b = run_graph(after, state, feed, [resolve_fetch(after, loss.name)])[1]
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
