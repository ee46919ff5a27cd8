"""Initialisation determined by the program: with ``random_seed`` set, two builds of one model
start from the same weights whatever their names; ``random_seed = 0`` keeps the name rule."""

from __future__ import annotations

import math
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphc.initializer import Normal, Uniform
from graphc.param_attr import ParamAttr

import graphc
from graphc import layers, optimizer, unique_name
from graphc.backends.evaluate import op_seed, random_op_positions
from graphc.backends.lowering import random_key, random_op_seed
from graphc.ir.graph import lower


def build(seed: int, prefix: str | None = None, burn: int = 0, dropout: bool = False):
    """A tiny model: fc (Xavier), fc with a Normal initializer, optional dropout, SGD.
    ``prefix``/``burn`` change every generated name without changing the program."""
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = seed
    with graphc.program_guard(main, startup), unique_name.guard(prefix):
        for _ in range(burn):
            unique_name.generate("fc")
        x = layers.data("x", [4])
        h = layers.fc(x, 3, act="relu")
        if dropout:
            h = layers.dropout(h, 0.5, dropout_implementation="upscale_in_train")
        out = layers.fc(h, 2, param_attr=ParamAttr(initializer=Normal(0.0, 0.5)))
        loss = layers.mean(out)
        optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss, h


def start(startup) -> dict[str, np.ndarray]:
    scope = graphc.Scope()
    graphc.Executor().run(startup, scope=scope)
    return {k: np.asarray(scope[k]) for k in scope.keys()}


def params_in_order(main, values):
    return [values[p.name] for p in main.global_block().all_parameters()]


def test_two_builds_with_other_names_start_identically():
    main_a, start_a, *_ = build(7)
    main_b, start_b, *_ = build(7, prefix="tower_", burn=3)
    names_a = [p.name for p in main_a.global_block().all_parameters()]
    names_b = [p.name for p in main_b.global_block().all_parameters()]
    assert not set(names_a) & set(names_b)  # every name differs
    a, b = params_in_order(main_a, start(start_a)), params_in_order(main_b, start(start_b))
    assert len(a) == 4
    for wa, wb in zip(a, b):
        np.testing.assert_array_equal(wa, wb)
    assert np.std(a[0]) > 0 and np.std(a[2]) > 0  # drawn, not constant


def test_other_seed_other_weights_and_positions_draw_apart():
    main, startup, *_ = build(7)
    other_main, other_startup, *_ = build(8)
    a, b = params_in_order(main, start(startup)), params_in_order(other_main,
                                                                   start(other_startup))
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[2], b[2])
    # two random ops of one program draw from different seeds
    graph = lower(startup)
    randoms = sorted(random_op_positions(graph).items(), key=lambda kv: kv[1])
    seeds = {op_seed(graph, graph.ops_by_id[i]) for i, _ in randoms}
    assert [p for _, p in randoms] == [0, 1] and len(seeds) == 2


def _old_rule_uniform(name: str, shape, limit: float) -> np.ndarray:
    """What graphc drew before positions: crc32 of the output name, step 0."""
    seed = (zlib.crc32(name.encode()) ^ 0) & 0x7FFFFFFF
    key = jax.random.fold_in(jax.random.key(seed), 0)
    return np.asarray(jax.random.uniform(key, shape, jnp.float32, -limit, limit))


def _old_rule_normal(name: str, shape, std: float) -> np.ndarray:
    seed = zlib.crc32(name.encode()) & 0x7FFFFFFF
    key = jax.random.fold_in(jax.random.key(seed), 0)
    return np.asarray(jax.random.normal(key, shape, jnp.float32) * std)


def test_seed_zero_keeps_the_name_rule():
    main, startup, *_ = build(0)
    values = start(startup)
    w0, b0, w1, _ = main.global_block().all_parameters()
    np.testing.assert_array_equal(values[w0.name],
                                  _old_rule_uniform(w0.name, (4, 3), math.sqrt(6.0 / 7)))
    np.testing.assert_allclose(values[w1.name], _old_rule_normal(w1.name, (3, 2), 0.5),
                               rtol=1e-6)
    # and therefore other names draw other numbers (the reason a seed should be set)
    other_main, other_startup, *_ = build(0, burn=1)
    other = params_in_order(other_main, start(other_startup))
    assert not np.array_equal(other[0], values[w0.name])


def test_explicit_initializer_seed_wins():
    draws = []
    for seed in (0, 7):
        main, startup = graphc.Program(), graphc.Program()
        main.random_seed = startup.random_seed = seed
        with graphc.program_guard(main, startup), unique_name.guard():
            x = layers.data("x", [4])
            layers.fc(x, 3, param_attr=ParamAttr(initializer=Uniform(-1, 1, seed=11)))
            layers.fc(x, 3, param_attr=ParamAttr(initializer=Uniform(-1, 1, seed=11)))
        draws.append(params_in_order(main, start(startup)))
    want = np.asarray(jax.random.uniform(random_key(11, 0), (4, 3), jnp.float32, -1, 1))
    for ws in draws:  # the attribute's seed, whatever the program's, as in Paddle
        np.testing.assert_array_equal(ws[0], want)
        np.testing.assert_array_equal(ws[2], want)


def test_seed_rule_is_one_function():
    assert random_op_seed(0, 3, "fc_0.w_0") == zlib.crc32(b"fc_0.w_0") & 0x7FFFFFFF
    assert random_op_seed(5, 3, "fc_0.w_0") == random_op_seed(5, 3, "other")
    assert random_op_seed(5, 3, "x") != random_op_seed(5, 4, "x")
    assert random_op_seed(5, 3, "x") != random_op_seed(6, 3, "x")
    assert random_op_seed(5, 3, "x", attr_seed=9) == 9


@pytest.mark.parametrize("n", [2])
def test_data_parallel_and_single_device_start_and_step_identically(n):
    main, startup, loss, _ = build(3)
    x = np.random.default_rng(0).standard_normal((4, 4)).astype("float32")
    exe = graphc.Executor()
    single, parallel = graphc.Scope(), graphc.Scope()
    exe.run(startup, scope=single)
    exe.run(startup, scope=parallel)
    names = [p.name for p in main.global_block().all_parameters()]
    for name in names:
        np.testing.assert_array_equal(single[name], parallel[name])
    exe.run(main, feed={"x": x}, fetch_list=[loss], scope=single)
    cp = graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(n))
    exe.run(cp, feed={"x": x}, fetch_list=[loss], scope=parallel)
    for name in names:
        np.testing.assert_allclose(single[name], parallel[name], rtol=1e-5, atol=1e-6)


def _dropout_masks(main, startup, h, strategy=None, steps=2):
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    prog = main if strategy is None else graphc.CompiledProgram(main, build_strategy=strategy)
    x = np.ones((3, 4), "float32")
    return [exe.run(prog, feed={"x": x}, fetch_list=[h], scope=scope)[0] != 0
            for _ in range(steps)]


def test_dropout_masks_fixed_by_program_and_step():
    main, startup, _, h = build(5, dropout=True)
    first = _dropout_masks(main, startup, h)
    again = _dropout_masks(main, startup, h)
    for a, b in zip(first, again):  # a fresh scope repeats every step's mask
        np.testing.assert_array_equal(a, b)
    # the same model under other names draws the same masks
    main_b, startup_b, _, h_b = build(5, prefix="b_", burn=2, dropout=True)
    for a, b in zip(first, _dropout_masks(main_b, startup_b, h_b)):
        np.testing.assert_array_equal(a, b)
    # passes that rewrite the main program keep them
    bs = graphc.BuildStrategy(fuse_elewise_add_act_ops=True, enable_inplace=True)
    for a, b in zip(first, _dropout_masks(main, startup, h, bs)):
        np.testing.assert_array_equal(a, b)
    # each step draws anew; another seed, other masks
    assert not np.array_equal(first[0], first[1])
    main_c, startup_c, _, h_c = build(6, dropout=True)
    other = _dropout_masks(main_c, startup_c, h_c)
    assert any(not np.array_equal(a, b) for a, b in zip(first, other))


def test_a_pass_that_rebuilds_a_random_op_keeps_its_numbers():
    """amp runs a dropout in bfloat16 and renames its output (dropout_0.tmp_0.bf16); with
    random_seed 0 the numbers are keyed by the output's name as lowered, so the mask stays."""
    from graphc.backends.interpreter import run_graph
    from graphc.passes import PassManager, make_pass
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 64])
        out = layers.dropout(layers.scale(x, 1.0), 0.5)
    feeds = {"x": np.ones((4, 64), "float32")}
    plain = graphc.lower(main)
    amp = graphc.lower(main)
    PassManager([make_pass("amp", custom_white_list=["scale"])]).run(
        amp, keep=[amp.latest(out.name)])
    assert any(v.name.endswith(".bf16") for v in amp.values.values()), amp.to_text()
    (want,) = run_graph(plain, {}, feeds, [out.name])[1]
    (got,) = run_graph(amp, {}, feeds, [out.name])[1]
    np.testing.assert_array_equal(got != 0, want != 0)
