"""Shared by the data-parallel pass tests (data-parallel, all-reduce-deps, fuse-broadcast-ops):
a small seeded classifier, passes run for N devices, and the simulated-replica check."""

from __future__ import annotations

import numpy as np

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import resolve_fetch, run_graph, run_replicas
from graphc.fluid.clip import GradientClipByValue
from graphc.ir import lower
from graphc.passes import PassManager, make_pass

NRANKS = 4
OPTIMIZERS = {"sgd": lambda **kw: optimizer.SGD(0.5, **kw),
              "momentum": lambda **kw: optimizer.Momentum(0.2, 0.9, **kw),
              "adam": lambda **kw: optimizer.Adam(0.02, **kw),
              "lamb": lambda **kw: optimizer.Lamb(0.02, **kw)}


def classifier(opt: str | None = "sgd", clip: bool = False):
    """x[6] -> fc(5, relu) -> fc(3) -> softmax cross entropy, seeded: (main, startup, loss)."""
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 1
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = layers.data("x", [-1, 6], "float32")
        y = layers.data("y", [-1, 1], "int64")
        logits = layers.fc(layers.fc(x, 5, act="relu"), 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, y))
        if opt is not None:
            kw = {"grad_clip": GradientClipByValue(0.1)} if clip else {}
            OPTIMIZERS[opt](**kw).minimize(loss)
    return main, startup, loss


def feeds(batch: int = 8, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(batch, 6)).astype("float32"),
            "y": rng.integers(0, 3, (batch, 1)).astype("int64")}


def run_passes(main, fetch, *passes, num_devices: int = NRANKS):
    """(graph before the last pass, after it, the last pass's stats); earlier passes run on
    both graphs."""
    def apply(graph, ps):
        keep = [resolve_fetch(graph, f) for f in fetch]
        return PassManager(list(ps), verify_each=True).run(graph, keep=keep,
                                                           num_devices=num_devices)

    before, after = lower(main), lower(main)
    if passes[:-1]:
        apply(before, passes[:-1])
        apply(after, passes[:-1])
    report = apply(after, passes[-1:])
    return before, after, report.stats()[passes[-1].name]


def data_parallel(**options):
    return make_pass("data-parallel", nranks=NRANKS, **options)


def assert_replicas_agree(before, after, startup, fetch, rtol=0.0, atol=0.0):
    """Both graphs on NRANKS simulated replicas (the batch split among them) agree on every
    fetch and the new state."""
    state, _ = run_graph(lower(startup))
    want_state, want = run_replicas(before, state, feeds(), fetch, num_replicas=NRANKS)
    got_state, got = run_replicas(after, state, feeds(), fetch, num_replicas=NRANKS)
    for name, a, b in zip(fetch, got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=name)
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        np.testing.assert_allclose(got_state[name], want_state[name], rtol=rtol, atol=atol,
                                   err_msg=name)
