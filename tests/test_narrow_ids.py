"""int64 ids and labels narrowed to int32 inside compiled steps (issue 28, backends/narrow.py):
the narrowed programs equal the wide ones, ids beyond int32 are refused or read as before."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import graphc
from graphc import layers, optimizer
from graphc.backends.data_checks import DataError, count_dtype, summarise
from graphc.backends.interpreter import run_graph
from graphc.backends.narrow import index32
from graphc.backends.precision import graphc_x64
from graphc.ir import unique_name
from graphc.ir.graph import lower
from graphc.ops.nn import lowering as nn_rules

VOCAB, CLASSES, IGNORE = 7, 5, -100
BIG = [2 ** 31, 2 ** 31 - 1, -2 ** 31, -2 ** 31 - 1, 2 ** 32 + 3, 2 ** 32 - 1, -2 ** 32 + 2,
       2 ** 40, -(2 ** 40), np.iinfo(np.int64).max, np.iinfo(np.int64).min]


def _every_kind_of_value(size: int, kept=()) -> np.ndarray:
    small = np.arange(-3 * size, 3 * size)
    parts = [small, BIG, list(kept), [k + 2 ** 32 for k in kept]]
    return np.concatenate([np.asarray(p, np.int64) for p in parts])


# -- index32 itself: equal results for every int64 value ----------------------------------

@pytest.mark.parametrize("size, kept", [(VOCAB, ()), (VOCAB, (3,)), (CLASSES, (IGNORE,)),
                                        (1, (-1,)), (2 ** 31 - 2, ())])
@pytest.mark.parametrize("checked", [False, True])
def test_index32_reads_what_the_wide_index_reads(size, kept, checked):
    with graphc_x64():
        wide = jnp.asarray(_every_kind_of_value(min(size, 50), kept))
        narrow = index32(wide, size, kept, checked=checked)
        assert narrow.dtype == jnp.int32
        valid = (wide >= 0) & (wide < size)
        for k in kept:
            valid |= wide == k
            same = (narrow == k) == (wide == k)
            assert bool(jnp.all(same if not checked else jnp.where(valid, same, True)))
        if size > 100:
            return
        # the reference: NumPy's indexing, NaN for an id outside [-size, size). (jnp.take
        # on the int64 ids themselves is none: XLA:CPU's gather reads 2**32 + 3 as row 3)
        table = np.arange(size * 2, dtype=np.float32).reshape(size, 2)
        w = np.asarray(wide)
        inside = (w >= -size) & (w < size)
        want = np.where(inside[:, None], table[np.where(inside, w, 0)], np.nan)
        got = np.asarray(jnp.take(jnp.asarray(table), narrow, axis=0))
        if checked:  # only values the check lets through need to agree
            want, got = want[np.asarray(valid)], got[np.asarray(valid)]
        np.testing.assert_array_equal(got, want)
        one = jax.nn.one_hot(wide, size), jax.nn.one_hot(narrow, size)
        if not checked:
            np.testing.assert_array_equal(*map(np.asarray, one))


def test_index32_leaves_what_it_cannot_narrow():
    with graphc_x64():
        x32 = jnp.asarray([1, 2], jnp.int32)
        assert index32(x32, 4) is x32
        wide = jnp.asarray([1, 2 ** 40], jnp.int64)
        assert index32(wide, 2 ** 31).dtype == jnp.int64  # no int32 stand-in past the axis
        assert index32(wide, 4, (2 ** 33,)).dtype == jnp.int64  # a kept value beyond int32
        u = jnp.asarray([0, 3, 2 ** 63 + 5], jnp.uint64)
        np.testing.assert_array_equal(
            np.asarray(jnp.take(jnp.arange(4.0), index32(u, 4), axis=0)),
            np.asarray(jnp.take(jnp.arange(4.0), u, axis=0)))


def test_summaries_count_in_int32_and_keep_the_wide_value():
    class Report:
        def __init__(self, bad, values):
            self.bad, self.values = bad, values
    assert count_dtype(10) == jnp.int32 and count_dtype(2 ** 31) == jnp.int64
    with graphc_x64():
        values = jnp.asarray([1, 2 ** 40 + 3, 5, 2 ** 40 + 3], jnp.int64)
        out = summarise([Report(values > 4, values), Report(jnp.zeros(3, bool), values[:3])])
    assert out.dtype == jnp.int64
    np.testing.assert_array_equal(np.asarray(out), [[3, 2 ** 40 + 3, 1, 0], [0, 1, 0, 0]])


# -- whole steps: narrowed against wide, jitted and interpreted -----------------------------

def _program(padding_idx=None, is_sparse=False):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 3
    with graphc.program_guard(main, startup), unique_name.guard():
        ids = graphc.data("ids", [-1, 1], "int64")
        label = graphc.data("label", [-1, 1], "int64")
        emb = layers.embedding(ids, [VOCAB, 4], padding_idx=padding_idx, is_sparse=is_sparse)
        logits = layers.fc(emb, CLASSES)
        per = layers.softmax_with_cross_entropy(logits, label, ignore_index=IGNORE)
        loss = layers.mean(per)
        optimizer.Adam(0.1).minimize(loss)
    return main, startup, loss


def _train(feeds, *, wide=False, check_data=True, interpret=False, **kw):
    """Losses and final parameters of two steps; ``wide``: the rules index with int64 as
    before the narrowing (index32 patched to the identity)."""
    main, startup, loss = _program(**kw)
    exe = graphc.Executor(check_data=check_data)
    scope = graphc.Scope()
    exe.run(startup, scope=scope)
    state = {n: np.array(scope[n]) for n in scope.keys()}
    saved = nn_rules.index32
    if wide:
        nn_rules.index32 = lambda values, *a, **k: values
    try:
        losses = []
        for feed in feeds:
            if interpret:
                new, (got,) = run_graph(lower(main), state, feed, [loss.name])
                state.update(new)
            else:
                (got,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
            losses.append(np.asarray(got))
    finally:
        nn_rules.index32 = saved
    if not interpret:
        state = {n: np.array(scope[n]) for n in scope.keys()}
    return losses, {p.name: np.asarray(state[p.name]) for p in main.all_parameters()}


def _feeds(rng, n=6):
    out = []
    for _ in range(2):
        ids = rng.integers(0, VOCAB, (n, 1)).astype(np.int64)
        label = rng.integers(0, CLASSES, (n, 1)).astype(np.int64)
        label[1] = IGNORE
        out.append({"ids": ids, "label": label})
    return out


@pytest.mark.parametrize("kw", [{}, {"padding_idx": 2}, {"is_sparse": True, "padding_idx": 0}])
def test_narrowed_steps_equal_wide_steps(kw):
    feeds = _feeds(np.random.default_rng(0))
    feeds[0]["ids"][:3, 0] = [2, 0, VOCAB - 1]  # the padding ids, the table's ends
    narrow = _train(feeds, **kw)
    wide = _train(feeds, wide=True, **kw)
    for a, b in zip(narrow[0], wide[0]):
        np.testing.assert_array_equal(a, b)
    for name in narrow[1]:
        np.testing.assert_array_equal(narrow[1][name], wide[1][name], err_msg=name)
    eager = _train(feeds, interpret=True, **kw)  # op by op: the same values, not bits
    for a, b in zip(narrow[0], eager[0]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    for name in narrow[1]:
        np.testing.assert_allclose(narrow[1][name], eager[1][name], rtol=1e-5, atol=1e-7,
                                   err_msg=name)


@pytest.mark.parametrize("slot, value", [("ids", 2 ** 32 + 3), ("ids", -2 ** 32 + 1),
                                         ("label", 2 ** 32 + 1), ("label", 2 ** 32 + IGNORE)])
def test_values_beyond_int32_are_refused_not_wrapped(slot, value):
    """Each value wraps to a valid one in int32 (row 3, row 1, class 1, the ignore_index):
    the checks read the wide value and refuse the step, with the value as fed."""
    feeds = _feeds(np.random.default_rng(1))
    feeds[0][slot][2, 0] = value
    with pytest.raises(DataError, match=f"holds {value} at \\[2, 0\\]"):
        _train(feeds[:1])
    with graphc_x64():  # jax arrays: the checks stay in the step, not on the host
        jax_feed = {k: jnp.asarray(v, jnp.int64) for k, v in feeds[0].items()}
    with pytest.raises(DataError, match=f"holds {value} at \\[2, 0\\]"):
        _train([jax_feed])


@pytest.mark.parametrize("slot, value", [("ids", 2 ** 32 + 3), ("label", 2 ** 32 + 1),
                                         ("label", 2 ** 32 + IGNORE), ("ids", -1)])
def test_unchecked_steps_read_a_wide_value_as_before(slot, value):
    """With the checks off nothing refuses: an id past the table or a label past the
    classes reads NaN as any out-of-range value does; it does not wrap to a valid row or
    class (the int64 step's XLA:CPU gather read 2**32 + 3 as row 3, and the old label rule
    cast labels to int32 with that wrap). A value int32 holds computes as in the int64
    step."""
    feeds = _feeds(np.random.default_rng(2))
    feeds[0][slot][2, 0] = value
    narrow = _train(feeds[:1], check_data=False)
    if value > 2 ** 31:
        assert not np.isfinite(narrow[0][0]).all()
        return
    wide = _train(feeds[:1], check_data=False, wide=True)
    np.testing.assert_array_equal(narrow[0][0], wide[0][0])


def test_the_compiled_step_indexes_with_int32():
    feeds = _feeds(np.random.default_rng(3))
    texts = {}
    for wide in (False, True):
        main, startup, loss = _program()
        exe, scope = graphc.Executor(), graphc.Scope()
        exe.run(startup, scope=scope)
        saved = nn_rules.index32
        if wide:
            nn_rules.index32 = lambda values, *a, **k: values
        try:
            texts[wide] = exe.compile(main, feed=feeds[0], fetch_list=[loss]).lowered_text()
        finally:
            nn_rules.index32 = saved
    # the wide step wraps negative ids in int64 (an add and a select on the 6 ids) before
    # JAX's gather converts them to int32; the narrowed one converts first
    def index_arithmetic(text):
        return len(re.findall(r"stablehlo\.(?:add|select) .*tensor<6xi64>", text))
    assert index_arithmetic(texts[False]) == 0 < index_arithmetic(texts[True])
    assert texts[False].count("i64") < texts[True].count("i64")
