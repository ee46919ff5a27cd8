"""ctc_greedy_decoder on LoD input (Paddle 1.8's LoD form: ctc_align of each token's arg-max):
a NumPy reference of Paddle's kernel on random LoDs, the jitted Executor and the interpreter,
its output in the input's token buffer, and the CRNN-CTC train/eval path it unblocks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from losses_more_reference import levenshtein

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError
from graphc.runtime.lod import create_lod_tensor, unpack
from graphc.testing.lod import as_feed, lod_lengths, split

pytestmark = pytest.mark.timeout(300)
CLASSES = 4  # num_classes + 1 columns: few classes, so repeats and blanks are common


def ctc_align_ref(path, blank, merge_repeated=True):
    """Paddle's ctc_align over one sequence: a token is kept unless it is the blank or (when
    merging) equals the token just before it, blank or not."""
    out, prev = [], -1
    for tok in path:
        if tok != blank and not (merge_repeated and tok == prev):
            out.append(int(tok))
        prev = tok
    return out


def _decoder_program(blank):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, CLASSES], "float32", lod_level=1)
        out = layers.ctc_greedy_decoder(x, blank=blank)
    return main, out


@pytest.fixture(scope="module")
def decoders():
    """One program and Executor per blank, reused by every example (compiled per bucket)."""
    return {b: (*_decoder_program(b), graphc.Executor()) for b in (0, CLASSES - 1)}


def _probs(paths, rng):
    """Per-token scores whose arg-max is ``paths`` (random otherwise)."""
    tokens = np.array([t for p in paths for t in p], "int64")
    x = rng.uniform(0, 0.5, (len(tokens), CLASSES)).astype("float32")
    x[np.arange(len(tokens)), tokens] = 1.0
    return create_lod_tensor(x, [[len(p) for p in paths]])


def _both(main, exe, out, feed):
    """(tokens, lengths) of ``out`` from the jitted Executor and from the interpreter."""
    (jitted,) = exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
    _, (interp,) = run_graph(graphc.lower(main), {}, {k: as_feed(main, k, v)
                                                      for k, v in feed.items()}, [out.name])
    interp = unpack(interp)
    return [(np.array(t), t.recursive_sequence_lengths()) for t in (jitted, interp)]


def _check(got, want):
    tokens = np.array([t for seq in want for t in seq], "int64").reshape(-1, 1)
    for data, lengths in got:
        assert lengths == [[len(s) for s in want]]
        assert data.dtype == np.int64
        np.testing.assert_array_equal(data, tokens)


@pytest.mark.parametrize("blank", [0, CLASSES - 1])
def test_paths_with_repeats_blanks_and_empty_sequences(decoders, blank):
    other = CLASSES - 1 - blank  # a non-blank class at the other end
    paths = [[1, 1, blank, 1, 2, 2], [blank] * 3, [], [other, other, blank, other], [2],
             [blank, 2, blank, blank, 2, 2, 1]]
    main, out, exe = decoders[blank]
    want = [ctc_align_ref(p, blank) for p in paths]
    assert want[0] == [1, 1, 2] and want[1] == [] and want[3] == [other, other]
    _check(_both(main, exe, out, {"x": _probs(paths, np.random.default_rng(0))}), want)


@settings(max_examples=10, deadline=None)
@given(lengths=lod_lengths(1, max_sequences=6, max_length=9), seed=st.integers(0, 2 ** 16),
       blank=st.sampled_from([0, CLASSES - 1]))
def test_random_lods_match_paddles_kernel(decoders, lengths, seed, blank):
    rng = np.random.default_rng(seed)
    paths = [list(rng.integers(0, CLASSES, n)) for n in lengths[0]]
    main, out, exe = decoders[blank]
    _check(_both(main, exe, out, {"x": _probs(paths, rng)}),
           [ctc_align_ref(p, blank) for p in paths])


def test_a_level_2_input_aligns_its_outer_sequences():
    """Paddle aligns over the outermost level: an entry's sub-sequences run back to back (a
    repeat across their border merges) and the result has one level."""
    x = graphc.data("x2", [-1, CLASSES], "float32", lod_level=2)
    out = layers.ctc_greedy_decoder(x, blank=0)
    assert out.lod_level == 1
    subs = [[1, 1], [1, 0, 2], [], [3], [0], [2, 2, 3]]  # entries of 3, 0, 1 and 2 subs
    feed = _probs(subs, np.random.default_rng(5))
    feed = create_lod_tensor(np.array(feed), [[3, 0, 1, 2], [len(s) for s in subs]])
    main = graphc.default_main_program()
    flat = [sum(subs[:3], []), [], subs[3], subs[4] + subs[5]]
    _check(_both(main, graphc.Executor(), out, {"x2": feed}),
           [ctc_align_ref(p, 0) for p in flat])


def test_a_batch_that_decodes_to_nothing_has_no_tokens(decoders):
    """Paddle's kernel writes one -1 row when every sequence comes out empty (its tensors
    cannot be empty); graphc's result is what that row stands for: no tokens at all."""
    main, out, exe = decoders[0]
    feed = {"x": _probs([[0, 0], [], [0]], np.random.default_rng(1))}
    _check(_both(main, exe, out, feed), [[], [], []])
    (flat,) = exe.run(main, feed=feed, fetch_list=[out])
    assert flat.shape == (0, 1)


def test_the_output_reuses_the_inputs_token_buffer():
    """The kept tokens never outnumber the input's, so the result lives in the input's
    bucket: a fresh length pattern in the same bucket compiles nothing new."""
    main, out = _decoder_program(0)
    exe = graphc.Executor()
    rng = np.random.default_rng(2)
    for lens in ([5, 3, 8], [1, 9, 2], [16, 0, 0]):
        paths = [list(rng.integers(0, CLASSES, n)) for n in lens]
        (got,) = exe.run(main, feed={"x": _probs(paths, rng)}, fetch_list=[out],
                         return_numpy=False)
        assert got.recursive_sequence_lengths() == [[len(ctc_align_ref(p, 0)) for p in paths]]
    (prep,) = exe._prepared[main][1].values()
    assert len(prep.steps) == 1  # lengths 16, 12, 16: bucket 16 each time


def test_two_devices_decode_their_own_sequences_as_one_does(decoders):
    """Split by whole sequences, each device's kept ids in its own block of the buffer."""
    main, out, _ = decoders[0]
    paths = [[1, 1, 0, 1, 2, 2], [0, 0, 0], [], [3, 3, 0, 3]]
    prog = graphc.CompiledProgram(main).with_data_parallel(places=graphc.cpu_places(2))
    (got,) = graphc.Executor().run(prog, feed={"x": _probs(paths, np.random.default_rng(4))},
                                   fetch_list=[out], return_numpy=False)
    _check([(np.array(got), got.recursive_sequence_lengths())],
           [ctc_align_ref(p, 0) for p in paths])


def test_a_dense_input_without_lengths_names_both_forms():
    with pytest.raises(ProgramError, match=r"input \[5, 4\] is dense; give a LoD value"):
        # not a feed (a feed declared dense is re-typed on the layer's demand: seqtype)
        layers.ctc_greedy_decoder(layers.scale(layers.fill_constant([5, 4], "float32", 0.0)),
                                  blank=0)


def test_the_decoder_prints_parses_and_clones_for_test():
    main, out = _decoder_program(2)
    text = graphc.lower(main).to_text()
    assert "ctc_align" in text and "lod1<i64" in text
    assert graphc.parse(text).to_text() == text
    test_prog = main.clone(for_test=True)
    assert test_prog.global_block().var(out.name).lod_level == 1


def test_crnn_ctc_trains_and_scores_its_greedy_decoding():
    """PaddleCV ocr_recognition's crnn_ctc in miniature (graphc's own code, Paddle's layers):
    conv features sliced into a sequence by im2sequence, a GRU, warpctc as the loss, the
    greedy decoding scored by the EditDistance evaluator against the labels."""
    classes = 5
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        images = fluid.data("pixel", [None, 1, 4, 12], "float32")
        label = fluid.data("label", [None, 1], "int32", lod_level=1)
        conv = fluid.layers.conv2d(images, 6, 3, padding=1, act="relu")
        seq = fluid.layers.im2sequence(conv, filter_size=[4, 1], stride=[1, 1])
        gru = fluid.layers.dynamic_gru(fluid.layers.fc(seq, 3 * 8), size=8)
        logits = fluid.layers.fc([seq, gru], classes + 1)
        cost = fluid.layers.reduce_sum(
            fluid.layers.warpctc(logits, label, blank=classes, norm_by_times=True))
        decoded = fluid.layers.ctc_greedy_decoder(logits, blank=classes)
        with pytest.warns(DeprecationWarning):
            evaluator = fluid.evaluator.EditDistance(
                decoded, fluid.layers.cast(label, "int64"))
        test_program = main.clone(for_test=True)
        fluid.optimizer.Adam(0.05).minimize(cost)
    rng = np.random.default_rng(3)
    labels = [[1, 2], [3], [0, 4, 4], [2, 1]]
    pixels = rng.standard_normal((4, 1, 4, 12)).astype("float32")
    flat = np.concatenate(labels).reshape(-1, 1).astype("int32")
    feed = {"pixel": pixels, "label": create_lod_tensor(flat, [[len(s) for s in labels]])}
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = [exe.run(main, feed=feed, fetch_list=[cost])[0].item() for _ in range(40)]
        evaluator.reset(exe)
        hyp, dist, errors = exe.run(test_program, feed=feed,
                                    fetch_list=[decoded, *evaluator.metrics],
                                    return_numpy=False)
        avg, err = evaluator.eval(exe)
    assert losses[-1] < 0.5 * losses[0], losses
    hyps = split(np.array(hyp)[:, 0], hyp.recursive_sequence_lengths()[0])
    mine = [levenshtein(h, r) / len(r) for h, r in zip(hyps, labels)]
    np.testing.assert_allclose(np.array(dist), [sum(mine)], rtol=1e-6)
    assert np.array(errors).item() == sum(d > 0 for d in mine)
    np.testing.assert_allclose([avg.item(), err.item()],
                               [np.mean(mine), np.mean([d > 0 for d in mine])], rtol=1e-6)
