"""Paddle 1.8's framework surface its unit tests use (issues 24/25, unitrd3): parameters that
initialise themselves, regularisation ops, int pow, scopes, memory_usage, io checks."""

from __future__ import annotations

import numpy as np
import pytest
from test_book_port import run_both

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.fluid.backward import append_backward

_both = run_both  # fetched values from the jitted Executor and from the interpreter


# -- Block.create_parameter -----------------------------------------------------------------
def test_create_parameter_with_an_initializer_fills_it_in_its_block_once():
    main = fluid.Program()
    block = main.global_block()
    for _ in range(2):  # the second call finds the parameter already written: no new op
        w = block.create_parameter(name="w", shape=[3, 2], dtype="float32",
                                   initializer=fluid.initializer.Constant(1.5))
    assert [op.type for op in block.ops] == ["fill_constant"]
    assert block.ops[0].attr("value") == 1.5
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        value = exe.run(main, fetch_list=[w])[0]
        np.testing.assert_array_equal(value, np.full((3, 2), 1.5, "float32"))
        np.testing.assert_array_equal(fluid.io.get_parameter_value_by_name("w", exe, main),
                                      value)
    _, interp = run_graph(graphc.lower(main), {}, {}, ["w"])
    np.testing.assert_array_equal(interp[0], np.full((3, 2), 1.5, "float32"))


def test_layers_still_initialise_parameters_in_the_startup_program_only():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        fluid.layers.fc(x, 3, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.5)))
    assert "fill_constant" not in [op.type for op in main.global_block().ops]
    assert [op.type for op in startup.global_block().ops] == ["fill_constant"] * 2
    w = main.global_block().all_parameters()[0]
    assert isinstance(w.initializer, fluid.initializer.Constant)


@pytest.mark.parametrize("shape, dtype", [(None, "float32"), ([1], None), ([], "float32"),
                                          ([-1], "float32")])
def test_create_parameter_refuses_an_unsized_parameter_and_leaves_no_variable(shape, dtype):
    block = fluid.Program().global_block()
    with pytest.raises(ValueError):
        block.create_parameter(name="bad", shape=shape, dtype=dtype, initializer=None)
    assert "bad" not in block.vars


def test_get_parameter_value_needs_a_parameter_with_a_value():
    main = fluid.Program()
    block = main.global_block()
    v = block.create_var(name="v", shape=[2], dtype="float32")
    block.create_parameter(name="p", shape=[2], dtype="float32")
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        with pytest.raises(TypeError):
            fluid.io.get_parameter_value(v, exe)
        with pytest.raises(graphc.GraphcError, match="no value"):
            fluid.io.get_parameter_value_by_name("p", exe, main)


# -- regularisation -------------------------------------------------------------------------
@pytest.mark.parametrize("reg, ops, decay", [
    (fluid.regularizer.L2DecayRegularizer(0.5), ["scale", "sum"], lambda w: 0.5 * w),
    (fluid.regularizer.L1DecayRegularizer(0.5), ["sign", "scale", "sum"],
     lambda w: 0.5 * np.sign(w)),
])
def test_append_regularization_ops_adds_the_decay_to_the_gradient(reg, ops, decay):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        w = fluid.layers.create_parameter([3, 2], "float32", name="w", default_initializer=
                                          fluid.initializer.Uniform(-1.0, 1.0, seed=3))
        loss = fluid.layers.mean(fluid.layers.mul(x, w))
        params_grads = append_backward(loss)
        count = len(main.global_block().ops)
        new = fluid.optimizer.append_regularization_ops(params_grads, reg)
    assert [op.type for op in main.global_block().ops[count:]] == ops
    assert len(new) == 1 and new[0][0] is w
    feed = {"x": np.arange(6, dtype="float32").reshape(2, 3) / 7 - 0.3}
    # the plain gradient of mean(x @ w): column sums of x over the batch, / (N * 2); the
    # decay is written back into the gradient variable (Paddle's sum into the gradient)
    plain = np.repeat(feed["x"].sum(0)[:, None], 2, 1) / 4
    for g, wv in _both(main, startup, feed, [new[0][1], w]):
        np.testing.assert_allclose(g, plain + decay(wv), rtol=1e-6, atol=1e-7)


def test_append_regularization_ops_passes_unregularised_pairs_unchanged():
    main = fluid.Program()
    block = main.global_block()
    p = block.create_parameter(name="p", shape=[2], dtype="float32")
    g = block.create_var(name="p@GRAD", shape=[2], dtype="float32")
    assert fluid.regularizer.append_regularization_ops([(p, g), (p, None)]) == \
        [(p, g), (p, None)]
    assert block.ops == []


# -- pow of integers ------------------------------------------------------------------------
def test_pow_of_int32_raises_to_the_integer_factor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data("a", shape=[3], dtype="int32")
        out = fluid.layers.pow(a, 2.0)
    assert out.dtype == "int32"
    feed = {"a": np.array([[1, -2, 3], [4, 0, -5]], "int32")}
    for (got,) in _both(main, startup, feed, [out]):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, feed["a"] ** 2)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        b = fluid.layers.data("b", shape=[3], dtype="int64")
        with pytest.raises(graphc.ShapeError, match="factor >= 0"):
            fluid.layers.pow(b, -1.0)


# -- scopes ---------------------------------------------------------------------------------
def test_scope_tree_created_variables_and_ints():
    scope = fluid.core.Scope()
    assert scope.find_var("a") is None and scope.size() == 0
    scope.var("a")  # created: found and counted before it holds a value
    assert scope.find_var("a") is not None and scope.size() == 1
    kid = scope.new_scope()
    assert kid.find_var("a") is not None and kid.size() == 0
    kid.var("b").get_tensor().set(np.ones(2, "float32"), fluid.CPUPlace())
    assert scope.find_var("b") is None
    n = scope.var("n")
    n.set_int(7)
    assert n.is_int() and n.get_int() == 7 and not scope.var("a").is_int()
    scope._remove_from_pool()
    with pytest.raises(graphc.GraphcError, match="nonexistent scope"):
        scope._remove_from_pool()


# -- memory_usage, io checks ----------------------------------------------------------------
def test_memory_usage_counts_the_written_tensors_with_the_batch_size():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[13], dtype="float32")
        y = fluid.layers.fc(x, 1)
        fluid.layers.mean(y)
    names = {n for op in main.global_block().ops for n in op.output_arg_names}
    # fc: mul [-1, 1] and elementwise_add [-1, 1]; mean [1]
    assert len(names) == 3
    for batch, unit, scale in [(10, "B", 1), (1000, "KB", 1024), (400000, "MB", 1024 ** 2)]:
        size = round((2 * batch + 1) * 4 / scale, 3)
        lower, upper, got = fluid.contrib.memory_usage(main, batch_size=batch)
        assert got == unit
        np.testing.assert_allclose([lower, upper], [size * 1.05, size * 1.1])
    with pytest.raises(ValueError):
        fluid.contrib.memory_usage(main, batch_size=0)
    with pytest.raises(TypeError):
        fluid.contrib.memory_usage("main", batch_size=1)


def test_io_refuses_a_main_program_that_is_not_a_program(tmp_path):
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(TypeError):
        fluid.io._get_valid_program("program")
    with pytest.raises(TypeError):
        fluid.io.load_vars(exe, str(tmp_path), main_program="program")
    main = fluid.Program()
    assert fluid.io._get_valid_program(main) is main


# -- the porting rule -----------------------------------------------------------------------
def test_porting_a_bare_dotted_import_keeps_binding_paddle():
    from porting import port
    ported = port("import paddle.fluid.core\nx = paddle.fluid.core.Scope()\n")
    assert ported.splitlines()[0] == "import graphc.fluid.core; import graphc as paddle"
    ns = {}
    exec(ported, ns)
    assert isinstance(ns["x"], fluid.core.Scope)


# -- name scopes ----------------------------------------------------------------------------
def test_ops_record_their_name_scope_path_and_a_reentered_scope_is_numbered():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        with fluid.name_scope("s1"):
            a = fluid.layers.data("a", shape=[1], dtype="float32")
            b = a + 1
            with fluid.name_scope("s2"):
                c = b * 2
        with fluid.name_scope("s1"):
            d = c - 1
        e = d * 3
    paths = {op.output_arg_names[0]: op.desc.attr("op_namescope")
             for op in main.global_block().ops}
    assert [paths[v.name] for v in (b, c, d, e)] == ["/s1/", "/s1/s2/", "/s1_1/", "/"]
    assert fluid.framework.current_name_scope() == ""
    for (got,) in _both(main, startup, {"a": np.ones((2, 1), "float32")}, [e]):
        np.testing.assert_array_equal(got, np.full((2, 1), 9, "float32"))


# -- feeds, readers, scope functions -------------------------------------------------------
def test_a_scalar_feed_is_a_tensor_of_shape_one():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = fluid.data("lr", shape=[1], dtype="float32")
        n = fluid.layers.data("n", shape=[1], dtype="int64", append_batch_size=False)
        out = lr * 2.0
        m = n + 1
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        for a in (0.25, 1, np.float32(0.5)):
            got, k = exe.run(main, feed={"lr": a, "n": 3}, fetch_list=[out, m])
            assert got.shape == (1,) and got.dtype == np.float32
            np.testing.assert_allclose(got, [2 * float(a)])
            np.testing.assert_array_equal(k, [4])
        t = exe.run(main, feed={"lr": 0.5, "n": 3}, fetch_list=[lr], return_numpy=False)[0]
        assert t._dtype() == fluid.core.VarDesc.VarType.FP32
    tensor = fluid.executor._as_lodtensor(1.0, fluid.CPUPlace(), "int32")
    assert tensor._dtype() == "int32" and np.array(tensor).tolist() == [1]
    assert np.array(fluid.executor._as_lodtensor((1, 2), fluid.CPUPlace(), "float64")
                    ).dtype == np.float64
    with pytest.raises(AssertionError):
        fluid.executor._as_lodtensor(1, fluid.CPUPlace())
    for bad in ({"a": 1}, [[1], [1, 2]]):
        with pytest.raises(TypeError):
            fluid.executor._as_lodtensor(bad, fluid.CPUPlace(), "int32")
    with pytest.raises(TypeError):
        fluid.reader.GeneratorLoader._check_input_array([np.zeros(2), np.zeros(3)])
    assert fluid.reader.GeneratorLoader._check_input_array([np.zeros(2)] * 3).shape == (3, 2)


@pytest.mark.parametrize("threaded", [False, True])
def test_py_reader_queue_feeds_the_pushed_batches_then_eof(threaded):
    import threading
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 3), (-1, 1)],
                                        dtypes=["float32", "int64"])
        x, y = fluid.layers.read_file(reader)
        s = fluid.layers.reduce_sum(x, dim=1, keep_dim=True) + fluid.layers.cast(y, "float32")
    rng = np.random.default_rng(0)
    batches = [[rng.random((n, 3)).astype("float32"), rng.integers(0, 9, (n, 1))]
               for n in (2, 4, 3)]
    q = reader.queue
    assert q.capacity() == 2 and not q.is_closed()

    def push_all():
        for b in batches:
            arr = fluid.LoDTensorArray()
            for a in b:
                t = fluid.LoDTensor()
                t.set(a, fluid.CPUPlace())
                arr.append(t)
            assert q.push(arr)
        q.close()

    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        pusher = threading.Thread(target=push_all) if threaded else None
        if pusher:
            pusher.start()
        got = []
        for b in batches:
            if not pusher:  # one at a time: pushed, then read
                arr = fluid.LoDTensorArray()
                for a in b:
                    t = fluid.LoDTensor()
                    t.set(a, fluid.CPUPlace())
                    arr.append(t)
                q.push(arr)
            got.append(exe.run(main, fetch_list=[s])[0])
        if pusher:
            pusher.join()
        else:
            q.close()
        with pytest.raises(fluid.core.EOFException):
            exe.run(main, fetch_list=[s])
    assert not q.push(fluid.LoDTensorArray())  # closed
    for (xb, yb), g in zip(batches, got):
        np.testing.assert_allclose(g, xb.sum(1, keepdims=True) + yb, rtol=1e-6)
    reader.reset()


def test_default_scope_funcs_stack_local_scopes():
    from graphc.fluid import default_scope_funcs as dsf
    root = dsf.get_cur_scope()
    assert dsf.find_var("dsf_a") is None
    dsf.var("dsf_a")
    dsf.enter_local_scope()
    assert dsf.get_cur_scope() is not root and dsf.find_var("dsf_a") is not None
    dsf.var("dsf_b").set_int(3)
    assert dsf.find_var("dsf_b").get_int() == 3
    dsf.leave_local_scope()
    assert dsf.get_cur_scope() is root and dsf.find_var("dsf_b") is None
    seen = []
    dsf.scoped_function(lambda: seen.append(dsf.get_cur_scope()))
    assert seen[0] is not root and dsf.get_cur_scope() is root


# -- regularised sparse tables (Paddle 1.8: a dense @NEWGRAD@ gradient) ----------------------
@pytest.mark.parametrize("reg", [fluid.regularizer.L2Decay(0.1), fluid.regularizer.L1Decay(0.1)])
def test_a_regularised_sparse_table_trains_as_the_dense_one(reg):
    def build(sparse):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 1
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            ids = fluid.layers.data("ids", [1], "int64")
            emb = fluid.layers.embedding(ids, [12, 3], is_sparse=sparse)
            loss = fluid.layers.mean(fluid.layers.fc(emb, 1))
            fluid.optimizer.SGD(0.3, regularization=reg).minimize(loss)
        return main, startup

    feed = {"ids": np.array([[1], [3], [3], [5]], "int64")}  # rows 6.. never looked up
    tables = []
    for sparse in (True, False):
        main, startup = build(sparse)
        ops = [op.type for op in main.global_block().ops]
        if sparse:
            assert "embedding_0.w_0@GRAD@NEWGRAD@" in main.global_block().vars
            assert "sparse_l2_decay" not in ops
        state, _ = run_graph(graphc.lower(startup))
        table0 = np.asarray(state["embedding_0.w_0"])
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            exe.run(main, feed=feed)
            jitted = np.array(fluid.global_scope().find_var("embedding_0.w_0").get_tensor())
        if sparse:  # the interpreter on the program with the @NEWGRAD@ sum
            interp_state, _ = run_graph(graphc.lower(main), state, feed)
            np.testing.assert_allclose(np.asarray(interp_state["embedding_0.w_0"]), jitted,
                                       rtol=1e-6, atol=1e-7)
        # every row decays, looked up or not: rows 6.. move by -lr * decay(w) alone
        decay = 0.1 * (table0 if isinstance(reg, fluid.regularizer.L2Decay) else
                       np.sign(table0))
        np.testing.assert_allclose(jitted[6:], table0[6:] - 0.3 * decay[6:], rtol=1e-5,
                                   atol=1e-7)
        tables.append(jitted)
    np.testing.assert_allclose(tables[0], tables[1], rtol=1e-6, atol=1e-7)


def test_flags_of_the_wrong_type_are_type_errors():
    with pytest.raises(TypeError):
        fluid.set_flags(["FLAGS_check_nan_inf"])
    with pytest.raises(TypeError):
        fluid.get_flags(1)
    with pytest.raises(ValueError):  # not one of Paddle 1.8's public flags
        fluid.get_flags("FLAGS_free_idle_chunk")


def test_data_layers_refuse_a_name_or_shape_of_the_wrong_type_with_type_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        for layer in (fluid.data, fluid.layers.data):
            with pytest.raises(TypeError, match="a name is a str"):
                layer(name=1, shape=[2, 25], dtype="bool")
            with pytest.raises(TypeError, match="shape must be a list"):
                layer(name="d", shape=2, dtype="bool")
