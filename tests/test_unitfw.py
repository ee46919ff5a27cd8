"""Paddle 1.8's framework surface its own unit tests use (issue 25, unitfw): layers.data feeds
unchecked as Paddle's need_check_feed rule, Program pruning and block nesting, fetch lists."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.compat as cpt
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.fluid.backward import calc_gradient
from graphc.runtime.feed_shapes import unchecked_feeds


def _both(main, startup, feed, fetch):
    """Fetched values from the jitted Executor and from the interpreter (on the program
    the executor runs for this feed)."""
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        jitted = exe.run(main, feed=feed, fetch_list=fetch)
    state, _ = run_graph(graphc.lower(startup))
    program, checked = unchecked_feeds(main, feed)
    _, interp = run_graph(graphc.lower(program), state, checked, [v.name for v in fetch])
    return jitted, interp


def _sample_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[5], dtype="float32")  # [-1, 5], unchecked
        y = x * 2.0 + 1.0
        s = fluid.layers.reduce_sum(x)
        shape = fluid.layers.shape(x)
    return main, startup, [y, s, shape]


def test_layers_data_takes_a_sample_without_its_batch_dimension():
    # Paddle 1.8 feeds it as it is (need_check_feed unset): the ops see shape [5]
    main, startup, fetch = _sample_program()
    assert not main.global_block().var("x").need_check_feed
    x = np.arange(5, dtype="float32")
    for y, s, shape in _both(main, startup, {"x": x}, fetch):
        np.testing.assert_array_equal(y, x * 2 + 1)
        np.testing.assert_allclose(s, [x.sum()])
        np.testing.assert_array_equal(shape, [5])
    # the declared shape still runs, on the program itself
    xb = np.arange(10, dtype="float32").reshape(2, 5)
    for y, _s, shape in _both(main, startup, {"x": xb}, fetch):
        np.testing.assert_array_equal(y, xb * 2 + 1)
        np.testing.assert_array_equal(shape, [2, 5])
    assert unchecked_feeds(main, {"x": xb})[0] is main
    # one re-typed copy per fed shape, kept on the program
    assert unchecked_feeds(main, {"x": x})[0] is unchecked_feeds(main, {"x": x + 1})[0]


def test_fluid_data_checks_the_feed_and_layers_data_converts_its_dtype():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.data("a", shape=[-1, 5], dtype="float32")  # checked (need_check_feed)
        b = fluid.layers.data("b", shape=[5], dtype="float32")
        out = a + b
    exe = fluid.Executor(fluid.CPUPlace())
    good = np.ones((2, 5), "float32")
    with pytest.raises(graphc.FeedError, match=r"feed 'a' has shape \[5\]"):
        exe.run(main, feed={"a": good[0], "b": good}, fetch_list=[out])
    with pytest.raises(graphc.FeedError, match="feed 'a' has dtype float64"):
        exe.run(main, feed={"a": good.astype("float64"), "b": good}, fetch_list=[out])
    b64 = np.full((2, 5), 0.1, "float64")  # Paddle computes in float64; graphc converts
    (got,) = exe.run(main, feed={"a": good, "b": b64}, fetch_list=[out])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, good + b64.astype("float32"))


def test_a_layers_data_feed_the_ops_cannot_take_is_a_feed_error():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[6], dtype="float32")
        y = fluid.layers.fc(x, 3)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(graphc.FeedError, match=r"feed 'x' has shape \[4, 7\] but the program "
                                               r"declares \[-1, 6\].*re-types"):
        exe.run(main, feed={"x": np.ones((4, 7), "float32")}, fetch_list=[y])


def test_program_blocks_seed_and_param_info_as_paddle():
    prog = fluid.Program()
    b1 = prog._create_block()
    assert (b1.idx, b1.parent_idx, prog.current_block().idx) == (1, 0, 1)
    b2 = prog._create_block()
    assert (b2.idx, b2.parent_idx) == (2, 1)
    prog._rollback()
    assert prog.current_block().idx == 1
    prog._rollback()
    assert prog.current_block() is prog.global_block()
    with pytest.raises(ValueError, match="random_seed must be an int"):
        prog.random_seed = "seed"
    with pytest.raises(TypeError, match="must be a Program"):
        prog._copy_param_info_from("program")
    with pytest.raises(TypeError, match="must be a Program"):
        prog._copy_dist_param_info_from("program")
    with pytest.raises(ValueError, match="type is required"):
        prog.global_block().append_op()


def _fc_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[2], dtype="float32")
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        y = fluid.layers.fc(x, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(y, label))
    return main, startup, y, label, loss


def test_prune_with_input_keeps_what_the_targets_need_from_the_feeds():
    main, startup, y, label, loss = _fc_program()
    kinds = [op.type for op in main.global_block().ops]
    assert [op.type for op in main._prune(loss).global_block().ops] == kinds
    pruned = main._prune_with_input([y.name, label.name], [loss])
    assert [op.type for op in pruned.global_block().ops] == kinds[-2:]
    assert [op.idx for op in pruned.global_block().ops] == [0, 1]
    assert loss.op is main.global_block().ops[-1]
    probs = np.array([[0.2, 0.8], [0.6, 0.4]], "float32")
    lab = np.array([[1], [0]], "int64")
    (got,) = fluid.Executor().run(pruned, feed={y.name: probs, "label": lab},
                                  fetch_list=[loss.name])
    np.testing.assert_allclose(got, [-(np.log(0.8) + np.log(0.6)) / 2], rtol=1e-6)
    with pytest.raises(ValueError, match="Variable or an Operator, got NoneType"):
        main._prune(None)
    with pytest.raises(ValueError, match="feeded_var_names must be a list"):
        main._prune_with_input([2, 3], [])


def test_desc_serializes_to_bytes_parse_from_string_reads():
    main, _, y, _, loss = _fc_program()
    data = main.desc.serialize_to_string()
    assert isinstance(data, bytes)
    back = fluid.Program.parse_from_string(data)
    assert [op.type for op in back.global_block().ops] == \
        [op.type for op in main.global_block().ops]


def test_a_program_graphc_cannot_lower_still_prints():
    prog = fluid.Program()
    blk = prog.global_block()
    x = blk.create_var(name="X", shape=[3, 4], dtype="float32")
    w = blk.create_var(name="Y", shape=[4, 2], dtype="float32")
    out = blk.create_var(name="Out", dtype="float32")
    blk.append_op(type="mul", inputs={"X": [x], "Y": [w]}, outputs={"Out": [out]})
    assert "mul" in str(prog)


def test_use_prune_of_a_compiled_program_runs_every_optimizer_op():
    main, startup, y, label, loss = _fc_program()
    with fluid.program_guard(main, startup):
        fluid.optimizer.SGD(0.5).minimize(loss)
    feed = {"x": np.ones((4, 2), "float32"), "label": np.zeros((4, 1), "int64")}
    w = main.global_block().all_parameters()[0].name
    got = []
    for prune in (True, False):
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        before = np.array(scope[w])
        compiled = fluid.CompiledProgram(main)
        exe.run(compiled, feed=feed, fetch_list=[loss.name], scope=scope, use_prune=prune)
        assert not np.array_equal(scope[w], before)
        got.append(np.array(scope[w]))
    np.testing.assert_array_equal(got[0], got[1])


def test_a_list_in_fetch_list_is_fetched_item_by_item():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[3], dtype="float32")
        x.stop_gradient = False
        x1, _, _ = fluid.layers.split(x, dim=0, num_or_sections=3)
        grads = fluid.gradients(x1 * 2.0, x)
        single = calc_gradient(x1 * 3.0, x)
    assert isinstance(grads, list) and isinstance(single, fluid.framework.Variable)
    exe = fluid.Executor()
    g, s = exe.run(main, feed={"x": np.ones(3, "float32")}, fetch_list=[grads, single])
    np.testing.assert_array_equal(g, [2, 0, 0])
    np.testing.assert_array_equal(s, [3, 0, 0])


def test_compat_helpers():
    assert cpt.to_text(b"ab") == "ab" and cpt.to_text(["a", b"b"]) == ["a", "b"]
    assert cpt.to_bytes("ab") == b"ab" and cpt.to_bytes({"a"}) == {b"a"}
    items = [b"x"]
    assert cpt.to_text(items, inplace=True) is items and items == ["x"]
    assert cpt.round(2.5) == 3.0 and cpt.round(-2.5) == -3.0 and cpt.round(0.125, 2) == 0.13
    assert cpt.floor_division(7, 2) == 3
    assert cpt.get_exception_message(ValueError("boom")) == "boom"


def test_save_inference_model_takes_a_compiled_program(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2], dtype="float32")
        y = fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.5)))
    exe = fluid.Executor()
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        compiled = fluid.CompiledProgram(main).with_data_parallel(places=[fluid.CPUPlace()])
        fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, compiled)
        prog, feeds, fetch = fluid.io.load_inference_model(str(tmp_path), exe)
        xv = np.array([[1.0, 2.0]], "float32")
        (got,) = exe.run(prog, feed={"x": xv}, fetch_list=fetch)
    assert feeds == ["x"]
    np.testing.assert_allclose(got, [[1.5]], rtol=1e-6)


def test_core_feed_and_fetch_lists_and_the_lod_constructor():
    scope = fluid.core.Scope()
    data = np.arange(8, dtype="float32").reshape(4, 2)
    t = fluid.core.LoDTensor([[3, 1]])  # Paddle's constructor: the lengths, value set later
    t.set(data, fluid.CPUPlace())
    fluid.core.set_feed_variable(scope, t, "feed", 1)
    assert fluid.core.get_fetch_variable(scope, "feed", 1) is t
    with pytest.raises(ValueError, match="none at index 0"):
        fluid.core.get_fetch_variable(scope, "feed", 0)
    fetched = scope.var("fetch").get_fetch_list()
    fetched.append(t)
    out = fluid.core.get_fetch_variable(scope, "fetch", 0)
    assert out.recursive_sequence_lengths() == [[3, 1]]
    np.testing.assert_array_equal(np.array(out), data)
    # an array first is still graphc's (array, lengths) form
    assert fluid.core.LoDTensor(np.ones((2, 2)), [[2]]).recursive_sequence_lengths() == [[2]]


def test_fetch_var_dtype_conversion_and_redeclaration():
    from graphc.fluid.executor import _fetch_var
    from graphc.fluid.framework import convert_np_dtype_to_dtype_
    assert convert_np_dtype_to_dtype_(np.float32) == fluid.core.VarDesc.VarType.FP32
    assert convert_np_dtype_to_dtype_("int64") == fluid.core.VarDesc.VarType.INT64
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.create_tensor(dtype="int32", persistable=True, name="kept")
        fluid.layers.assign(np.array([1, 3, 5], "int32"), output=x)
    with pytest.raises(ValueError, match=r"exists with shape \[3\], not \[4\]"):
        main.global_block().create_var(name="kept", shape=[4])
    scope = fluid.Scope()
    fluid.Executor().run(main, scope=scope)
    got = _fetch_var("kept", scope)
    assert got.dtype == np.int32 and got.tolist() == [1, 3, 5]
    with pytest.raises(graphc.GraphcError, match="no variable 'nope'"):
        _fetch_var("nope", scope)


def test_parameter_list_and_compiled_program_arguments_are_type_checked():
    main, startup, y, label, loss = _fc_program()
    before = len(main.global_block().ops)
    with fluid.program_guard(main, startup):
        for bad in ("fc_0.w_0", ["fc_0.w_0", 3]):
            with pytest.raises(TypeError, match="parameter_list"):
                fluid.optimizer.SGD(0.1).minimize(loss, parameter_list=bad)
    assert len(main.global_block().ops) == before  # refused before any op is appended
    with pytest.raises(TypeError, match="expects a Program, got str"):
        fluid.CompiledProgram("program")
    compiled = fluid.CompiledProgram(main)
    scope = fluid.global_scope()
    assert compiled._compile(scope, fluid.CPUPlace()) is compiled
    compiled._compile(scope, fluid.CPUPlace())  # the same binding again is fine
    with pytest.raises(ValueError, match="another scope"):
        compiled._compile(fluid.core.Scope(), fluid.CPUPlace())


def test_an_inference_model_saved_and_loaded_in_memory():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[2], dtype="float32")
        y = fluid.layers.fc(x, 1)
        loss = fluid.layers.mean(y)
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor()
    xv = np.array([[1.0, 2.0], [3.0, -1.0]], "float32")
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        scope = fluid.global_scope()
        w, b = (np.array(scope[p.name]) for p in main.global_block().all_parameters())
        pruned = main.clone()._prune_with_input(["x"], [y])
        # the pruned program keeps what its ops use: no learning rate, no loss
        assert sorted(v.name for v in pruned.global_block().vars.values() if v.persistable) \
            == sorted(p.name for p in main.global_block().all_parameters())
        params = fluid.io.save_persistables(exe, None, pruned)
        model = pruned.desc.serialize_to_string()
    assert isinstance(params, bytes)
    with fluid.scope_guard(fluid.Scope()):
        prog, feeds, fetch = fluid.io.load_inference_model(None, exe, model, params)
        (got,) = exe.run(prog, feed={"x": xv}, fetch_list=[y.name])
        with pytest.raises(ValueError, match="params_filename must be the saved bytes"):
            fluid.io.load_inference_model(None, exe, model, None)
    np.testing.assert_allclose(got, xv @ w + b, rtol=1e-6)
    with pytest.raises(graphc.CheckpointError, match="bytes after the 2 variables"):
        fluid.io.load_inference_model(None, exe, model, params + params[:8])


def test_saving_a_program_with_auc_warns_about_its_state(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2], dtype="float32")
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        predict = fluid.layers.fc(x, 2, act="softmax")
        fluid.layers.auc(input=predict, label=y)
        cost = fluid.layers.mean(fluid.layers.cross_entropy(predict, y))
    exe = fluid.Executor()
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.warns(UserWarning, match="auc op whose statistics"):
            fluid.io.save_inference_model(str(tmp_path), ["x", "y"], [cost], exe, main)


def test_a_dense_lod_tensor_or_list_feed_of_a_sample():
    main, startup, fetch = _sample_program()
    x = np.arange(5, dtype="float32")
    t = fluid.core.LoDTensor()
    t.set(x, fluid.CPUPlace())
    exe = fluid.Executor()
    for value in (t, x.tolist()):
        y, _, shape = exe.run(main, feed={"x": value}, fetch_list=fetch)
        np.testing.assert_array_equal(y, x * 2 + 1)
        np.testing.assert_array_equal(shape, [5])
    with pytest.raises(graphc.FeedError, match="feed 'x'"):
        exe.run(main, feed={"x": [[1.0, 2.0], [3.0]]}, fetch_list=fetch)  # ragged


def _lod_feed(data, lengths):
    t = fluid.LoDTensor()
    t.set(data, fluid.CPUPlace())
    t.set_recursive_sequence_lengths(lengths)
    return t


def test_a_lod_fed_to_a_variable_declared_without_one_runs_its_rows():
    # the LoD is dropped, as before: carrying it would mix a LoD buffer with dense rows
    # beside it (the recommender chapter feeds one-row LoDs to its dense id inputs)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32")
        t = fluid.layers.transpose(x, [1, 0])
    data = np.arange(15, dtype="float32").reshape(5, 3)
    assert unchecked_feeds(main, {"x": _lod_feed(data, [[2, 3]])})[0] is main
    exe = fluid.Executor(fluid.CPUPlace())
    (got,) = exe.run(main, feed={"x": _lod_feed(data, [[2, 3]])}, fetch_list=[t])
    np.testing.assert_array_equal(got, data.T)


def test_a_dense_array_fed_to_a_lod_variable_runs_with_no_lod():
    # Paddle 1.8 feeds an ndarray to a lod_level=1 variable as a LoDTensor of empty LoD:
    # ops on rows run; an op that needs sequences is refused naming itself
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3], dtype="float32", lod_level=1)
        y = x * 3.0
        s = fluid.layers.reduce_sum(x)
    data = np.arange(15, dtype="float32").reshape(5, 3)
    for got_y, got_s in _both(main, startup, {"x": data}, [y, s]):
        np.testing.assert_array_equal(got_y, data * 3)
        np.testing.assert_allclose(got_s, [data.sum()])
    exe = fluid.Executor(fluid.CPUPlace())
    yl, _ = exe.run(main, feed={"x": data}, fetch_list=[y, s], return_numpy=False)
    assert yl.recursive_sequence_lengths() == []
    assert main.global_block().var("x").lod_level == 1  # the user's program is untouched
    with fluid.program_guard(main, startup):
        pooled = fluid.layers.sequence_pool(x, "sum")
    with pytest.raises(graphc.FeedError, match=r"feed 'x' is declared with lod_level=1 but "
                                               r"fed a dense array of shape \[5, 3\].*"
                                               r"sequence_pool"):
        exe.run(main, feed={"x": data}, fetch_list=[pooled])
