"""fluid.io's save/load API: an inference model is the test-mode program pruned to the feeds and
fetch targets (text IR + safetensors) and reproduces the original's outputs after loading;
save/load of params, vars and ``io.save``/``io.load`` round-trip, and every failure is a
CheckpointError naming the file and variable, with the scope untouched."""

from __future__ import annotations

import os

import numpy as np
import pytest

import graphc as fluid
from graphc import io, layers, optimizer
from graphc.ir.errors import GraphcError

pytestmark = pytest.mark.timeout(120)

rng = np.random.default_rng(0)
X = rng.standard_normal((6, 4)).astype("float32")
Y = rng.integers(0, 3, (6, 1)).astype("int64")


def build(hidden=8, opt="momentum"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4])
        label = fluid.data("label", [-1, 1], "int64")
        h = layers.batch_norm(layers.fc(x, hidden, act="relu"))
        h = layers.dropout(h, 0.5)
        pred = layers.softmax(layers.fc(h, 3))
        loss = layers.mean(layers.cross_entropy(pred, label))
        (optimizer.Momentum(0.1, 0.9) if opt == "momentum" else optimizer.SGD(0.1)).minimize(
            loss)
    return main, startup, pred, loss


def trained(scope, steps=2, **kw):
    main, startup, pred, loss = build(**kw)
    exe = fluid.Executor()
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(steps):
            exe.run(main, feed={"x": X, "label": Y}, fetch_list=[loss])
    return exe, main, startup, pred, loss


def snapshot(scope):
    return {n: np.asarray(scope[n]) for n in scope.keys()}


def test_inference_model_reproduces_test_mode_outputs(tmp_path):
    scope = fluid.Scope()
    exe, main, _, pred, _ = trained(scope)
    with fluid.scope_guard(scope):
        want = exe.run(main.clone(for_test=True), feed={"x": X, "label": Y},
                       fetch_list=[pred])[0]
        names = io.save_inference_model(str(tmp_path), ["x"], [pred], exe, main_program=main)
    assert names == [pred.name]
    text = (tmp_path / "__model__").read_text()
    fluid.parse(text)  # graphc's own text IR
    # Before loading, a fresh scope has nothing; the load fills in exactly the pruned params.
    fresh = fluid.Scope()
    with fluid.scope_guard(fresh):
        program, feeds, fetch = io.load_inference_model(str(tmp_path), exe)
        got = exe.run(program, feed={feeds[0]: X}, fetch_list=fetch)[0]
    assert feeds == ["x"] and [v.name for v in fetch] == [pred.name]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # pruned: no label, loss, backward or optimizer ops; batch_norm and dropout in test mode
    block = program.global_block()
    assert not block.has_var("label")
    assert all(op.role == "forward" for op in block.ops)
    assert {op.type for op in block.ops} >= {"batch_norm", "dropout"}
    assert all(op.attrs["is_test"] for op in block.ops if "is_test" in op.attrs)
    assert "cross_entropy" not in {op.type for op in block.ops}
    params = {p.name for p in main.all_parameters()}
    assert set(fresh.keys()) <= {v.name for v in main.list_vars() if v.persistable}
    assert params <= set(fresh.keys())
    assert not any("velocity" in n for n in fresh.keys())  # optimizer state is not needed


def test_inference_model_file_names_program_only_and_fed_intermediate(tmp_path):
    scope = fluid.Scope()
    exe, main, _, pred, _ = trained(scope, steps=1, opt="sgd")
    hidden = next(op for op in main.global_block().ops if op.type == "dropout").output("Out")[0]
    with fluid.scope_guard(scope):
        io.save_inference_model(str(tmp_path), ["x"], pred, exe, main_program=main,
                                model_filename="model.txt", params_filename="params")
        # feeding an intermediate cuts the program there
        io.save_inference_model(str(tmp_path / "tail"), [hidden], [pred], exe,
                                main_program=main)
        h = exe.run(main.clone(for_test=True), feed={"x": X, "label": Y},
                    fetch_list=[hidden, pred])
    assert (tmp_path / "model.txt").is_file() and (tmp_path / "params").is_dir()
    with fluid.scope_guard(fluid.Scope()):
        with pytest.raises(fluid.CheckpointError, match="__model__"):
            io.load_inference_model(str(tmp_path), exe)  # saved under other names
        program, feeds, fetch = io.load_inference_model(str(tmp_path), exe, "model.txt",
                                                        "params")
        np.testing.assert_allclose(exe.run(program, feed={"x": X}, fetch_list=fetch)[0],
                                   h[1], rtol=1e-6, atol=1e-6)
        tail, feeds, fetch = io.load_inference_model(str(tmp_path / "tail"), exe)
        assert feeds == [hidden] and "batch_norm" not in {op.type for op in
                                                         tail.global_block().ops}
        np.testing.assert_allclose(exe.run(tail, feed={hidden: h[0]}, fetch_list=fetch)[0],
                                   h[1], rtol=1e-6, atol=1e-6)
    with fluid.scope_guard(scope):
        io.save_inference_model(str(tmp_path / "only"), ["x"], [pred], exe,
                                main_program=main, program_only=True)
    assert not (tmp_path / "only" / "persistables.safetensors").exists()
    with fluid.scope_guard(fluid.Scope()), pytest.raises(fluid.CheckpointError,
                                                         match="only"):
        io.load_inference_model(str(tmp_path / "only"), exe)


def test_inference_model_errors(tmp_path):
    scope = fluid.Scope()
    exe, main, _, pred, loss = trained(scope, steps=0, opt="sgd")
    with fluid.scope_guard(scope):
        with pytest.raises(GraphcError, match="'nope' is not a variable"):
            io.save_inference_model(str(tmp_path), ["nope"], [pred], exe, main_program=main)
        with pytest.raises(GraphcError, match="'label'.*not in feeded_var_names"):
            io.save_inference_model(str(tmp_path), ["x"], [loss], exe, main_program=main)
        io.save_inference_model(str(tmp_path / "m"), ["x"], [pred], exe, main_program=main)
    with pytest.raises(fluid.CheckpointError, match="not a directory"):
        io.load_inference_model(str(tmp_path / "missing"), exe)
    (tmp_path / "plain").write_text("")
    with fluid.scope_guard(scope), pytest.raises(fluid.CheckpointError,
                                                 match="plain': it is a file"):
        io.save_inference_model(str(tmp_path / "plain"), ["x"], [pred], exe, main_program=main)
    (tmp_path / "m" / "__model__").write_text("this is not IR")
    clean = fluid.Scope()
    with fluid.scope_guard(clean), pytest.raises(fluid.CheckpointError,
                                                 match="__model__' does not parse"):
        io.load_inference_model(str(tmp_path / "m"), exe)
    assert len(clean) == 0


def test_params_and_vars_round_trip_and_mismatch_leaves_scope(tmp_path):
    scope = fluid.Scope()
    exe, main, startup, pred, _ = trained(scope, steps=1)
    params = [p.name for p in main.all_parameters()]
    assert [v.name for v in io.get_program_parameter(main)] == [
        v.name for v in main.list_vars() if isinstance(v, fluid.Parameter)]
    persist = {v.name for v in io.get_program_persistable_vars(main)}
    assert set(params) < persist and any("velocity" in n for n in persist)
    with fluid.scope_guard(scope):
        saved = snapshot(scope)
        io.save_params(exe, str(tmp_path / "p"), main)
        io.save_persistables(exe, str(tmp_path / "all"), main, filename="combined")
        io.save_vars(exe, str(tmp_path / "v"), main, vars=[params[0]])
        exe.run(main, feed={"x": X, "label": Y})  # moves everything on
        io.load_params(exe, str(tmp_path / "p"), main)
        for n in params:
            np.testing.assert_array_equal(np.asarray(scope[n]), saved[n])
        io.load_persistables(exe, str(tmp_path / "all"), main, filename="combined")
        for n in persist:
            np.testing.assert_array_equal(np.asarray(scope[n]), saved[n])
        with pytest.raises(fluid.CheckpointError, match="no tensor"):
            io.load_persistables(exe, str(tmp_path / "p"), main)  # params only there
        with pytest.raises(fluid.CheckpointError, match="'nope' is not in the program"):
            io.load_vars(exe, str(tmp_path / "v"), main, vars=["nope"])
        with pytest.raises(fluid.CheckpointError, match="no saved variables"):
            io.load_params(exe, str(tmp_path / "absent"), main)
    # A program whose fc is narrower: shape mismatch names file and tensor, scope untouched.
    other = fluid.Scope()
    narrow_main, narrow_startup, _, _ = build(hidden=5)
    with fluid.scope_guard(other):
        exe.run(narrow_startup)
        before = snapshot(other)
        with pytest.raises(fluid.CheckpointError, match=r"persistables.safetensors.*"
                                                        r"'fc_0.w_0' is float32\[4, 8\]"):
            io.load_params(exe, str(tmp_path / "p"), narrow_main)
        after = snapshot(other)
    assert before.keys() == after.keys()
    for n in before:
        np.testing.assert_array_equal(before[n], after[n])


def test_io_save_load_params_and_optimizer_state(tmp_path):
    scope = fluid.Scope()
    exe, main, _, pred, _ = trained(scope, steps=2)
    prefix = str(tmp_path / "ckpt" / "model")
    with fluid.scope_guard(scope):
        saved = snapshot(scope)
        io.save(main, prefix)
        for suffix in (".pdparams", ".pdopt"):
            assert os.path.isdir(prefix + suffix)
        fluid.parse(open(prefix + ".pdmodel").read())
        exe.run(main, feed={"x": X, "label": Y})
        io.load(main, prefix + ".pdparams", exe)  # the suffix is accepted as Paddle does
        for n in (v.name for v in io.get_program_persistable_vars(main)):
            np.testing.assert_array_equal(np.asarray(scope[n]), saved[n])
        one = main.all_parameters()[0].name
        exe.run(main, feed={"x": X, "label": Y})
        io.load(main, prefix, var_list=[one])
        np.testing.assert_array_equal(np.asarray(scope[one]), saved[one])
    # A program with optimizer state but no .pdopt: refused before anything changes.
    sgd_scope = fluid.Scope()
    _, sgd_main, _, _, _ = trained(sgd_scope, steps=0, opt="sgd")
    with fluid.scope_guard(sgd_scope):
        io.save(sgd_main, str(tmp_path / "sgd"))
    with fluid.scope_guard(scope):
        before = snapshot(scope)
        os.rename(str(tmp_path / "sgd.pdparams"), str(tmp_path / "mix.pdparams"))
        with pytest.raises(fluid.CheckpointError, match="mix.pdopt"):
            io.load(main, str(tmp_path / "mix"))
        after = snapshot(scope)
    for n in before:
        np.testing.assert_array_equal(before[n], after[n])


def test_wrong_argument_types_are_graphc_errors_naming_the_argument(tmp_path):
    scope = fluid.Scope()
    exe, main, _, pred, _ = trained(scope, steps=0, opt="sgd")
    d = str(tmp_path / "out")
    cases = [
        (lambda: io.save_inference_model(d, None, [pred], exe, main_program=main),
         "feeded_var_names must be a list of names, got NoneType"),
        (lambda: io.save_inference_model(None, ["x"], [pred], exe, main_program=main),
         "dirname must be a path, got NoneType"),
        (lambda: io.load_inference_model(None, exe), "dirname must be a path"),
        (lambda: io.save_vars(exe, d, main_program=main, vars=5),
         "vars must be a list of Variables or names, got int"),
        (lambda: io.save_vars(exe, None, main_program=main, predicate=io.is_parameter),
         "save_vars: dirname must be a path"),
        (lambda: io.save_params(exe, d, main_program="main"),
         "main_program must be a Program, got str"),
        (lambda: io.load_params(exe, d, main_program=3), "main_program must be a Program"),
        (lambda: io.save(main, None), "io.save: model_path must be a path"),
        (lambda: io.load(main, 7), "io.load: model_path must be a path"),
    ]
    with fluid.scope_guard(scope):
        for call, message in cases:
            with pytest.raises(GraphcError, match=message):
                call()
    assert not os.path.exists(d)


def test_a_save_without_values_leaves_no_directory_behind(tmp_path):
    main, _, pred, _ = build()  # the startup program never ran: no parameter has a value
    exe = fluid.Executor()
    with fluid.scope_guard(fluid.Scope()):
        for call in (
                lambda: io.save_inference_model(str(tmp_path / "m"), ["x"], [pred], exe,
                                                main_program=main),
                lambda: io.save_inference_model(str(tmp_path / "w"), ["x"], [pred], exe,
                                                main_program=main,
                                                export_for_deployment=False),
                lambda: io.save(main, str(tmp_path / "s" / "sub" / "model"))):
            with pytest.raises(fluid.CheckpointError, match="has no value in the scope"):
                call()
    assert list(tmp_path.iterdir()) == []
