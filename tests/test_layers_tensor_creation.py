"""Issue 24's tensor creation and manipulation layers against NumPy references of Paddle's
semantics, through the interpreter and the jitted Executor (which must agree), plus the
seeding of the random ones, the parameter/global-variable layers and build-time errors."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError

RNG = np.random.default_rng(24)


def run_both(feeds: dict, outs: list) -> list[np.ndarray]:
    """``outs`` from the interpreter and the Executor, which must agree (exactly for ints)."""
    program = graphc.default_main_program()
    _, interp = run_graph(graphc.lower(program), {}, feeds, [o.name for o in outs])
    compiled = graphc.Executor().run(program, feed=feeds, fetch_list=outs, scope=graphc.Scope())
    results = []
    for out, a, b in zip(outs, interp, compiled):
        a = np.asarray(a)
        assert a.dtype == np.dtype(out.dtype) == b.dtype, (out, a.dtype, b.dtype)
        assert len(out.shape) == a.ndim and all(
            d < 0 or d == s for d, s in zip(out.shape, a.shape)), (out, a.shape)
        np.testing.assert_allclose(b, a, rtol=1e-6, err_msg=out.name)
        results.append(a)
    return results


def feed(name, value):
    value = np.asarray(value)
    return graphc.data(name, [-1, *value.shape[1:]], str(value.dtype)), value


# -- NumPy references of Paddle's kernels ------------------------------------------------------
def space_to_depth_ref(x, b):
    """Paddle's kernel loop (Darknet's reorg), index by index."""
    n, c, h, w = x.shape
    out = np.empty(x.size, x.dtype)
    out_c = c // (b * b)
    for idx, v in enumerate(x.reshape(-1)):
        bb, k, j, i = np.unravel_index(idx, x.shape)
        c2, offset = k % out_c, k // out_c
        w2, h2 = i * b + offset % b, j * b + offset // b
        out[w2 + w * b * (h2 + h * b * (c2 + out_c * bb))] = v
    return out.reshape(n, c * b * b, h // b, w // b)


def pixel_shuffle_ref(x, r):
    n, c, h, w = x.shape
    out = np.empty((n, c // (r * r), h * r, w * r), x.dtype)
    for k in range(c // (r * r)):
        for i in range(r):
            for j in range(r):
                out[:, k, i::r, j::r] = x[:, k * r * r + i * r + j]
    return out


def shuffle_channel_ref(x, g):
    c = x.shape[1]
    out = np.empty_like(x)
    for i in range(g):
        for j in range(c // g):
            out[:, j * g + i] = x[:, i * (c // g) + j]
    return out


def unique_ref(x):
    """Paddle's: values in order of first appearance, each element's position among them."""
    first: dict = {}
    for v in x.tolist():
        first.setdefault(v, len(first))
    values = np.array(list(first), x.dtype)
    index = np.array([first[v] for v in x.tolist()])
    counts = np.array([np.sum(x == v) for v in values])
    return values, index, counts


# -- rearranging -------------------------------------------------------------------------------
def test_pad_pad2d_pad_constant_like_crop():
    x, xv = feed("x", RNG.standard_normal((2, 3, 4, 5)).astype("float32"))
    y, yv = feed("y", RNG.standard_normal((2, 2, 4, 3)).astype("float32"))
    outs = [layers.pad(x, [0, 1, 2, 0, 0, 0, 1, 1], 2.5),
            layers.pad2d(x, [1, 2, 3, 0], pad_value=-1.0),
            layers.pad2d(x, [2, 1, 0, 3], "reflect"),
            layers.pad2d(x, [1, 0, 2, 2], "edge", data_format="NHWC"),
            layers.pad_constant_like(x, y, 0.5),
            layers.crop(x, y, [0, 1, 0, 2]),
            layers.crop(x, [1, 2, 2, 2], [1, 0, 1, 3]),
            layers.crop_tensor(x, [-1, 2, -1, 1], [0, 1, 3, 4])]
    r = run_both({"x": xv, "y": yv}, outs)
    hw = [(0, 0), (0, 0)]
    expected = [np.pad(xv, [(0, 1), (2, 0), (0, 0), (1, 1)], constant_values=2.5),
                np.pad(xv, hw + [(1, 2), (3, 0)], constant_values=-1.0),
                np.pad(xv, hw + [(2, 1), (0, 3)], mode="reflect"),
                np.pad(xv, [(0, 0), (1, 0), (2, 2), (0, 0)], mode="edge"),
                np.pad(yv, [(0, 0), (0, 1), (0, 0), (0, 2)], constant_values=0.5),
                xv[:, 1:3, :, 2:5], xv[1:2, 0:2, 1:3, 3:5], xv[:, 1:3, 3:, 4:5]]
    for got, want in zip(r, expected):
        np.testing.assert_array_equal(got, want)
    assert outs[0].shape == (-1, 5, 4, 7) and outs[7].shape == (-1, 2, 1, 1)


def test_space_to_depth_pixel_shuffle_shuffle_channel_follow_paddles_kernels():
    x, xv = feed("x", np.arange(2 * 8 * 4 * 6, dtype="float32").reshape(2, 8, 4, 6))
    outs = [layers.space_to_depth(x, 2), layers.pixel_shuffle(x, 2),
            layers.shuffle_channel(x, 4), layers.shuffle_channel(x, 1)]
    r = run_both({"x": xv}, outs)
    for got, want in zip(r, [space_to_depth_ref(xv, 2), pixel_shuffle_ref(xv, 2),
                             shuffle_channel_ref(xv, 4), xv]):
        np.testing.assert_array_equal(got, want)
    assert outs[0].shape == (-1, 32, 2, 3) and outs[1].shape == (-1, 2, 8, 12)


def test_label_smooth_multiplex_scatter_nd_reverse():
    lab, labv = feed("lab", np.eye(4, dtype="float32")[[0, 2, 3]])
    prior = graphc.data("prior", [1, 4], "float32")
    priorv = np.array([[0.1, 0.2, 0.3, 0.4]], "float32")
    xs = [feed(f"m{i}", RNG.standard_normal((4, 3)).astype("float32")) for i in range(3)]
    ids, idsv = feed("ids", np.array([[2], [0], [1], [2]], "int32"))
    ref, refv = feed("ref", RNG.standard_normal((3, 4)).astype("float32"))
    index = graphc.data("index", [3, 2], "int64")
    indexv = np.array([[0, 1], [2, 3], [0, 1]])
    upd = graphc.data("upd", [3], "float32")
    updv = np.array([1.0, 2.0, 4.0], "float32")
    outs = [layers.label_smooth(lab), layers.label_smooth(lab, prior, epsilon=0.3),
            layers.multiplex([v for v, _ in xs], ids),
            layers.scatter_nd_add(ref, index, upd), layers.scatter_nd(index, upd, [3, 5]),
            layers.reverse(ref, 1), layers.reverse(ref, [0, -1])]
    r = run_both({"lab": labv, "prior": priorv, "ids": idsv, "ref": refv, "index": indexv,
                  "upd": updv, **{f"m{i}": v for i, (_, v) in enumerate(xs)}}, outs)
    added = refv.copy()
    np.add.at(added, (indexv[:, 0], indexv[:, 1]), updv)
    scattered = np.zeros((3, 5), "float32")
    np.add.at(scattered, (indexv[:, 0], indexv[:, 1]), updv)
    expected = [0.9 * labv + 0.1 / 4, 0.7 * labv + 0.3 * priorv,
                np.stack([xs[k][1][i] for i, k in enumerate(idsv[:, 0])]), added, scattered,
                refv[:, ::-1], refv[::-1, ::-1]]
    for got, want in zip(r, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# -- creation and index ops --------------------------------------------------------------------
def test_linspace_eye_diag_is_empty_shard_index():
    ids, idsv = feed("ids", np.array([[16], [1], [9], [19], [10]], "int64"))
    full, fullv = feed("f", np.zeros((2, 3), "float32"))
    empty = layers.slice(full, [1], [2], [1])  # [-1, 0]: graphc refuses empty feeds
    outs = [layers.linspace(0, 10, 5, "float32"), layers.linspace(-1.0, 1.0, 1, "float64"),
            layers.linspace(3, 0, 4, "float32"), layers.eye(3), layers.eye(2, 4, dtype="int64"),
            layers.eye(2, batch_shape=[3]), layers.diag(np.array([1.0, -2.0, 3.0], "float32")),
            layers.is_empty(empty), layers.is_empty(full),
            layers.shard_index(ids, 20, 2, 0), layers.shard_index(ids, 20, 2, 1, ignore_value=-7)]
    r = run_both({"ids": idsv, "f": fullv}, outs)
    expected = [np.linspace(0, 10, 5), [-1.0], [3, 2, 1, 0], np.eye(3), np.eye(2, 4),
                np.broadcast_to(np.eye(2), (3, 2, 2)), np.diag([1.0, -2.0, 3.0]), [True],
                [False], [[-1], [1], [9], [-1], [-1]], [[6], [-7], [-7], [9], [0]]]
    for got, want in zip(r, expected):
        np.testing.assert_array_equal(got, want)
    assert [o.dtype for o in outs[:3]] == ["float32", "float64", "float32"]
    assert outs[5].shape == (3, 2, 2) and outs[4].dtype == "int64"


@pytest.mark.parametrize("values", [[2, 3, 3, 1, 5, 3], [7], [4, 4, 4], [-1, 0, -1, 2, 0]])
def test_unique_and_counts_match_paddle_padded_to_the_input_length(values):
    x = graphc.data("x", [len(values)], "int64")
    f = graphc.data("f", [len(values)], "float32")
    out, index = layers.unique(x)
    fout, findex, fcount = layers.unique_with_counts(f, dtype="int64")
    xv = np.array(values, "int64")
    r = run_both({"x": xv, "f": xv.astype("float32")}, [out, index, fout, findex, fcount])
    want, want_index, want_counts = unique_ref(xv)
    n = len(want)
    pad = [0] * (len(values) - n)
    np.testing.assert_array_equal(r[0], list(want) + pad)
    np.testing.assert_array_equal(r[1], want_index)
    np.testing.assert_array_equal(r[2], list(want) + pad)
    np.testing.assert_array_equal(r[3], want_index)
    np.testing.assert_array_equal(r[4], list(want_counts) + pad)
    assert r[1].max() + 1 == n and index.dtype == "int32" and findex.dtype == "int64"


# -- random layers -----------------------------------------------------------------------------
def test_sampling_id_picks_the_class_whose_running_sum_passes_r():
    p, pv = feed("p", np.array([[0.2, 0.2, 0.6], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0],
                                [0.3, 0.3, 0.3]], "float32"))
    fixed = layers.sampling_id(p, min=0.5, max=0.5)  # r = 0.5 in every row
    drawn = layers.sampling_id(p, seed=3)
    r = run_both({"p": pv}, [fixed, drawn])
    # Paddle: subtract the probabilities from r until it is negative; the last class if never
    np.testing.assert_array_equal(r[0], [2, 1, 2, 1])
    assert r[1].dtype == np.int64 and r[1][2] == 2 and np.all((0 <= r[1]) & (r[1] < 3))


def test_sampling_id_follows_the_distribution():
    p, pv = feed("p", np.tile(np.array([[0.1, 0.6, 0.3]], "float32"), (4000, 1)))
    ids = layers.sampling_id(p)
    (got,) = graphc.Executor().run(feed={"p": pv}, fetch_list=[ids])
    np.testing.assert_allclose(np.bincount(got, minlength=3) / 4000, [0.1, 0.6, 0.3],
                               atol=0.03)


def test_random_layers_draw_in_range_fresh_each_run_and_alike_with_a_seed():
    x, xv = feed("x", np.zeros((5, 2), "float32"))
    outs = [layers.uniform_random([300, 10], min=2.0, max=3.0),
            layers.gaussian_random([300, 10], mean=1.0, std=0.5, dtype="float64"),
            layers.gaussian_random_batch_size_like(x, [0, 400], mean=-1.0, std=2.0),
            layers.uniform_random([4], seed=11), layers.uniform_random([4], seed=11)]
    exe = graphc.Executor()
    first = exe.run(feed={"x": xv}, fetch_list=outs)
    second = exe.run(feed={"x": xv}, fetch_list=outs)
    u, g, b = first[0], first[1], first[2]
    assert u.min() >= 2.0 and u.max() < 3.0 and abs(u.mean() - 2.5) < 0.05
    assert g.dtype == np.float64 and abs(g.mean() - 1.0) < 0.05 and abs(g.std() - 0.5) < 0.05
    assert b.shape == (5, 400) and abs(b.mean() + 1.0) < 0.2 and abs(b.std() - 2.0) < 0.2
    np.testing.assert_array_equal(first[3], first[4])  # one seed, one draw
    assert not np.array_equal(first[0], second[0])  # each run draws afresh
    assert all(o.stop_gradient for o in outs)


def test_random_layers_are_reproducible_with_the_program_seed():
    def build_and_run():
        main, startup = graphc.Program(), graphc.Program()
        main.random_seed = 5
        with graphc.program_guard(main, startup):
            out = layers.gaussian_random([3, 3])
        return graphc.Executor().run(main, fetch_list=[out], scope=graphc.Scope())[0]

    np.testing.assert_array_equal(build_and_run(), build_and_run())


# -- variables and parameters ------------------------------------------------------------------
def test_create_tensor_parameter_global_var():
    x, xv = feed("x", RNG.standard_normal((2, 3)).astype("float32"))
    held = layers.create_tensor("float32", name="held")
    assert held.name == "held" and not held.persistable
    layers.assign(x, held)
    w = layers.create_parameter([3, 4], "float32", name="w_free")
    b = layers.create_parameter([4], "float32", attr=fluid.ParamAttr(name="b_free"),
                                is_bias=True)
    step = layers.create_global_var([1], 3.0, "int64", persistable=True, name="step")
    out = layers.elementwise_add(layers.matmul(held, w), b)
    main = graphc.default_main_program()
    assert {p.name for p in main.all_parameters()} >= {"w_free", "b_free"}
    assert step.persistable and step.shape == (1,) and step.dtype == "int64"
    exe = graphc.Executor()
    scope = graphc.Scope()
    exe.run(graphc.default_startup_program(), scope=scope)
    got, got_step = exe.run(main, feed={"x": xv}, fetch_list=[out, step], scope=scope)
    wv = np.asarray(scope.find_var("w_free").get_tensor())
    assert wv.shape == (3, 4) and np.abs(wv).max() > 0  # Xavier, not zeros
    np.testing.assert_array_equal(scope.find_var("b_free").get_tensor(), np.zeros(4))
    # (float32 products near zero: an absolute floor, as XLA and numpy sum in other orders)
    np.testing.assert_allclose(got, xv @ wv, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_step, [3])


# -- errors and spelling -----------------------------------------------------------------------
def test_build_time_errors_name_the_layer_and_the_reason():
    x = graphc.data("x", [-1, 3, 4, 4])
    n = layers.fill_constant([1], "int32", 5)
    with pytest.raises(ProgramError, match="linspace: 'num' must be a number"):
        layers.linspace(0, 1, n, "float32")
    with pytest.raises(ShapeError, match="must be float32 or float64"):
        layers.linspace(0, 1, 3, "int32")
    with pytest.raises(ProgramError, match="crop_tensor: shape must be a list of ints"):
        layers.crop_tensor(x, n)
    with pytest.raises(ProgramError, match="crop: offsets must be a list of ints"):
        layers.crop(x, [1, 1, 1, 1], n)
    with pytest.raises(ShapeError, match="channels 3 must be a multiple of 4"):
        layers.space_to_depth(x, 2)
    with pytest.raises(ShapeError, match="X must be 1-D"):
        layers.unique(x)
    with pytest.raises(ProgramError, match="multiplex: inputs must hold at least 2"):
        layers.multiplex([x], layers.cast(n, "int64"))
    with pytest.raises(ProgramError, match="create_global_var: shape"):
        layers.create_global_var([-1, 2], 0.0, "float32")


def test_fluid_layers_spelling_resolves():
    for name in ("create_tensor", "create_parameter", "create_global_var", "uniform_random",
                 "gaussian_random", "gaussian_random_batch_size_like", "sampling_id",
                 "linspace", "diag", "eye", "reverse", "unique", "unique_with_counts", "pad",
                 "pad2d", "pad_constant_like", "crop", "crop_tensor", "label_smooth",
                 "multiplex", "scatter_nd", "scatter_nd_add", "shard_index", "space_to_depth",
                 "pixel_shuffle", "shuffle_channel", "is_empty"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
        assert name in fluid.layers.__all__


def test_label_smooth_takes_a_lod_input_row_by_row():
    lengths = [[2, 0, 3]]
    tokens = np.eye(4, dtype="float32")[[0, 1, 3, 2, 2]]
    x = graphc.data("x", [-1, 4], lod_level=1)
    out = layers.label_smooth(x, epsilon=0.2)
    assert out.lod_level == 1
    t = fluid.create_lod_tensor(tokens, lengths, fluid.CPUPlace())
    (got,) = graphc.Executor().run(feed={"x": t}, fetch_list=[out], return_numpy=False)
    np.testing.assert_allclose(np.asarray(got), 0.8 * tokens + 0.05, rtol=1e-6)
    assert got.recursive_sequence_lengths() == lengths
