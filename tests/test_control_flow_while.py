"""While, while_loop and tensor arrays (issue 26): NumPy references on the jitted step and the
interpreter, exact gradients through a loop (finite differences and the loop unrolled by
hand), one compile for any trip count, text round trips, and bad input refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import GraphcError, ProgramError, ShapeError
from graphc.ir.text import parse


def _both(feed, fetch, program=None):
    """The fetches from the jitted Executor and from the interpreter (must agree)."""
    program = program or graphc.default_main_program()
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    jitted = exe.run(program, feed=feed, fetch_list=fetch)
    state = {k: np.asarray(v) for k, v in graphc.global_scope().items()} \
        if hasattr(graphc.global_scope(), "items") else {}
    _, interp = run_graph(graphc.lower(program), state, feed,
                          [getattr(f, "name", f) for f in fetch])
    for a, b in zip(jitted, interp):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    return jitted


def _counter_loop(limit: int):
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", limit)
    return i, n, layers.less_than(i, n)


def test_counter_accumulation_and_arrays_match_numpy():
    x = fluid.data("x", [3], "float32")
    i, n, cond = _counter_loop(5)
    acc = layers.fill_constant([1], "float32", 0.0)
    h = layers.scale(x, 1.0)
    arr = layers.create_array("float32")
    loop = layers.While(cond)
    with loop.block():
        layers.assign(layers.elementwise_add(acc, layers.cast(i, "float32")), acc)
        h2 = layers.tanh(h) * 0.5 + x
        layers.assign(h2, h)
        layers.array_write(h2, i, arr)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    length = layers.array_length(arr)
    third = layers.array_read(arr, layers.fill_constant([1], "int64", 2))
    xv = np.array([0.1, -0.2, 0.3], "float32")
    got = _both({"x": xv}, [acc, h, i, length, third])
    ref, steps = xv.astype(np.float64), []
    for _ in range(5):
        ref = np.tanh(ref) * 0.5 + xv
        steps.append(ref)
    np.testing.assert_allclose(got[0], [10.0])
    np.testing.assert_allclose(got[1], ref, rtol=1e-5)
    assert int(got[2][0]) == 5 and int(got[3][0]) == 5
    np.testing.assert_allclose(got[4], steps[2], rtol=1e-5)


def test_while_loop_api_and_nested_loops():
    def cond(i, total):
        return layers.less_than(i, layers.fill_constant([1], "int64", 10))

    def body(i, total):
        return [layers.increment(i, in_place=False),
                layers.elementwise_add(total, layers.cast(i, "float32"))]

    i0 = layers.fill_constant([1], "int64", 0)
    t0 = layers.fill_constant([1], "float32", 0.0)
    i_end, total = layers.while_loop(cond, body, [i0, t0])
    # nested: sum over i < 3 of (sum over j < 4 of i * j)
    i, n, c_out = _counter_loop(3)
    s = layers.fill_constant([1], "float32", 0.0)
    outer = layers.While(c_out)
    with outer.block():
        j = layers.fill_constant([1], "int64", 0)
        m = layers.fill_constant([1], "int64", 4)
        c_in = layers.less_than(j, m)
        inner = layers.While(c_in)
        with inner.block():
            prod = layers.cast(layers.elementwise_mul(i, j), "float32")
            layers.assign(layers.elementwise_add(s, prod), s)
            layers.increment(j)
            layers.less_than(j, m, cond=c_in)
        layers.increment(i)
        layers.less_than(i, n, cond=c_out)
    got = _both({}, [i_end, total, s])
    assert int(got[0][0]) == 10 and float(got[1][0]) == 45.0
    assert float(got[2][0]) == sum(a * b for a in range(3) for b in range(4))


def _rnn_loop(steps, max_iterations=None):
    x = fluid.data("x", [4, 3], "float64")
    x.stop_gradient = False
    h = layers.fc(x, 3, param_attr=fluid.ParamAttr(name="w0"), bias_attr=False)
    i, n, cond = _counter_loop(steps)
    loop = layers.While(cond, max_iterations=max_iterations)
    with loop.block():
        h2 = layers.fc(h, 3, act="tanh", param_attr=fluid.ParamAttr(name="w1"),
                       bias_attr=False)
        layers.assign(h2, h)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    return x, layers.reduce_mean(layers.square(h))


def _fd(fun, w, eps=1e-6):
    g = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        wp, wm = w.copy(), w.copy()
        wp[idx] += eps
        wm[idx] -= eps
        g[idx] = (fun(wp) - fun(wm)) / (2 * eps)
    return g


def test_gradients_through_a_loop_equal_finite_differences_and_the_unrolled_loop():
    graphc.default_main_program().random_seed = 3
    x, loss = _rnn_loop(3)
    fluid.backward.append_backward(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    scope = graphc.global_scope()
    w0, w1 = (np.asarray(scope.find_var(n).get_tensor()).astype(np.float64)
              for n in ("w0", "w1"))
    xv = np.random.default_rng(0).standard_normal((4, 3))
    got = exe.run(feed={"x": xv}, fetch_list=[loss, "w0@GRAD", "w1@GRAD", "x@GRAD"])

    def f(w0_, w1_, x_=xv):
        h = x_ @ w0_
        for _ in range(3):
            h = np.tanh(h @ w1_)
        return np.mean(h * h)

    np.testing.assert_allclose(got[0], [f(w0, w1)], rtol=1e-10)
    np.testing.assert_allclose(got[1], _fd(lambda w: f(w, w1), w0), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(got[2], _fd(lambda w: f(w0, w), w1), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(got[3], _fd(lambda v: f(w0, w1, v), xv), rtol=1e-5, atol=1e-9)

    # the same three steps unrolled by hand with ordinary layers: equal gradients
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        x2 = fluid.data("x", [4, 3], "float64")
        h = layers.fc(x2, 3, param_attr=fluid.ParamAttr(name="w0"), bias_attr=False)
        for _ in range(3):
            h = layers.fc(h, 3, act="tanh", param_attr=fluid.ParamAttr(name="w1"),
                          bias_attr=False)
        unrolled = layers.reduce_mean(layers.square(h))
        fluid.backward.append_backward(unrolled)
    again = exe.run(main, feed={"x": xv}, fetch_list=[unrolled, "w0@GRAD", "w1@GRAD"])
    for a, b in zip(got, again):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_a_loop_trains_and_compiles_once_for_any_trip_count():
    x = fluid.data("x", [8, 4], "float32")
    y = fluid.data("y", [8, 1], "float32")
    steps = fluid.data("steps", [1], "int64")
    h = layers.fc(x, 4, act="tanh")
    i = layers.fill_constant([1], "int64", 0)
    cond = layers.less_than(i, steps)
    loop = layers.While(cond, max_iterations=4)
    with loop.block():
        layers.assign(layers.fc(h, 4, act="tanh", param_attr=fluid.ParamAttr(name="cell")),
                      h)
        layers.increment(i)
        layers.less_than(i, steps, cond=cond)
    loss = layers.reduce_mean(layers.square(layers.fc(h, 1) - y))
    fluid.optimizer.SGD(0.3).minimize(loss)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((8, 4)).astype("float32")
    yv = np.tanh(xv.sum(1, keepdims=True)).astype("float32")
    losses = []
    for k in range(40):
        (lv,) = exe.run(feed={"x": xv, "y": yv, "steps": np.array([1 + k % 4])},
                        fetch_list=[loss])
        losses.append(float(lv[0]))
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    prepared = exe._prepared[graphc.default_main_program()][1]
    sizes = [s.traces for prep in prepared.values()
             for s in prep.steps.values()]
    assert sizes == [1]
    # past the bound the gradient is refused, and nothing is committed
    w = np.asarray(graphc.global_scope().find_var("cell").get_tensor()).copy()
    with pytest.raises(DataError, match="at most 4 iterations"):
        exe.run(feed={"x": xv, "y": yv, "steps": np.array([5])}, fetch_list=[loss])
    np.testing.assert_array_equal(
        np.asarray(graphc.global_scope().find_var("cell").get_tensor()), w)


def test_text_form_round_trips_a_program_with_nested_loops():
    i, n, cond = _counter_loop(2)
    acc = layers.fill_constant([2], "float32", 1.0)
    loop = layers.While(cond)
    with loop.block():
        j, m, c2 = _counter_loop(3)
        inner = layers.While(c2)
        with inner.block():
            layers.assign(layers.scale(acc, 2.0), acc)
            layers.increment(j)
            layers.less_than(j, m, cond=c2)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    g = graphc.lower(graphc.default_main_program())
    text = g.to_text()
    assert text.count("body @body {") == 2
    again = parse(text)
    assert again.structurally_equal(g) and again.to_text() == text
    np.testing.assert_allclose(_both({}, [acc])[0], [64.0, 64.0])


def test_a_value_escaping_its_region_does_not_parse():
    i, n, cond = _counter_loop(2)
    acc = layers.fill_constant([1], "float32", 1.0)
    loop = layers.While(cond)
    with loop.block():
        layers.assign(layers.scale(acc, 2.0), acc)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    text = graphc.lower(graphc.default_main_program()).to_text()
    inner = [ln.split(":")[0].strip() for ln in text.splitlines()
             if ln.startswith("    %scale")][0]
    bad = text.replace("  }\n", f"  }}\n  %leak: f32[1] = scale(X={inner})\n", 1)
    with pytest.raises(GraphcError, match="scale"):
        parse(bad)


def test_bad_input_is_refused_by_name():
    x = fluid.data("x", [2, 3], "float32")
    with pytest.raises(ProgramError, match="bool tensor of one element"):
        layers.While(layers.fill_constant([1], "int64", 1))
    i, n, cond = _counter_loop(2)
    loop = layers.While(cond)
    with pytest.raises(ProgramError, match="never updates its condition"):
        with loop.block():
            layers.increment(i)
    # a body that changes a carried value's shape
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        h = layers.scale(x, 1.0)
        i, n, cond = _counter_loop(2)
        loop = layers.While(cond)
        with loop.block():
            layers.assign(layers.concat([h, h], axis=0), h)
            layers.increment(i)
            layers.less_than(i, n, cond=cond)
    with pytest.raises(ShapeError, match="changes carried value"):
        graphc.Executor().run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[h])
    # an array read past its end, on the jitted step
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [3], "float32")
        arr = layers.array_write(x, layers.fill_constant([1], "int64", 0))
        k = fluid.data("k", [1], "int64")
        out = layers.array_read(arr, k)
    exe = graphc.Executor()
    xv = np.ones(3, "float32")
    np.testing.assert_allclose(exe.run(main, feed={"x": xv, "k": np.array([0])},
                                       fetch_list=[out])[0], xv)
    with pytest.raises(DataError, match="below the array's length"):
        exe.run(main, feed={"x": xv, "k": np.array([1])}, fetch_list=[out])
    with pytest.raises(ProgramError, match="not a tensor array"):
        layers.array_read(x, k)


def test_a_check_inside_the_body_is_reported_by_the_step():
    ids = fluid.data("ids", [4, 1], "int64")
    i, n, cond = _counter_loop(2)
    acc = layers.fill_constant([4, 8], "float32", 0.0)
    loop = layers.While(cond)
    with loop.block():
        emb = layers.embedding(ids, size=[10, 8])
        layers.assign(layers.elementwise_add(acc, layers.reshape(emb, [4, 8])), acc)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    good = np.array([[1], [2], [3], [4]])
    exe.run(feed={"ids": good}, fetch_list=[acc])
    with pytest.raises(DataError, match="ids|Ids"):
        exe.run(feed={"ids": np.array([[1], [2], [30], [4]])}, fetch_list=[acc])


def test_fetching_an_array_gives_its_elements_and_gradients_flow_through_arrays():
    x = fluid.data("x", [3], "float64")
    x.stop_gradient = False
    zero, one = (layers.fill_constant([1], "int64", v) for v in (0, 1))
    arr = layers.array_write(x, zero)
    layers.array_write(layers.scale(x, 2.0), one, array=arr)
    xv = np.arange(3, dtype="float64")
    (got,) = graphc.Executor().run(feed={"x": xv}, fetch_list=[arr])
    assert len(got) == 2
    np.testing.assert_array_equal(got[0], xv)
    np.testing.assert_array_equal(got[1], 2 * xv)
    a, b = np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.25, -1.0])
    first, second = layers.array_read(arr, zero), layers.array_read(arr, one)
    again = layers.array_read(arr, one)  # read twice: the gradients add up
    av, bv = fluid.data("a", [3], "float64"), fluid.data("b", [3], "float64")
    loss = layers.sums([layers.reduce_sum(layers.elementwise_mul(second, av)),
                        layers.reduce_sum(layers.elementwise_mul(first, bv)),
                        layers.reduce_sum(again)])
    fluid.backward.append_backward(loss)
    (grad,) = graphc.Executor().run(feed={"x": xv, "a": a, "b": b}, fetch_list=["x@GRAD"])
    np.testing.assert_allclose(grad, 2 * a + b + 2.0)


def test_gradients_through_an_array_carried_by_nested_loops():
    """mem[k + 1] = mem[k] + d[k] + x for k < 3 (an outer loop of one step around an inner
    loop), loss = mean(mem[3]): d loss / dx = 3 / 10 per element."""
    ds = [fluid.data(f"d{k}", [10], "float32") for k in range(3)]
    x = fluid.data("x", [10], "float32")
    x.stop_gradient = False
    i = layers.zeros([1], "int64")
    mem = layers.array_write(layers.zeros([10], "float32"), i)
    data = layers.array_write(ds[0], i)
    for k in (1, 2):
        layers.array_write(ds[k], layers.fill_constant([1], "int64", k), array=data)
    j = layers.fill_constant([1], "int64", 0)
    n_out, n_in = (layers.fill_constant([1], "int64", v) for v in (1, 3))

    def inner_cond(j, x, mem):
        return layers.less_than(j, n_in)

    def inner_body(j, x, mem):
        total = layers.elementwise_add(x, layers.elementwise_add(
            layers.array_read(data, j), layers.array_read(mem, j)))
        j = layers.increment(j, in_place=True)
        layers.array_write(total, j, array=mem)
        return [j, x, mem]

    def outer_body(i, j, x, mem):
        j, x, mem = layers.while_loop(inner_cond, inner_body, [j, x, mem])
        return [layers.increment(i, in_place=True), j, x, mem]

    layers.while_loop(lambda i, j, x, mem: layers.less_than(i, n_out), outer_body,
                      [i, j, x, mem])
    result = layers.array_read(mem, j)
    loss = layers.mean(result)
    fluid.backward.append_backward(loss)
    rng = np.random.default_rng(2)
    feed = {f"d{k}": rng.random(10).astype("float32") for k in range(3)}
    feed["x"] = np.ones(10, "float32")
    got = _both(feed, [result, "x@GRAD"])
    np.testing.assert_allclose(got[0], feed["d0"] + feed["d1"] + feed["d2"] + 3, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.full(10, 0.3), rtol=1e-6)


def test_while_loop_gradient_through_a_fed_value_is_exact_and_names_the_fed_value():
    def cond(i, x):
        return layers.less_than(i, layers.fill_constant([1], "float32", 11.0))

    def body(i, x):
        return [layers.increment(i, in_place=False), layers.elementwise_mul(i, i)]

    i = fluid.data("i", [1], "float32")
    i.stop_gradient = False
    x = layers.fill_constant([1], "float32", 1.0)
    x.stop_gradient = False  # the loop's result is this variable: it must take a gradient
    # x_end = (i0 + 9)^2: d/di0 = 2 (i0 + 9) = 20 at i0 = 1 (exact, unlike a sum over steps)
    _, x_end = layers.while_loop(cond, body, [layers.assign(i), x])
    fluid.backward.append_backward(layers.mean(x_end))
    got = graphc.Executor().run(feed={"i": np.ones(1, "float32")},
                                fetch_list=[x_end, "i@GRAD"])
    np.testing.assert_allclose(got[0], [100.0])
    np.testing.assert_allclose(got[1], [20.0])
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        j = fluid.data("j", [1], "float32")
        j.stop_gradient = False
        y0 = layers.fill_constant([1], "float32", 1.0)
        y0.stop_gradient = False
        _, y = layers.while_loop(cond, body, [j, y0])
        fluid.backward.append_backward(layers.mean(y))
    # the loop overwrites the fed j: j@GRAD is the fed value's gradient (Paddle's name)
    got = _both({"j": np.full(1, 2, "float32")}, [y, "j@GRAD"], main)
    np.testing.assert_allclose(got[0], [100.0])
    np.testing.assert_allclose(got[1], [20.0])  # (j0 + 8)^2 with j0 = 2


def test_fed_loop_var_gradient_product_and_refusal_when_read_before():
    def cond(i, x):
        return i < 3

    def body(i, x):
        return [i + 1, x * i]

    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        i = fluid.data("i", [1], "float64")
        x = fluid.data("x", [1], "float64")
        i.stop_gradient = x.stop_gradient = False
        out = layers.while_loop(cond, body, [i, x])
        fluid.backward.append_backward(layers.mean(out[1]))
    i0, x0 = 1.5, 0.7
    # x_end = x0 * i0 * (i0 + 1) (two steps from i0 = 1.5): the exact partials
    feed = {"i": np.array([i0]), "x": np.array([x0])}
    got = _both(feed, ["i@GRAD", "x@GRAD"], main)
    np.testing.assert_allclose(got[0], [x0 * (2 * i0 + 1)], rtol=1e-12)
    np.testing.assert_allclose(got[1], [i0 * (i0 + 1)], rtol=1e-12)
    main, startup = graphc.Program(), graphc.Program()
    with fluid.program_guard(main, startup):
        i = fluid.data("i", [1], "float64")
        x = fluid.data("x", [1], "float64")
        i.stop_gradient = x.stop_gradient = False
        sq = layers.elementwise_mul(x, x)  # its gradient reads x, which the loop replaces
        out = layers.while_loop(cond, body, [i, x])
        with pytest.raises(ProgramError, match="fed variable 'x' is overwritten"):
            fluid.backward.append_backward(layers.mean(out[1] + sq))


def test_an_inner_loop_past_its_bound_refuses_the_outer_gradient():
    x = fluid.data("x", [2], "float64")
    x.stop_gradient = False
    h = layers.scale(x, 1.0)
    i, n, c_out = _counter_loop(2)
    inner_n = fluid.data("inner_n", [1], "int64")
    outer = layers.While(c_out)
    with outer.block():
        j = layers.fill_constant([1], "int64", 0)
        c_in = layers.less_than(j, inner_n)
        inner = layers.While(c_in, max_iterations=2)
        with inner.block():
            layers.assign(layers.tanh(h), h)
            layers.increment(j)
            layers.less_than(j, inner_n, cond=c_in)
        layers.increment(i)
        layers.less_than(i, n, cond=c_out)
    fluid.backward.append_backward(layers.reduce_sum(h))
    xv = np.array([0.3, -0.7])
    program = graphc.default_main_program()
    exe = graphc.Executor()
    (g,) = exe.run(feed={"x": xv, "inner_n": np.array([2])}, fetch_list=["x@GRAD"])
    val = xv.copy()
    chain = []
    for _ in range(4):
        chain.append(1 - np.tanh(val) ** 2)
        val = np.tanh(val)
    np.testing.assert_allclose(g, np.prod(chain, axis=0), rtol=1e-10)
    with pytest.raises(DataError, match="at most 2 iterations"):
        exe.run(feed={"x": xv, "inner_n": np.array([3])}, fetch_list=["x@GRAD"])
    with pytest.raises(DataError, match="at most 2 iterations"):
        run_graph(graphc.lower(program), {}, {"x": xv, "inner_n": np.array([3])}, ["x@GRAD"])


def test_an_array_fetched_without_numpy_is_a_lod_tensor_array():
    x = fluid.data("x", [2], "float32")
    arr = layers.array_write(x, layers.fill_constant([1], "int64", 0))
    (got,) = graphc.Executor().run(feed={"x": np.ones(2, "float32")}, fetch_list=[arr],
                                   return_numpy=False)
    assert isinstance(got, fluid.LoDTensorArray) and len(got) == 1
    np.testing.assert_array_equal(np.array(got[0]), np.ones(2))
    assert got[0].recursive_sequence_lengths() == []
    built = fluid.LoDTensorArray()
    built.append(got[0])
    with pytest.raises(GraphcError, match="expected a LoDTensor"):
        built.append(np.ones(2))


def test_a_bad_condition_is_a_type_error_as_in_paddle():
    i = layers.zeros([2], "int64")
    cond = layers.less_than(i, layers.fill_constant([2], "int64", 1))
    with pytest.raises(TypeError, match="bool tensor of one element"):
        layers.While(cond=cond)
    with pytest.raises(TypeError, match="bool tensor of one element"):
        layers.While(cond=layers.cast(cond, "float64"))
    with pytest.raises(TypeError, match="must be a Variable"):
        layers.increment([1, 2, 3])


def test_while_loop_argument_errors_are_type_and_value_errors_as_in_paddle():
    one = layers.fill_constant([1], "int64", 1)
    ten = layers.fill_constant([1], "int64", 10)

    def lt(i):
        return layers.less_than(i, ten)

    def step(i):
        return layers.increment(i)

    def grow(i, extra):  # adds an entry: the structure changes
        return step(i), [*extra, layers.fill_constant([1], "int64", 1)]

    with pytest.raises(TypeError, match="callables"):
        layers.while_loop(one, step, [one])
    with pytest.raises(TypeError, match="callables"):
        layers.while_loop(lt, one, [one])
    with pytest.raises(TypeError, match="list or tuple"):
        layers.while_loop(lt, step, one)
    with pytest.raises(ValueError, match="empty"):
        layers.while_loop(lt, step, [])
    with pytest.raises(TypeError, match="must be a Variable"):
        layers.while_loop(lambda i: 1, step, [one])
    with pytest.raises(ValueError, match="2 values .2 tensors. for 1 loop_vars"):
        layers.while_loop(lt, lambda i: [step(i), step(i)], [one])
    with pytest.raises(ValueError, match=r"3 tensors\) for 2 loop_vars \(2 tensors"):
        layers.while_loop(lambda i, extra: lt(i), grow, [one, [ten]])
    for err in (TypeError, ValueError):  # both remain graphc's ProgramError
        with pytest.raises(ProgramError):
            layers.while_loop(lt, step, one if err is TypeError else [])


def test_print_inside_a_loop_prints_every_iteration_in_one_compiled_call(capfd):
    i, n, cond = _counter_loop(3)
    acc = layers.fill_constant([2], "float32", 1.0)
    loop = layers.While(cond)
    with loop.block():
        shown = layers.Print(acc, message="acc in loop")
        layers.assign(layers.scale(shown, 2.0), acc)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    exe = graphc.Executor()
    (got,) = exe.run(fetch_list=[acc])
    np.testing.assert_allclose(got, [8.0, 8.0])
    out = capfd.readouterr()
    text = out.out + out.err
    assert text.count("acc in loop") == 3 and "[4 4]" in text.replace(".", "")
    prepared = exe._prepared[graphc.default_main_program()][1]
    assert sum(s.traces for p in prepared.values() for s in p.steps.values()) == 1
