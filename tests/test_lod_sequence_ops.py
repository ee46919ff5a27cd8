"""The sequence ops beyond sequence_pool (issue 16) and the LoD rules of reduce_mean/max/min,
batch_norm and layer_norm: each against a NumPy reference over the ragged sequences, on
random LoDs with empty and length-1 sequences (hypothesis); finite-difference gradients; the
JAX step equal to the interpreter; shape errors and run-time data checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.runtime.lod import LoDTensor, create_lod_tensor, unpack
from graphc.testing.lod import as_feed, lod_lengths, random_lod_tensor, split
from graphc.testing.lod_checks import fd_check, token_loss

EXAMPLES = settings(max_examples=8, deadline=None)
seeds = st.integers(0, 2 ** 16)


def run(build, feeds: dict, state=None):
    """Build in a fresh program, run on the interpreter; LoD results as (tokens, lengths)."""
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        outs = build()
        outs = outs if isinstance(outs, list | tuple) else [outs]
        main = graphc.default_main_program()
        g = graphc.lower(main)
        fetched = run_graph(g, state or {}, {k: as_feed(main, k, v) for k, v in feeds.items()},
                            [o.name for o in outs])[1]
    result = []
    for v in fetched:
        if isinstance(v, np.ndarray):
            result.append(v)
        else:
            t = unpack(v)
            result.append((np.array(t), t.recursive_sequence_lengths()))
    return result if len(result) > 1 else result[0]


def lod_in(name, width, dtype="float64", level=1):
    shape = [-1, width] if width else [-1, 1]
    return graphc.data(name, shape, dtype, lod_level=level)


def assert_lod(got, tokens, lengths, **tol):
    np.testing.assert_allclose(got[0], np.asarray(tokens).reshape(got[0].shape), **tol)
    assert got[1] == [list(map(int, x)) for x in lengths]


# -- NumPy references over ragged sequences --------------------------------------------------------

def ref_softmax(tokens, lengths):
    out = [np.exp(s - s.max()) / np.exp(s - s.max()).sum() for s in split(tokens, lengths)
           if len(s)]
    return np.concatenate(out) if out else tokens


def ref_conv(tokens, lengths, filt, start, n):
    rows = []
    for s in split(tokens, lengths):
        for t in range(len(s)):
            ctx = [s[t + start + j] if 0 <= t + start + j < len(s) else np.zeros(s.shape[1])
                   for j in range(n)]
            rows.append(np.concatenate(ctx) @ filt)
    return np.array(rows).reshape(-1, filt.shape[1])


def ref_reverse(tokens, lengths):
    seqs = [s[::-1] for s in split(tokens, lengths)]
    return np.concatenate(seqs) if seqs else tokens


# -- forward against the references ----------------------------------------------------------------

@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds)
def test_sequence_softmax(lengths, seed):
    x = random_lod_tensor(np.random.default_rng(seed), lengths, (1,))
    got = run(lambda: layers.sequence_softmax(lod_in("x", 1)), {"x": x})
    assert_lod(got, ref_softmax(np.array(x), lengths[0]), lengths, rtol=1e-12)


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, n=st.integers(1, 4), start=st.integers(-3, 1))
def test_sequence_conv(lengths, seed, n, start):
    rng = np.random.default_rng(seed)
    x = random_lod_tensor(rng, lengths, (2,))
    filt = rng.standard_normal((2 * n, 3))

    def build():
        out = layers.sequence_conv(lod_in("x", 2), 3, n, padding_start=start,
                                   param_attr=fluid.ParamAttr(name="f"), bias_attr=False)
        assert out.lod_level == 1
        return out

    got = run(build, {"x": x}, {"f": filt})
    assert_lod(got, ref_conv(np.array(x), lengths[0], filt, start, n), lengths, rtol=1e-10,
               atol=1e-12)


@EXAMPLES
@given(lengths=lod_lengths(2), seed=seeds, ref_level=st.sampled_from([-1, 0, 1]))
def test_sequence_expand_dense_rows_over_y(lengths, seed, ref_level):
    rng = np.random.default_rng(seed)
    level = 1 if ref_level == -1 else ref_level
    repeats = lengths[level]
    x = rng.standard_normal((len(repeats), 2))
    y = random_lod_tensor(rng, lengths, (1,))
    got = run(lambda: layers.sequence_expand(graphc.data("x", [-1, 2], "float64"),
                                             lod_in("y", 1, level=2), ref_level), {"x": x, "y": y})
    want = np.repeat(x, repeats, axis=0)
    assert_lod(got, want, lengths[:level + 1])


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds)
def test_sequence_expand_as(lengths, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(lengths[0]), 3))
    y = random_lod_tensor(rng, lengths, (1,))
    got = run(lambda: layers.sequence_expand_as(graphc.data("x", [-1, 3], "float64"),
                                                lod_in("y", 1)), {"x": x, "y": y})
    assert_lod(got, np.repeat(x, lengths[0], axis=0), lengths)


@EXAMPLES
@given(a=lod_lengths(1, max_sequences=4), seed=seeds, data=st.data())
def test_sequence_concat(a, seed, data):
    n = len(a[0])
    b = [data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))]
    rng = np.random.default_rng(seed)
    xa, xb = random_lod_tensor(rng, a, (2,)), random_lod_tensor(rng, b, (2,))
    got = run(lambda: layers.sequence_concat([lod_in("a", 2), lod_in("b", 2), lod_in("c", 2)]),
              {"a": xa, "b": xb, "c": xa})
    seqs = [np.concatenate([p, q, r]) for p, q, r in zip(split(np.array(xa), a[0]),
                                                         split(np.array(xb), b[0]),
                                                         split(np.array(xa), a[0]))]
    lens = [[2 * p + q for p, q in zip(a[0], b[0])]]
    assert_lod(got, np.concatenate(seqs), lens)


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, shape=st.sampled_from([(4, 2), (2, 4), (3, 3),
                                                                  (2, 1), (6, 3)]))
def test_sequence_reshape(lengths, seed, shape):
    width, new = shape
    # lengths whose values divide by new_dim: scale each length
    factor = new // np.gcd(width, new)
    lengths = [[n * factor for n in lengths[0]]]
    x = random_lod_tensor(np.random.default_rng(seed), lengths, (width,))
    got = run(lambda: layers.sequence_reshape(lod_in("x", width), new), {"x": x})
    assert_lod(got, np.array(x).reshape(-1, new), [[n * width // new for n in lengths[0]]])


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, maxlen=st.sampled_from([None, 5, 7]))
def test_sequence_pad_and_unpad(lengths, seed, maxlen):
    x = random_lod_tensor(np.random.default_rng(seed), lengths, (2,))

    def build():
        pad = layers.fill_constant([1], "float64", -3.5)
        out, length = layers.sequence_pad(lod_in("x", 2), pad, maxlen=maxlen)
        back = layers.sequence_unpad(out, length)
        mask = layers.sequence_mask(length, maxlen=6, dtype="float32")
        return out, length, back, mask

    out, length, back, mask = run(build, {"x": x})
    width = out.shape[1]
    if maxlen is not None:
        assert width == maxlen
    else:  # the token bucket: a static bound on every length
        assert width >= max(lengths[0]) and width == graphc.runtime.lod.bucket(sum(lengths[0]))
    want = np.full((len(lengths[0]), width, 2), -3.5)
    for i, s in enumerate(split(np.array(x), lengths[0])):
        want[i, :len(s)] = s
    np.testing.assert_array_equal(out, want)
    assert length.dtype == np.int64 and length.tolist() == lengths[0]
    assert_lod(back, np.array(x), lengths)
    want_mask = (np.arange(6)[None, :] < np.array(lengths[0])[:, None]).astype("float32")
    assert mask.dtype == np.float32 and np.array_equal(mask, want_mask)


@EXAMPLES
@given(lengths=lod_lengths(2), seed=seeds)
def test_sequence_reverse_levels_1_and_2(lengths, seed):
    rng = np.random.default_rng(seed)
    x2 = random_lod_tensor(rng, lengths, (2,))
    got = run(lambda: layers.sequence_reverse(lod_in("x", 2, level=2)), {"x": x2})
    assert_lod(got, ref_reverse(np.array(x2), lengths[1]), lengths)
    if not lengths[1]:
        return  # no sub-sequences: no level-1 batch to make of them
    x1 = create_lod_tensor(np.array(x2), [lengths[1]])
    got = run(lambda: layers.sequence_reverse(lod_in("x", 2)), {"x": x1})
    assert_lod(got, ref_reverse(np.array(x2), lengths[1]), [lengths[1]])


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds)
def test_sequence_slice(lengths, seed):
    rng = np.random.default_rng(seed)
    x = random_lod_tensor(rng, lengths, (2,))
    offset = np.array([[rng.integers(0, n + 1)] for n in lengths[0]], "int64")
    length = np.array([[rng.integers(0, n - o[0] + 1)] for n, o in zip(lengths[0], offset)],
                      "int64")
    got = run(lambda: layers.sequence_slice(lod_in("x", 2), graphc.data("o", [-1, 1], "int64"),
                                            graphc.data("n", [-1, 1], "int64")),
              {"x": x, "o": offset, "n": length})
    seqs = [s[o[0]:o[0] + n[0]] for s, o, n in zip(split(np.array(x), lengths[0]), offset,
                                                    length)]
    assert_lod(got, np.concatenate(seqs), [length[:, 0]])


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds, win=st.integers(1, 4))
def test_sequence_enumerate(lengths, seed, win):
    x = random_lod_tensor(np.random.default_rng(seed), lengths, (1,), "int64", 0, 50)
    got = run(lambda: layers.sequence_enumerate(lod_in("x", 1, "int64"), win, pad_value=-1),
              {"x": x})
    rows = [[s[t + k, 0] if t + k < len(s) else -1 for k in range(win)]
            for s in split(np.array(x), lengths[0]) for t in range(len(s))]
    assert got[0].dtype == np.int64
    assert_lod(got, np.array(rows, "int64").reshape(-1, win), lengths)


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds)
def test_sequence_scatter(lengths, seed):
    rng = np.random.default_rng(seed)
    n, width = len(lengths[0]), 4
    x = rng.standard_normal((n, width))
    ids = random_lod_tensor(rng, lengths, (1,), "int64", 0, width)
    upd = random_lod_tensor(rng, lengths, (1,))
    got = run(lambda: layers.sequence_scatter(graphc.data("x", [-1, width], "float64"),
                                              lod_in("ids", 1, "int64"), lod_in("u", 1)),
              {"x": x, "ids": ids, "u": upd})
    want = x.copy()
    for i, (s, u) in enumerate(zip(split(np.array(ids), lengths[0]),
                                   split(np.array(upd), lengths[0]))):
        for j, v in zip(s[:, 0], u[:, 0]):
            want[i, j] += v
    np.testing.assert_allclose(got, want, rtol=1e-12)


@EXAMPLES
@given(lengths=lod_lengths(1), seed=seeds)
def test_reductions_and_norms_over_real_tokens(lengths, seed):
    rng = np.random.default_rng(seed)
    x = random_lod_tensor(rng, lengths, (3,))
    tokens = np.array(x)
    scale, bias = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)

    def build():
        v = lod_in("x", 3)
        bn = layers.batch_norm(v, param_attr=fluid.ParamAttr(name="s"),
                               bias_attr=fluid.ParamAttr(name="b"),
                               moving_mean_name="m", moving_variance_name="var")
        ln = layers.layer_norm(v, param_attr=fluid.ParamAttr(name="ls"),
                               bias_attr=fluid.ParamAttr(name="lb"))
        return [layers.reduce_mean(v), layers.reduce_mean(v, dim=[0]),
                layers.reduce_max(v, dim=0), layers.reduce_min(v, dim=[0, 1]),
                layers.reduce_mean(v, dim=[1]), bn, ln]

    state = {"s": scale, "b": bias, "m": np.zeros(3), "var": np.ones(3), "ls": scale,
             "lb": bias}
    got = run(build, {"x": x}, state)
    if len(tokens):
        np.testing.assert_allclose(got[0], [tokens.mean()], rtol=1e-12)
        np.testing.assert_allclose(got[1], tokens.mean(0), rtol=1e-12)
        np.testing.assert_allclose(got[2], tokens.max(0))
        np.testing.assert_allclose(got[3], [tokens.min()])
        norm = (tokens - tokens.mean(0)) / np.sqrt(tokens.var(0) + 1e-5)
        assert_lod(got[5], norm * scale + bias, lengths, rtol=1e-10, atol=1e-12)
    assert_lod(got[4], tokens.mean(1), lengths, rtol=1e-12)
    mu, var = tokens.mean(1, keepdims=True), tokens.var(1, keepdims=True)
    assert_lod(got[6], (tokens - mu) / np.sqrt(var + 1e-5) * scale + bias, lengths,
               rtol=1e-10, atol=1e-12)


def test_nets_sequence_conv_pool():
    rng = np.random.default_rng(3)
    lengths = [[3, 1, 0, 2]]
    x = random_lod_tensor(rng, lengths, (2,))
    filt, b = rng.standard_normal((6, 4)), rng.standard_normal(4)

    def build():
        return fluid.nets.sequence_conv_pool(lod_in("x", 2), 4, 3, act="tanh", pool_type="sum",
                                             param_attr=fluid.ParamAttr(name="f"),
                                             bias_attr=fluid.ParamAttr(name="b"))

    got = run(build, {"x": x}, {"f": filt, "b": b})
    conv = np.tanh(ref_conv(np.array(x), lengths[0], filt, -1, 3) + b)
    want = [s.sum(0) if len(s) else np.zeros(4) for s in split(conv, lengths[0])]
    np.testing.assert_allclose(got, np.array(want), rtol=1e-10)


# -- gradients (finite differences over the ragged tokens) --------------------------------------

@pytest.mark.parametrize("op", ["softmax", "conv", "reverse", "concat", "pad", "reduce_max",
                                "bn", "ln", "expand_as", "slice", "scatter", "reshape"])
@settings(max_examples=3, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=3, max_length=4), seed=seeds)
def test_gradients_over_random_lods(op, lengths, seed):
    rng = np.random.default_rng(seed)
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x = lod_in("x", 1 if op == "softmax" else 2)
        x.stop_gradient = False
        feeds = {"x": random_lod_tensor(rng, lengths, (x.shape[1],))}
        state, wrt = {}, ["x"]
        if op == "softmax":
            out = layers.sequence_softmax(x)
        elif op == "conv":
            out = layers.sequence_conv(x, 2, 3, param_attr=fluid.ParamAttr(name="f"),
                                       bias_attr=fluid.ParamAttr(name="cb"), act="tanh")
            state = {"f": rng.standard_normal((6, 2)), "cb": rng.standard_normal(2)}
        elif op == "reverse":
            out = layers.sequence_reverse(x)
        elif op == "concat":
            out = layers.sequence_concat([x, layers.scale(x, 2.0)])
        elif op == "pad":
            out, _ = layers.sequence_pad(x, layers.fill_constant([1], "float64", 0.5), maxlen=5)
        elif op == "reduce_max":
            out = layers.reduce_max(x, dim=[0])
        elif op == "ln":
            out = layers.layer_norm(x, param_attr=fluid.ParamAttr(name="s"),
                                    bias_attr=fluid.ParamAttr(name="b"))
            state = {"s": rng.uniform(0.5, 1.5, 2), "b": rng.standard_normal(2)}
        elif op == "expand_as":  # the gradient of the dense rows, summed over their copies
            d = graphc.data("d", [-1, 3], "float64")
            d.stop_gradient = False
            feeds["d"] = rng.standard_normal((len(lengths[0]), 3))
            wrt = ["d"]
            out = layers.elementwise_add(layers.sequence_expand_as(d, x), layers.reduce_sum(
                x, dim=[1], keep_dim=True))
        elif op == "slice":
            n = lengths[0]
            feeds["o"] = np.array([[rng.integers(0, k + 1)] for k in n])
            feeds["n"] = np.array([[rng.integers(0, k - o + 1)] for k, (o,) in
                                   zip(n, feeds["o"])])
            out = layers.sequence_slice(x, graphc.data("o", [-1, 1], "int64"),
                                        graphc.data("n", [-1, 1], "int64"))
        elif op == "scatter":
            d = graphc.data("d", [-1, 3], "float64")
            d.stop_gradient = False
            feeds["d"] = rng.standard_normal((len(lengths[0]), 3))
            feeds["ids"] = random_lod_tensor(rng, lengths, (1,), "int64", 0, 3)
            wrt = ["d", "x"]
            out = layers.sequence_scatter(d, lod_in("ids", 1, "int64"),
                                          layers.reduce_sum(x, dim=[1], keep_dim=True))
        elif op == "reshape":
            out = layers.sequence_reshape(x, 1)
        else:
            out = layers.batch_norm(x, param_attr=fluid.ParamAttr(name="s"),
                                    bias_attr=fluid.ParamAttr(name="b"), moving_mean_name="m",
                                    moving_variance_name="v")
            state = {"s": rng.uniform(0.5, 1.5, 2), "b": rng.standard_normal(2),
                     "m": np.zeros(2), "v": np.ones(2)}
        loss, w = token_loss(out, rng)
        if op == "bn" and sum(lengths[0]) < 2:
            return  # one token: batch statistics make every output the bias
        fd_check(graphc.default_main_program(), loss, {**feeds, **w}, wrt, rng, state,
                 rtol=1e-5, atol=1e-6)


# -- the JAX step equals the interpreter, and buckets bound the compiles -----------------------

def test_jax_step_equals_interpreter_for_every_sequence_op():
    rng = np.random.default_rng(0)
    lengths = [[2, 0, 1, 4]]
    feeds = {"x": random_lod_tensor(rng, lengths, (2,)),
             "s": random_lod_tensor(rng, lengths, (1,)),
             "ids": random_lod_tensor(rng, lengths, (1,), "int64", 0, 3),
             "d": rng.standard_normal((4, 3))}
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x, s = lod_in("x", 2), lod_in("s", 1)
        ids, d = lod_in("ids", 1, "int64"), graphc.data("d", [-1, 3], "float64")
        pad, length = layers.sequence_pad(x, layers.fill_constant([1], "float64", 1.0))
        outs = [layers.sequence_softmax(s), layers.sequence_conv(x, 3, 2),
                layers.sequence_expand(d, x), layers.sequence_expand_as(d, x),
                layers.sequence_concat([x, x]), layers.sequence_reshape(x, 1), pad, length,
                layers.sequence_unpad(pad, length), layers.sequence_mask(length, maxlen=5),
                layers.sequence_reverse(x),
                layers.sequence_slice(x, layers.fill_constant([4, 1], "int64", 0),
                                      layers.fill_constant([4, 1], "int64", 0)),
                layers.sequence_enumerate(ids, 2),
                layers.sequence_scatter(d, ids, layers.cast(ids, "float64")),
                layers.reduce_mean(x), layers.reduce_max(x, dim=[0]), layers.batch_norm(x),
                layers.layer_norm(x)]
        for v in (x, s, d):
            v.stop_gradient = False
        # every float output feeds the loss, so every gradient rule runs in both
        floats = [o for o in outs if o.dtype == "float64"]
        loss = layers.sums([layers.mean(layers.square(o)) for o in floats])
        fluid.optimizer.SGD(0.1).minimize(loss)
        outs += [main.global_block().var(n + "@GRAD") for n in ("x", "s", "d")]
    exe = graphc.Executor()
    scope = graphc.Scope()
    with graphc.scope_guard(scope):
        exe.run(startup)
        state = {n: np.array(scope.find_var(n).get_tensor()) for n in
                 main.global_block().vars if main.global_block().var(n).persistable
                 and scope.find_var(n) is not None}
        got = exe.run(main, feed=feeds, fetch_list=outs, return_numpy=False)
    g = graphc.lower(main)
    ref = run_graph(g, state, {k: as_feed(main, k, v) for k, v in feeds.items()},
                    [o.name for o in outs])[1]
    for o, a, b in zip(outs, got, ref):
        if isinstance(a, LoDTensor) and a.recursive_sequence_lengths():  # dense: empty LoD
            b = unpack(b)
            assert a.recursive_sequence_lengths() == b.recursive_sequence_lengths(), o.name
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6, atol=1e-6,
                                   err_msg=o.name)


# -- errors and data checks -----------------------------------------------------------------------

def test_static_refusals_name_the_op():
    x, d = lod_in("x", 2), graphc.data("d", [-1, 2], "float64")
    with pytest.raises(ShapeError, match="sequence_expand: X is the LoD value"):
        layers.sequence_expand(x, x)
    with pytest.raises(ShapeError, match="ref_level 1 is not a level of Y"):
        layers.sequence_expand(d, x, ref_level=1)
    with pytest.raises(ShapeError, match="sequence_softmax: X must hold one value per token"):
        layers.sequence_softmax(x)
    with pytest.raises(graphc.ProgramError, match="give maxlen"):
        layers.sequence_mask(graphc.data("n", [-1], "int64"))
    with pytest.raises(ShapeError, match="X must be a LoD value"):  # not from a feed (seqtype)
        layers.sequence_reverse(layers.fill_constant([3, 2], "float32", 1.0))
    assert layers.reduce_mean(x, dim=[1]).lod_level == 1
    assert layers.reduce_max(x).lod_level == 0


def test_run_time_checks_raise_data_errors():
    x = create_lod_tensor(np.ones((5, 2)), [[4, 1]])
    with pytest.raises(DataError, match="sequences no longer than padded_length 3"):
        run(lambda: layers.sequence_pad(lod_in("x", 2),
                                        layers.fill_constant([1], "float64", 0.0), maxlen=3),
            {"x": x})
    with pytest.raises(DataError, match="Offset \\+ Length <= the sequence's length"):
        run(lambda: layers.sequence_slice(lod_in("x", 2), graphc.data("o", [-1, 1], "int64"),
                                          graphc.data("n", [-1, 1], "int64")),
            {"x": x, "o": np.array([[1], [0]]), "n": np.array([[3], [2]])})
    with pytest.raises(DataError, match="divide by new_dim 4"):
        run(lambda: layers.sequence_reshape(lod_in("x", 2), 4), {"x": x})
    with pytest.raises(DataError, match="ids in \\[0, 2\\)"):
        run(lambda: layers.sequence_scatter(graphc.data("d", [-1, 2], "float64"),
                                            lod_in("i", 1, "int64"), lod_in("u", 1)),
            {"d": np.zeros((2, 2)), "i": create_lod_tensor(np.array([[0], [2]]), [[1, 1]]),
             "u": create_lod_tensor(np.ones((2, 1)), [[1, 1]])})
    # compiled: the step refuses the batch and commits nothing
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        out, _ = layers.sequence_pad(lod_in("x", 2), layers.fill_constant([1], "float64", 0.0),
                                     maxlen=3)
    with pytest.raises(DataError, match="padded_length 3"):
        graphc.Executor().run(main, feed={"x": x}, fetch_list=[out])


def test_random_lengths_through_sequence_ops_compile_a_bounded_number_of_steps():
    import math

    from graphc.runtime import lod as rlod
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 2], "float32", lod_level=1)
        conv = layers.sequence_conv(x, 3, 3, act="tanh")
        rev = layers.sequence_reverse(conv)
        both = layers.sequence_concat([rev, layers.sequence_softmax(
            layers.reduce_sum(conv, dim=[1], keep_dim=True)) * 1.0 + conv])
        padded, _ = layers.sequence_pad(both, layers.fill_constant([1], "float32", 0.0))
        loss = layers.mean(layers.batch_norm(both)) + layers.reduce_mean(padded)
        fluid.optimizer.SGD(0.01).minimize(loss)
    exe = graphc.Executor()
    scope = graphc.Scope()
    rng = np.random.default_rng(7)
    most = 0
    with graphc.scope_guard(scope):
        exe.run(startup)
        for _ in range(40):
            lens = rng.integers(0, 41, 4).tolist()
            most = max(most, sum(lens))
            t = create_lod_tensor(rng.standard_normal((sum(lens), 2)).astype("float32"), [lens])
            got_rev, got_conv = exe.run(main, feed={"x": t}, fetch_list=[rev, conv],
                                        return_numpy=False)
            assert got_rev.recursive_sequence_lengths() == [lens]
            np.testing.assert_allclose(np.array(got_rev), ref_reverse(np.array(got_conv), lens))
    (prep,) = exe._prepared[main][1].values()
    # the concatenated buffer doubles the capacity but follows the same buckets
    bound = math.ceil(math.log2(max(most, 1) / rlod.MIN_BUCKET)) + 1
    assert 1 < len(prep.steps) <= bound, (len(prep.steps), bound)


def _text_model_losses(batches, places):
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 5
    with graphc.program_guard(main, startup):
        words = graphc.data("words", [-1, 1], "int64", lod_level=1)
        label = graphc.data("label", [-1, 1], "int64")
        emb = layers.embedding(words, [20, 4])
        h = layers.layer_norm(layers.sequence_reverse(emb))
        conv = fluid.nets.sequence_conv_pool(h, 3, 3, act="tanh", pool_type="max")
        attn = layers.sequence_softmax(layers.fc(h, 1))
        weighted = layers.sequence_pool(layers.elementwise_mul(h, attn), "sum")
        logits = layers.fc(layers.concat([conv, weighted], 1), 2)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.Adam(0.05).minimize(loss)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    prog = main if not places else graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(places))
    return [float(np.mean(exe.run(prog, feed=b, fetch_list=[loss], scope=scope)[0]))
            for b in batches]


def test_text_model_on_four_devices_equals_one():
    rng = np.random.default_rng(2)
    batches = []
    for _ in range(3):
        lens = rng.integers(0, 6, 8).tolist()
        lens[0] = 1
        batches.append({"words": create_lod_tensor(rng.integers(0, 20, (sum(lens), 1)), [lens]),
                        "label": rng.integers(0, 2, (8, 1))})
    one = _text_model_losses(batches, 0)
    four = _text_model_losses(batches, 4)
    np.testing.assert_allclose(four, one, rtol=1e-5)
    assert one[-1] < one[0]
