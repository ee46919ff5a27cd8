"""Issue 24's nn layers (conv2d/3d transposes, conv3d, pool3d, adaptive pooling, instance,
group and local response norm, affine_channel, the resize family, pool2d past its input):
NumPy references of Paddle 1.8's semantics on the jitted Executor and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from nn_more_reference import adaptive_ref, conv_ref, conv_transpose_ref, interp_ref, pool_ref

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import GraphcError, ProgramError, ShapeError

RNG = np.random.default_rng(24)


def _run_both(fetch, feeds):
    """Fetched values (outputs then parameters) from the jitted step and the interpreter."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    names = [v.name for v in fetch]
    exe = graphc.Executor()
    exe.run(startup)
    jitted = exe.run(main, feed=feeds, fetch_list=names)
    state, _ = run_graph(graphc.lower(startup))
    _, interp = run_graph(graphc.lower(main), state, feeds, names)
    return [np.asarray(v) for v in jitted], [np.asarray(v) for v in interp]


def _params():
    return [p for p in graphc.default_main_program().global_block().all_parameters()]


def _check(out, feeds, ref, rtol=1e-5, atol=1e-6):
    """``ref(params...)`` is the NumPy reference given the parameters each backend read."""
    params = _params()
    for got in _run_both([out, *params], feeds):
        assert got[0].shape == ref(*got[1:]).shape
        np.testing.assert_allclose(got[0], ref(*got[1:]), rtol=rtol, atol=atol)
    return out


# -- conv2d_transpose / conv3d / conv3d_transpose -------------------------------------------
@pytest.mark.parametrize(("shape", "kw", "pads"), [
    ((2, 3, 4, 5), dict(num_filters=4, filter_size=3), [(0, 0), (0, 0)]),
    ((1, 4, 3, 3), dict(num_filters=2, filter_size=[2, 3], stride=2, padding=1), [(1, 1)] * 2),
    ((1, 4, 3, 4), dict(num_filters=6, filter_size=3, stride=2, dilation=2, groups=2),
     [(0, 0)] * 2),
    ((1, 2, 3, 3), dict(num_filters=3, filter_size=3, stride=2, padding=[0, 1, 1, 0]),
     [(0, 1), (1, 0)]),
    ((-1, 2, 3, 3), dict(num_filters=3, filter_size=3, stride=2, padding=1,
                         output_size=[6, 6]), [(1, 1)] * 2),
])
def test_conv2d_transpose(shape, kw, pads):
    feed_shape = tuple(2 if d < 0 else d for d in shape)
    x = graphc.data("x", list(shape), "float64")
    out = layers.conv2d_transpose(x, bias_attr=False, **kw)
    s = [kw.get("stride", 1)] * 2
    d = [kw.get("dilation", 1)] * 2
    v = RNG.standard_normal(feed_shape)
    _check(out, {"x": v}, lambda w: conv_transpose_ref(v, w, s, pads, d, kw.get("groups", 1),
                                                       kw.get("output_size")))
    assert out.shape[0] == shape[0]


def test_conv2d_transpose_filter_from_output_size_and_bias():
    x = graphc.data("x", [1, 2, 4, 4], "float64")
    out = layers.conv2d_transpose(x, 3, output_size=9, stride=2)
    assert out.shape == (1, 3, 9, 9)
    w = _params()[0]
    assert list(w.shape) == [2, 3, 3, 3]  # Paddle: (9 - 3*2 - 1) // 1 + 1
    ops = [op.type for op in graphc.default_main_program().global_block().ops]
    assert ops == ["conv2d_transpose", "elementwise_add"]


def test_conv2d_transpose_nhwc_and_same():
    x = graphc.data("x", [1, 3, 3, 2], "float64")
    out = layers.conv2d_transpose(x, 4, filter_size=3, stride=2, padding="SAME",
                                  data_format="NHWC", bias_attr=False)
    v = RNG.standard_normal((1, 3, 3, 2))
    # SAME on a 3-wide input, k 3, stride 2: pads (1, 1)
    _check(out, {"x": v}, lambda w: conv_transpose_ref(
        v.transpose(0, 3, 1, 2), w, [2, 2], [(1, 1)] * 2, [1, 1], 1).transpose(0, 2, 3, 1))


def test_padding_as_pairs_per_dimension():
    x = graphc.data("x", [1, 2, 3, 3], "float64")
    out = layers.conv2d_transpose(x, 2, filter_size=3, padding=[[0, 0], [0, 0], [1, 0], [0, 2]],
                                  bias_attr=False)
    v = RNG.standard_normal((1, 2, 3, 3))
    _check(out, {"x": v}, lambda w: conv_transpose_ref(v, w, [1, 1], [(1, 0), (0, 2)], [1, 1],
                                                       1))
    y = graphc.data("y", [1, 4, 4, 4, 2], "float32")
    assert layers.pool3d(y, 2, pool_padding=[[0, 0], [1, 1], [0, 0], [1, 0], [0, 0]],
                         data_format="NDHWC").shape == (1, 5, 3, 4, 2)
    with pytest.raises(ProgramError, match="padding pairs"):
        layers.conv3d(y, 2, 2, padding=[[1, 1]] * 5, data_format="NDHWC")


def test_conv2d_transpose_refuses_bad_output_size():
    x = graphc.data("x", [1, 2, 3, 3], "float32")
    with pytest.raises(ShapeError, match="output_size"):
        layers.conv2d_transpose(x, 2, output_size=[9, 9], filter_size=3, stride=2)


@pytest.mark.parametrize("kw", [dict(stride=1, padding=0), dict(stride=2, padding=1, groups=2),
                                dict(stride=[1, 2, 1], padding=[1, 0, 1], dilation=2)])
def test_conv3d(kw):
    x = graphc.data("x", [2, 4, 5, 6, 5], "float64")
    out = layers.conv3d(x, 4, 3, bias_attr=False, **kw)
    v = RNG.standard_normal((2, 4, 5, 6, 5))
    s = kw["stride"] if isinstance(kw["stride"], list) else [kw["stride"]] * 3
    p = kw["padding"] if isinstance(kw["padding"], list) else [kw["padding"]] * 3
    d = [kw.get("dilation", 1)] * 3
    _check(out, {"x": v}, lambda w: conv_ref(v, w, s, [(q, q) for q in p], d,
                                             kw.get("groups", 1)))


def test_conv3d_transpose_and_ndhwc_conv3d():
    x = graphc.data("x", [1, 2, 2, 3, 2], "float64")
    out = layers.conv3d_transpose(x, 3, filter_size=2, stride=2, bias_attr=False)
    v = RNG.standard_normal((1, 2, 2, 3, 2))
    _check(out, {"x": v}, lambda w: conv_transpose_ref(v, w, [2] * 3, [(0, 0)] * 3, [1] * 3, 1))
    y = graphc.data("y", [1, 4, 4, 4, 2], "float32")
    assert layers.conv3d(y, 5, 3, data_format="NDHWC").shape == (1, 2, 2, 2, 5)


# -- pooling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(pool_size=2, pool_type="max", pool_stride=2),
    dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1),
    dict(pool_size=2, pool_type="avg", pool_stride=2, ceil_mode=True),
    dict(pool_size=[2, 3, 2], pool_type="max", pool_stride=[1, 2, 1]),
    dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1, exclusive=False),
])
def test_pool3d(kw):
    x = graphc.data("x", [-1, 2, 5, 5, 4], "float32")
    out = layers.pool3d(x, **kw)
    v = RNG.standard_normal((2, 2, 5, 5, 4)).astype("float32")
    k = kw["pool_size"] if isinstance(kw["pool_size"], list) else [kw["pool_size"]] * 3
    s = kw["pool_stride"] if isinstance(kw["pool_stride"], list) else [kw["pool_stride"]] * 3
    p = kw.get("pool_padding", 0)
    _check(out, {"x": v}, lambda: pool_ref(v, k, s, [(p, p)] * 3, kw["pool_type"],
                                           kw.get("ceil_mode", False),
                                           kw.get("exclusive", True)))


def test_global_pool3d():
    x = graphc.data("x", [2, 3, 4, 4, 4], "float32")
    out = layers.pool3d(x, pool_type="avg", global_pooling=True)
    v = RNG.standard_normal((2, 3, 4, 4, 4)).astype("float32")
    _check(out, {"x": v}, lambda: v.mean(axis=(2, 3, 4), keepdims=True))


@pytest.mark.parametrize(("kind", "exclusive", "ceil"), [
    ("max", True, False), ("avg", True, False), ("avg", False, False), ("max", True, True)])
def test_pool2d_window_past_the_padded_input_gives_one_output(kind, exclusive, ceil):
    # Paddle 1.8: (3 - 4) / 2 + 1 = 1 (C division); the window is clipped to the input
    x = graphc.data("x", [-1, 2, 3, 3], "float32")
    out = layers.pool2d(x, pool_size=4, pool_type=kind, pool_stride=2, exclusive=exclusive,
                        ceil_mode=ceil)
    assert out.shape == (-1, 2, 1, 1)
    v = RNG.standard_normal((2, 2, 3, 3)).astype("float32")
    _check(out, {"x": v}, lambda: pool_ref(v, [4, 4], [2, 2], [(0, 0)] * 2, kind, ceil,
                                           exclusive))


def test_pool2d_window_with_no_output_is_still_refused():
    x = graphc.data("x", [2, 2, 3, 3], "float32")
    with pytest.raises(ShapeError, match="larger than padded input"):
        layers.pool2d(x, pool_size=5, pool_stride=1)


@pytest.mark.parametrize(("nd", "size", "kind"), [
    (2, [2, 3], "max"), (2, 3, "avg"), (3, [2, 1, 3], "avg"), (3, 2, "max")])
def test_adaptive_pools(nd, size, kind):
    shape = (2, 3, 5, 7) if nd == 2 else (1, 2, 5, 3, 4)
    x = graphc.data("x", list(shape), "float32")
    fn = layers.adaptive_pool2d if nd == 2 else layers.adaptive_pool3d
    out = fn(x, size, pool_type=kind)
    size = [size] * nd if isinstance(size, int) else size
    v = RNG.standard_normal(shape).astype("float32")
    _check(out, {"x": v}, lambda: adaptive_ref(v, size, kind))
    with pytest.raises(ProgramError, match="require_index"):
        fn(x, size, "avg", require_index=True)


def _argmax_ref(x, windows):
    """(max, flat index in the input plane) per window: windows[o] = list of flat indices."""
    plane = x.reshape(*x.shape[:2], -1)
    out = np.zeros(x.shape[:2] + (len(windows),))
    mask = np.zeros(out.shape, np.int64)
    for o, w in enumerate(windows):
        vals = plane[:, :, w]
        mask[:, :, o] = np.array(w)[vals.argmax(-1)]
        out[:, :, o] = vals.max(-1)
    return out, mask


@pytest.mark.parametrize(("nd", "size"), [(2, [2, 3]), (3, [2, 1, 2])])
def test_adaptive_max_pool_with_index(nd, size):
    shape = (2, 3, 5, 7) if nd == 2 else (1, 2, 3, 4, 5)
    x = graphc.data("x", list(shape), "float32")
    fn = layers.adaptive_pool2d if nd == 2 else layers.adaptive_pool3d
    out, mask = fn(x, size, require_index=True)
    assert (out.shape, mask.shape, mask.dtype) == (shape[:2] + tuple(size),) * 2 + ("int32",)
    v = RNG.permutation(int(np.prod(shape))).reshape(shape).astype("float32")
    dims = shape[2:]
    windows = []
    for o in np.ndindex(*size):
        ranges = [range(o[i] * dims[i] // size[i], -(-(o[i] + 1) * dims[i] // size[i]))
                  for i in range(nd)]
        windows.append([int(np.ravel_multi_index(p, dims)) for p in np.ndindex(
            *(len(r) for r in ranges)) for p in [tuple(r[j] for r, j in zip(ranges, p))]])
    want_out, want_mask = _argmax_ref(v, windows)
    for got in _run_both([out, mask], {"x": v}):
        np.testing.assert_allclose(got[0].reshape(want_out.shape), want_out)
        np.testing.assert_array_equal(got[1].reshape(want_mask.shape), want_mask)


# -- normalisation ---------------------------------------------------------------------------
def test_instance_norm():
    x = graphc.data("x", [-1, 3, 4, 5], "float64")
    out = layers.instance_norm(x, epsilon=1e-3)
    v = RNG.standard_normal((2, 3, 4, 5)) * 3 + 1

    def ref(scale, bias):
        m = v.mean(axis=(2, 3), keepdims=True)
        var = v.var(axis=(2, 3), keepdims=True)
        return (v - m) / np.sqrt(var + 1e-3) * scale.reshape(1, 3, 1, 1) \
            + bias.reshape(1, 3, 1, 1)
    _check(out, {"x": v}, ref)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_group_norm(layout):
    shape = (2, 6, 3, 4) if layout == "NCHW" else (2, 3, 4, 6)
    x = graphc.data("x", list(shape), "float64")
    out = layers.group_norm(x, groups=3, data_layout=layout, act="relu")
    v = RNG.standard_normal(shape)

    def ref(scale, bias):
        t = v if layout == "NCHW" else v.transpose(0, 3, 1, 2)
        g = t.reshape(2, 3, -1)
        y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
        y = y.reshape(t.shape) * scale.reshape(1, 6, 1, 1) + bias.reshape(1, 6, 1, 1)
        y = np.maximum(y, 0)
        return y if layout == "NCHW" else y.transpose(0, 2, 3, 1)
    _check(out, {"x": v}, ref)


def test_group_norm_refuses_groups_not_dividing_channels():
    x = graphc.data("x", [2, 6, 3, 4], "float32")
    with pytest.raises(ShapeError, match="groups=4"):
        layers.group_norm(x, groups=4)


def test_lrn():
    x = graphc.data("x", [2, 6, 3, 3], "float64")
    out = layers.lrn(x, n=3, k=2.0, alpha=0.1, beta=0.5)
    v = RNG.standard_normal((2, 6, 3, 3))

    def ref():
        mid = np.full_like(v, 2.0)
        for ch in range(6):
            for j in range(ch - 1, ch + 2):
                if 0 <= j < 6:
                    mid[:, ch] += 0.1 * v[:, j] ** 2
        return v * mid ** -0.5
    _check(out, {"x": v}, ref)


def test_affine_channel():
    x = graphc.data("x", [2, 3, 2, 2], "float32")
    s = layers.fill_constant([3], "float32", 2.0)
    b = layers.fill_constant([3], "float32", -1.0)
    out = layers.affine_channel(x, s, b)
    v = RNG.standard_normal((2, 3, 2, 2)).astype("float32")
    _check(out, {"x": v}, lambda: v * 2.0 - 1.0)
    with pytest.raises(ProgramError, match="scale"):
        layers.affine_channel(x, None, b)


# -- resize ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "kw", "out"), [
    ("bilinear", dict(out_shape=[6, 7]), [6, 7]),
    ("bilinear", dict(out_shape=[6, 7], align_corners=False, align_mode=0), [6, 7]),
    ("bilinear", dict(out_shape=[3, 2], align_corners=False, align_mode=1), [3, 2]),
    ("bilinear", dict(scale=1.5, align_corners=False, align_mode=0), [6, 7]),
    ("nearest", dict(out_shape=[7, 3]), [7, 3]),
    ("nearest", dict(out_shape=[8, 9], align_corners=False), [8, 9]),
])
def test_resize_2d(method, kw, out):
    x = graphc.data("x", [-1, 2, 4, 5], "float64")
    fn = layers.resize_bilinear if method == "bilinear" else layers.resize_nearest
    y = fn(x, **kw)
    v = RNG.standard_normal((2, 2, 4, 5))
    _check(y, {"x": v}, lambda: interp_ref(v, out, method, kw.get("align_corners", True),
                                           kw.get("align_mode", 1)))


def test_resize_trilinear_and_nhwc():
    x = graphc.data("x", [1, 2, 3, 4, 2], "float64")
    y = layers.resize_trilinear(x, out_shape=[4, 2, 5], align_corners=False, align_mode=0)
    v = RNG.standard_normal((1, 2, 3, 4, 2))
    _check(y, {"x": v}, lambda: interp_ref(v, [4, 2, 5], "linear", False, 0))
    z = graphc.data("z", [1, 4, 5, 3], "float64")
    r = layers.image_resize(z, out_shape=[2, 7], data_format="NHWC")
    u = RNG.standard_normal((1, 4, 5, 3))
    _check(r, {"x": v, "z": u}, lambda: interp_ref(u.transpose(0, 3, 1, 2), [2, 7], "linear", True,
                                           1).transpose(0, 2, 3, 1))


def test_trilinear_channels_last_carries_paddles_nhwc_attribute():
    x = graphc.data("x", [1, 3, 4, 2, 2], "float64")
    y = layers.resize_trilinear(x, out_shape=[2, 5, 3], data_format="NDHWC")
    op = graphc.default_main_program().global_block().ops[-1]
    assert (op.type, op.attr("data_layout"), y.shape) == ("trilinear_interp", "NHWC",
                                                         (1, 2, 5, 3, 2))
    v = RNG.standard_normal((1, 3, 4, 2, 2))
    _check(y, {"x": v}, lambda: interp_ref(v.transpose(0, 4, 1, 2, 3), [2, 5, 3], "linear",
                                           True, 1).transpose(0, 2, 3, 4, 1))


def test_image_resize_short_and_refusals():
    x = graphc.data("x", [1, 3, 10, 15], "float32")
    assert layers.image_resize_short(x, 4).shape == (1, 3, 4, 6)
    with pytest.raises(ProgramError, match="out_shape or scale"):
        layers.image_resize(x)
    with pytest.raises(ProgramError, match="data-dependent"):
        layers.image_resize(x, out_shape=layers.fill_constant([2], "int32", 4))
    with pytest.raises(GraphcError):
        layers.image_resize(x, out_shape=[2, 2], resample="BICUBIC")


def test_fluid_spelling():
    for name in ("conv2d_transpose", "conv3d", "conv3d_transpose", "pool3d", "adaptive_pool2d",
                 "adaptive_pool3d", "instance_norm", "group_norm", "lrn", "image_resize",
                 "image_resize_short", "resize_bilinear", "resize_nearest", "resize_trilinear",
                 "affine_channel"):
        assert getattr(fluid.layers, name) is getattr(layers, name)


# -- dice_loss, temporal_shift, unfold, bilinear_tensor_product ----------------------------
def test_dice_loss():
    x = graphc.data("x", [-1, 3, 4], "float64")
    lab = graphc.data("lab", [-1, 3, 1], "int64")
    out = layers.dice_loss(x, lab, epsilon=1e-3)
    v = RNG.uniform(0, 1, (2, 3, 4))
    ids = RNG.integers(0, 4, (2, 3, 1))

    def ref():
        hot = np.eye(4)[ids[..., 0]]
        inse = (v * hot).sum(axis=(1, 2))
        den = v.sum(axis=(1, 2)) + hot.sum(axis=(1, 2))
        return np.mean(1 - inse * 2 / (den + 1e-3)).reshape(out.shape)
    _check(out, {"x": v, "lab": ids}, ref)


@pytest.mark.parametrize("ratio", [0.25, 0.2, 0.4])
def test_temporal_shift(ratio):
    x = graphc.data("x", [-1, 5, 2, 2], "float32")
    out = layers.temporal_shift(x, seg_num=3, shift_ratio=ratio)
    v = RNG.standard_normal((6, 5, 2, 2)).astype("float32")

    def ref():
        t = v.reshape(2, 3, 5, 2, 2)
        res = np.zeros_like(t)
        c1, c2 = int(5 * ratio), int(5 * 2 * ratio)
        for it in range(3):
            for ic in range(5):
                src = it - 1 if ic < c1 else it + 1 if ic < c2 else it
                if 0 <= src < 3:
                    res[:, it, ic] = t[:, src, ic]
        return res.reshape(v.shape)
    _check(out, {"x": v}, ref)
    with pytest.raises(ShapeError, match="multiple of seg_num"):
        layers.temporal_shift(graphc.data("y", [4, 5, 2, 2], "float32"), seg_num=3)
    with pytest.raises(ShapeError, match="not in"):
        layers.temporal_shift(x, seg_num=3, shift_ratio=0.5)


@pytest.mark.parametrize("kw", [dict(kernel_sizes=2), dict(kernel_sizes=[2, 3], strides=2,
                                                           paddings=[1, 0, 0, 2], dilations=1),
                                dict(kernel_sizes=2, paddings=[1, 2], dilations=2)])
def test_unfold(kw):
    x = graphc.data("x", [2, 3, 5, 6], "float64")
    out = layers.unfold(x, **kw)
    v = RNG.standard_normal((2, 3, 5, 6))
    k = kw["kernel_sizes"] if isinstance(kw["kernel_sizes"], list) else [kw["kernel_sizes"]] * 2
    s = [kw.get("strides", 1)] * 2
    d = [kw.get("dilations", 1)] * 2
    p = kw.get("paddings", 0)
    p = [p] * 4 if isinstance(p, int) else (p * 2 if len(p) == 2 else p)

    def ref():
        xp = np.pad(v, [(0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])])
        oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
        ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
        cols = np.zeros((2, 3, k[0], k[1], oh, ow))
        for i in range(k[0]):
            for j in range(k[1]):
                cols[:, :, i, j] = xp[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                                      j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
        return cols.reshape(2, 3 * k[0] * k[1], oh * ow)
    _check(out, {"x": v}, ref)


def test_bilinear_tensor_product():
    x = graphc.data("x", [-1, 3], "float64")
    y = graphc.data("y", [-1, 4], "float64")
    out = layers.bilinear_tensor_product(x, y, 5, act="tanh")
    assert out.shape == (-1, 5)
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4))
    _check(out, {"x": a, "y": b},
           lambda w, bias: np.tanh(np.einsum("bm,imn,bn->bi", a, w, b) + bias))


def test_fluid_spelling_of_the_rest():
    for name in ("dice_loss", "temporal_shift", "unfold", "bilinear_tensor_product"):
        assert getattr(fluid.layers, name) is getattr(layers, name)


def test_3d_ops_read_paddles_nchw_nhwc_spelling():
    block = graphc.default_main_program().global_block()
    x = graphc.data("x", [1, 4, 4, 4, 2], "float32")
    out = block.create_var("out", None, "float32")
    block.append_op("pool3d", {"X": x}, {"Out": out},
                    {"ksize": [2, 2, 2], "strides": [2, 2, 2], "data_format": "NHWC"})
    assert out.shape == (1, 2, 2, 2, 2)
    v = RNG.standard_normal((1, 4, 4, 4, 2)).astype("float32")
    _check(out, {"x": v}, lambda: pool_ref(v.transpose(0, 4, 1, 2, 3), [2] * 3, [2] * 3,
                                           [(0, 0)] * 3, "max").transpose(0, 2, 3, 4, 1))


def test_pools_take_unknown_channels():
    x = graphc.data("x", [2, -1, 6, 6], "float32")
    assert layers.adaptive_pool2d(x, 3, "avg").shape == (2, -1, 3, 3)
    y = graphc.data("y", [2, -1, 4, 4, 4], "float32")
    assert layers.pool3d(y, 2, pool_stride=2).shape == (2, -1, 2, 2, 2)
    with pytest.raises(ProgramError, match="channel dimension"):
        layers.conv3d(y, 2, 3)


def test_max_pool2d_with_index_strided_and_padded():
    block = graphc.default_main_program().global_block()
    x = graphc.data("x", [2, 3, 6, 5], "float32")
    out = block.create_var("out", None, "float32")
    mask = block.create_var("mask", None, "int32")
    block.append_op("max_pool2d_with_index", {"X": x}, {"Out": out, "Mask": mask},
                    {"ksize": [3, 2], "strides": [2, 2], "paddings": [1, 1]})
    assert out.shape == (2, 3, 3, 3)
    v = RNG.permutation(180).reshape(2, 3, 6, 5).astype("float32")
    want = pool_ref(v, [3, 2], [2, 2], [(1, 1), (1, 1)], "max")
    for got_out, got_mask in _run_both([out, mask], {"x": v}):
        np.testing.assert_allclose(got_out, want)
        plane = v.reshape(2, 3, -1)
        np.testing.assert_allclose(np.take_along_axis(plane, got_mask.reshape(2, 3, -1), 2),
                                   want.reshape(2, 3, -1))
