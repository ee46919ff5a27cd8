"""More of what stopped Paddle 1.8 programs ported by renaming imports: CTR-DNN's dense label
beside LoD token rows, DCGAN's shape-tensor fills, Variable's surface, lr schedule values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError
from graphc.testing.lod import as_feed

# -- CTR-DNN (the CPU guide's): one id per slot, embeddings concatenated un-pooled -----------
SLOTS, VOCAB, N = 3, 40, 6


def _ctr_dnn(lod: bool):
    """Paddle's CPU-guide CTR-DNN: LoD slots -> embedding -> concat with the dense features
    -> fc stack -> softmax -> cross_entropy with the dense label; ``lod`` False feeds the
    same ids as dense [N, 1] columns (the reference: one token per sequence is one row)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        dense = fluid.layers.data("dense_input", shape=[5], dtype="float32")
        slots = [fluid.layers.data(f"C{i}", shape=[1], dtype="int64",
                                   lod_level=1 if lod else 0) for i in range(SLOTS)]
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        embs = [fluid.layers.embedding(s, size=[VOCAB, 4], is_sparse=True,
                                       param_attr=fluid.ParamAttr(name="SparseFeatFactors"))
                for s in slots]
        if not lod:  # a dense [N, 1] id column embeds to [N, 1, 4]
            embs = [fluid.layers.reshape(e, [-1, 4]) for e in embs]
        h = fluid.layers.concat(embs + [dense], axis=1)
        for width in (8, 8):
            h = fluid.layers.fc(h, width, act="relu")
        predict = fluid.layers.fc(h, 2, act="softmax")
        cost = fluid.layers.cross_entropy(input=predict, label=label)
        avg_cost = fluid.layers.mean(cost)
        acc = fluid.layers.accuracy(input=predict, label=label)
        auc = fluid.layers.auc(input=predict, label=label)[0]
        fluid.optimizer.SGD(learning_rate=0.2).minimize(avg_cost)
    return main, startup, predict, [avg_cost, acc, auc]


def _ctr_feeds(steps, lod, tokens_off=0):
    rng = np.random.RandomState(3)
    feeds = []
    for _ in range(steps):
        ids = rng.randint(0, VOCAB, (SLOTS, N, 1)).astype("int64")
        feed = {"dense_input": rng.rand(N, 5).astype("float32"),
                "label": (ids[0] % 2).astype("int64")}  # learnable from slot C0
        for i in range(SLOTS):
            if lod:
                lens = [1] * N
                lens[0] += tokens_off
                rows = np.resize(ids[i], (sum(lens), 1))
                feed[f"C{i}"] = fluid.create_lod_tensor(rows, [lens], fluid.CPUPlace())
            else:
                feed[f"C{i}"] = ids[i]
        feeds.append(feed)
    return feeds


def _train(lod, steps=30):
    main, startup, predict, fetch = _ctr_dnn(lod)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        out = [[float(np.asarray(v).reshape(-1)[0]) for v in exe.run(main, feed=f,
                                                                       fetch_list=fetch)]
               for f in _ctr_feeds(steps, lod) * 3]
    return main, predict, np.array(out)


def test_ctr_dnn_dense_label_pairs_with_lod_rows_and_trains():
    main, predict, got = _train(lod=True)
    assert predict.lod_level == 1
    _, _, ref = _train(lod=False)
    losses = got[:, 0]
    assert losses[-10:].mean() < 0.7 * losses[:10].mean()
    # one token per sequence is one row: the LoD program is the dense one, step for step
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-6)
    assert got[-10:, 1].mean() > 0.7 and 0.5 < got[-1, 2] <= 1.0


def test_ctr_dnn_on_the_interpreter_equals_the_jitted_step():
    import graphc

    main, startup, predict, fetch = _ctr_dnn(lod=True)
    feed = _ctr_feeds(1, lod=True)[0]
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        params = {v.name: np.asarray(scope.find_var(v.name).get_tensor())
                  for v in main.list_vars() if v.persistable and scope.find_var(v.name)}
        got = exe.run(main, feed=feed, fetch_list=[predict, fetch[0]])
    packed = {k: as_feed(main, k, v) for k, v in feed.items()}
    _, ref = run_graph(graphc.lower(main), params, packed, [predict.name, fetch[0].name])
    np.testing.assert_allclose(np.asarray(ref[0].data)[:N], got[0], rtol=1e-5)
    np.testing.assert_allclose(ref[1], got[1], rtol=1e-5)


def test_ctr_dnn_label_rows_must_equal_the_tokens():
    main, startup, _, fetch = _ctr_dnn(lod=True)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.raises(DataError, match="paired row for row"):
            exe.run(main, feed=_ctr_feeds(1, lod=True, tokens_off=2)[0], fetch_list=fetch)


def test_softmax_with_cross_entropy_dense_label_beside_lod_logits():
    x = fluid.data("x", [-1, 3], "float64", lod_level=1)
    label = fluid.data("label", [-1, 1], "int64")
    loss = fluid.layers.softmax_with_cross_entropy(x, label)
    assert loss.lod_level == 1
    tokens = np.random.RandomState(0).randn(5, 3)
    lab = np.array([[0], [2], [1], [1], [0]], "int64")
    t = fluid.create_lod_tensor(tokens, [[2, 3]], fluid.CPUPlace())
    (got,) = fluid.Executor(fluid.CPUPlace()).run(feed={"x": t, "label": lab},
                                                   fetch_list=[loss])
    logp = tokens - np.log(np.exp(tokens).sum(1, keepdims=True))
    np.testing.assert_allclose(got, -np.take_along_axis(logp, lab, 1), rtol=1e-10)


# -- DCGAN: noise and labels sized by shape(img)[0], shape tensors folded when traced ---------
Z = 8


def _dcgan():
    """A DCGAN-shaped pair of nets as the 1.8 models build it: a batch size read with
    ``layers.shape(img)[0]`` sizes the noise (uniform_random) and the real/fake labels
    (fill_constant); the generator's output is reshaped with the same Variable."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.data("img", [-1, 1, 4, 4], "float32")
        batch = fluid.layers.shape(img)[0]
        noise = fluid.layers.uniform_random([batch, Z], dtype="float32", min=-1.0, max=1.0)
        real = fluid.layers.fill_constant(shape=[batch, 1], dtype="float32", value=1.0)
        fake = fluid.layers.zeros(shape=fluid.layers.shape(real), dtype="float32")
        g = fluid.layers.fc(noise, 16, act="tanh", param_attr=fluid.ParamAttr("g_w"),
                            bias_attr=fluid.ParamAttr("g_b"))
        g_img = fluid.layers.reshape(g, [batch, 1, 4, 4])

        def d(x):
            return fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr("d_w"),
                                   bias_attr=fluid.ParamAttr("d_b"))

        d_loss = fluid.layers.mean(
            fluid.layers.sigmoid_cross_entropy_with_logits(d(img), real)
            + fluid.layers.sigmoid_cross_entropy_with_logits(d(g_img), fake))
        fluid.optimizer.SGD(0.1).minimize(d_loss, parameter_list=["d_w", "d_b"])
    return main, startup, [noise, real, fake, g_img, d_loss]


def test_dcgan_noise_and_labels_follow_the_fed_batch():
    main, startup, fetch = _dcgan()
    noise, real, fake, g_img, _ = fetch
    assert (noise.shape, real.shape, fake.shape, g_img.shape) == (
        (-1, Z), (-1, 1), (-1, 1), (-1, 1, 4, 4))
    ops = [op.type for op in main.global_block().ops]
    assert "shape" in ops and "uniform_random" in ops
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.RandomState(0)
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = []
        for n in (3, 5, 3, 5, 3, 5):
            got = exe.run(main, feed={"img": rng.rand(n, 1, 4, 4).astype("float32") + 1},
                          fetch_list=fetch)
            assert [g.shape for g in got[:4]] == [(n, Z), (n, 1), (n, 1), (n, 1, 4, 4)]
            np.testing.assert_array_equal(got[1], 1)
            np.testing.assert_array_equal(got[2], 0)
            assert np.all(np.abs(got[0]) <= 1) and got[0].std() > 0.2
            losses.append(float(got[4][0]))
    assert losses[-1] < losses[0]


def test_shape_tensors_on_the_interpreter():
    import graphc

    img = fluid.data("img", [-1, 3], "float32")
    shp = fluid.layers.shape(img)
    rows = fluid.layers.elementwise_mul(shp[0], fluid.layers.fill_constant([1], "int32", 2))
    g = fluid.layers.gaussian_random(fluid.layers.concat([rows, shp[1:]]), std=2.0)
    e = fluid.layers.expand(fluid.layers.reshape(img, [1, shp[0], 3]), [shp[0], 1, 1])
    r = fluid.layers.reshape(img, shape=[-1],
                             actual_shape=fluid.layers.elementwise_mul(shp[0], shp[1]))
    value = np.arange(6, dtype="float32").reshape(2, 3)
    got = fluid.Executor(fluid.CPUPlace()).run(feed={"img": value}, fetch_list=[g, e, r])
    _, ref = run_graph(graphc.lower(fluid.default_main_program()), {}, {"img": value},
                       [g.name, e.name, r.name])
    for a, b in zip(got, ref):
        assert a.shape == np.asarray(b).shape
    assert got[0].shape == (4, 3) and g.shape == (-1, 3)
    np.testing.assert_array_equal(got[1], np.tile(value[None], (2, 1, 1)))
    np.testing.assert_array_equal(got[2], value.reshape(-1))


def test_shape_dims_known_at_build_are_static():
    x = fluid.data("x", [-1, 4, 6], "float32")
    s = fluid.layers.shape(x)
    out = fluid.layers.fill_constant([s[0], s[2], fluid.layers.elementwise_add(s[1], s[1])],
                                     "float32", 0.0)
    assert out.shape == (-1, 6, 8)
    y = fluid.layers.uniform_random(fluid.layers.slice(s, [0], [1], [3]))
    assert y.shape == (4, 6)


def test_shape_tensors_from_data_values_are_refused_at_build_time():
    from graphc.ir.errors import ShapeError

    n = fluid.data("n", [1], "int64")
    with pytest.raises(ShapeError, match=r"fill_constant: argument shape\[0\] \('n'\).*data"):
        fluid.layers.fill_constant([n, 2], "float32", 1.0)
    x = fluid.data("x", [-1, 4], "float32")
    summed = fluid.layers.cast(fluid.layers.reduce_sum(x, keep_dim=True), "int32")
    with pytest.raises(ShapeError, match=r"uniform_random: .*op reduce_sum.*not from shapes"):
        fluid.layers.uniform_random(fluid.layers.reshape(summed, [1]))
    with pytest.raises(ShapeError, match="must be int32 or int64"):
        fluid.layers.fill_constant(fluid.layers.cast(fluid.layers.shape(x), "float32"),
                                   "float32", 1.0)


# -- Variable: Paddle 1.8's constructor, setters and patched operators ------------------------
def test_variable_constructor_takes_paddles_arguments():
    import inspect

    from graphc.fluid.framework import Variable

    params = list(inspect.signature(Variable.__init__).parameters)
    assert params[:14] == ["self", "block", "type", "name", "shape", "dtype", "lod_level",
                           "capacity", "persistable", "error_clip", "stop_gradient", "is_data",
                           "need_check_feed", "belong_to_optimizer"]
    block = fluid.default_main_program().global_block()
    v = Variable(block, fluid.core.VarDesc.VarType.LOD_TENSOR, "made", [-1, 3], "float32", 1,
                 None, True)
    assert block.var("made") is v
    assert (v.shape, v.dtype, v.lod_level, v.persistable, v.stop_gradient) == (
        (-1, 3), "float32", 1, True, False)
    rows = Variable(block, type=fluid.core.VarDesc.VarType.SELECTED_ROWS, name="rows",
                    shape=[10, 2], dtype="float32", belong_to_optimizer=True)
    assert rows.selected_rows and rows.belong_to_optimizer
    anon = Variable(block, shape=[2])
    assert anon.name.startswith("_generated_var") and anon.dtype == "float32"


def test_variable_setters_are_paddles():
    x = fluid.data("x", [-1, 3], "float32")
    x.stop_gradient = False
    x.persistable = True
    assert (x.stop_gradient, x.persistable) == (False, True)
    for attr, value in (("shape", (2, 3)), ("dtype", "int64"), ("lod_level", 1)):
        with pytest.raises(AttributeError):
            setattr(x, attr, value)
    block = fluid.default_main_program().global_block()
    t = block.create_var(name="tmp_a", shape=[3], dtype="float32")
    t.name = "tmp_b"
    assert block.var("tmp_b") is t and not block.has_var("tmp_a")
    y = fluid.layers.scale(x, 2.0)
    with pytest.raises(ProgramError, match="already uses it"):
        y.name = "renamed"


def test_variable_operators_match_paddles_patch():
    x = fluid.data("x", [-1, 3], "float32")
    n = fluid.data("n", [-1, 3], "int64")
    col = fluid.data("col", [-1], "float32")
    wide = fluid.data("wide", [-1, 3, 2], "float32")
    outs = [x == n, x != 2, x + n, wide * col]  # int64 right operand cast to float32
    assert [o.dtype for o in outs] == ["bool", "bool", "float32", "float32"]
    assert {x: 0}[x] == 0 and x in {x} and len({x, n}) == 2
    xv = np.array([[1, 2, 3], [4, 5, 6]], "float32")
    nv = np.array([[1, 0, 3], [0, 5, 0]], "int64")
    cv = np.array([10, 100], "float32")
    wv = np.ones((2, 3, 2), "float32")
    got = fluid.Executor(fluid.CPUPlace()).run(
        feed={"x": xv, "n": nv, "col": cv, "wide": wv}, fetch_list=outs)
    np.testing.assert_array_equal(got[0], xv == nv)
    np.testing.assert_array_equal(got[1], xv != 2)
    np.testing.assert_array_equal(got[2], xv + nv)
    np.testing.assert_array_equal(got[3], wv * cv[:, None, None])  # Paddle: axis 0


# -- learning-rate schedules: the float32 nearest each float64 closed form, steps 0..12 -------
def _closed_forms():
    """Each schedule's formula in float64, written from Paddle 1.8's layer docs: (builder,
    step -> value, first step). noam's counter starts at 1, the others' at 0."""
    lr, n, rate = 1.0, 5, 0.5

    def poly(step, cycle):
        steps = n * max(math.ceil(step / n), 1) if cycle else n
        step = step if cycle else min(step, n)
        return (lr - 1e-4) * (1 - step / steps) + 1e-4

    forms = {
        "exponential": (lambda: fluid.layers.exponential_decay(lr, n, rate),
                        lambda s: lr * rate ** (s / n), 0),
        "exponential_stair": (lambda: fluid.layers.exponential_decay(lr, n, rate, True),
                              lambda s: lr * rate ** math.floor(s / n), 0),
        "natural_exp": (lambda: fluid.layers.natural_exp_decay(lr, n, rate),
                        lambda s: lr * math.exp(-rate * (s / n)), 0),
        "inverse_time": (lambda: fluid.layers.inverse_time_decay(lr, n, rate),
                         lambda s: lr / (1 + rate * (s / n)), 0),
        "inverse_time_stair": (lambda: fluid.layers.inverse_time_decay(lr, n, rate, True),
                               lambda s: lr / (1 + rate * math.floor(s / n)), 0),
        "polynomial": (lambda: fluid.layers.polynomial_decay(lr, n),
                       lambda s: poly(s, False), 0),
        "polynomial_cycle": (lambda: fluid.layers.polynomial_decay(lr, n, cycle=True),
                             lambda s: poly(s, True), 0),
        "piecewise": (lambda: fluid.layers.piecewise_decay([3, 6, 9], [0.1, 0.2, 0.3, 0.4]),
                      lambda s: [0.1, 0.2, 0.3, 0.4][sum(s >= b for b in (3, 6, 9))], 0),
        "cosine": (lambda: fluid.layers.cosine_decay(0.1, 3, 4),
                   lambda s: 0.1 * 0.5 * (math.cos(math.floor(s / 3) * math.pi / 4) + 1), 0),
        "noam": (lambda: fluid.layers.noam_decay(0.01, 200, 2.0),
                 lambda s: 2.0 * 0.01 ** -0.5 * min(s ** -0.5, 200 ** -1.5 * s), 1),
        "noam_past_warmup": (lambda: fluid.layers.noam_decay(1.0, 4, 0.002),
                             lambda s: 0.002 * min(s ** -0.5, 4 ** -1.5 * s), 1),
        "warmup_scalar": (lambda: fluid.layers.linear_lr_warmup(2.0, 10, 0.1 / 3, 1),
                          lambda s: 0.1 / 3 + (1 - 0.1 / 3) * (s / 10) if s < 10 else 2.0, 0),
        "warmup_of_exponential": (
            lambda: fluid.layers.linear_lr_warmup(fluid.layers.exponential_decay(lr, n, rate),
                                                  4, 0.0, 0.9),
            lambda s: 0.9 * (s / 4) if s < 4 else lr * rate ** (s / n), 0),
    }
    return forms


@pytest.mark.parametrize("name", list(_closed_forms()))
def test_schedules_are_their_closed_forms_rounded_once(name):
    build, form, first = _closed_forms()[name]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = build()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        got = [exe.run(main, fetch_list=[lr])[0] for _ in range(13)]
    for i, value in enumerate(got):
        ref = form(first + i)
        assert value.dtype == np.float32 and value.shape == (1,)
        assert value[0] == np.float32(ref), (name, first + i, ref, value[0])
        # Paddle's assertAlmostEqual at 7 places, float32 (NumPy 2) and float64 (1.x) alike
        assert round(ref - value[0], 7) == 0 and round(ref - float(value[0]), 7) == 0


def test_gradient_flows_through_shape_tensor_reshape_and_expand():
    x = fluid.data("x", [-1, 6], "float64")
    x.stop_gradient = False
    s = fluid.layers.shape(x)
    r = fluid.layers.reshape(x, [s[0], 2, 3])
    e = fluid.layers.expand(r, [1, s[0], 1])
    assert (r.shape, e.shape) == ((-1, 2, 3), (-1, -1, 3))
    loss = fluid.layers.reduce_sum(fluid.layers.square(e))
    fluid.backward.append_backward(loss)
    v = np.arange(18, dtype="float64").reshape(3, 6)
    out, grad = fluid.Executor(fluid.CPUPlace()).run(feed={"x": v}, fetch_list=[e, "x@GRAD"])
    np.testing.assert_array_equal(out, np.tile(v.reshape(3, 2, 3), (1, 3, 1)))
    np.testing.assert_allclose(grad, 2 * v * 3)  # each element used once per tile
