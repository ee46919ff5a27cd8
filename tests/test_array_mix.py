"""Tensor arrays whose elements go from dense rows to LoD values (issue 26): a decoder in the
machine-translation book's style (dense boot state, LoD states, beam_search,
beam_search_decode) against a NumPy beam search, the arrays' types and fetches, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from test_lod_control_ops import lod_data

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.runtime.lod import LoDTensor, create_lod_tensor, unpack
from graphc.testing.beam_reference import beam_search_decode_reference, beam_search_reference
from graphc.testing.lod import as_feed

N, BEAM, VOCAB, HID, EMB, END = 3, 2, 6, 4, 3, 0
PARAMS = {"ws": (HID, HID), "we": (EMB, HID), "b1": (HID,), "emb": (VOCAB, EMB),
          "wo": (HID, VOCAB), "bo": (VOCAB,)}


def _decoder(max_len: int):
    """The book's decode loop: the boot state (dense [N, HID], fed) is element 0 of
    state_array; each step expands the previous state by the previous scores' LoD, computes
    one state per live prefix (a LoD value) and writes it back; then beam_search_decode."""
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        boot = layers.data("boot", shape=[HID], dtype="float64")
        init_ids = layers.data("init_ids", shape=[1], dtype="int64", lod_level=2)
        init_scores = layers.data("init_scores", shape=[1], dtype="float64", lod_level=2)
        array_len = layers.fill_constant(shape=[1], dtype="int64", value=max_len)
        counter = layers.zeros(shape=[1], dtype="int64", force_cpu=True)
        state_array = layers.create_array("float64", capacity=max_len + 1)
        layers.array_write(boot, array=state_array, i=counter)
        ids_array = layers.create_array("int64", capacity=max_len + 1)
        scores_array = layers.create_array("float64", capacity=max_len + 1)
        layers.array_write(init_ids, array=ids_array, i=counter)
        layers.array_write(init_scores, array=scores_array, i=counter)
        cond = layers.less_than(x=counter, y=array_len)
        while_op = layers.While(cond=cond)
        with while_op.block():
            pre_ids = layers.array_read(array=ids_array, i=counter)
            pre_state = layers.array_read(array=state_array, i=counter)
            pre_score = layers.array_read(array=scores_array, i=counter)
            expanded = layers.sequence_expand(pre_state, pre_score)
            emb = layers.embedding(pre_ids, size=[VOCAB, EMB], dtype="float64",
                                   param_attr=fluid.ParamAttr(name="emb"))
            state = layers.fc(input=[expanded, emb], size=HID, act="tanh",
                              param_attr=[fluid.ParamAttr(name="ws"),
                                          fluid.ParamAttr(name="we")],
                              bias_attr=fluid.ParamAttr(name="b1"))
            probs = layers.fc(input=layers.lod_reset(x=state, y=pre_score), size=VOCAB,
                              act="softmax", param_attr=fluid.ParamAttr(name="wo"),
                              bias_attr=fluid.ParamAttr(name="bo"))
            top_scores, top_ids = layers.topk(probs, k=BEAM)
            accu = layers.elementwise_add(x=layers.log(top_scores),
                                          y=layers.reshape(pre_score, shape=[-1]), axis=0)
            selected_ids, selected_scores = layers.beam_search(
                pre_ids, pre_score, top_ids, accu, BEAM, end_id=END, level=0)
            layers.increment(x=counter, value=1, in_place=True)
            layers.array_write(state, array=state_array, i=counter)
            layers.array_write(selected_ids, array=ids_array, i=counter)
            layers.array_write(selected_scores, array=scores_array, i=counter)
            length_cond = layers.less_than(x=counter, y=array_len)
            finish_cond = layers.logical_not(layers.is_empty(x=selected_ids))
            layers.logical_and(x=length_cond, y=finish_cond, out=cond)
        outs = layers.beam_search_decode(ids_array, scores_array, BEAM, end_id=END)
    return main, [*outs, state_array]


def _reference(params, boot, init_ids, max_len):
    """NumPy: Paddle's rows. The state is plain rows; sequence_expand repeats row r as often
    as the previous step's row r has picks (the scores' last level)."""
    pre_ids, pre_scores, lod = init_ids, np.zeros((N, 1)), [[1] * N, [1] * N]
    state, picks, states = boot, [(init_ids, np.zeros((N, 1)), lod)], [boot]
    for _ in range(max_len):
        expanded = np.repeat(state, lod[1], axis=0)
        state = np.tanh(expanded @ params["ws"] + params["emb"][pre_ids.ravel()] @ params["we"]
                        + params["b1"])
        logits = state @ params["wo"] + params["bo"]
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :BEAM]
        accu = np.log(np.take_along_axis(p, top, 1)) + pre_scores.reshape(-1, 1)
        pre_ids, pre_scores, _, lod = beam_search_reference(pre_ids, pre_scores, top, accu,
                                                            lod, BEAM, END)
        picks.append((pre_ids, pre_scores, lod))
        states.append(state)
        if not len(pre_ids):  # the loop stops after the first step that picks nothing
            break
    return beam_search_decode_reference(picks, BEAM, END), states


@pytest.fixture(scope="module")
def decoder():
    return _decoder(5)


@pytest.mark.parametrize("end_bias", [0.0, 3.0])
def test_decoder_with_dense_boot_state_equals_numpy_beam_search(decoder, end_bias):
    """end_bias 3: sources end early (fewer live prefixes, the loop stops on is_empty)."""
    main, outs = decoder
    rng = np.random.default_rng(1)
    params = {k: rng.standard_normal(s) for k, s in PARAMS.items()}
    params["bo"][END] += end_bias
    boot, init_ids = rng.standard_normal((N, HID)), np.array([[1], [2], [3]])
    (want_ids, want_scores, want_lengths), states = _reference(params, boot, init_ids, 5)
    init = [[1] * N, [1] * N]
    feeds = {"boot": boot, "init_ids": create_lod_tensor(init_ids, init),
             "init_scores": create_lod_tensor(np.zeros((N, 1)), init)}
    fetched = run_graph(graphc.lower(main), params,
                        {k: as_feed(main, k, v) for k, v in feeds.items()},
                        [o.name for o in outs])[1]
    scope = graphc.Scope()
    with graphc.scope_guard(scope):
        for k, v in params.items():
            scope.var(k).get_tensor().set(v, graphc.CPUPlace())
        jit = graphc.Executor().run(main, feed=feeds, fetch_list=outs, return_numpy=False)
    for got in (fetched, jit):
        got_ids, got_scores = (v if isinstance(v, LoDTensor) else unpack(v) for v in got[:2])
        assert got_ids.recursive_sequence_lengths() == want_lengths
        np.testing.assert_array_equal(np.array(got_ids), want_ids)
        np.testing.assert_allclose(np.array(got_scores), want_scores, rtol=1e-9)
    # the state array fetches as Paddle's rows: the boot state as N one-row sequences, then
    # one row per live prefix (graphc keeps each as a LoD value: docs/control_flow.md)
    elements = jit[2]
    assert len(elements) == len(states)
    assert elements[0].recursive_sequence_lengths() == [[1] * N, [1] * N]
    for got, want in zip(elements, states):
        np.testing.assert_allclose(np.array(got), want, rtol=1e-9)
    if end_bias:
        assert len(states) < 6


def test_mixed_array_types_and_reverse_order():
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        i = layers.fill_constant([1], "int64", 0)
        dense = layers.data("d", shape=[2], dtype="float64")
        a = layers.array_write(dense, i)
        before = layers.array_read(a, i)
        doubled = layers.scale(before, 2.0)
        assert (before.lod_level, doubled.lod_level, a.element_lod) == (0, 0, 0)
        layers.array_write(lod_data("l", 2, level=2), layers.increment(i), array=a)
        # the read built before the LoD write, and what was built on it, are LoD values now
        assert (before.lod_level, doubled.lod_level, a.element_lod) == (2, 2, 2)
        # LoD first, dense later: the dense rows are stored as one-row sequences
        j = layers.fill_constant([1], "int64", 0)
        b = layers.array_write(lod_data("l2", 2, level=2), j)
        b = layers.array_write(dense, layers.increment(j), array=b)
    d = np.arange(6.).reshape(3, 2)
    lod_in = create_lod_tensor(np.ones((4, 2)), [[1, 2, 0], [2, 1, 1]])
    got_a, got_doubled, got_b = graphc.Executor().run(
        main, feed={"d": d, "l": lod_in, "l2": lod_in}, fetch_list=[a, doubled, b],
        return_numpy=False)
    assert [e.recursive_sequence_lengths() for e in got_a] == [[[1] * 3, [1] * 3],
                                                              [[1, 2, 0], [2, 1, 1]]]
    np.testing.assert_array_equal(np.array(got_a[0]), d)
    np.testing.assert_array_equal(np.array(got_doubled), 2 * d)
    np.testing.assert_array_equal(np.array(got_b[1]), d)


def test_refusals_name_the_array_and_op():
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        i = layers.fill_constant([1], "int64", 0)
        a = layers.array_write(layers.data("d", shape=[2], dtype="float64"), i)
        layers.argmax(layers.array_read(a, i), axis=1)  # an op that refuses LoD values
        with pytest.raises(ShapeError, match=r"array_write at .*test_array_mix.py.* makes the "
                                              r"array .* an array of LoD values.*arg_max"):
            layers.array_write(lod_data("l", 2, level=2), layers.increment(i), array=a)
        b = layers.array_write(layers.data("e", shape=[2], dtype="float64"), i)
        with pytest.raises(ShapeError, match="an array's elements share one type"):
            layers.array_write(lod_data("r", 3, level=2), i, array=b)  # other rows


def test_sequence_expand_of_two_level_x_reads_its_tokens_as_rows():
    """A 2-level X (Paddle refuses one) is graphc's LoD form of Paddle's rows: its tokens are
    expanded as a dense X's rows; their count must be Y's ref-level entries (a data check)."""
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        x = lod_data("x", 2, "float64", 2)
        out = layers.sequence_expand(x, lod_data("y", 1, "float64", 2))
    x_val = create_lod_tensor(np.arange(6.).reshape(3, 2), [[1, 1], [2, 1]])
    y_val = create_lod_tensor(np.zeros((4, 1)), [[2, 1], [1, 0, 3]])
    got, = graphc.Executor().run(main, feed={"x": x_val, "y": y_val}, fetch_list=[out],
                                 return_numpy=False)
    np.testing.assert_array_equal(np.array(got), np.repeat(np.arange(6.).reshape(3, 2),
                                                           [1, 0, 3], axis=0))
    assert got.recursive_sequence_lengths() == [[2, 1], [1, 0, 3]]
    with pytest.raises(DataError, match="as many rows"):
        graphc.Executor().run(main, feed={"x": x_val, "y": create_lod_tensor(
            np.zeros((4, 1)), [[1, 1], [1, 3]])}, fetch_list=[out])
    # level 0 of a 1-level Y (the OCR decoder's attention over its encoder sequences)
    main = graphc.Program()
    with graphc.program_guard(main, graphc.Program()):
        out = layers.sequence_expand(lod_data("x", 2, "float64", 2),
                                     lod_data("y", 1, "float64", 1))
    got, = graphc.Executor().run(main, feed={"x": x_val, "y": create_lod_tensor(
        np.zeros((5, 1)), [[2, 0, 3]])}, fetch_list=[out], return_numpy=False)
    np.testing.assert_array_equal(np.array(got), np.repeat(np.arange(6.).reshape(3, 2),
                                                           [2, 0, 3], axis=0))
    assert got.recursive_sequence_lengths() == [[2, 0, 3]]
    with pytest.raises(DataError, match="as many rows"):
        graphc.Executor().run(main, feed={"x": x_val, "y": create_lod_tensor(
            np.zeros((5, 1)), [[2, 3]])}, fetch_list=[out])


def _fd_check(build, feed):
    """Every parameter's gradient equals central finite differences (float64)."""
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        loss = build()
        pairs = fluid.backward.append_backward(loss)
    scope = graphc.Scope()
    with graphc.scope_guard(scope):
        exe = graphc.Executor()
        exe.run(start)
        for p, g in pairs:
            w = np.array(scope.find_var(p.name).get_tensor())
            grad = np.asarray(exe.run(main, feed=feed, fetch_list=[g])[0])
            fd = np.zeros_like(w)
            for idx in np.ndindex(w.shape):
                vals = []
                for e in (1e-6, -1e-6):
                    moved = w.copy()
                    moved[idx] += e
                    scope.var(p.name).get_tensor().set(moved, graphc.CPUPlace())
                    vals.append(exe.run(main, feed=feed, fetch_list=[loss])[0].item())
                fd[idx] = (vals[0] - vals[1]) / 2e-6
            scope.var(p.name).get_tensor().set(w, graphc.CPUPlace())
            np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7, err_msg=p.name)
            assert np.abs(fd).max() > 0.1, p.name


def test_gradients_through_a_mixed_array_and_a_loop_reading_lod_values():
    rng = np.random.default_rng(0)

    def mixed():  # dense element 0, LoD element 1, both read back
        a = layers.array_write(layers.fc(layers.data("d", [2], "float64"), 2),
                               layers.fill_constant([1], "int64", 0))
        a = layers.array_write(layers.fc(lod_data("l", 2, level=2), 2),
                               layers.fill_constant([1], "int64", 1), array=a)
        reads = [layers.array_read(a, layers.fill_constant([1], "int64", k)) for k in (0, 1)]
        return layers.elementwise_add(*[layers.reduce_sum(layers.square(r)) for r in reads])

    _fd_check(mixed, {"d": rng.standard_normal((3, 2)), "l": create_lod_tensor(
        rng.standard_normal((4, 2)), [[1, 2, 0], [2, 1, 1]])})

    def loop():  # a While body reading an outer LoD value (an encoder's sequences)
        enc = layers.fc(lod_data("s", 2), 2, act="tanh")
        i, n = layers.fill_constant([1], "int64", 0), layers.fill_constant([1], "int64", 3)
        acc = layers.fill_constant([1], "float64", 0.)
        acc.stop_gradient = False
        cond = layers.less_than(i, n)
        with layers.While(cond).block():
            pooled = layers.sequence_pool(enc, "sum")
            layers.assign(acc + layers.reduce_sum(layers.square(pooled)), acc)
            layers.increment(i, in_place=True)
            layers.less_than(i, n, cond=cond)
        return layers.reduce_sum(acc)

    _fd_check(loop, {"s": create_lod_tensor(rng.standard_normal((3, 2)), [[1, 2]])})

    def expand():  # sequence_expand of a 2-level X (its tokens as rows)
        x = layers.fc(lod_data("x", 2, "float64", 2), 2)
        out = layers.sequence_expand(x, lod_data("y", 1, "float64", 2))
        return layers.reduce_sum(layers.square(out))

    _fd_check(expand, {"x": create_lod_tensor(rng.standard_normal((3, 2)), [[1, 1], [2, 1]]),
                       "y": create_lod_tensor(np.zeros((4, 1)), [[2, 1], [1, 0, 3]])})


def test_backward_through_a_loop_carrying_lod_values_is_refused():
    main, start = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, start):
        i, n = layers.fill_constant([1], "int64", 0), layers.fill_constant([1], "int64", 2)
        a = layers.array_write(layers.fc(layers.data("d", [2], "float64"), 2), i)
        y = lod_data("y", 1, "float64", 2)
        cond = layers.less_than(i, n)
        with layers.While(cond).block():
            r = layers.array_read(a, i)
            nxt = layers.sequence_expand(r, y)
            layers.increment(i, in_place=True)
            layers.array_write(layers.fc(nxt, 2), i, array=a)
            layers.less_than(i, n, cond=cond)
        loss = layers.reduce_sum(layers.array_read(a, layers.fill_constant([1], "int64", 0)))
        grads = [g for _, g in fluid.backward.append_backward(loss)]
    exe = graphc.Executor()
    exe.run(start)
    y = create_lod_tensor(np.zeros((3, 1)), [[1, 1, 1], [1, 1, 1]])
    with pytest.raises(ShapeError, match="loop that carries an array of LoD values"):
        exe.run(main, feed={"d": np.ones((3, 2)), "y": y}, fetch_list=[loss, *grads])


def test_saved_decoder_with_a_mixed_array_loads_and_decodes_the_same(decoder, tmp_path):
    """save_inference_model writes the mixed array in Paddle's format; loading it retypes the
    array where a read is declared a LoD value (before the loop's LoD write is read back)."""
    main, outs = decoder
    rng = np.random.default_rng(2)
    params = {k: rng.standard_normal(s) for k, s in PARAMS.items()}
    init = [[1] * N, [1] * N]
    feeds = {"boot": rng.standard_normal((N, HID)),
             "init_ids": create_lod_tensor(np.array([[1], [2], [3]]), init),
             "init_scores": create_lod_tensor(np.zeros((N, 1)), init)}
    with graphc.scope_guard(graphc.Scope()):
        for k, v in params.items():
            graphc.global_scope().var(k).get_tensor().set(v, graphc.CPUPlace())
        exe = graphc.Executor()
        want = exe.run(main, feed=feeds, fetch_list=outs[:2], return_numpy=False)
        fluid.io.save_inference_model(str(tmp_path), list(feeds), outs[:2], exe,
                                      main_program=main)
    with graphc.scope_guard(graphc.Scope()):
        exe = graphc.Executor()
        prog, _, targets = fluid.io.load_inference_model(str(tmp_path), exe)
        got = exe.run(prog, feed=feeds, fetch_list=targets, return_numpy=False)
    for w, g in zip(want, got):
        assert g.recursive_sequence_lengths() == w.recursive_sequence_lengths()
        np.testing.assert_array_equal(np.array(g), np.array(w))
