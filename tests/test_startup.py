"""Grouped startup (runtime/startup.py): a startup program run by kind of initialiser gives
exactly the values, bit for bit, of the one-XLA-computation path for the same seeds."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from graphc.initializer import Constant, Normal, Uniform
from graphc.models import resnet

import graphc
from graphc import layers
from graphc.backends.lowering import apply_rule
from graphc.backends.precision import graphc_x64
from graphc.ir.types import TensorType
from graphc.runtime import startup as startup_mod
from graphc.runtime.startup import use_grouped_startup
from graphc.runtime.startup_draws import draw_random, flat_draws_supported


def _deep(n: int, seed: int, width: int = 8):
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = seed
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        x = graphc.data("x", [-1, width], "float32")
        y = graphc.data("y", [-1, 1], "float32")
        h = x
        for _ in range(n):
            h = layers.fc(h, width, act="relu")
        loss = layers.mean(layers.square_error_cost(layers.fc(h, 1), y))
        graphc.optimizer.SGD(0.01).minimize(loss)
    return main, start


def _both_ways(start, runs: int = 1, grouped_expected: bool = True):
    """The scopes after ``runs`` runs of ``start`` grouped and as one computation."""
    exe = graphc.Executor()
    scopes = []
    for grouped in (True, False):
        scope = graphc.Scope()
        with use_grouped_startup(grouped):
            for _ in range(runs):
                exe.run(start, scope=scope)
        scopes.append(scope)
    prep = exe._prepare(start)
    assert (getattr(prep, "startup_plan", None) is not None) == grouped_expected
    return scopes


def _assert_same(a: graphc.Scope, b: graphc.Scope) -> None:
    assert sorted(a._vars) == sorted(b._vars)
    for name in a._vars:
        x, y = np.asarray(a._vars[name]), np.asarray(b._vars[name])
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), f"{name} differs"


@pytest.mark.parametrize("seed", [0, 7])
def test_deep_fc_startup_bitwise_equal(seed):
    _, start = _deep(60, seed)
    grouped, whole = _both_ways(start)
    _assert_same(grouped, whole)
    # the draws are really random and differ between layers
    w1, w2 = (np.asarray(grouped._vars[f"fc_{i}.w_0"]) for i in (1, 2))
    assert not np.array_equal(w1, w2) and np.all(np.abs(w1) <= np.sqrt(6 / 16))


def test_tiny_resnet_startup_bitwise_equal():
    """Normal (conv), Uniform (fc), Constant (batch norm, Momentum's velocities)."""
    model = resnet(18, num_classes=4, image_shape=(3, 8, 8), base_width=2)
    model.main.random_seed = model.startup.random_seed = 3
    with graphc.program_guard(model.main, model.startup):
        graphc.optimizer.Momentum(0.1, 0.9).minimize(model.loss)
    grouped, whole = _both_ways(model.startup)
    _assert_same(grouped, whole)


def test_explicit_initialisers_seeds_and_second_run():
    """Own seeds, mean/std/min/max, float64 and int32 fills, size-0 and scalar-like shapes;
    a second run draws new numbers (the run counter), as the one computation does."""
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        block = main.global_block()
        specs = [("a", [3, 5], "float32", Normal(0.5, 2.0, seed=11)),
                 ("b", [7], "float32", Normal(-1.0, 0.1)),
                 ("c", [4, 2], "float32", Uniform(-2.0, 3.0, seed=5)),
                 ("d", [1], "float32", Uniform(0.0, 1e-3)),
                 ("e", [2, 3], "float64", Normal(0.0, 1.0)),
                 ("f", [6], "float64", Uniform(-1.0, 1.0)),
                 ("g", [0, 4], "float32", Normal(0.0, 1.0)),
                 ("h", [5], "int32", Constant(3.0)),
                 ("i", [2, 2], "float32", Constant(-0.0)),
                 ("j", [2, 2], "float32", Constant(0.0))]
        for name, shape, dtype, init in specs:
            block.create_parameter(name, shape, dtype)
            init(start.global_block().create_var(name, shape, dtype, persistable=True),
                 start.global_block())
    grouped, whole = _both_ways(start, runs=2)
    _assert_same(grouped, whole)
    assert np.signbit(np.asarray(grouped._vars["i"])).all()
    assert not np.signbit(np.asarray(grouped._vars["j"])).any()
    once = graphc.Scope()
    graphc.Executor().run(start, scope=once)
    assert not np.array_equal(np.asarray(once._vars["a"]), np.asarray(grouped._vars["a"]))


def test_other_ops_run_after_the_groups_in_order():
    """A startup program with ops that are not initialisers: a scale of an initialised
    parameter, and a variable overwritten by a later initialiser (SSA versions)."""
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        sb = start.global_block()
        w = sb.create_var("w", [4, 3], "float32", persistable=True)
        Normal(0.0, 1.0)(w, sb)
        w2 = sb.create_var("w2", [4, 3], "float32", persistable=True)
        sb.append_op("scale", inputs={"X": w}, outputs={"Out": w2},
                     attrs={"scale": 3.0, "bias": 0.5})
        u = sb.create_var("u", [5], "float32", persistable=True)
        Uniform(-3.0, 3.0)(u, sb)
        sb.append_op("assign", inputs={"X": u},
                     outputs={"Out": sb.create_var("u2", [5], "float32", persistable=True)})
        Uniform(-1.0, 1.0)(w, sb)  # w is initialised again after w2 read it
        for i in range(4):
            Constant(float(i))(sb.create_var(f"k{i}", [2], "float32", persistable=True), sb)
    grouped, whole = _both_ways(start)
    _assert_same(grouped, whole)
    plan = graphc.Executor()._prepare(start)
    with graphc_x64():
        plan = startup_mod._plan(plan.graph)
    # the gaussian the scale computes with stays in its computation (the same XLA folding)
    assert [op.type for op in plan.rest] == ["gaussian_random", "scale", "assign"]


def test_a_main_program_without_feeds_is_not_grouped():
    """Most of its ops are not initialisers: the executor runs it as a step."""
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        x = layers.fill_constant([2, 2], "float32", 1.0)
        y = layers.scale(layers.relu(layers.scale(x, 2.0)), 3.0)
        layers.assign(y, main.global_block().create_var("out", [2, 2], "float32",
                                                        persistable=True))
    exe = graphc.Executor()
    scope = graphc.Scope()
    exe.run(main, scope=scope)
    assert exe._prepare(main).startup_plan.grouped <= len(exe._prepare(main).startup_plan.rest)
    np.testing.assert_array_equal(np.asarray(scope._vars["out"]), np.full((2, 2), 6.0))


@pytest.mark.skipif(not flat_draws_supported(), reason="JAX's threefry is not partitionable")
@pytest.mark.parametrize("shape", [(8, 8), (3, 1, 5, 5), (1025,)])
@pytest.mark.parametrize("kind, attrs", [
    ("uniform_random", {"min": -0.3, "max": 0.7}),  # max - min == 1: XLA folds constants
    ("uniform_random", {"min": -0.25, "max": 0.5}),
    ("gaussian_random", {"mean": 0.25, "std": 0.05}),
    ("gaussian_random", {"mean": 0.0, "std": 1.0})])
def test_flat_draw_equals_compiled_rule(kind, attrs, shape):
    """Each op's slice of one flat draw equals its rule compiled alone, seed as a constant
    (as in the one-computation path); several ops of several shapes share the draw."""
    ops = [(kind, seed, shape, {**attrs, "shape": list(shape), "dtype": "float32",
                                "seed": 0}) for seed in (1, 2, 123456789)]
    ops.insert(1, ("uniform_random", 9, (2, 3), {"min": 0.0, "max": 1.0, "shape": [2, 3],
                                                 "dtype": "float32", "seed": 0}))
    with graphc_x64():
        got = draw_random("float32", ops, 4)
        for (op_type, seed, shp, op_attrs), value in zip(ops, got):
            out = {"Out": [TensorType(shp, "float32")]}

            def rule(step, op_type=op_type, op_attrs=op_attrs, seed=seed, out=out):
                return apply_rule(op_type, op_attrs, {}, out, "w", seed, step)["Out"][0]

            want = np.asarray(jax.jit(rule)(4))
            assert np.array_equal(want.view(np.uint32), value.view(np.uint32)), (op_type, shp)
