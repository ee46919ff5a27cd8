"""What stopped real PaddlePaddle/models 1.8 programs ported by the rule alone (port24), each
checked against Paddle's documented behaviour, never against the program itself."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.io import DataLoader

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.dataio.loader_epoch import pack_lod_batches
from graphc.ir.errors import ProgramError
from graphc.runtime.lod import LoDError

pytestmark = pytest.mark.timeout(120)


def test_a_loaders_lod_feed_reads_as_the_lod_tensor_it_packs():
    """Paddle's loaders yield LoDTensors: scripts call ``.lod()`` and ``np.array`` on them
    before (or instead of) a step, as lexical_analysis's predict does."""
    words = fluid.data("words", [-1, 1], "int64", lod_level=1)
    seqs = [[3, 4, 5], [6], [7, 8]]
    loader = DataLoader.from_generator(feed_list=[words], capacity=4, iterable=True)
    loader.set_sample_list_generator(lambda: iter([[(s,) for s in seqs]]),
                                     places=[fluid.CPUPlace()])
    (item,) = list(loader())
    t = item[0]["words"]
    assert t.lod() == [[0, 3, 4, 6]]
    assert t.recursive_sequence_lengths() == [[3, 1, 2]]
    assert t.has_valid_recursive_sequence_lengths()
    assert t.shape() == [6, 1]
    np.testing.assert_array_equal(np.array(t), np.array([3, 4, 5, 6, 7, 8]).reshape(6, 1))
    np.testing.assert_array_equal(t.numpy(), np.array(t))


def test_a_packed_feed_without_its_source_unpacks_each_devices_sequences():
    a = fluid.data("a", [-1, 1], "int64", lod_level=1)
    first = fluid.create_lod_tensor(np.arange(5).reshape(5, 1), [[2, 3, 0, 0]], None)
    (packed,) = pack_lod_batches([a], [(first,)], 2)
    packed.source = None  # as a batch placed on the devices holds only its packed array
    assert packed.recursive_sequence_lengths() == [[2, 3, 0, 0]]
    np.testing.assert_array_equal(np.array(packed), np.arange(5).reshape(5, 1))
    (stacked,) = pack_lod_batches([a], [(first,), (first,)], 1)
    stacked.source = None
    with pytest.raises(LoDError, match="2 stacked batches"):
        stacked.lod()


# -- shuffle_batch --------------------------------------------------------------------------
def _shuffle_program(seed):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2, 3], "float32")
        out = fluid.contrib.layers.shuffle_batch(x, seed=seed)
        idx = main.global_block().ops[-1].output("ShuffleIdx")[0]
    return main, out, idx


@pytest.mark.parametrize("seed", [None, 9])
def test_shuffle_batch_permutes_rows_anew_each_step_on_both_backends(seed):
    """Paddle's shuffle_batch: Out's rows (all dims but the last, flattened) are X's in a
    random order (ShuffleIdx[i] the row of X at Out's row i); every step draws a new one."""
    main, out, idx = _shuffle_program(seed)
    x = np.arange(4 * 2 * 3, dtype="float32").reshape(4, 2, 3)
    exe = fluid.Executor(fluid.CPUPlace())
    orders = []
    for step in range(4):
        got, order = exe.run(main, feed={"x": x}, fetch_list=[out, idx])
        assert sorted(order.tolist()) == list(range(8))
        np.testing.assert_array_equal(got.reshape(8, 3), x.reshape(8, 3)[order])
        _, (ref_out, ref_order) = run_graph(graphc.lower(main), {}, {"x": x}, [out.name, idx],
                                            step=step)
        np.testing.assert_array_equal(ref_out.reshape(8, 3), x.reshape(8, 3)[ref_order])
        orders.append(tuple(order.tolist()))
    assert len(set(orders)) > 1


def test_shuffle_batch_refuses_a_seed_variable():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [-1, 3], "float32")
        with pytest.raises(ProgramError, match="seed must be an int"):
            fluid.contrib.layers.shuffle_batch(x, seed=x)


# -- contrib.layers.basic_lstm / basic_gru ----------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _lstm_step(p, x, h, c, forget_bias):
    i, f, j, o = np.split(np.concatenate([x, h], 1) @ p[0] + p[1], 4, axis=1)
    c2 = c * _sig(f + forget_bias) + _sig(i) * np.tanh(j)
    return [np.tanh(c2) * _sig(o), c2]


def _gru_step(p, x, h):
    r, u = np.split(_sig(np.concatenate([x, h], 1) @ p[0] + p[2]), 2, axis=1)
    cand = np.tanh(np.concatenate([x, r * h], 1) @ p[1] + p[3])
    return [u * h + (1 - u) * cand]


def rnn_reference(step, params, x, inits, lengths, layers_, ways):
    """Paddle's documented basic_lstm/basic_gru on batch-major ``x``: per direction every
    layer runs over time (the backward way over the reversed sequence, padding first), a
    state stops changing past its sequence's length, layer outputs feed the next layer."""
    b, t = x.shape[:2]
    mask = (np.arange(t)[None, :] < np.asarray(lengths)[:, None]).astype(x.dtype)
    outs, lasts = [], [np.zeros_like(s) for s in inits]
    for way in range(ways):
        seq = x.transpose(1, 0, 2)
        m = mask.T
        if way:
            seq, m = seq[::-1], m[::-1]
        for layer in range(layers_):
            k = layer * ways + way
            states = [s[k] for s in inits]
            ys = []
            for s in range(t):
                new = step(params[way][layer], seq[s], *states)
                states = [m[s][:, None] * n + (1 - m[s][:, None]) * o
                          for n, o in zip(new, states)]
                ys.append(states[0])
            seq = np.stack(ys)
            for last, st in zip(lasts, states):
                last[k] = st
        outs.append(seq[::-1] if way else seq)
    return np.concatenate(outs, axis=2).transpose(1, 0, 2), lasts


def _build_rnn(kind, layers_, bidirectional, with_init, dtype="float32"):
    main, startup = fluid.Program(), fluid.Program()
    ways = 2 if bidirectional else 1
    uni = fluid.initializer.Uniform(-0.6, 0.6, seed=3)
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 5, 3], dtype)
        lens = fluid.data("lens", [-1], "int64")
        h0 = fluid.data("h0", [layers_ * ways, -1, 4], dtype) if with_init else None
        c0 = fluid.data("c0", [layers_ * ways, -1, 4], dtype) if with_init else None
        attrs = dict(num_layers=layers_, sequence_length=lens, bidirectional=bidirectional,
                     param_attr=fluid.ParamAttr(initializer=uni),
                     bias_attr=fluid.ParamAttr(initializer=uni), dtype=dtype)
        if kind == "lstm":
            outs = fluid.contrib.layers.basic_lstm(x, h0, c0, 4, forget_bias=0.5, **attrs)
        else:
            outs = fluid.contrib.layers.basic_gru(x, h0, 4, **attrs)
    return main, startup, list(outs)


def _unit_params(main, kind, layers_, ways):
    """Each way's and layer's parameters, by Paddle's names."""
    unit = {"lstm": "BasicLSTMUnit", "gru": "BasicGRUUnit"}[kind]
    names = [p.name for p in main.all_parameters()]
    out = []
    for way in ("", "reverse_")[:ways]:
        per = []
        for layer in range(layers_):
            scope = f"basic_{kind}_{way}layers_{layer}/{unit}_0"
            mine = sorted(n for n in names if n.startswith(scope + "."))
            ws = [n for n in mine if ".w_" in n]
            bs = [n for n in mine if ".b_" in n]
            per.append(ws + bs)
        out.append(per)
    return out


@pytest.mark.parametrize("kind, layers_, bidirectional, with_init", [
    ("lstm", 2, False, True), ("lstm", 1, True, False), ("gru", 2, True, True),
    ("gru", 1, False, False)])
def test_basic_rnns_match_a_numpy_reference_on_both_backends(kind, layers_, bidirectional,
                                                             with_init):
    ways = 2 if bidirectional else 1
    main, startup, outs = _build_rnn(kind, layers_, bidirectional, with_init)
    rng = np.random.default_rng(0)
    b = 3
    feed = {"x": rng.standard_normal((b, 5, 3)).astype("float32"),
            "lens": np.array([5, 2, 3], "int64")}
    n_states = 2 if kind == "lstm" else 1
    inits = [rng.standard_normal((layers_ * ways, b, 4)).astype("float32") if with_init else
             np.zeros((layers_ * ways, b, 4), "float32") for _ in range(n_states)]
    if with_init:
        feed.update(zip(("h0", "c0"), inits))
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    names = _unit_params(main, kind, layers_, ways)
    params = [[[np.asarray(scope[n]) for n in per] for per in way] for way in names]
    assert all(len(p) == (2 if kind == "lstm" else 4) for way in params for p in way)
    if kind == "lstm":
        def step(p, x, h, c):
            return _lstm_step(p, x, h, c, 0.5)
    else:
        step = _gru_step
    want_out, want_lasts = rnn_reference(step, params, feed["x"], inits, feed["lens"],
                                         layers_, ways)
    got = exe.run(main, feed=feed, fetch_list=outs, scope=scope)
    state = {n: np.asarray(scope[n]) for way in names for per in way for n in per}
    _, ref = run_graph(graphc.lower(main), state, feed, [o.name for o in outs])
    for values in (got, ref):
        np.testing.assert_allclose(values[0], want_out, rtol=2e-5, atol=2e-5)
        assert values[0].shape == (b, 5, 4 * ways)
        for g, w in zip(values[1:], want_lasts):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_basic_lstm_gradients_equal_finite_differences():
    from graphc.testing.lod_checks import fd_check, token_loss
    main, startup, outs = _build_rnn("lstm", 1, True, True, dtype="float64")
    rng = np.random.default_rng(1)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    state = {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}
    with fluid.program_guard(main, startup), fluid.unique_name.guard("fd_"):
        for name in ("x", "c0"):
            main.global_block().var(name).stop_gradient = False
        loss, w = token_loss(fluid.layers.reshape(outs[0], [-1, 8]), rng)
        loss2 = fluid.layers.reduce_sum(fluid.layers.square(outs[2]))
        loss = fluid.layers.elementwise_add(loss, loss2)
    feed = {"x": rng.standard_normal((2, 5, 3)), "lens": np.array([5, 3], "int64"),
            "h0": rng.standard_normal((2, 2, 4)), "c0": rng.standard_normal((2, 2, 4)), **w}
    first_w = next(n for n in state if ".w_" in n)
    fd_check(main, loss, feed, ["x", "c0", first_w], rng, state=state, coords=2)


def test_basic_rnn_bad_input_names_the_layer():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [-1, 3], "float32")
        with pytest.raises(ProgramError, match=r"basic_lstm: input x has shape \[-1, 3\]"):
            fluid.contrib.layers.basic_lstm(x, None, None, 4)
        seq = fluid.data("seq", [-1, 5, 3], "float32")
        h0 = fluid.data("h0", [1, -1, 4], "float32")
        with pytest.raises(ProgramError, match="both init_hidden and init_cell"):
            fluid.contrib.layers.basic_lstm(seq, h0, None, 4)


# -- framework details real programs rely on ------------------------------------------------
def test_a_multislot_sample_may_be_a_zip_of_names_and_values():
    """Paddle's MultiSlotDataGenerator takes generate_sample's ``zip(names, values)`` (the
    CTR-DNN generator yields one) as the list it stands for."""
    from graphc.fluid.incubate import data_generator as dg
    gen = dg.MultiSlotDataGenerator()
    line = gen._gen_str(zip(["dense", "C1", "label"], [[0.5, 1], [7], [1]]))
    assert line == gen._gen_str([("dense", [0.5, 1]), ("C1", [7]), ("label", [1])])
    assert line == "2 0.5 1 1 7 1 1\n"


def test_auc_states_carry_paddles_names_and_reset_by_them():
    """Paddle names auc's four state tensors as unnamed globals (``_generated_var_0..3``);
    PaddleRec's CTR-DNN infer zeroes them by those names between test passes."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        pred = fluid.data("pred", [-1, 2], "float32")
        label = fluid.data("label", [-1, 1], "int64")
        auc, _, states = fluid.layers.auc(pred, label, num_thresholds=15)
    assert [s.name for s in states] == [f"_generated_var_{i}" for i in range(4)]
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]], "float32")
    y = np.array([[0], [1], [1], [0]], "int64")
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed={"pred": p, "label": y}, fetch_list=[auc])
        assert np.asarray(scope["_generated_var_2"]).sum() == 2  # both positives counted
        for name in ("_generated_var_2", "_generated_var_3"):
            t = fluid.global_scope().var(name).get_tensor()
            t.set(np.zeros(t._get_dims(), "int64"), fluid.CPUPlace())
        (got,) = exe.run(main, feed={"pred": p[:2], "label": y[:2]}, fetch_list=[auc])
    np.testing.assert_allclose(got, [1.0])  # only the fresh batch counts: 0.8 > 0.1


# -- matmul of a LoD value ------------------------------------------------------------------
def test_matmul_scores_each_token_of_a_lod_value_and_keeps_its_lod():
    """Paddle's matmul shares X's LoD with Out: a [tokens, K] sequence batch times a dense
    [V, K]^T gives [tokens, V] with the same sequences (gru4rec's infer)."""
    from graphc.testing.lod_checks import fd_check, token_loss
    rng = np.random.default_rng(2)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float64", lod_level=1)
        x.stop_gradient = False
        y = fluid.data("y", [4, 3], "float64")
        y.stop_gradient = False
        out = fluid.layers.matmul(x, y, transpose_y=True, alpha=0.5)
        assert out.lod_level == 1
        loss, w = token_loss(out, rng)
    tokens = rng.standard_normal((5, 3))
    feed = {"x": fluid.create_lod_tensor(tokens, [[2, 3]], fluid.CPUPlace()),
            "y": rng.standard_normal((4, 3)), **w}
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out],
                                                  return_numpy=False)
    assert got.recursive_sequence_lengths() == [[2, 3]]
    np.testing.assert_allclose(np.array(got), 0.5 * tokens @ feed["y"].T, rtol=1e-12)
    fd_check(main, loss, feed, ["x", "y"], rng, coords=4)


def test_matmul_refuses_to_transpose_a_lod_value_across_its_tokens():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [-1, 3], "float32", lod_level=1)
        y = fluid.data("y", [-1, 4], "float32")
        with pytest.raises(graphc.ShapeError, match="one row per token"):
            fluid.layers.matmul(x, y, transpose_x=True)


# -- fuse-embedding-seq-pool over fluid.embedding ------------------------------------------
def test_pooled_fluid_embedding_rows_are_not_fused_and_train_as_unfused():
    """fluid.embedding keeps the ids' trailing 1 ([tokens, 1] ids -> [tokens, 1, D] rows, so
    sum-pooling gives [N, 1, D]); the pass declines these lookups (PaddleRec ssr's bag-of-
    words encoders), which then run exactly as built."""
    from graphc.ir.graph import lower
    from graphc.passes import PassManager, make_pass
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.data("a", [-1, 1], "int64", lod_level=1)
        b = fluid.data("b", [-1, 1], "int64", lod_level=1)
        pooled = [fluid.layers.sequence_pool(fluid.embedding(v, [7, 2], param_attr="T"), "sum")
                  for v in (a, b)]
        assert list(pooled[0].shape) == [-1, 1, 2]
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(pooled[0], pooled[1]))
        fluid.optimizer.SGD(0.5).minimize(loss)
    graph = lower(main)
    report = PassManager([make_pass("fuse-embedding-seq-pool")]).run(graph, keep=[])
    stats = {k: v for r in report.passes for k, v in r.stats.items()}
    assert stats == {"skipped: Ids is not [tokens] or [tokens, 1]": 2}
    table = np.arange(14, dtype="float32").reshape(7, 2) / 7
    feed = {"a": fluid.create_lod_tensor(np.array([[1], [2], [3]]), [[2, 1]], None),
            "b": fluid.create_lod_tensor(np.array([[4], [5]]), [[1, 1]], None)}
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    scope["T"] = table
    (got,) = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    pa, pb = table[1] + table[2], table[3]
    want = pa @ table[4] + pb @ table[5]
    np.testing.assert_allclose(got, [want], rtol=1e-6)


def test_fluid_load_into_the_startup_program_reads_parameters_and_optimizer_state(tmp_path):
    """Paddle's startup program holds the parameters as Parameters, so fluid.load(startup,
    path) reads them from .pdparams and the optimizer's state from .pdopt (PaddleNLP's
    sentiment_classification restores its checkpoint so)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.Adam(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[loss])
        saved = {v.name: np.array(fluid.global_scope()[v.name]) for v in main.list_vars()
                 if v.persistable}
        fluid.save(main, str(tmp_path / "ckpt"))
    with fluid.scope_guard(fluid.Scope()):
        fluid.load(startup, str(tmp_path / "ckpt"), exe)
        for name, value in saved.items():
            if name in startup.global_block().vars:
                np.testing.assert_array_equal(np.asarray(fluid.global_scope()[name]), value)
    assert any(p.name in startup.global_block().vars for p in main.all_parameters())


def test_fluid_load_reads_what_save_persistables_or_a_combined_save_wrote(tmp_path):
    """Paddle 1.8's fluid.load, finding no ``.pdparams``, loads a save_vars-family directory
    (every program variable with a file there) or, given var_list, one combined file
    (similarity_net restores its saved inference model's directory so)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        fluid.layers.fc(x, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    params = main.all_parameters()
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        want = {p.name: np.array(fluid.global_scope()[p.name]) for p in params}
        fluid.io.save_persistables(exe, str(tmp_path / "dir"), main)
        fluid.io.save_params(exe, str(tmp_path / "one"), main, filename="all")
    for path, var_list in ((tmp_path / "dir", None), (tmp_path / "one" / "all", params)):
        with fluid.scope_guard(fluid.Scope()):
            fluid.load(main, str(path), exe, var_list=var_list)
            for name, value in want.items():
                np.testing.assert_array_equal(np.asarray(fluid.global_scope()[name]), value)
    with fluid.scope_guard(fluid.Scope()), pytest.raises(graphc.GraphcError, match="var_list"):
        fluid.load(main, str(tmp_path / "one" / "all"), exe)


# -- fluid.evaluator.EditDistance -----------------------------------------------------------
def _levenshtein(a, b):
    d = np.arange(len(b) + 1)
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return int(d[-1])


def test_edit_distance_evaluator_accumulates_until_reset():
    """Paddle's deprecated fluid.evaluator.EditDistance: states summed by the main program
    each step; eval() = (total distance / sequences, sequences with errors / sequences),
    from the last reset on."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        hyp = fluid.data("hyp", [-1, 1], "int64", lod_level=1)
        ref = fluid.data("ref", [-1, 1], "int64", lod_level=1)
        with pytest.warns(DeprecationWarning):
            ev = fluid.evaluator.EditDistance(hyp, ref)
    batches = [([[1, 2, 3], [4, 5]], [[1, 2, 3], [4]]), ([[7], [8, 9, 9]], [[6, 7], [8, 9]])]

    def feed(h, r):
        def lod(seqs):
            return fluid.create_lod_tensor(np.concatenate(seqs).reshape(-1, 1).astype("int64"),
                                           [[len(s) for s in seqs]], fluid.CPUPlace())
        return {"hyp": lod(h), "ref": lod(r)}

    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        ev.reset(exe)
        dists = []
        for h, r in batches:
            total, errors = exe.run(main, feed=feed(h, r), fetch_list=ev.metrics)
            # the edit_distance layer's default: normalised by the reference's length
            mine = [_levenshtein(a, b) / len(b) for a, b in zip(h, r)]
            np.testing.assert_allclose(total, [sum(mine)], rtol=1e-6)
            assert errors.item() == sum(d > 0 for d in mine)
            dists += mine
        avg, err = ev.eval(exe)
        np.testing.assert_allclose(avg, [np.mean(dists)], rtol=1e-6)
        np.testing.assert_allclose(err, [np.mean([d > 0 for d in dists])], rtol=1e-6)
        ev.reset(exe)
        exe.run(main, feed=feed(*batches[0]), fetch_list=ev.metrics)
        avg, err = ev.eval(exe)
        np.testing.assert_allclose([avg.item(), err.item()], [0.5, 0.5], rtol=1e-6)  # batch 0


# -- paddle.dataset.image -------------------------------------------------------------------
def test_paddle_dataset_image_helpers(tmp_path):
    """Paddle's image helpers: decode to HWC BGR uint8 (OpenCV's order), shorter side to
    ``size`` (aspect kept, integer division), central/random crops, mirror, CHW, mean
    subtraction per channel; a lossless PNG decodes exactly."""
    from graphc.dataset import image
    from PIL import Image
    rgb = np.random.default_rng(0).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    path = tmp_path / "x.png"
    Image.fromarray(rgb).save(path)
    bgr = image.load_image(str(path))
    np.testing.assert_array_equal(bgr, rgb[:, :, ::-1])
    np.testing.assert_array_equal(image.load_image_bytes(path.read_bytes()), bgr)
    gray = image.load_image(str(path), is_color=False)
    assert gray.shape == (6, 10) and gray.dtype == np.uint8
    assert image.resize_short(bgr, 3).shape == (3, 5, 3)  # 3 * 10 // 6
    assert image.resize_short(bgr.transpose(1, 0, 2), 3).shape == (5, 3, 3)
    np.testing.assert_array_equal(image.center_crop(bgr, 4), bgr[1:5, 3:7])
    np.testing.assert_array_equal(image.left_right_flip(bgr), bgr[:, ::-1])
    np.testing.assert_array_equal(image.to_chw(bgr), bgr.transpose(2, 0, 1))
    np.random.seed(3)
    crop = image.random_crop(bgr, 4)
    assert any(np.array_equal(crop, bgr[t:t + 4, s:s + 4]) for t in range(3) for s in range(7))
    out = image.simple_transform(bgr, 6, 4, is_train=False, mean=[1.0, 2.0, 3.0])
    want = bgr[1:5, 3:7].transpose(2, 0, 1).astype("float32") - np.array(
        [1.0, 2.0, 3.0], "float32")[:, None, None]
    np.testing.assert_array_equal(out, want)  # resize to the same size keeps the pixels
    with pytest.raises(graphc.GraphcError, match="exceeds the image"):
        image.center_crop(bgr, 7)
