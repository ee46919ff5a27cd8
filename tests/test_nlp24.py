"""What stopped PaddleNLP/PaddleRec 1.8 programs ported by the rule alone (nlp24 block of
docs/porting_from_paddle.md): concat of LoD batches, TDM's tree ops, the runtime fixes."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import DataError
from graphc.backends.interpreter import run_graph
from graphc.backends.lod import LoDArray
from graphc.ir.errors import GraphcError
from graphc.testing.lod import as_feed, lod_grad_check, random_lod_tensor

pytestmark = pytest.mark.timeout(120)


def _both(main, feeds: dict, fetch: list, startup=None):
    """Fetches of the jitted Executor (LoDTensors kept) and of the interpreter."""
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        if startup is not None:
            exe.run(startup)
        jitted = exe.run(main, feed=feeds, fetch_list=fetch, return_numpy=False)
        state = {n: np.asarray(scope.find_var(n).get_tensor()) for n in
                 (v.name for v in main.list_vars() if v.persistable)
                 if scope.find_var(n) is not None}
    _, ref = run_graph(graphc.lower(main), state, {k: as_feed(main, k, v) for k, v in
                                                   feeds.items()}, [f.name for f in fetch])
    return jitted, ref


def _tokens(value):
    if isinstance(value, LoDArray):  # each level's entries cut to the level above's count
        lengths, count = [], len(value.lengths[0])
        for level in value.lengths:
            lengths.append(np.asarray(level)[:count].tolist())
            count = int(sum(lengths[-1]))
        return np.asarray(value.data)[:count], lengths
    return np.asarray(value), value.recursive_sequence_lengths()


# -- concat of LoD values along axis 0: whole batches, one after the other ---------------------
@pytest.fixture(scope="module")
def concat_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.data("a", [-1, 3], "float64", lod_level=1)
        b = fluid.data("b", [-1, 3], "float64", lod_level=1)
        a.stop_gradient = b.stop_gradient = False
        out = fluid.layers.concat([a, fluid.layers.scale(b, 2.0)])
        loss = fluid.layers.reduce_mean(out * out)
    return main, out, loss


@pytest.mark.parametrize("la,lb", [([2, 0, 3], [1, 4]), ([0], [5, 0, 1, 2]), ([7], [0])])
def test_concat_lod_axis0_stacks_batches(concat_program, la, lb):
    """ELMo's ``concat([loss_fw, loss_bw])``: the second's sequences after the first's (Paddle
    keeps only the first's LoD there, a LoD covering part of the rows; the rows are the same)."""
    main, out, _ = concat_program
    rng = np.random.default_rng(len(la) + len(lb))
    ta, tb = random_lod_tensor(rng, [la], (3,)), random_lod_tensor(rng, [lb], (3,))
    jitted, ref = _both(main, {"a": ta, "b": tb}, [out])
    want = np.concatenate([np.asarray(ta), 2.0 * np.asarray(tb)])
    for got in (jitted[0], ref[0]):
        tokens, lengths = _tokens(got)
        np.testing.assert_allclose(tokens, want, rtol=1e-12)
        assert list(lengths[0]) == la + lb


def test_concat_lod_axis0_gradient_goes_back_to_each_batch(concat_program):
    main, _, loss = concat_program
    rng = np.random.default_rng(3)
    feeds = {"a": random_lod_tensor(rng, [[2, 0, 1]], (3,)),
             "b": random_lod_tensor(rng, [[3, 1]], (3,))}
    prog = main.clone()
    with fluid.program_guard(prog):
        grads = lod_grad_check(prog, prog.global_block().var(loss.name), feeds, ["a", "b"],
                               rng)
    tokens = 3 + 4
    np.testing.assert_allclose(grads["a"], 2 * np.asarray(feeds["a"]) / (tokens * 3),
                               rtol=1e-9)
    np.testing.assert_allclose(grads["b"], 8 * np.asarray(feeds["b"]) / (tokens * 3),
                               rtol=1e-9)


def test_concat_lod_axis0_level2_joins_every_level():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        a = fluid.data("a", [-1, 2], "float32", lod_level=2)
        b = fluid.data("b", [-1, 2], "float32", lod_level=2)
        out = fluid.layers.concat([a, b], axis=0)
    assert out.lod_level == 2
    rng = np.random.default_rng(5)
    ta = random_lod_tensor(rng, [[2, 1], [1, 0, 3]], (2,), dtype="float32")
    tb = random_lod_tensor(rng, [[0, 2], [2, 2]], (2,), dtype="float32")
    jitted, ref = _both(main, {"a": ta, "b": tb}, [out])
    want = np.concatenate([np.asarray(ta), np.asarray(tb)])
    for got in (jitted[0], ref[0]):
        tokens, lengths = _tokens(got)
        np.testing.assert_array_equal(tokens, want)
        assert [list(v) for v in lengths] == [[2, 1, 0, 2], [1, 0, 3, 2, 2]]


# -- tdm_child / tdm_sampler / index_sample ---------------------------------------------------
def _random_tree(rng, child_nums=2, layers=3):
    """A complete child_nums-ary tree, node 0 the root, with a few leaves cut: TreeInfo rows
    [item_id, layer, parent, children...], travel paths of each leaf, the layer list."""
    info, by_layer = [[0, 0, 0] + [0] * child_nums], [[0]]
    for depth in range(1, layers + 1):
        level = []
        for parent in by_layer[-1]:
            if depth > 1 and rng.random() < 0.25:
                continue  # an unbalanced tree: this node has no children
            kids = []
            for _ in range(child_nums):
                node = len(info)
                info.append([0, depth, parent] + [0] * child_nums)
                kids.append(node)
            info[parent][3:3 + child_nums] = kids
            level += kids
        by_layer.append(level)
    leaves = [n for n, row in enumerate(info) if n and row[3] == 0]
    for item, node in enumerate(leaves, 1):
        info[node][0] = item
    travel = []
    for node in leaves:
        path = []
        while node:
            path.append(node)
            node = info[node][2]
        path = path[::-1]
        travel.append(path + [0] * (layers - len(path)))
    return np.array(info), np.array(travel), by_layer[1:]


def _tdm_child_reference(info, ids, child_nums):
    child = np.zeros(ids.shape + (child_nums,), np.int64)
    leaf = np.zeros_like(child)
    for pos, node in np.ndenumerate(ids):
        if node != 0 and info[node, 3] != 0:
            child[pos] = info[node, 3:3 + child_nums]
            leaf[pos] = info[child[pos], 0] != 0
    return child, leaf


def _init(value):
    return fluid.ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(value))


def test_tdm_child_matches_the_tree():
    rng = np.random.default_rng(11)
    info, _, _ = _random_tree(rng, child_nums=3)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 1], "int64")
        child, leaf = fluid.contrib.layers.tdm_child(x, len(info), 3, _init(info),
                                                     dtype="int64")
    ids = rng.integers(0, len(info), (9, 1))
    want_child, want_leaf = _tdm_child_reference(info, ids, 3)
    jitted, ref = _both(main, {"x": ids}, [child, leaf], startup)
    for got in (jitted, ref):
        np.testing.assert_array_equal(np.asarray(got[0]), want_child)
        np.testing.assert_array_equal(np.asarray(got[1]), want_leaf)
    with pytest.raises(DataError, match="node ids in"):
        _both(main, {"x": np.array([[len(info)]])}, [child], startup)


@pytest.fixture(scope="module")
def sampler():
    rng = np.random.default_rng(2)
    _, travel, layers = _random_tree(rng, child_nums=2, layers=3)
    flat = np.concatenate(layers).reshape(-1, 1)
    counts = [len(v) for v in layers]
    negs = [1, min(3, counts[1] - 1), min(4, counts[2] - 1)]
    built = {}
    for seed in (0, 7):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = fluid.data("x", [-1, 1], "int64")
            outs = fluid.contrib.layers.tdm_sampler(
                x, negs, counts, len(travel), _init(travel), _init(flat), seed=seed,
                output_list=False, tree_dtype="int64", dtype="int64")
        built[seed] = (main, startup, outs)
    return travel, layers, negs, built


def _check_samples(out, labels, mask, ids, travel, layers, negs):
    col = 0
    for layer, k in enumerate(negs):
        pos = travel[ids, layer]
        block = slice(col, col + 1 + k)
        live = pos != 0
        assert (out[~live, block] == 0).all() and (mask[~live, block] == 0).all()
        assert (labels[~live, block] == 0).all()
        np.testing.assert_array_equal(out[live, col], pos[live])
        assert (labels[live, col] == 1).all() and (mask[live, block] == 1).all()
        assert (labels[live, col + 1:col + 1 + k] == 0).all()
        for row in np.flatnonzero(live):
            negatives = out[row, col + 1:col + 1 + k]
            assert len(set(negatives)) == k and pos[row] not in negatives
            assert set(negatives) <= set(layers[layer])
        col += 1 + k
    assert col == out.shape[1]


def test_tdm_sampler_positives_then_distinct_negatives(sampler):
    travel, layers, negs, built = sampler
    main, startup, outs = built[0]
    ids = np.arange(len(travel)).repeat(3)
    jitted, ref = _both(main, {"x": ids.reshape(-1, 1)}, list(outs), startup)
    for got in (jitted, ref):
        _check_samples(*(np.asarray(g) for g in got), ids, travel, layers, negs)


def test_tdm_sampler_negatives_are_uniform_and_seeded(sampler):
    """Every other node of the layer is drawn about as often; a non-zero seed repeats its
    draws run after run (Paddle seeds its sampler each run), seed 0 draws afresh."""
    travel, layers, negs, built = sampler
    leaf = int(np.flatnonzero(travel[:, 2])[0])
    ids = np.full((400, 1), leaf)
    exe = fluid.Executor(fluid.CPUPlace())
    runs = {}
    for seed, (main, startup, outs) in built.items():
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            runs[seed] = [exe.run(main, feed={"x": ids}, fetch_list=[outs[0]])[0]
                          for _ in range(2)]
    np.testing.assert_array_equal(runs[7][0], runs[7][1])
    assert (runs[0][0] != runs[0][1]).any()
    start = 1 + negs[0] + 1 + negs[1] + 1  # the third layer's negatives
    drawn = runs[0][0][:, start:start + negs[2]].reshape(-1)
    others = [n for n in layers[2] if n != travel[leaf, 2]]
    counts = np.array([(drawn == n).sum() for n in others])
    expected = len(drawn) / len(others)
    assert ((counts - expected) ** 2 / expected).sum() < 40  # chi-square, well within


def test_index_sample_gathers_each_row():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [-1, 5], "float32")
        index = fluid.data("index", [-1, 3], "int64")
        out = fluid.contrib.layers.index_sample(x, index)
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((4, 5)).astype("float32")
    iv = rng.integers(0, 5, (4, 3))
    want = np.stack([xv[i, iv[i]] for i in range(4)])
    jitted, ref = _both(main, {"x": xv, "index": iv}, [out])
    for got in (jitted[0], ref[0]):
        np.testing.assert_array_equal(np.asarray(got), want)
    with pytest.raises(DataError, match="column indices"):
        _both(main, {"x": xv, "index": iv + 5}, [out])


# -- the runtime: ParallelExecutor on one device, create_var's initializer, int tables ----------
def test_one_device_compiled_program_takes_a_reshaped_layers_data_feed():
    """ELMo's ParallelExecutor on one CPU feeds its [256] state to ``layers.data(shape=[1])``
    (Paddle checks no layers.data shape) as a one-dict list, and reshapes it in the program."""
    assert fluid.parallel_executor.ExecutionStrategy is fluid.ExecutionStrategy
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        h = fluid.layers.data("h", shape=[1], dtype="float32")
        out = fluid.layers.reduce_sum(fluid.layers.reshape(h, [2, -1, 3]), dim=1)
    hv = np.arange(12, dtype="float32")
    want = hv.reshape(2, 2, 3).sum(1)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    compiled = fluid.CompiledProgram(main).with_data_parallel(places=[fluid.CPUPlace()])
    for feed in ({"h": hv}, [{"h": hv}]):
        (got,) = exe.run(compiled, feed=feed, fetch_list=[out])
        np.testing.assert_array_equal(got, want)
    assert len(compiled._retargeted) == 1  # one re-typed copy, reused


def test_create_var_runs_its_initializer_and_int_tables_widen():
    """TDM creates its tree table with ``create_var(..., initializer=...)`` in the startup
    program (Paddle runs the initializer there) and sets int32 arrays into int64 tables."""
    main, startup = fluid.Program(), fluid.Program()
    startup.global_block().create_var(name="table", dtype="int64", shape=[3, 2],
                                      persistable=True,
                                      initializer=fluid.initializer.Constant(4))
    table = main.global_block().create_var(name="table", dtype="int64", shape=[3, 2],
                                           persistable=True)
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1], "int64")
        out = fluid.layers.gather(table, ids)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        np.testing.assert_array_equal(np.asarray(scope.find_var("table").get_tensor()),
                                      np.full((3, 2), 4))
        t = scope.find_var("table").get_tensor()
        t.set(np.arange(6, dtype="int32").reshape(3, 2), fluid.CPUPlace())
        for _ in range(2):
            (got,) = exe.run(main, feed={"ids": np.array([2, 0])}, fetch_list=[out])
            np.testing.assert_array_equal(got, [[4, 5], [0, 1]])
        assert np.asarray(scope.find_var("table").get_tensor()).dtype == np.int64
        t.set(np.zeros((3, 2), "float32"), fluid.CPUPlace())  # not an exact widening
        with pytest.raises(GraphcError, match="holds float32"):
            exe.run(main, feed={"ids": np.array([2, 0])}, fetch_list=[out])

