"""Issue 24's nn tail (data_norm, spectral_norm, inplace_abn, lstm, hash,
continuous_value_model, autoincreased_step_counter): NumPy references on both backends."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.ir.errors import ProgramError, ShapeError
from graphc.testing.lod import as_feed

RNG = np.random.default_rng(2406)


def _run_both(fetch, feeds):
    """Fetched values (by Variable or name) from the jitted step and the interpreter."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    names = [getattr(v, "name", v) for v in fetch]
    exe = graphc.Executor()
    exe.run(startup)
    jitted = exe.run(main, feed=feeds, fetch_list=names)
    state, _ = run_graph(graphc.lower(startup))
    _, interp = run_graph(graphc.lower(main), state, feeds, names)
    return [np.asarray(v) for v in jitted], [np.asarray(v) for v in interp]


# -- hash: XXH64, written here from the algorithm's description ------------------------------
M64 = (1 << 64) - 1
P1, P2, P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
P4, P5 = 9650029242287828579, 2870177450012600261


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return _rotl((acc + lane * P2) & M64, 31) * P1 & M64


def xxh64(data: bytes, seed: int = 0) -> int:
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed & M64, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for a in v:
            h = ((h ^ _round(0, a)) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1 & M64), 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h = _rotl(h ^ (data[i] * P5 & M64), 11) * P1 & M64
        i += 1
    h = (h ^ (h >> 33)) * P2 & M64
    h = (h ^ (h >> 29)) * P3 & M64
    return h ^ (h >> 32)


@pytest.mark.parametrize(("data", "want"), [
    (b"", 0xEF46DB3751D8E999), (b"a", 0xD24EC4F1A98C6E5B), (b"abc", 0x44BC2CF5AD770999),
    (b"The quick brown fox jumps over the lazy dog", 0x0B242D361FDA71BC)])
def test_the_reference_xxh64_gives_the_published_values(data, want):
    assert xxh64(data) == want


def hash_ref(ids: np.ndarray, mod: int, num_hash: int) -> np.ndarray:
    rows = ids.reshape(-1, ids.shape[-1])
    out = [[xxh64(np.ascontiguousarray(r).tobytes(), s) % mod for s in range(num_hash)]
           for r in rows]
    return np.asarray(out, ids.dtype).reshape(*ids.shape[:-1], num_hash, 1)


@pytest.mark.parametrize(("dtype", "width"), [("int64", 1), ("int64", 2), ("int64", 5),
                                              ("int32", 3), ("int32", 9), ("int32", 8)])
def test_hash_matches_xxh64_of_each_rows_bytes(dtype, width):
    # widths cover the < 32-byte path, the 32-byte stripes, the 8-byte lanes and the 4-byte tail
    ids = RNG.integers(-2**31, 2**31 - 1, (4, width)).astype(dtype)
    ids[0] = 0
    x = graphc.data("ids", [-1, width], dtype)
    out = layers.hash(x, hash_size=1000003, num_hash=3)
    assert (out.shape, out.dtype) == ((-1, 3, 1), dtype)
    want = hash_ref(ids, 1000003, 3)
    for (got,) in _run_both([out], {"ids": ids}):
        np.testing.assert_array_equal(got, want)


def test_hash_keeps_lod_and_refuses_floats():
    x = graphc.data("ids", [-1, 1], "int64", lod_level=1)
    out = layers.hash(x, 10, num_hash=2)
    assert out.lod_level == 1
    ids = np.array([[3], [7], [11]], "int64")
    t = fluid.create_lod_tensor(ids, [[2, 0, 1]], fluid.CPUPlace())
    (got,) = graphc.Executor().run(feed={"ids": t}, fetch_list=[out], return_numpy=False)
    np.testing.assert_array_equal(np.asarray(got), hash_ref(ids, 10, 2))
    assert got.recursive_sequence_lengths() == [[2, 0, 1]]
    with pytest.raises(ProgramError, match="int32 or int64"):
        layers.hash(graphc.data("f", [-1, 2]), 10)


# -- continuous_value_model (cvm) -----------------------------------------------------------
@pytest.mark.parametrize("use_cvm", [True, False])
def test_cvm_forward_and_paddles_gradient(use_cvm):
    xv = RNG.uniform(0, 5, (3, 6))
    cv = RNG.uniform(0, 5, (3, 2))
    x = graphc.data("x", [-1, 6], "float64")
    x.stop_gradient = False
    c = graphc.data("cv", [-1, 2], "float64")
    y = layers.continuous_value_model(x, c, use_cvm=use_cvm)
    assert y.shape == (-1, 6 if use_cvm else 4)
    append_backward(layers.reduce_sum(y))
    if use_cvm:
        show = np.log(xv[:, :1] + 1)
        want = np.concatenate([show, np.log(xv[:, 1:2] + 1) - show, xv[:, 2:]], axis=1)
    else:
        want = xv[:, 2:]
    for got, grad in _run_both([y, "x@GRAD"], {"x": xv, "cv": cv}):
        np.testing.assert_allclose(got, want, rtol=1e-12)
        # Paddle's cvm_grad: the show/click columns get CVM itself, the rest dY
        np.testing.assert_array_equal(grad[:, :2], cv)
        np.testing.assert_array_equal(grad[:, 2:], 1.0)


# -- data_norm -------------------------------------------------------------------------------
def _stats(prefix):
    scope = graphc.global_scope()
    return [np.asarray(scope.find_var(f"{prefix}.{k}").get_tensor())
            for k in ("batch_size", "batch_sum", "batch_square_sum")]


@pytest.mark.parametrize(("slot_dim", "shift"), [(-1, False), (2, True)])
def test_data_norm_forward_and_summary_update(slot_dim, shift):
    xv = RNG.standard_normal((4, 6))
    xv[1, 2] = 0.0  # with slot_dim=2: the second slot of row 1 is empty (show 0)
    x = graphc.data("x", [-1, 6], "float64")
    y = layers.data_norm(x, name="dn", slot_dim=slot_dim, enable_scale_and_shift=shift,
                         param_attr={"batch_size": 100.0, "batch_sum": 10.0,
                                     "batch_square": 50.0, "scale_w": 2.0, "bias": 0.5})
    size, total, square = np.full(6, 100.0), np.full(6, 10.0), np.full(6, 50.0)
    means, scales = total / size, np.sqrt(size / square)
    want = (xv - means) * scales
    if shift:
        want = want * 2.0 + 0.5
    live = np.ones_like(xv, bool)
    if slot_dim > 0:  # an empty slot is all zeros, bias included
        live = np.repeat(np.abs(xv[:, ::2]) >= 1e-7, 2, axis=1)
        want = np.where(live, want, 0.0)
        assert (want[1, 2:4] == 0).all()
    for (got,) in _run_both([y], {"x": xv}):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # the jitted run above folded Paddle's batch statistics into the summaries
    count = live.sum(0)
    if slot_dim > 0:  # per slot: 1, the mean, the mean square deviation + count * eps
        batch = [np.ones(6), (xv * live).sum(0) / count,
                 (((xv - means) ** 2) * live).sum(0) / count + count * 1e-5]
    else:
        batch = [count, xv.sum(0), ((xv - means) ** 2).sum(0) + count * 1e-5]
    for got, old, add in zip(_stats("dn"), (size, total, square), batch):
        np.testing.assert_allclose(got, old * 0.9999999 + add, rtol=1e-12)


@pytest.mark.parametrize("shift", [False, True])
def test_data_norm_gradient_of_an_empty_slot_is_paddles(shift):
    xv = RNG.standard_normal((3, 4))
    xv[0, 0] = 0.0  # row 0's first slot is empty
    x = graphc.data("x", [-1, 4], "float64")
    x.stop_gradient = False
    y = layers.data_norm(x, name="dn", slot_dim=2, enable_scale_and_shift=shift)
    append_backward(layers.reduce_sum(y))
    scales = np.sqrt(1e4 / 1e4)
    want = np.full((3, 4), scales)
    if shift:  # masked with scale and shift only; without, dX = dY * scales everywhere
        want[0, :2] = 0.0
    for (grad,) in _run_both(["x@GRAD"], {"x": xv}):
        np.testing.assert_allclose(grad, want, rtol=1e-12)


def test_data_norm_test_program_leaves_the_summaries_alone():
    x = graphc.data("x", [-1, 3], "float32")
    layers.data_norm(x, name="dn")
    test = graphc.default_main_program().clone(for_test=True)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    exe.run(test, feed={"x": np.ones((2, 3), "float32")})
    np.testing.assert_array_equal(_stats("dn")[0], np.full(3, 1e4, "float32"))
    exe.run(graphc.default_main_program(), feed={"x": np.ones((2, 3), "float32")})
    assert _stats("dn")[0][0] == pytest.approx(1e4 * 0.9999999 + 2, rel=1e-6)


def test_data_norm_parameter_names_are_paddles():
    layers.data_norm(graphc.data("x", [-1, 3]), enable_scale_and_shift=True)
    names = {p.name for p in graphc.default_main_program().global_block().all_parameters()}
    assert names == {"dn.batch_size", "dn.batch_sum", "dn.batch_square_sum", "dn.scale_w",
                     "dn.bias"}
    op = graphc.default_main_program().global_block().ops[-1]
    assert op.input("scale_w") == ["dn.scale_w"] and op.input("bias") == ["dn.bias"]


def test_data_norm_wants_2d_input():
    with pytest.raises(ProgramError, match=r"\[N, C\]"):
        layers.data_norm(graphc.data("x", [-1, 3, 4]))


# -- spectral_norm ---------------------------------------------------------------------------
def spectral_ref(w, u, v, dim, iters, eps):
    mat = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    for _ in range(iters):
        v = mat.T @ u
        v = v / (np.linalg.norm(v) + eps)
        u = mat @ v
        u = u / (np.linalg.norm(u) + eps)
    return u, v, u @ mat @ v


@pytest.mark.parametrize(("shape", "dim", "iters"), [((4, 3), 0, 1), ((3, 4, 2), 1, 3),
                                                     ((2, 5, 2, 2), 0, 0)])
def test_spectral_norm_matches_power_iteration_and_paddles_gradient(shape, dim, iters):
    wv = RNG.standard_normal(shape)
    w = graphc.data("w", list(shape), "float64")
    w.stop_gradient = False
    out = layers.spectral_norm(w, dim=dim, power_iters=iters, eps=1e-12)
    assert out.shape == shape
    dout = RNG.standard_normal(shape)
    weights = graphc.data("dout", list(shape), "float64")
    append_backward(layers.reduce_sum(layers.elementwise_mul(out, weights)))
    params = graphc.default_main_program().global_block().all_parameters()
    u_name, v_name = (p.name for p in params)
    feeds = {"w": wv, "dout": dout}
    for got, grad, u0, v0 in _run_both([out, "w@GRAD", u_name, v_name], feeds):
        u, v, sigma = spectral_ref(wv, u0, v0, dim, iters, 1e-12)
        np.testing.assert_allclose(got, wv / sigma, rtol=1e-10)
        # Paddle: u and v constant, dW = dOut / sigma - sum(dOut * W) / sigma^2 * u v^T
        uv = np.moveaxis(np.outer(u, v).reshape(np.moveaxis(wv, dim, 0).shape), 0, dim)
        np.testing.assert_allclose(grad, dout / sigma - (dout * wv).sum() / sigma ** 2 * uv,
                                   rtol=1e-9, atol=1e-12)
    # U and V are not written back (Paddle's kernel iterates on copies)
    scope = graphc.global_scope()
    np.testing.assert_array_equal(np.asarray(scope.find_var(u_name).get_tensor()), u0)


# -- inplace_abn -----------------------------------------------------------------------------
@pytest.mark.parametrize(("act", "alpha"), [(None, 1.0), ("identity", 1.0),
                                            ("leaky_relu", 0.1), ("elu", 0.7)])
def test_inplace_abn_is_batch_norm_then_its_activation(act, alpha):
    xv = RNG.standard_normal((2, 3, 4, 4))
    x = graphc.data("x", [-1, 3, 4, 4], "float64")
    out = layers.inplace_abn(x, act=act, act_alpha=alpha)
    mean = xv.mean(axis=(0, 2, 3), keepdims=True)
    var = xv.var(axis=(0, 2, 3), keepdims=True)
    norm = (xv - mean) / np.sqrt(var + 1e-5)  # scale 1, bias 0 at start
    want = {None: norm, "identity": norm, "leaky_relu": np.where(norm > 0, norm, alpha * norm),
            "elu": np.where(norm > 0, norm, alpha * (np.exp(norm) - 1))}[act]
    for (got,) in _run_both([out], {"x": xv}):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_inplace_abn_refuses_other_activations():
    with pytest.raises(ProgramError, match="inplace_abn: act"):
        layers.inplace_abn(graphc.data("x", [-1, 3, 4, 4]), act="relu")


# -- lstm (cudnn) ----------------------------------------------------------------------------
def _sig(z):
    return 1 / (1 + np.exp(-z))


def lstm_ref(x, h0, c0, w, hidden, layers_, dirs):
    off, hs, cs = 0, [], []
    for layer in range(layers_):
        outs = []
        for d in range(dirs):
            width = x.shape[2]
            wx = w[off:off + 4 * hidden * width].reshape(4 * hidden, width)
            off += wx.size
            wh = w[off:off + 4 * hidden * hidden].reshape(4 * hidden, hidden)
            off += wh.size
            b = w[off:off + 4 * hidden] + w[off + 4 * hidden:off + 8 * hidden]
            off += 8 * hidden
            k = layer * dirs + d
            h, c = h0[k], c0[k]
            ys = np.zeros((x.shape[0], x.shape[1], hidden))
            steps = range(x.shape[0]) if d == 0 else reversed(range(x.shape[0]))
            for t in steps:
                g = x[t] @ wx.T + h @ wh.T + b
                i, f, cand, o = np.split(g, 4, axis=-1)
                c = _sig(f) * c + _sig(i) * np.tanh(cand)
                h = _sig(o) * np.tanh(c)
                ys[t] = h
            outs.append(ys)
            hs.append(h)
            cs.append(c)
        x = np.concatenate(outs, axis=-1)
    return x, np.stack(hs), np.stack(cs)


@pytest.mark.parametrize(("num_layers", "bidi"), [(1, False), (2, True), (3, False)])
def test_lstm_matches_a_numpy_lstm(num_layers, bidi):
    dirs = 2 if bidi else 1
    t, n, i, hid = 4, 3, 5, 3
    xv = RNG.standard_normal((t, n, i))
    h0v = RNG.standard_normal((num_layers * dirs, n, hid))
    c0v = RNG.standard_normal((num_layers * dirs, n, hid))
    x = graphc.data("x", [t, -1, i], "float64")
    h0 = graphc.data("h0", [num_layers * dirs, -1, hid], "float64")
    c0 = graphc.data("c0", [num_layers * dirs, -1, hid], "float64")
    out, last_h, last_c = layers.lstm(x, h0, c0, t, hid, num_layers, is_bidirec=bidi,
                                      dropout_prob=0.3, is_test=True)
    assert out.shape == (t, -1, hid * dirs)
    assert last_h.shape == last_c.shape == (num_layers * dirs, -1, hid)
    (w,) = graphc.default_main_program().global_block().all_parameters()
    feeds = {"x": xv, "h0": h0v, "c0": c0v}
    for got_out, got_h, got_c, wv in _run_both([out, last_h, last_c, w], feeds):
        want = lstm_ref(xv, h0v, c0v, wv, hid, num_layers, dirs)
        for got, ref in zip((got_out, got_h, got_c), want):
            np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)


def test_lstm_dropout_between_layers_scales_kept_units():
    x = graphc.data("x", [2, 50, 4], "float32")
    h0 = graphc.data("h0", [2, 50, 8], "float32")
    c0 = graphc.data("c0", [2, 50, 8], "float32")
    layers.lstm(x, h0, c0, 2, 8, 2, dropout_prob=0.25, seed=3)
    op = graphc.default_main_program().global_block().ops[-1]
    reserve = op.output("Reserve")[0]
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    feeds = {"x": np.ones((2, 50, 4), "float32"), "h0": np.zeros((2, 50, 8), "float32"),
             "c0": np.zeros((2, 50, 8), "float32")}
    (mask,) = exe.run(feed=feeds, fetch_list=[reserve])
    assert mask.shape == (1, 2, 50, 8)
    assert set(np.unique(mask)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.15 < (mask == 0).mean() < 0.35


def test_lstm_checks_shapes():
    x = graphc.data("x", [4, -1, 5])
    h = graphc.data("h", [2, -1, 3])
    with pytest.raises(ShapeError, match=r"InitH must be \[1, batch, 3\]"):
        layers.lstm(x, h, h, 4, 3, 1)
    with pytest.raises(ProgramError, match="seq_len, batch, input_size"):
        layers.lstm(graphc.data("y", [-1, 5]), h, h, 4, 3, 1)


# -- autoincreased_step_counter --------------------------------------------------------------
def test_autoincreased_step_counter_counts_runs():
    counter = layers.autoincreased_step_counter()
    other = layers.autoincreased_step_counter("my_counter", begin=3, step=2)
    assert layers.autoincreased_step_counter() is counter
    assert (counter.name, counter.dtype, counter.persistable) == ("@STEP_COUNTER@", "int64",
                                                                  True)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    seen = [exe.run(fetch_list=[counter, other]) for _ in range(3)]
    assert [int(a[0]) for a, _ in seen] == [1, 2, 3]
    assert [int(b[0]) for _, b in seen] == [4, 6, 8]  # Paddle: begin - 1, then + step
    assert seen[0][0].dtype == np.int64


def test_decay_step_counter_still_shares_the_lr_counter():
    step = fluid.layers.learning_rate_scheduler._decay_step_counter(begin=5)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    assert [float(exe.run(fetch_list=[step])[0][0]) for _ in range(2)] == [5.0, 6.0]


def test_fluid_layers_spelling_resolves():
    for name in ("data_norm", "spectral_norm", "inplace_abn", "lstm", "hash",
                 "continuous_value_model", "filter_by_instag", "load",
                 "autoincreased_step_counter"):
        assert getattr(fluid.layers, name) is getattr(layers, name)
        assert name in fluid.layers.__all__


# -- filter_by_instag ------------------------------------------------------------------------
def instag_ref(rows, lengths, tags, tag_lengths, wanted, fill):
    """(kept rows, their LoD lengths, loss weight, index map) as Paddle's kernel."""
    starts = np.cumsum([0, *lengths])
    tag_starts = np.cumsum([0, *tag_lengths])
    out, out_len, index = [], [], []
    for i, n in enumerate(lengths):
        if set(tags[tag_starts[i]:tag_starts[i + 1]].reshape(-1)) & set(wanted):
            index.append([sum(out_len), starts[i], n])
            out.extend(rows[starts[i]:starts[i] + n])
            out_len.append(n)
    if not out:  # one fill row, weight 0, index [0, 1, 1]
        return np.full((1, rows.shape[1]), fill, rows.dtype), [1], np.zeros((1, 1)), \
            [[0, 1, 1]]
    return np.asarray(out), out_len, np.ones((len(out_len), 1)), index


def _lod_parts(value):
    """(tokens, level-1 lengths) of a fetched LoD value from either backend."""
    if hasattr(value, "recursive_sequence_lengths"):
        return np.asarray(value), list(value.recursive_sequence_lengths()[0])
    tokens = int(np.sum(value.lengths[-1]))
    return np.asarray(value.data)[:tokens], [int(n) for n in np.asarray(value.lengths[0])]


@pytest.mark.parametrize(("is_lod", "wanted"), [(True, [2, 5]), (False, [2, 5]),
                                                (True, [9]), (False, [4])])
def test_filter_by_instag_keeps_tagged_instances(is_lod, wanted):
    rows = RNG.standard_normal((6, 3))
    lengths = [1, 2, 0, 3] if is_lod else [1] * 6
    tag_lengths = [1, 2, 1, 2] if is_lod else [1, 2, 1, 1, 1, 0]
    tags = np.array([[1], [2], [3], [2], [4], [5]], "int64")
    ins = graphc.data("ins", [-1, 3], "float64", lod_level=1 if is_lod else 0)
    tag = graphc.data("tag", [-1, 1], "int64", lod_level=1)
    flt = graphc.data("flt", [-1], "int64")
    out, weight = layers.filter_by_instag(ins, tag, flt, is_lod, out_val_if_empty=-3)
    assert (out.lod_level, weight.lod_level, weight.dtype) == (1, 1, "float32")
    assert weight.shape == (-1, 1)
    index_map = graphc.default_main_program().global_block().ops[-1].output("IndexMap")[0]
    feeds = {"ins": fluid.create_lod_tensor(rows, [lengths], fluid.CPUPlace()) if is_lod
             else rows, "tag": fluid.create_lod_tensor(tags, [tag_lengths], fluid.CPUPlace()),
             "flt": np.array(wanted, "int64")}
    want, want_len, want_w, want_index = instag_ref(rows, lengths, tags, tag_lengths, wanted,
                                                    -3)
    exe = graphc.Executor()
    jitted = exe.run(feed=feeds, fetch_list=[out, weight, index_map], return_numpy=False)
    main = graphc.default_main_program()
    packed = {k: as_feed(main, k, v) if hasattr(v, "recursive_sequence_lengths") else v
              for k, v in feeds.items()}
    _, interp = run_graph(graphc.lower(main), {}, packed, [out.name, weight.name, index_map])
    for got_out, got_w, got_index in (jitted, interp):
        tokens, lod = _lod_parts(got_out)
        np.testing.assert_array_equal(tokens, want)
        # Paddle's LoD lists the kept instances only; graphc's adds the dropped ones, empty
        assert lod[:len(want_len)] == want_len and not any(lod[len(want_len):])
        # LossWeight and IndexMap: one row (a sequence of one) per kept instance, as Paddle
        weights, weight_lod = _lod_parts(got_w)
        np.testing.assert_array_equal(weights, want_w)
        assert weight_lod[:len(want_w)] == [1] * len(want_w) and not any(
            weight_lod[len(want_w):])
        index, _ = _lod_parts(got_index)
        np.testing.assert_array_equal(index, np.reshape(want_index, (-1, 3)))


# -- load (Paddle's LoDTensor file format) ---------------------------------------------------
def paddle_tensor_bytes(array, lod=(), packed_dims=False):
    """A LoDTensor file built by hand from the format: version, LoD levels (byte size and
    uint64 offsets), tensor version, TensorDesc (data_type, dims) size and bytes, data."""
    codes = {"float32": 5, "float64": 6, "int64": 3, "int32": 2}
    out = struct.pack("<IQ", 0, len(lod))
    for level in lod:
        out += struct.pack("<Q", 8 * len(level)) + struct.pack(f"<{len(level)}Q", *level)
    desc = bytes([0x08, codes[str(array.dtype)]])
    dims = b"".join(bytes([d]) for d in array.shape)  # small dims: one-byte varints
    desc += bytes([0x12, len(dims)]) + dims if packed_dims else \
        b"".join(bytes([0x10, d]) for d in array.shape)
    return out + struct.pack("<Ii", 0, len(desc)) + desc + array.tobytes()


@pytest.mark.parametrize(("dtype", "lod", "packed"), [("float32", (), False),
                                                      ("int64", ([0, 1, 3],), False),
                                                      ("float64", (), True)])
def test_load_fills_a_variable_from_a_paddle_tensor_file(tmp_path, dtype, lod, packed):
    value = (RNG.standard_normal((3, 4)) * 10).astype(dtype)
    path = tmp_path / "w"
    path.write_bytes(paddle_tensor_bytes(value, lod, packed))
    startup = graphc.default_startup_program()
    with graphc.program_guard(startup):
        w = startup.global_block().create_var("w", [3, 4], dtype, persistable=True)
        assert layers.load(w, str(path)) is None
    exe = graphc.Executor()
    exe.run(startup)
    got = np.asarray(graphc.global_scope().find_var("w").get_tensor())
    np.testing.assert_array_equal(got, value)
    assert got.dtype == value.dtype
    state, _ = run_graph(graphc.lower(startup))
    np.testing.assert_array_equal(np.asarray(state["w"]), value)
    # read when the op runs: a rewritten file is read again by the same compiled step
    path.write_bytes(paddle_tensor_bytes(value + 1, lod, packed))
    exe.run(startup)
    np.testing.assert_array_equal(graphc.global_scope().find_var("w").get_tensor(), value + 1)


def test_load_as_fp16_and_the_reader_round_trip(tmp_path):
    from graphc.ops.nn_more_ops.paddle_tensor import read_lod_tensor, write_lod_tensor
    value = RNG.standard_normal((2, 5)).astype("float32")
    write_lod_tensor(str(tmp_path / "a"), value, [[0, 2]])
    assert (tmp_path / "a").read_bytes() == paddle_tensor_bytes(value, ([0, 2],))
    got, lod = read_lod_tensor(str(tmp_path / "a"))
    np.testing.assert_array_equal(got, value)
    assert lod == [[0, 2]]
    main = graphc.default_main_program()
    half = main.global_block().create_var("half", [2, 5], "float16")
    layers.load(half, str(tmp_path / "a"), load_as_fp16=True)
    (out,) = graphc.Executor().run(fetch_list=[half])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, value.astype("float16"))


def test_load_refuses_a_file_of_another_shape_or_a_missing_one(tmp_path):
    (tmp_path / "a").write_bytes(paddle_tensor_bytes(np.zeros((2, 2), "float32")))
    main = graphc.default_main_program()
    w = main.global_block().create_var("w", [3, 4], "float32")
    layers.load(w, str(tmp_path / "a"))
    with pytest.raises(Exception, match=r"holds float32 \[2, 2\].*float32 \[3, 4\]"):
        graphc.Executor().run(fetch_list=[w])
    with pytest.raises(ProgramError, match="needs a known shape"):
        layers.load(graphc.data("x", [-1, 3]), str(tmp_path / "a"))
    with graphc.program_guard(graphc.Program(), graphc.Program()):
        other = graphc.default_main_program()
        v = other.global_block().create_var("v", [1], "float32")
        layers.load(v, str(tmp_path / "missing"))
        with pytest.raises(Exception, match="cannot read tensor file"):
            run_graph(graphc.lower(other), {}, {}, ["v"])
