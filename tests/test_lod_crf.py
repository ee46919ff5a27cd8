"""Sequence labelling on LoD sequences (issue 16): linear_chain_crf against a brute-force sum
over every tag path, crf_decoding against brute-force Viterbi, chunk_eval against Paddle's
sequential chunk rules (IOB, IOE, IOBES, plain), on random LoDs with empty and length-1
sequences; finite-difference gradients of the CRF; interpreter == JAX."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import layers, unique_name
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.runtime.lod import create_lod_tensor, unpack
from graphc.testing.lod import as_feed, lod_grad_check, lod_lengths, split


def param_grad_check(graph_fwd, graph_full, state, feeds, loss, names, rng, eps=1e-6,
                     coords=4, rtol=1e-5, atol=1e-7):
    """Central differences of ``loss`` in a few coordinates of each parameter / dense feed."""
    fetched = run_graph(graph_full, state, feeds, [n + "@GRAD" for n in names])[1]
    for name, g in zip(names, fetched):
        src = state if name in state else feeds
        value = np.asarray(src[name], np.float64)
        for i in rng.choice(value.size, min(coords, value.size), replace=False):
            vals = []
            for sign in (1, -1):
                moved = value.copy().reshape(-1)
                moved[i] += sign * eps
                moved = moved.reshape(value.shape)
                st_, fd = (({**state, name: moved}, feeds) if src is state
                           else (state, {**feeds, name: moved}))
                vals.append(float(np.asarray(run_graph(graph_fwd, st_, fd, [loss])[1][0])
                                  .reshape(-1)[0]))
            np.testing.assert_allclose(np.asarray(g).reshape(-1)[i],
                                       (vals[0] - vals[1]) / (2 * eps), rtol=rtol, atol=atol,
                                       err_msg=f"d loss / d {name}[{i}]")


def path_score(emit, tags, trans):
    s = trans[0, tags[0]] + trans[1, tags[-1]] + sum(emit[i, t] for i, t in enumerate(tags))
    return s + sum(trans[2 + a, b] for a, b in zip(tags[:-1], tags[1:]))


def crf_reference(tokens, labels, lengths, trans):
    """-log p(label path) and the best path of each sequence, by enumerating every path."""
    d = tokens.shape[1]
    nll, best = [], []
    for emit, lab in zip(split(tokens, lengths), split(labels, lengths)):
        if len(emit) == 0:
            nll.append(0.0)
            continue
        paths = list(itertools.product(range(d), repeat=len(emit)))
        scores = np.array([path_score(emit, p, trans) for p in paths])
        log_z = np.log(np.sum(np.exp(scores - scores.max()))) + scores.max()
        nll.append(log_z - path_score(emit, lab[:, 0], trans))
        best += list(paths[int(np.argmax(scores))])
    return np.array(nll).reshape(-1, 1), np.array(best, np.int64).reshape(-1, 1)


SCHEMES = {"IOB": (2, 0, 1, -1, -1), "IOE": (2, -1, 0, 1, -1), "IOBES": (4, 0, 1, 2, 3),
           "plain": (1, -1, -1, -1, -1)}


def _segments(seq, num_types, scheme):
    """Paddle's chunk_eval segments of one sequence, token by token."""
    n_tags, b, i, e, s = scheme
    other = num_types

    def end(pt, pty, t, ty):
        if pty == other:
            return False
        if ty == other or ty != pty:
            return True
        if pt in (b, i):
            return t in (b, s)
        return pt in (e, s)

    def begin(pt, pty, t, ty):
        if pty == other:
            return ty != other
        if ty == other:
            return False
        if ty != pty or t in (b, s):
            return True
        if t in (i, e):
            return pt in (e, s)
        return False

    segs, start, in_chunk, pt, pty = [], 0, False, -1, other
    for k, v in enumerate(seq):
        t, ty = v % n_tags, min(v // n_tags, other)
        if in_chunk and end(pt, pty, t, ty):
            segs.append((start, k - 1, pty))
            in_chunk = False
        if begin(pt, pty, t, ty):
            start, in_chunk = k, True
        pt, pty = t, ty
    if in_chunk:
        segs.append((start, len(seq) - 1, pty))
    return segs


def chunk_reference(inf, lab, lengths, num_types, scheme, excluded=()):
    n_inf = n_lab = n_ok = 0
    for a, b in zip(split(inf[:, 0], lengths), split(lab[:, 0], lengths)):
        sa = {x for x in _segments(list(a), num_types, SCHEMES[scheme]) if x[2] not in excluded}
        sb = {x for x in _segments(list(b), num_types, SCHEMES[scheme]) if x[2] not in excluded}
        n_inf, n_lab, n_ok = n_inf + len(sa), n_lab + len(sb), n_ok + len(sa & sb)
    p = n_ok / n_inf if n_inf else 0.0
    r = n_ok / n_lab if n_lab else 0.0
    f = 2 * p * r / (p + r) if n_ok else 0.0
    return p, r, f, n_inf, n_lab, n_ok


def _crf_program(d):
    x = graphc.data("x", [-1, d], "float64", lod_level=1)
    lab = graphc.data("lab", [-1, 1], "int64", lod_level=1)
    nll = layers.linear_chain_crf(x, lab, param_attr=graphc.ParamAttr(name="crfw"))
    path = layers.crf_decoding(x, param_attr="crfw")
    hits = layers.crf_decoding(x, param_attr="crfw", label=lab)
    return nll, path, hits


@settings(max_examples=8, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=4, max_length=4), seed=st.integers(0, 2 ** 16))
def test_crf_and_viterbi_match_brute_force(lengths, seed):
    rng = np.random.default_rng(seed)
    d = 3
    (lens,) = lengths
    with graphc.program_guard(graphc.Program(), graphc.Program()), unique_name.guard():
        nll, path, hits = _crf_program(d)
        prog = graphc.default_main_program()
        graph = graphc.lower(prog)
    tokens = rng.standard_normal((sum(lens), d))
    labels = rng.integers(0, d, (sum(lens), 1))
    trans = rng.standard_normal((d + 2, d))
    feed = {"x": as_feed(prog, "x", create_lod_tensor(tokens, [lens])),
            "lab": as_feed(prog, "lab", create_lod_tensor(labels, [lens]))}
    got_nll, got_path, got_hits = run_graph(graph, {"crfw": trans}, feed,
                                            [nll.name, path.name, hits.name])[1]
    want_nll, want_path = crf_reference(tokens, labels, lens, trans)
    np.testing.assert_allclose(got_nll, want_nll, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(unpack(got_path)), want_path)
    np.testing.assert_array_equal(np.asarray(unpack(got_hits)),
                                  (want_path == labels).astype(np.int64))


@settings(max_examples=12, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=4, max_length=6),
       scheme=st.sampled_from(sorted(SCHEMES)), num_types=st.integers(1, 3),
       exclude=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_chunk_eval_matches_paddles_chunk_rules(lengths, scheme, num_types, exclude, seed):
    rng = np.random.default_rng(seed)
    (lens,) = lengths
    top = num_types * SCHEMES[scheme][0] + 1  # the last value is "outside"
    excluded = [0] if exclude else []
    with graphc.program_guard(graphc.Program(), graphc.Program()), unique_name.guard():
        inf = graphc.data("inf", [-1, 1], "int64", lod_level=1)
        lab = graphc.data("lab", [-1, 1], "int64", lod_level=1)
        outs = layers.chunk_eval(inf, lab, scheme, num_types, excluded_chunk_types=excluded)
        prog = graphc.default_main_program()
        graph = graphc.lower(prog)
    a = rng.integers(0, top, (sum(lens), 1))
    b = np.where(rng.random((sum(lens), 1)) < 0.7, a, rng.integers(0, top, (sum(lens), 1)))
    feed = {"inf": as_feed(prog, "inf", create_lod_tensor(a, [lens])),
            "lab": as_feed(prog, "lab", create_lod_tensor(b, [lens]))}
    got = [float(np.asarray(v)[0]) for v in run_graph(graph, {}, feed,
                                                        [o.name for o in outs])[1]]
    want = chunk_reference(a, b, lens, num_types, scheme, excluded)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_chunk_eval_known_iob_example():
    # B-0 I-0 O B-1 | B-1 I-1 ; predicted B-0 I-0 O B-0 | B-1 I-1: 2 of 3 chunks right
    inf = graphc.data("inf", [-1, 1], "int64", lod_level=1)
    lab = graphc.data("lab", [-1, 1], "int64", lod_level=1)
    p, r, f1, n_inf, n_lab, n_ok = layers.chunk_eval(inf, lab, "IOB", 2)
    got = graphc.Executor().run(feed={
        "inf": create_lod_tensor(np.array([[0], [1], [4], [0], [2], [3]]), [[4, 2]]),
        "lab": create_lod_tensor(np.array([[0], [1], [4], [2], [2], [3]]), [[4, 2]])},
        fetch_list=[p, r, f1, n_inf, n_lab, n_ok])
    assert [float(v[0]) for v in got] == pytest.approx([2 / 3, 2 / 3, 2 / 3, 3, 3, 2])


def test_crf_gradients_by_finite_differences():
    rng = np.random.default_rng(4)
    lens, d = [2, 0, 1, 3], 3
    x = graphc.data("x", [-1, d], "float64", lod_level=1)
    x.stop_gradient = False
    lab = graphc.data("lab", [-1, 1], "int64", lod_level=1)
    loss = layers.mean(layers.linear_chain_crf(layers.tanh(x), lab,
                                               param_attr=graphc.ParamAttr(name="crfw")))
    prog = graphc.default_main_program()
    fwd = graphc.lower(prog)
    state = {"crfw": rng.standard_normal((d + 2, d))}
    feeds = {"x": create_lod_tensor(rng.standard_normal((6, d)), [lens]),
             "lab": create_lod_tensor(rng.integers(0, d, (6, 1)), [lens])}
    lod_grad_check(prog, loss, feeds, ["x"], rng, state=state)
    full = graphc.lower(prog)
    packed = {k: as_feed(prog, k, v) for k, v in feeds.items()}
    param_grad_check(fwd, full, state, packed, loss.name, ["crfw"], rng, coords=8)


def test_crf_training_step_interpreter_equals_jax():
    ids = layers.data("ids", [1], dtype="int64", lod_level=1)
    lab = layers.data("lab", [1], dtype="int64", lod_level=1)
    emission = layers.fc(layers.embedding(ids, [10, 4]), 3)
    loss = layers.mean(layers.linear_chain_crf(emission, lab, graphc.ParamAttr(name="crfw")))
    path = layers.crf_decoding(emission, "crfw")
    graphc.optimizer.SGD(0.1).minimize(loss)
    main = graphc.default_main_program()
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    graph = graphc.lower(main)
    names = [v.var.name for v in graph.inputs if v.var.kind in ("param", "persistable")]
    before = {n: np.asarray(scope[n]) for n in names}
    feed = {"ids": create_lod_tensor([[1, 2, 3], [4], [], [5, 6]], [[3, 1, 0, 2]]),
            "lab": create_lod_tensor([[0, 2, 1], [1], [], [2, 2]], [[3, 1, 0, 2]])}
    loss_j, path_j = exe.run(main, feed=feed, fetch_list=[loss, path], scope=scope)
    new_state, (loss_i, path_i) = run_graph(
        graph, before, {k: as_feed(main, k, v) for k, v in feed.items()},
        [loss.name, path.name])
    np.testing.assert_allclose(loss_j, loss_i, rtol=1e-5)
    np.testing.assert_array_equal(path_j, np.asarray(unpack(path_i)))
    np.testing.assert_allclose(np.asarray(scope["crfw"]), new_state["crfw"], rtol=1e-5)


def test_bad_inputs():
    x = graphc.data("x", [-1, 3], lod_level=1)
    lab = graphc.data("lab", [-1, 1], "int64", lod_level=1)
    with pytest.raises(ProgramError, match="param_attr must name an existing transition"):
        layers.crf_decoding(x, param_attr="nope")
    with pytest.raises(ShapeError, match="Label must be a level-1 LoD value of int64"):
        # not a feed: a feed declared dense is re-typed on the op's demand (seqtype)
        layers.linear_chain_crf(x, layers.fill_constant([4, 1], "int64", 0))
    with pytest.raises(ShapeError, match="chunk_scheme must be one of"):
        layers.chunk_eval(lab, lab, "BIO", 2)
    with pytest.raises(ProgramError, match="length= .* is not supported"):
        layers.linear_chain_crf(x, lab, length=lab)


def _train_tagger(batches, places):
    """embedding -> fc -> dynamic_lstm -> fc -> linear_chain_crf, Adam; per-step losses."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), unique_name.guard():
        ids = layers.data("ids", [1], dtype="int64", lod_level=1)
        lab = layers.data("lab", [1], dtype="int64", lod_level=1)
        h, _ = layers.dynamic_lstm(layers.fc(layers.embedding(ids, [12, 4]), 8), 8)
        loss = layers.mean(layers.linear_chain_crf(layers.fc(h, 3), lab, "crfw"))
        graphc.optimizer.Adam(0.05).minimize(loss)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    prog = main if not places else graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(places))
    losses = [float(np.mean(exe.run(prog, feed=b, fetch_list=[loss], scope=scope)[0]))
              for b in batches]
    return losses, {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}


def test_lstm_crf_tagger_four_devices_equal_one():
    rng = np.random.default_rng(12)
    batches = []
    for _ in range(3):
        lens = rng.integers(0, 5, 8).tolist()
        lens[0] = 1
        batches.append({"ids": create_lod_tensor(rng.integers(0, 12, (sum(lens), 1)), [lens]),
                        "lab": create_lod_tensor(rng.integers(0, 3, (sum(lens), 1)), [lens])})
    one, params1 = _train_tagger(batches, 0)
    four, params4 = _train_tagger(batches, 4)
    np.testing.assert_allclose(four, one, rtol=1e-5)
    for name, value in params1.items():
        np.testing.assert_allclose(params4[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
