"""LoD core (issue 16): LoD types in the IR (text, verifier), feeding and fetching LoDTensors,
sequence_pool against ragged NumPy references (forward and finite differences), row-wise ops
keeping the LoD, interpreter == JAX, 4 devices == 1 for the CTR-DNN, bounded recompilation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
import graphc.fluid as fluid
from graphc import layers, models
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ParseError, ShapeError, VerifyError
from graphc.runtime import lod as rlod
from graphc.runtime.feeds import FeedError
from graphc.testing.lod import as_feed, lod_grad_check, lod_lengths, pool_reference, split

POOLS = ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")


def lod_tensor(data, lengths):
    return fluid.create_lod_tensor(np.asarray(data), lengths, fluid.CPUPlace())


# -- IR: types, text, verifier ---------------------------------------------------------------

def test_lod_types_print_parse_and_round_trip():
    ids = graphc.data("ids", [-1, 1], "int64", lod_level=1)
    nested = graphc.data("nested", [-1, 3], lod_level=2)
    emb = layers.embedding(ids, [10, 3])
    layers.sequence_pool(layers.elementwise_add(emb, emb), "sum")
    inner = layers.sequence_pool(nested, "max")
    assert inner.lod_level == 1 and emb.lod_level == 1
    g = graphc.lower(graphc.default_main_program())
    text = g.to_text()
    assert "input %ids: lod1<i64[-1,1]> {feed}" in text
    assert "input %nested: lod2<f32[-1,3]> {feed}" in text
    assert ": lod1<f32[-1,3]> = sequence_pool(X=%nested) {pooltype=\"MAX\"}" in text
    g2 = graphc.parse(text)
    g2.verify()
    assert g2.to_text() == text and g2.structurally_equal(g)
    with pytest.raises(ParseError, match="lod_level must be 0 to 3"):
        graphc.parse("graph @g {\n  input %x: lod4<f32[-1,2]> {feed}\n  output %x\n}")


def test_ops_without_a_lod_rule_refuse_lod_inputs():
    x = graphc.data("x", [-1, 4], lod_level=1)
    with pytest.raises(ShapeError, match="input 'X' of op reduce_prod is a LoD value "
                                         r"\(lod1<f32\[-1,4\]>"):
        layers.reduce_prod(x)
    with pytest.raises(ShapeError, match="op gather is a LoD value"):
        layers.gather(x, graphc.data("index", [-1], "int64"))
    # a dense operand of the same rank pairs with the tokens row for row (Paddle's dims[0]
    # check, a data check at run time); a lower-rank one on axis 0 is refused
    per_seq = graphc.data("per_seq", [-1, 4])
    assert layers.elementwise_add(x, per_seq).lod_level == 1
    with pytest.raises(ShapeError, match="spans the token dimension"):
        layers.elementwise_add(x, graphc.data("per_row", [-1]), axis=0)
    with pytest.raises(ShapeError, match="axis 0 of a LoD value runs across the tokens"):
        layers.softmax(x, axis=0)
    with pytest.raises(ShapeError, match="X must be a LoD value"):  # not from a feed (a feed
        # declared dense is re-typed on a sequence op's demand: seqtype)
        layers.sequence_pool(layers.fill_constant([3, 4], "float32", 1.0), "sum")


def test_verifier_refuses_lod_where_an_op_takes_none_and_as_state():
    text = ("graph @g {\n  input %x: lod1<f32[-1,4]> {feed}\n"
            "  %y: f32[4] = reduce_prod(X=%x)\n  output %y\n}")
    with pytest.raises(VerifyError, match="reduce_prod is a LoD value"):
        graphc.parse(text).verify()
    text = "graph @g {\n  input %w: lod1<f32[-1,4]> {persistable}\n  output %w\n}"
    with pytest.raises(VerifyError, match="LoD value .* not a feed"):
        graphc.parse(text).verify()
    text = ("graph @g {\n  input %x: lod1<f32[-1,4]> {feed}\n"
            "  %y: f32[-1,4] = relu(X=%x)\n  output %y\n}")
    with pytest.raises(VerifyError, match="LoD levels differ"):
        graphc.parse(text).verify()


def test_row_wise_ops_keep_the_lod_and_reductions_drop_it():
    x = graphc.data("x", [-1, 4], lod_level=1)
    h = layers.fc(x, 3, act="tanh")
    assert h.lod_level == 1
    assert layers.scale(layers.dropout(h, 0.5), 2.0).lod_level == 1
    assert layers.reduce_sum(h, dim=1).lod_level == 1
    assert layers.reduce_sum(h).lod_level == 0 and layers.mean(h).lod_level == 0
    assert layers.sequence_pool(h, "average").lod_level == 0
    assert layers.cast(h, "float64").lod_level == 1


def test_layers_data_levels():
    assert layers.data("a", [1], dtype="int64", lod_level=2).lod_level == 2
    assert layers.data("a3", [1], dtype="int64", lod_level=3).lod_level == 3
    with pytest.raises(graphc.ProgramError, match="lod_level=4"):
        layers.data("b", [1], lod_level=4)
    with pytest.raises(graphc.ProgramError, match="unknown first dimension"):
        graphc.data("c", [4, 1], lod_level=1)


# -- host values and feeds ---------------------------------------------------------------------

def test_lod_tensor_api():
    t = fluid.create_lod_tensor(np.arange(10).reshape(5, 2), [[2, 0, 3]], fluid.CPUPlace())
    assert t.recursive_sequence_lengths() == [[2, 0, 3]] and t.lod() == [[0, 2, 2, 5]]
    assert t.shape() == [5, 2] and t.has_valid_recursive_sequence_lengths()
    t.set_lod([[0, 1, 5]])
    assert t.recursive_sequence_lengths() == [[1, 4]]
    t.set_recursive_sequence_lengths([[1, 1]])
    assert not t.has_valid_recursive_sequence_lengths()
    words = fluid.create_lod_tensor([[1, 2], [3], []], [[2, 1, 0]], fluid.CPUPlace())
    assert np.array(words).tolist() == [[1], [2], [3]] and np.array(words).dtype == np.int64
    nested = fluid.create_lod_tensor(np.ones((4, 1)), [[1, 2], [3, 0, 1]], None)
    assert nested.lod() == [[0, 1, 3], [0, 3, 3, 4]]
    with pytest.raises(rlod.LoDError, match="level 1 has 2 lengths but level 0's"):
        fluid.create_lod_tensor(np.ones((4, 1)), [[1, 2], [3, 1]], None)
    r = fluid.create_random_int_lodtensor([[2, 3]], [1], fluid.CPUPlace(), low=0, high=9)
    assert r.shape() == [5, 1] and np.array(r).min() >= 0 and np.array(r).max() <= 9


def _pool_program(level=1, dtype="float32"):
    x = graphc.data("x", [-1, 2], dtype, lod_level=level)
    return x, layers.sequence_pool(x, "sum")


def test_feed_errors_name_the_feed():
    x, out = _pool_program()
    exe = graphc.Executor()

    def run(value):
        return exe.run(feed={"x": value}, fetch_list=[out])

    with pytest.raises(FeedError, match="feed 'x': .*lengths sum to 4 but the tensor has 3"):
        run(rlod.LoDTensor(np.ones((3, 2)), [[1, 3]]))  # unchecked until fed
    bad = rlod.LoDTensor(np.ones((3, 2)), [[4, -1]])
    with pytest.raises(FeedError, match="feed 'x': .*negative length"):
        run(bad)
    with pytest.raises(FeedError, match="feed 'x' has 2 LoD level.* lod_level=1"):
        run(lod_tensor(np.ones((3, 2)), [[1, 1], [1, 2]]))
    with pytest.raises(FeedError, match="feed 'x' is declared with lod_level=1"):
        run(np.ones((3, 2), "float32"))
    with pytest.raises(FeedError, match="feed 'x' has shape \\[3, 5\\]"):
        run(lod_tensor(np.ones((3, 5)), [[3]]))
    with pytest.raises(FeedError, match="feed 'x' holds no sequences"):
        run(lod_tensor(np.ones((0, 2)), [[]]))


def test_packing_buckets_and_unpacking():
    assert [rlod.bucket(n) for n in (0, 1, 16, 17, 100)] == [16, 16, 16, 32, 128]
    want = graphc.data("x", [-1, 1], "int64", lod_level=2).type
    t = lod_tensor(np.arange(5).reshape(5, 1), [[2, 1], [1, 0, 4]])
    packed = rlod.pack_feed("x", t, want, np.int64)
    assert packed.data.shape == (16, 1) and packed.lengths[0].tolist() == [2, 1]
    assert packed.lengths[1].shape == (16,) and packed.lengths[1][:3].tolist() == [1, 0, 4]
    back = rlod.unpack(packed)
    assert back.recursive_sequence_lengths() == [[2, 1], [1, 0, 4]]
    assert np.array_equal(np.array(back), np.arange(5).reshape(5, 1))
    # two devices: each gets whole sequences (35 and 5 tokens), packed into one shared
    # bucket (64 rows each), so the device split of dim 0 hands each its own block
    t1 = lod_tensor(np.arange(40).reshape(40, 1), [[30, 5, 3, 2]])
    split2 = rlod.pack_feed("x", t1, graphc.data("y", [-1, 1], "int64", lod_level=1).type,
                            np.int64, parts=2)
    assert split2.data.shape == (128, 1) and split2.lengths[0].tolist() == [30, 5, 3, 2]
    assert split2.data[64:69, 0].tolist() == [35, 36, 37, 38, 39]
    assert not split2.data[69:].any() and not split2.data[35:64].any()
    assert np.array_equal(np.array(rlod.unpack(split2, blocks=2)), np.arange(40)[:, None])


def test_fetch_returns_lod_tensors_with_their_lod():
    x = graphc.data("x", [-1, 2], lod_level=1)
    h = layers.scale(x, 2.0)
    exe = graphc.Executor()
    t = lod_tensor(np.arange(8, dtype="float32").reshape(4, 2), [[3, 0, 1]])
    (as_numpy,) = exe.run(feed={"x": t}, fetch_list=[h])
    np.testing.assert_allclose(as_numpy, np.array(t) * 2)  # Paddle: the packed data
    (as_lod,) = exe.run(feed={"x": t}, fetch_list=[h], return_numpy=False)
    assert isinstance(as_lod, fluid.LoDTensor)
    assert as_lod.recursive_sequence_lengths() == [[3, 0, 1]]
    np.testing.assert_allclose(np.array(as_lod), np.array(t) * 2)


# -- sequence_pool against the ragged reference -------------------------------------------------

lengths_st = st.lists(st.integers(0, 5), min_size=1, max_size=5)


@settings(max_examples=12, deadline=None)
@given(lengths=lengths_st, pooltype=st.sampled_from(POOLS), seed=st.integers(0, 2 ** 16))
def test_sequence_pool_matches_the_ragged_reference(lengths, pooltype, seed):
    rng = np.random.default_rng(seed)
    tokens = rng.standard_normal((sum(lengths), 3))
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x = graphc.data("x", [-1, 3], "float64", lod_level=1)
        out = layers.sequence_pool(x, pooltype.lower(), pad_value=-2.5)
        g = graphc.lower(graphc.default_main_program())
        feed = {"x": as_feed(graphc.default_main_program(), "x", lod_tensor(tokens,
                                                                           [lengths]))}
    (got,) = run_graph(g, {}, feed, [out.name])[1]
    np.testing.assert_allclose(got, pool_reference(tokens, lengths, pooltype, -2.5),
                               rtol=1e-12)


def test_sequence_pool_of_level_2_pools_sub_sequences():
    x = graphc.data("x", [-1, 2], "float64", lod_level=2)
    out = layers.sequence_pool(x, "sum")
    outer, inner = [2, 0, 2], [3, 0, 1, 2]
    tokens = np.arange(12.0).reshape(6, 2)
    (got,) = graphc.Executor().run(feed={"x": lod_tensor(tokens, [outer, inner])},
                                   fetch_list=[out], return_numpy=False)
    assert got.recursive_sequence_lengths() == [outer]
    np.testing.assert_allclose(np.array(got), pool_reference(tokens, inner, "SUM"))


@pytest.mark.parametrize("pooltype", POOLS)
def test_sequence_pool_gradient(pooltype):
    rng = np.random.default_rng(7)
    lengths = [3, 0, 1, 2]
    tokens = rng.standard_normal((6, 2))
    x = graphc.data("x", [-1, 2], "float64", lod_level=1)
    x.stop_gradient = False
    w = graphc.data("w", [-1, 2], "float64")
    out = layers.sequence_pool(x, pooltype.lower())
    loss = layers.reduce_sum(layers.elementwise_mul(out, w))
    weights = rng.standard_normal((4, 2))
    grads = lod_grad_check(graphc.default_main_program(), loss,
                           {"x": lod_tensor(tokens, [lengths]), "w": weights}, ["x"], rng)
    # the analytic gradient on the ragged data: each sequence's weights, spread by the pool
    want = np.zeros_like(tokens)
    for i, (seq, start) in enumerate(zip(split(tokens, lengths), np.cumsum([0, *lengths]))):
        n = len(seq)
        if n == 0:
            continue
        if pooltype in ("SUM", "AVERAGE", "SQRT"):
            scale = {"SUM": 1.0, "AVERAGE": 1.0 / n, "SQRT": 1.0 / math.sqrt(n)}[pooltype]
            want[start:start + n] = weights[i] * scale
        elif pooltype == "MAX":
            arg = seq.argmax(0)
            want[start + arg, [0, 1]] = weights[i]
        else:
            want[start if pooltype == "FIRST" else start + n - 1] = weights[i]
    np.testing.assert_allclose(grads["x"], want, rtol=1e-12, atol=1e-12)


def test_mean_and_reduce_sum_exclude_padding_with_gradients():
    rng = np.random.default_rng(3)
    lengths = [1, 0, 4]
    tokens = rng.standard_normal((5, 3))
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    h = layers.tanh(layers.scale(x, 1.5, bias=0.25))  # padding rows would give tanh(0.25)
    loss = layers.elementwise_add(layers.mean(h), layers.reduce_sum(layers.square(h)))
    grads = lod_grad_check(graphc.default_main_program(), loss,
                           {"x": lod_tensor(tokens, [lengths])}, ["x"], rng)
    hh = np.tanh(1.5 * tokens + 0.25)
    dh = 1.0 / hh.size + 2 * hh
    np.testing.assert_allclose(grads["x"], dh * (1 - hh ** 2) * 1.5, rtol=1e-10)


# -- embeddings and fc on LoD ids ----------------------------------------------------------------

@pytest.mark.parametrize("is_sparse", [False, True])
def test_embedding_fc_pool_train_step_interpreter_equals_jax(is_sparse):
    ids = graphc.data("ids", [-1, 1], "int64", lod_level=1)
    emb = layers.embedding(ids, [20, 4], is_sparse=is_sparse)
    h = layers.fc(emb, 3, act="relu")
    pooled = layers.sequence_pool(h, "average")
    loss = layers.mean(pooled)
    graphc.optimizer.SGD(0.5).minimize(loss)
    main = graphc.default_main_program()
    lengths = [2, 0, 3, 1]
    t = lod_tensor(np.array([[3], [5], [7], [3], [0], [19]]), [lengths])
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    before = {v.name: np.asarray(scope[v.name]) for v in main.global_block().vars.values()
              if v.persistable}
    grad_name = "embedding_0.w_0@GRAD"
    loss_j, emb_grad = exe.run(main, feed={"ids": t}, fetch_list=[loss, grad_name],
                               scope=scope)
    g = graphc.lower(main)
    new_state, (loss_i, emb_grad_i) = run_graph(g, before, {"ids": as_feed(main, "ids", t)},
                                                [loss.name, grad_name])
    np.testing.assert_allclose(loss_j, loss_i, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(emb_grad), np.asarray(emb_grad_i), rtol=1e-5,
                               atol=1e-7)
    for name, value in new_state.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-5, atol=1e-7)
    # the reference on the ragged data
    w, fw, fb = before["embedding_0.w_0"], before["fc_0.w_0"], before["fc_0.b_0"]
    tokens = np.array(t)[:, 0]
    hh = np.maximum(w[tokens] @ fw + fb, 0)
    pooled_ref = pool_reference(hh, lengths, "AVERAGE")
    np.testing.assert_allclose(loss_j, [pooled_ref.mean()], rtol=1e-5)
    if is_sparse:  # padding tokens are padding rows, never row 0
        assert isinstance(emb_grad, graphc.SelectedRows)
        assert set(np.asarray(emb_grad.rows).tolist()) == {3, 5, 7, 0, 19, 20}
        assert (np.asarray(emb_grad.rows) == 20).sum() == 16 - 6


# -- the CTR-DNN: 4 devices == 1, and compile counts ----------------------------------------------

def _ctr_batches(num, n, slots, vocab, rng, max_len=6):
    out = []
    for _ in range(num):
        f = {"dense_input": rng.standard_normal((n, 13)).astype("float32"),
             "label": rng.integers(0, 2, (n, 1))}
        for s in range(slots):
            lens = rng.integers(0, max_len, n).tolist()
            lens[0] = 1  # length 1 and (likely) empty sequences in every batch
            f[f"C{s + 1}"] = lod_tensor(rng.integers(0, vocab, (sum(lens), 1)), [lens])
        out.append(f)
    return out


def _train_ctr(batches, places):
    m = models.ctr_dnn(num_slots=2, vocab=30, emb_dim=4, hidden=(8,),
                       optimizer_fn=lambda: graphc.optimizer.Adam(0.01))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    prog = m.main if not places else graphc.CompiledProgram(m.main).with_data_parallel(
        loss_name=m.loss.name, places=graphc.cpu_places(places))
    losses = [float(np.mean(exe.run(prog, feed=b, fetch_list=[m.loss], scope=scope)[0]))
              for b in batches]
    params = {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}
    return losses, params


def test_ctr_dnn_four_devices_equal_one():
    batches = _ctr_batches(3, 8, 2, 30, np.random.default_rng(11))
    one, params1 = _train_ctr(batches, 0)
    four, params4 = _train_ctr(batches, 4)
    np.testing.assert_allclose(four, one, rtol=1e-5)
    for name, value in params1.items():
        np.testing.assert_allclose(params4[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_random_lengths_compile_a_bounded_number_of_steps():
    x = graphc.data("x", [-1, 2], lod_level=1)
    loss = layers.mean(layers.sequence_pool(layers.fc(x, 2), "sum"))
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    main = graphc.default_main_program()
    rng = np.random.default_rng(5)
    max_len, n = 40, 4  # up to 160 tokens: buckets 16, 32, 64, 128, 256
    most = 0
    for _ in range(200):
        lens = rng.integers(0, max_len + 1, n).tolist()
        most = max(most, sum(lens))
        t = lod_tensor(rng.standard_normal((sum(lens), 2)).astype("float32"), [lens])
        exe.run(main, feed={"x": t}, fetch_list=[loss])
    (prep,) = exe._prepared[main][1].values()
    bound = math.ceil(math.log2(most / rlod.MIN_BUCKET)) + 1
    assert 1 < len(prep.steps) <= bound, (len(prep.steps), bound)


def test_data_feeder_builds_lod_feeds_from_variable_length_samples():
    words = layers.data("words", [1], dtype="int64", lod_level=1)
    nested = layers.data("nested", [2], dtype="float32", lod_level=2)
    label = layers.data("label", [1], dtype="int64")
    feeder = fluid.DataFeeder([words, nested, label], fluid.CPUPlace())
    feed = feeder.feed([([4, 5, 6], [[[1, 2]], []], [1]),
                        ([], [[[3, 4], [5, 6]]], [0]),
                        ([7], [], [1])])
    assert feed["words"].recursive_sequence_lengths() == [[3, 0, 1]]
    assert np.array(feed["words"]).tolist() == [[4], [5], [6], [7]]
    assert feed["nested"].recursive_sequence_lengths() == [[2, 1, 0], [1, 0, 2]]
    assert np.array(feed["nested"]).shape == (3, 2) and feed["label"].shape() == [3, 1]
    pooled = layers.sequence_pool(layers.embedding(words, [8, 2]), "sum")
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    (out,) = exe.run(feed={"words": feed["words"]}, fetch_list=[pooled])
    assert out.shape == (3, 2) and not out[1].any()  # the empty sequence pools to zeros
    with pytest.raises(FeedError, match="feed 'words', sample 0: lod_level=1 expects"):
        feeder.feed([(3, [], [1])])


def test_build_strategy_passes_on_a_lod_program_keep_results():
    x = graphc.data("x", [-1, 2], lod_level=1)
    h = layers.fc(x, 4, act="relu")  # fuse-elewise-add-act fuses the LoD bias add + relu
    loss = layers.mean(layers.sequence_pool(layers.fc(h, 2), "sqrt"))
    graphc.optimizer.Momentum(0.1, 0.9).minimize(loss)
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    bs = graphc.BuildStrategy()
    bs.fuse_elewise_add_act_ops = bs.enable_inplace = bs.fuse_all_optimizer_ops = True
    fused = graphc.CompiledProgram(main, build_strategy=bs)
    rng = np.random.default_rng(2)
    feeds = [{"x": lod_tensor(rng.standard_normal((sum(n), 2)).astype("float32"), [n])}
             for n in ([3, 0, 2], [1, 4, 1], [0, 0, 5])]
    results = []
    for prog in (main, fused):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        losses = [exe.run(prog, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
        results.append((losses, {p.name: np.asarray(scope[p.name])
                                 for p in main.global_block().all_parameters()}))
    assert "fused_elemwise_activation" in fused._build_graph((loss.name,)).to_text()
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    for name, value in results[0][1].items():
        np.testing.assert_allclose(results[1][1][name], value, rtol=1e-6, atol=1e-7)


def test_interpreter_replicas_split_lod_feeds_by_whole_sequences():
    from graphc.backends.interpreter import run_replicas
    m = models.ctr_dnn(num_slots=1, vocab=20, emb_dim=3, hidden=(4,),
                       optimizer_fn=lambda: graphc.optimizer.SGD(0.2))
    (batch,) = _ctr_batches(1, 4, 1, 20, np.random.default_rng(4))
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    state = {v.name: np.asarray(scope[v.name]) for v in m.main.global_block().vars.values()
             if v.persistable}
    feeds = {k: as_feed(m.main, k, v) for k, v in batch.items()}
    one_state, (one_loss, _) = run_graph(graphc.lower(m.main), state, feeds,
                                                [m.loss.name, "C1"])
    cp = graphc.CompiledProgram(m.main).with_data_parallel(
        loss_name=m.loss.name, places=graphc.cpu_places(2))
    graph = cp.graph([m.loss, "C1"])
    two_state, (losses, ids) = run_replicas(graph, state, feeds, [m.loss.name, "C1"],
                                            num_replicas=2)
    np.testing.assert_allclose(losses.mean(), one_loss[0], rtol=1e-6)
    for name, value in one_state.items():
        np.testing.assert_allclose(two_state[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    merged = rlod.unpack(ids, blocks=2)
    assert merged.recursive_sequence_lengths() == batch["C1"].recursive_sequence_lengths()
    np.testing.assert_array_equal(np.array(merged), np.array(batch["C1"]))


def test_shape_ops_keep_the_lod_only_while_rows_stay_tokens():
    ids = layers.data("ids", [1], dtype="int64", lod_level=1)
    emb = fluid.embedding(ids, [10, 3])  # a reshape to [0, 1, 1], then the lookup
    assert emb.lod_level == 1 and list(emb.shape) == [-1, 1, 3]
    flat = layers.reshape(emb, [-1, 3])
    assert flat.lod_level == 1
    both = layers.concat([flat, layers.scale(flat, 2.0)], axis=1)
    assert both.lod_level == 1 and list(both.shape) == [-1, 6]
    pooled = layers.sequence_pool(both, "max")
    with pytest.raises(ShapeError, match="does not keep one row per token"):
        layers.reshape(emb, [1, -1])
    # nlp24: LoD values of one level stack as batches along axis 0; a dense one would not
    rows_in = layers.data("rows_in", [3], dtype="float32")
    with pytest.raises(ShapeError, match="along axis 0 mixes a dense value"):
        layers.concat([flat, rows_in], axis=0)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    t = lod_tensor(np.array([[1], [2], [3]]), [[1, 0, 2]])
    out, table = exe.run(feed={"ids": t}, fetch_list=[pooled, "embedding_0.w_0"])
    rows = table[[1, 2, 3]]
    want = pool_reference(np.concatenate([rows, 2 * rows], 1), [1, 0, 2], "MAX")
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("level", [1, 2])
def test_row_wise_chain_gradient_on_ragged_tokens(level):
    rng = np.random.default_rng(level)
    lengths = [[2, 0, 3]] if level == 1 else [[2, 1, 0], [1, 0, 3]]
    tokens = rng.standard_normal((4 if level == 2 else 5, 3))
    x = graphc.data("x", [-1, 3], "float64", lod_level=level)
    x.stop_gradient = False
    h = layers.fc(x, 2, act="tanh", param_attr=graphc.ParamAttr(name="w"),
                  bias_attr=graphc.ParamAttr(name="b"))
    h = layers.elementwise_mul(h, layers.sigmoid(h))
    pooled = layers.sequence_pool(h, "sqrt")
    if level == 2:  # lod1 over sub-sequences: pool once more
        pooled = layers.sequence_pool(pooled, "max")
    loss = layers.reduce_sum(layers.square(pooled))
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    w, b = (np.asarray(graphc.global_scope()[n]) for n in ("w", "b"))
    main = graphc.default_main_program()
    t = lod_tensor(tokens, lengths)
    (got,) = exe.run(main, feed={"x": t}, fetch_list=[loss])
    # the reference on the ragged data
    hh = np.tanh(tokens @ w + b)
    hh = hh * (1 / (1 + np.exp(-hh)))
    ref = pool_reference(hh, lengths[-1], "SQRT")
    if level == 2:
        ref = pool_reference(ref, lengths[0], "MAX")
    np.testing.assert_allclose(got, [np.sum(ref ** 2)], rtol=1e-10)
    lod_grad_check(main, loss, {"x": t}, ["x"], rng, state={"w": w, "b": b})

    def ref_loss(w_):  # NumPy on the ragged tokens: padding can contribute nothing
        hh = np.tanh(tokens @ w_ + b)
        hh = hh * (1 / (1 + np.exp(-hh)))
        r = pool_reference(hh, lengths[-1], "SQRT")
        return np.sum((pool_reference(r, lengths[0], "MAX") if level == 2 else r) ** 2)

    (w_grad,) = exe.run(main, feed={"x": t}, fetch_list=["w@GRAD"])
    numeric = np.zeros_like(w)
    for i in np.ndindex(*w.shape):
        d = np.zeros_like(w)
        d[i] = 1e-6
        numeric[i] = (ref_loss(w + d) - ref_loss(w - d)) / 2e-6
    np.testing.assert_allclose(w_grad, numeric, rtol=1e-5, atol=1e-8)


def test_cross_entropy_per_token_with_a_lod_label():
    logits = graphc.data("logits", [-1, 4], "float64", lod_level=1)
    label = graphc.data("label", [-1, 1], "int64", lod_level=1)
    loss_tokens = layers.softmax_with_cross_entropy(logits, label)
    assert loss_tokens.lod_level == 1
    per_seq = layers.sequence_pool(loss_tokens, "average")
    ce = layers.cross_entropy(layers.softmax(logits), label)
    assert ce.lod_level == 1
    total = layers.mean(ce)
    rng = np.random.default_rng(1)
    lengths = [[3, 1, 0, 2]]
    x = rng.standard_normal((6, 4))
    y = rng.integers(0, 4, (6, 1))
    out = graphc.Executor().run(
        feed={"logits": lod_tensor(x, lengths), "label": lod_tensor(y, lengths)},
        fetch_list=[loss_tokens, per_seq, total], return_numpy=False)
    p = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    token_loss = -np.log(p[np.arange(6), y[:, 0]])[:, None]
    assert out[0].recursive_sequence_lengths() == lengths
    np.testing.assert_allclose(np.array(out[0]), token_loss, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out[1]), pool_reference(token_loss, lengths[0],
                                                                  "AVERAGE"), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(out[2]), [token_loss.mean()], rtol=1e-10)


def test_inference_model_with_lod_feeds_and_step_inspection(tmp_path):
    ids = layers.data("ids", [1], dtype="int64", lod_level=1)
    out = layers.fc(layers.sequence_pool(layers.embedding(ids, [20, 3]), "sum"), 2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    t = fluid.create_lod_tensor([[1, 2], [3]], [[2, 1]], fluid.CPUPlace())
    (want,) = exe.run(feed={"ids": t}, fetch_list=[out])
    fluid.io.save_inference_model(str(tmp_path), ["ids"], [out], exe)
    prog, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
    assert prog.global_block().var("ids").lod_level == 1
    (got,) = exe.run(prog, feed={feeds[0]: t}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    step = exe.compile(fluid.default_main_program(), feed={"ids": t}, fetch_list=[out])
    assert "stablehlo" in step.lowered_text() and step.batch_size() == 1


def test_data_parallel_level_2_feeds_and_lod_fetches():
    x = graphc.data("x", [-1, 2], lod_level=2)
    h = layers.fc(x, 3, act="tanh")
    sub = layers.sequence_pool(h, "average")  # lod1 over sub-sequences
    loss = layers.mean(layers.sequence_pool(sub, "sum"))
    graphc.optimizer.SGD(0.1).minimize(loss)
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    rng = np.random.default_rng(9)
    outer, inner = [2, 0, 1, 3], [1, 4, 0, 2, 2, 1]
    t = lod_tensor(rng.standard_normal((10, 2)).astype("float32"), [outer, inner])
    results = []
    for places in (0, 2):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        prog = main if not places else graphc.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(places))
        got = exe.run(prog, feed={"x": t}, fetch_list=[h, sub, loss], scope=scope,
                      return_numpy=False)
        results.append((got, np.asarray(scope["fc_0.w_0"])))
    (h1, sub1, loss1), w1 = results[0]
    (h2, sub2, loss2), w2 = results[1]
    assert h2.recursive_sequence_lengths() == [outer, inner]
    assert sub2.recursive_sequence_lengths() == sub1.recursive_sequence_lengths() == [outer]
    np.testing.assert_allclose(np.array(h2), np.array(h1), rtol=1e-6)
    np.testing.assert_allclose(np.array(sub2), np.array(sub1), rtol=1e-6)
    np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-7)
    with pytest.raises(FeedError, match="3 sequences, which do not split evenly over 2"):
        prog = graphc.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=graphc.cpu_places(2))
        graphc.Executor().run(prog, feed={"x": lod_tensor(np.ones((3, 2), "float32"),
                                                          [[1, 1, 1], [1, 1, 1]])},
                              fetch_list=[loss], scope=scope)


@pytest.mark.parametrize("pooltype", ["SQRT", "MAX", "LAST"])
def test_generic_lod_gradient_equals_the_pool_gradient_rule(pooltype):
    """An aware op's grad op without a rule of its own differentiates its forward rule over
    the tokens (ops/sequence/lowering.py lod_generic_grad): it must agree with
    sequence_pool_grad."""
    from graphc.backends.lowering import RuleContext, get_rule
    from graphc.ir.types import TensorType
    from graphc.ops.sequence.lowering import lod_generic_grad
    rng = np.random.default_rng(0)
    t = lod_tensor(rng.standard_normal((6, 3)), [[2, 0, 4]])
    want_t = TensorType((-1, 3), "float64", False, 1)
    x = jax_tree(rlod.pack_feed("x", t, want_t, np.float64))
    attrs = {"pooltype": pooltype, "is_test": False, "pad_value": 0.0}
    dout = rng.standard_normal((3, 3))
    out_types = {"X@GRAD": [want_t]}
    ctx = RuleContext("sequence_pool_grad", attrs, out_types, "test", 0, 0)
    kw = {"X": x, "Out@GRAD": dout}
    own = get_rule("sequence_pool_grad")(ctx, **kw)["X@GRAD"]
    generic = lod_generic_grad(ctx, **kw)["X@GRAD"]
    np.testing.assert_allclose(np.asarray(generic.data), np.asarray(own.data), rtol=1e-12)


def jax_tree(x):
    import jax
    import jax.numpy as jnp
    return jax.tree.map(jnp.asarray, x)


@settings(max_examples=10, deadline=None)
@given(lengths=lod_lengths(2), pooltype=st.sampled_from(POOLS), seed=st.integers(0, 999))
def test_level_2_pools_and_means_match_the_ragged_reference(lengths, pooltype, seed):
    rng = np.random.default_rng(seed)
    tokens = rng.standard_normal((sum(lengths[1]), 2))
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        x = graphc.data("x", [-1, 2], "float64", lod_level=2)
        sub = layers.sequence_pool(layers.exp(x), pooltype.lower(), pad_value=0.5)
        top = layers.sequence_pool(sub, "sum")
        avg = layers.mean(sub)
        main = graphc.default_main_program()
        feed = {"x": as_feed(main, "x", lod_tensor(tokens, lengths))}
        g = graphc.lower(main)
    sub_got, top_got, avg_got = run_graph(g, {}, feed, [sub.name, top.name, avg.name])[1]
    sub_ref = pool_reference(np.exp(tokens), lengths[1], pooltype, 0.5)
    assert rlod.unpack(sub_got).recursive_sequence_lengths() == [lengths[0]]
    np.testing.assert_allclose(np.array(rlod.unpack(sub_got)), sub_ref, rtol=1e-12)
    np.testing.assert_allclose(top_got, pool_reference(sub_ref, lengths[0], "SUM"), rtol=1e-12)
    want = sub_ref.mean() if sub_ref.size else 0.0  # no tokens: graphc's mean is 0
    np.testing.assert_allclose(avg_got, [want], rtol=1e-12)
