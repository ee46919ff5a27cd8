"""Random ops' keys without loops (issue 28): straight-line threefry equals JAX's bit for bit,
a step's keys come from one hash, and a compiled step with dropouts has no ``while`` for them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphc
from graphc import layers
from graphc.backends import threefry
from graphc.backends.evaluate import op_seed
from graphc.backends.interpreter import run_graph
from graphc.backends.lowering import random_key
from graphc.backends.precision import graphc_x64, with_graphc_x64

SEEDS = (0, 7, 123456789, 2 ** 31 - 1, -5)


@pytest.mark.parametrize("seed", SEEDS)
@with_graphc_x64
def test_straight_line_keys_draw_jaxs_numbers(seed):
    ours, jaxs = threefry.key(seed), jax.random.key(seed)
    for step in (0, 1, 4_000_000_000):
        a, b = jax.random.fold_in(ours, step), jax.random.fold_in(jaxs, step)
        np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(b))
        np.testing.assert_array_equal(jax.random.key_data(jax.random.split(a, 3)),
                                      jax.random.key_data(jax.random.split(b, 3)))
        for shape in ((), (5,), (3, 4, 2)):
            for draw in (lambda k, s=shape: jax.random.uniform(k, s, jnp.float32),
                         lambda k, s=shape: jax.random.uniform(k, s, jnp.float64),
                         lambda k, s=shape: jax.random.normal(k, s, jnp.float32),
                         lambda k, s=shape: jax.random.bernoulli(k, 0.3, s),
                         *(lambda k, w=w, s=shape: jax.random.bits(k, s, f"uint{w}")
                           for w in (8, 16, 32, 64))):
                np.testing.assert_array_equal(draw(a), draw(b))


def test_straight_line_hash_compiles_without_a_loop():
    step = jax.jit(lambda t: jax.random.bernoulli(random_key(3, t), 0.5, (8, 8)))
    assert " while(" not in step.lower(1).compile().as_text()
    # JAX's own lowering on CPU rolls each hash into a loop: the test could fail
    if jax.devices()[0].platform == "cpu":
        theirs = jax.jit(lambda t: jax.random.bernoulli(
            jax.random.fold_in(jax.random.key(3), t), 0.5, (8, 8)))
        assert " while(" in theirs.lower(1).compile().as_text()


@with_graphc_x64
def test_shared_keys_are_each_ops_own_fold():
    seeds = [11, 12, 99]

    def both(step):
        alone = [jax.random.key_data(random_key(s, step)) for s in seeds]
        with threefry.shared_keys(seeds, step):
            shared = [jax.random.key_data(random_key(s, step)) for s in seeds]
            other = jax.random.key_data(random_key(5, step))  # not in the table: its own
        return alone, shared, other

    for run in (both, jax.jit(both)):
        alone, shared, other = run(jnp.int64(3))
        np.testing.assert_array_equal(np.stack(alone), np.stack(shared))
        np.testing.assert_array_equal(other, jax.random.key_data(random_key(5, 3)))

    @jax.jit
    def served(step):
        other = step + 1  # another step value (a loop body's counter) is not served
        with threefry.shared_keys(seeds, step):
            assert threefry.shared_key(11, other) is None
            assert threefry.shared_key(11, step) is not None
        assert threefry.shared_key(11, step) is None  # nothing outlives the block
        return step

    served(jnp.int64(3))
    with threefry.shared_keys(seeds, 3):  # eagerly (the interpreter) each op folds its own
        assert threefry.shared_key(11, 3) is None


def _three_dropouts(prob=0.5):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 3
    with graphc.program_guard(main, startup):
        x = layers.data("x", [6, 16], append_batch_size=False)
        h = layers.fc(x, 16)
        drops = [layers.dropout(h, prob, dropout_implementation="upscale_in_train")
                 for _ in range(3)]  # side by side: each output's zeros are its own mask
        loss = layers.mean(layers.sums([layers.tanh(d) for d in drops]))
        graphc.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss, drops


@pytest.fixture(scope="module")
def dropouts():
    return _three_dropouts()


def test_three_dropouts_compile_without_a_loop_for_their_randomness(dropouts):
    main, startup, loss, _ = dropouts
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((6, 16), np.float32)}
    text = exe.compile(main, feed=feed, fetch_list=[loss]).compiled_text({"x": (6, 16)})
    assert text.count(" while(") <= 1, "each random op's key or bits got a loop"
    assert text.count(" while(") == 0


def _masks(main, startup, drops, steps=2, interpreter=False):
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    feed = {"x": np.linspace(0.5, 1.5, 96, dtype=np.float32).reshape(6, 16)}
    out = []
    if interpreter:
        graph = graphc.lower(main)
        state = {k: np.asarray(scope[k]) for k in scope.keys()}
        for step in range(steps):
            state_new, fetched = run_graph(graph, state, feed, [d.name for d in drops], step)
            state.update(state_new)
            out.append([f != 0 for f in fetched])
        return out
    for _ in range(steps):
        fetched = exe.run(main, feed=feed, fetch_list=drops, scope=scope)
        out.append([np.asarray(f) != 0 for f in fetched])
    return out


def test_dropout_masks_repeat_by_seed_and_agree_with_the_interpreter(dropouts):
    main, startup, _, drops = dropouts
    first = _masks(main, startup, drops)
    again = _masks(main, startup, drops)
    interpreted = _masks(main, startup, drops, interpreter=True)
    for a, b, c in zip(first, again, interpreted):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    # every op and every step draws its own mask, at about the rate asked
    flat = [m for step in first for m in step]
    assert all(not np.array_equal(p, q) for i, p in enumerate(flat) for q in flat[i + 1:])
    assert 0.35 < np.mean(flat) < 0.65


def test_dropout_draws_float32_uniforms(dropouts):
    """The mask is jax.random.uniform(float32) >= p under the op's key (Paddle's kernel
    compares float32 uniforms), not the float64 draw of before issue 28."""
    main, startup, _, drops = dropouts
    (masks,) = _masks(main, startup, drops[:1], steps=1, interpreter=True)
    graph = graphc.lower(main)
    op = next(o for o in graph.ops() if o.type == "dropout")
    with graphc_x64():
        want = np.asarray(jax.random.uniform(random_key(op_seed(graph, op), 0), (6, 16),
                                             jnp.float32) >= 0.5)
    np.testing.assert_array_equal(masks[0], want)


# -- hlo28: each mask hashed once (issue 28) ------------------------------------------------
def test_each_dropout_mask_is_hashed_once(dropouts):
    """The backward reads each dropout's Mask instead of XLA copying its threefry hash (20
    xors) into every fusion that uses it: 3 masks and their keys are 4 hashes' worth, where
    the copies into the backward made 7."""
    main, startup, loss, _ = dropouts
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.ones((6, 16), np.float32)}
    text = exe.compile(main, feed=feed, fetch_list=[loss]).compiled_text({"x": (6, 16)})
    assert text.count(" xor(") < 5 * 20, text.count(" xor(")
