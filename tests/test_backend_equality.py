"""The compiled JAX step computes what the op-by-op interpreter computes: on every layer
kind and on random programs, forward and after one training step."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as fluid
from graphc import optimizer
from graphc.backends.interpreter import run_graph
from graphc.testing import STEP_NAMES, feeds_for, random_programs

# Examples per property: bounded in CI (each example compiles one XLA program).
SCALE = 1 if os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci" else 4


def tolerance(arr) -> dict:
    if arr.dtype == np.float64:
        return {"rtol": 1e-9, "atol": 1e-9}
    return {"rtol": 2e-5, "atol": 2e-5}  # XLA fuses and reorders float32 arithmetic


def compare(gen, fetch, seed=0, batch=3):
    """Run startup, then main with both backends from the same state; compare everything."""
    state, _ = run_graph(gen.startup_graph())
    feeds = feeds_for(gen, batch, seed)
    graph = gen.graph()
    want_state, want = run_graph(graph, state, feeds, fetch)
    scope = fluid.Scope()
    for name, value in state.items():
        scope[name] = value
    got = fluid.Executor().run(gen.main, feed=feeds, fetch_list=fetch, scope=scope)
    for name, a, b in zip(fetch, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_allclose(a, b, err_msg=name, **tolerance(b))
    for name, b in want_state.items():
        np.testing.assert_allclose(scope[name], b, err_msg=name, **tolerance(b))
    return got


@pytest.mark.parametrize("step", STEP_NAMES)
def test_every_layer_kind(step):
    @settings(max_examples=2 * SCALE)
    @given(random_programs(max_ops=2, steps=[step], with_loss=False))
    def check(gen):
        compare(gen, gen.fetch)

    check()


@settings(max_examples=12 * SCALE)
@given(random_programs(max_ops=6), st.integers(0, 3))
def test_random_programs_forward(gen, seed):
    compare(gen, gen.fetch, seed)


@settings(max_examples=8 * SCALE)
@given(random_programs(max_ops=5, with_loss=True),
       st.sampled_from(["sgd", "momentum", "adam"]))
def test_random_programs_training_step(gen, opt_name):
    opt = {"sgd": optimizer.SGD(0.1), "momentum": optimizer.Momentum(0.1, 0.9),
           # epsilon 1e-4: a loss whose true gradient is zero (the mean of a softmax) leaves
           # rounding noise of ~1e-9, which Adam's default 1e-8 would scale up to a full
           # step whose sign differs between backends
           "adam": optimizer.Adam(0.01, epsilon=1e-4)}[opt_name]
    with fluid.program_guard(gen.main, gen.startup):
        _, params_grads = opt.minimize(gen.main.global_block().var(gen.loss))
    fetch = [gen.loss] + [g.name for _, g in params_grads]
    compare(gen, fetch)
