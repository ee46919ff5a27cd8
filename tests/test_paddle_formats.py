"""Paddle's formats via fluid.io: Paddle-written fixtures run with Paddle's outputs; graphc
writes Paddle's tensor bytes and a __model__ Paddle reads; bad files: typed, nothing loaded."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.dataio.paddle_format import program_desc, tensor_stream
from graphc.dataio.paddle_format.schema import messages
from graphc.ir.errors import ProgramError
from graphc.runtime.checkpoint import CheckpointError

pytestmark = pytest.mark.timeout(180)
FIX = Path(__file__).resolve().parent / "fixtures" / "paddle_format"
MODELS = ["mlp", "convnet"]


def _model(name):
    return (FIX / name / "infer" / "__model__").read_bytes()


def _program(name):
    """The fixture's inference program, read from Paddle's ProgramDesc."""
    return fluid.Program.parse_from_string(_model(name))


def _scope_values(names):
    scope = fluid.global_scope()
    return {n: np.asarray(scope[n]).copy() for n in names if n in scope}


def _persistable_names(program):
    return sorted(v.name for v in program.list_vars() if v.persistable)


@pytest.fixture(autouse=True)
def fresh_scope():
    with fluid.scope_guard(fluid.Scope()):
        yield


# -- Paddle-written -> graphc -----------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_paddles_inference_model_loads_and_runs_with_paddles_outputs(name):
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fluid.io.load_inference_model(
        str(FIX / name / "infer"), exe, params_filename="__params__")
    assert feeds == (["x"] if name == "mlp" else ["img"])
    assert [v.name for v in fetches] == ["softmax_0.tmp_0"]
    assert "feed" not in [op.type for op in program.global_block().ops]
    (out,) = exe.run(program, feed={feeds[0]: np.load(FIX / name / "input.npy")},
                     fetch_list=fetches)
    np.testing.assert_allclose(out, np.load(FIX / name / "output.npy"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", MODELS)
def test_per_variable_and_combined_files_load_the_same_values(name):
    program = _program(name)
    exe = fluid.Executor()
    fluid.io.load_persistables(exe, str(FIX / name / "vars"), main_program=program)
    names = _persistable_names(program)
    per_var = _scope_values(names)
    assert sorted(per_var) == names
    with fluid.scope_guard(fluid.Scope()):
        fluid.io.load_params(exe, str(FIX / name / "combined"), main_program=program,
                             filename="params") if name == "mlp" else fluid.io.load_vars(
            exe, str(FIX / name / "combined"), main_program=program,
            predicate=lambda v: v.persistable, filename="params")
        combined = _scope_values(names)
    for n in names:
        np.testing.assert_array_equal(per_var[n], combined[n])
    feed = "x" if name == "mlp" else "img"
    (out,) = exe.run(program, feed={feed: np.load(FIX / name / "input.npy")},
                     fetch_list=["softmax_0.tmp_0"])
    np.testing.assert_allclose(out, np.load(FIX / name / "output.npy"), rtol=1e-5, atol=1e-6)


def test_load_program_state_and_set_program_state():
    program = _program("convnet")
    state = fluid.io.load_program_state(str(FIX / "convnet" / "vars"))
    assert sorted(state) == _persistable_names(program)
    combined = fluid.io.load_program_state(
        str(FIX / "convnet" / "combined" / "params"),
        var_list=[v for v in program.list_vars() if v.persistable])
    for n in state:
        np.testing.assert_array_equal(state[n], combined[n])
    assert fluid.io.set_program_state(program, state) == []
    np.testing.assert_array_equal(fluid.global_scope()["conv2d_0.w_0"], state["conv2d_0.w_0"])
    with pytest.raises(CheckpointError, match="load_program_state: .*var_list"):
        fluid.io.load_program_state(str(FIX / "convnet" / "combined" / "params"))
    bad = dict(state, **{"fc_0.w_0": np.zeros((2, 2), "float32")})
    before = _scope_values(state)
    with pytest.raises(CheckpointError, match=r"'fc_0.w_0' has shape \[2, 2\] but the "
                                              r"program declares \[18, 3\]"):
        fluid.io.set_program_state(program, bad)
    after = _scope_values(state)
    assert all(np.array_equal(before[n], after[n]) for n in state)
    missing = {k: v for k, v in state.items() if k != "fc_0.b_0"}
    assert fluid.io.set_program_state(program, missing) == ["fc_0.b_0"]


# -- graphc-written -> Paddle -------------------------------------------------------------------
@pytest.mark.parametrize("name", MODELS)
def test_graphc_writes_paddles_tensor_files_byte_for_byte(name, tmp_path):
    program = _program(name)
    exe = fluid.Executor()
    fluid.io.load_persistables(exe, str(FIX / name / "vars"), main_program=program)
    fluid.io.save_persistables(exe, str(tmp_path / "vars"), main_program=program)
    fluid.io.save_persistables(exe, str(tmp_path / "combined"), main_program=program,
                               filename="params")
    for fname in os.listdir(FIX / name / "vars"):
        assert (tmp_path / "vars" / fname).read_bytes() == \
            (FIX / name / "vars" / fname).read_bytes(), fname
    assert sorted(os.listdir(tmp_path / "vars")) == sorted(os.listdir(FIX / name / "vars"))
    assert (tmp_path / "combined" / "params").read_bytes() == \
        (FIX / name / "combined" / "params").read_bytes()
    feeds = ["x"] if name == "mlp" else ["img"]
    fluid.io.save_inference_model(str(tmp_path / "infer"), feeds, ["softmax_0.tmp_0"], exe,
                                  main_program=program, params_filename="__params__")
    assert (tmp_path / "infer" / "__params__").read_bytes() == \
        (FIX / name / "infer" / "__params__").read_bytes()


@pytest.mark.parametrize("name", MODELS)
def test_graphc_written_model_desc_is_paddles_program(name, tmp_path):
    """What a Paddle reader needs of __model__: the same vars (type, dtype, dims,
    persistable), the same ops with feed/fetch ops by col, deterministic bytes."""
    exe = fluid.Executor()
    program, feeds, fetches = fluid.io.load_inference_model(
        str(FIX / name / "infer"), exe, params_filename="__params__")
    fluid.io.save_inference_model(str(tmp_path), feeds, fetches, exe, main_program=program)
    ours, theirs = messages().ProgramDesc(), messages().ProgramDesc()
    ours.ParseFromString((tmp_path / "__model__").read_bytes())
    theirs.ParseFromString(_model(name))

    def vars_of(desc):
        return {v.name: (v.type.type, v.type.lod_tensor.tensor.data_type,
                         list(v.type.lod_tensor.tensor.dims), v.persistable)
                for v in desc.blocks[0].vars}

    def ops_of(desc):  # Paddle also lists optional slots it leaves empty
        return [(op.type, {s.parameter: list(s.arguments) for s in op.inputs if s.arguments},
                 {s.parameter: list(s.arguments) for s in op.outputs if s.arguments})
                for op in desc.blocks[0].ops]
    assert vars_of(ours) == vars_of(theirs)
    assert ops_of(ours) == ops_of(theirs)
    again = program_desc.from_program(program, feeds, [v.name for v in fetches])
    assert again == (tmp_path / "__model__").read_bytes()


@pytest.mark.parametrize("name", MODELS)
def test_graphc_written_model_loads_in_paddle(name, tmp_path, monkeypatch):
    exe = fluid.Executor()
    program, feeds, fetches = fluid.io.load_inference_model(
        str(FIX / name / "infer"), exe, params_filename="__params__")
    fluid.io.save_inference_model(str(tmp_path), feeds, fetches, exe, main_program=program,
                                  params_filename="__params__")
    monkeypatch.setenv("FLAGS_enable_pir_api", "0")  # Paddle's legacy (ProgramDesc) mode
    paddle = pytest.importorskip("paddle")
    paddle.enable_static()
    pexe = paddle.static.Executor(paddle.CPUPlace())
    prog, pfeeds, pfetches = paddle.static.io.load_inference_model(
        str(tmp_path), pexe, model_filename="__model__", params_filename="__params__")
    (out,) = pexe.run(prog, feed={pfeeds[0]: np.load(FIX / name / "input.npy")},
                      fetch_list=pfetches)
    np.testing.assert_allclose(out, np.load(FIX / name / "output.npy"), rtol=1e-5, atol=1e-6)


def test_graphc_trained_model_round_trips_through_paddles_format(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 5])
        h = fluid.layers.batch_norm(fluid.layers.fc(x, 6, act="relu"))
        pred = fluid.layers.fc(h, 2, act="softmax")
        loss = fluid.layers.mean(pred)
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    exe = fluid.Executor()
    exe.run(startup)
    data = np.random.default_rng(0).standard_normal((3, 5)).astype("float32")
    exe.run(main, feed={"x": data}, fetch_list=[loss])
    test = main.clone(for_test=True)
    (want,) = exe.run(test, feed={"x": data}, fetch_list=[pred])
    fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [pred], exe, main_program=main)
    fluid.io.save_persistables(exe, str(tmp_path / "ckpt"), main_program=main)
    state = _scope_values(_persistable_names(main))
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), exe)
        (got,) = exe.run(program, feed={"x": data}, fetch_list=fetches)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        fluid.io.load_persistables(exe, str(tmp_path / "ckpt"), main_program=main)
        for n, v in state.items():  # optimizer moments and learning rate included
            np.testing.assert_array_equal(fluid.global_scope()[n], v)


def test_graphc_checkpoints_still_load_through_fluid_io(tmp_path):
    import graphc
    program = _program("mlp")
    exe = fluid.Executor()
    fluid.io.load_persistables(exe, str(FIX / "mlp" / "vars"), main_program=program)
    want = _scope_values(_persistable_names(program))
    graphc.io.save_persistables(exe, str(tmp_path), main_program=program)
    assert (tmp_path / "manifest.json").is_file()
    with fluid.scope_guard(fluid.Scope()):
        fluid.io.load_persistables(exe, str(tmp_path), main_program=program)
        got = _scope_values(want)
    assert all(np.array_equal(want[n], got[n]) for n in want)


# -- bad input stays typed; nothing loaded ----------------------------------------------------
def _loaded_nothing(program):
    assert not _scope_values(_persistable_names(program))


def test_truncated_and_corrupted_tensor_files(tmp_path):
    program = _program("mlp")
    exe = fluid.Executor()
    d = tmp_path / "vars"
    shutil.copytree(FIX / "mlp" / "vars", d)
    good = (d / "fc_1.w_0").read_bytes()
    (d / "fc_1.w_0").write_bytes(good[:-5])
    with pytest.raises(CheckpointError, match=r"fc_1\.w_0'.*truncated"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    _loaded_nothing(program)
    (d / "fc_1.w_0").write_bytes(b"\x07" + good[1:])
    with pytest.raises(CheckpointError, match=r"fc_1\.w_0.*version 7"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    (d / "fc_1.w_0").write_bytes(good + b"xx")
    with pytest.raises(CheckpointError, match=r"2 bytes after variable 'fc_1\.w_0'"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    (d / "fc_1.w_0").unlink()
    with pytest.raises(CheckpointError, match=r"no file '.*fc_1\.w_0'"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    _loaded_nothing(program)
    combined = tmp_path / "c"
    shutil.copytree(FIX / "mlp" / "combined", combined)
    data = (combined / "params").read_bytes()
    (combined / "params").write_bytes(data[:200])
    with pytest.raises(CheckpointError, match=r"params'.*(truncated|ends before)"):
        fluid.io.load_persistables(exe, str(combined), main_program=program, filename="params")
    (combined / "params").write_bytes(data + data[:36])
    with pytest.raises(CheckpointError, match=r"params' has 36 bytes after the 4 variables"):
        fluid.io.load_persistables(exe, str(combined), main_program=program, filename="params")
    _loaded_nothing(program)


def test_wrong_dtype_or_shape_against_the_program(tmp_path):
    program = _program("mlp")
    exe = fluid.Executor()
    d = tmp_path / "vars"
    shutil.copytree(FIX / "mlp" / "vars", d)
    (d / "fc_0.b_0").write_bytes(tensor_stream.encode(np.zeros(8, "float64")))
    with pytest.raises(CheckpointError, match=r"fc_0\.b_0'.*'fc_0\.b_0' is float64\[8\] but "
                                              r"the program declares float32\[8\]"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    (d / "fc_0.b_0").write_bytes(tensor_stream.encode(np.zeros(5, "float32")))
    with pytest.raises(CheckpointError, match=r"'fc_0\.b_0' has shape \[5\] but the program "
                                              r"declares \[8\]"):
        fluid.io.load_persistables(exe, str(d), main_program=program)
    _loaded_nothing(program)


def _with_op_type(data: bytes, old: str, new: str) -> bytes:
    desc = messages().ProgramDesc()
    desc.ParseFromString(data)
    for op in desc.blocks[0].ops:
        if op.type == old:
            op.type = new
    return desc.SerializeToString()


def test_bad_program_descs_are_program_errors_naming_the_file(tmp_path):
    d = tmp_path / "infer"
    shutil.copytree(FIX / "mlp" / "infer", d)
    exe = fluid.Executor()
    (d / "__model__").write_bytes(_with_op_type(_model("mlp"), "relu", "my_custom_relu"))
    with pytest.raises(ProgramError, match=r"__model__'.*\['my_custom_relu'\] have no graphc "
                                           "definition"):
        fluid.io.load_inference_model(str(d), exe, params_filename="__params__")
    (d / "__model__").write_bytes(_model("mlp")[:-7])
    with pytest.raises(ProgramError, match=r"__model__'.*truncated or corrupted"):
        fluid.io.load_inference_model(str(d), exe, params_filename="__params__")
    desc = messages().ProgramDesc()
    desc.ParseFromString(_model("mlp"))
    desc.blocks.add(idx=1, parent_idx=0)
    (d / "__model__").write_bytes(desc.SerializeToString())
    with pytest.raises(ProgramError, match=r"2 blocks \(control flow"):
        fluid.io.load_inference_model(str(d), exe, params_filename="__params__")
    assert not list(fluid.global_scope().keys())
    with pytest.raises(ProgramError, match="truncated or corrupted"):
        fluid.Program.parse_from_string(b"\x0a\xff\xff")


def test_writes_are_atomic(tmp_path, monkeypatch):
    program = _program("mlp")
    exe = fluid.Executor()
    fluid.io.load_persistables(exe, str(FIX / "mlp" / "vars"), main_program=program)
    fluid.io.save_persistables(exe, str(tmp_path), main_program=program, filename="params")
    good = (tmp_path / "params").read_bytes()
    from graphc.dataio.paddle_format import files

    def crash(path, data):
        def write(tmp):
            with open(tmp, "wb") as f:
                f.write(data[:10])
            raise OSError("disk full")
        from graphc.runtime import checkpoint
        try:
            checkpoint.atomic_write(path, write)
        except OSError as exc:
            raise CheckpointError(f"cannot write '{path}': {exc}") from None
    monkeypatch.setattr(files, "_write_verified", crash)
    with pytest.raises(CheckpointError, match="cannot write .*params.*disk full"):
        fluid.io.save_persistables(exe, str(tmp_path), main_program=program, filename="params")
    assert (tmp_path / "params").read_bytes() == good
    assert os.listdir(tmp_path) == ["params"]
    with fluid.scope_guard(fluid.Scope()), pytest.raises(CheckpointError,
                                                          match="has no value in the scope"):
        fluid.io.save_params(exe, str(tmp_path / "b"), main_program=program)
    assert not (tmp_path / "b").exists()


def test_tensor_stream_keeps_lod_and_every_element_type():
    import ml_dtypes
    for dtype in ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32",
                  "float64", ml_dtypes.bfloat16, "complex64"):
        array = np.arange(6).reshape(3, 2).astype(dtype)
        data = tensor_stream.encode(array, [[0, 1, 3]])
        back, lod, end = tensor_stream.decode(data)
        assert (back.dtype, back.shape, lod, end) == (array.dtype, (3, 2), [[0, 1, 3]], len(data))
        np.testing.assert_array_equal(back.astype("float64"), array.astype("float64"))
    with pytest.raises(tensor_stream.TensorStreamError, match="uint16 has no Paddle"):
        tensor_stream.encode(np.zeros(2, "uint16"))


def test_load_program_state_reads_graphc_io_save_and_refuses_pickle(tmp_path):
    import graphc
    program = _program("mlp")
    exe = fluid.Executor()
    fluid.io.load_persistables(exe, str(FIX / "mlp" / "vars"), main_program=program)
    want = _scope_values(_persistable_names(program))
    graphc.io.save(program, str(tmp_path / "model"))
    state = fluid.io.load_program_state(str(tmp_path / "model"))
    assert sorted(state) == sorted(want)
    assert all(np.array_equal(state[n], want[n]) for n in want)
    (tmp_path / "p.pdparams").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(CheckpointError, match="pickle file .*does not unpickle"):
        fluid.io.load_program_state(str(tmp_path / "p"))
    with pytest.raises(CheckpointError, match="nothing at"):
        fluid.io.load_program_state(str(tmp_path / "none"))


def test_paddles_while_loop_model_loads_as_a_loop_region():
    """A Paddle-saved inference model whose while op holds a sub-block (an fc cell and a
    tensor array written in the loop) runs as graphc's while op with Paddle's outputs."""
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fluid.io.load_inference_model(
        str(FIX / "loopnet" / "infer"), exe, params_filename="__params__")
    assert [op.type for op in program.global_block().ops].count("while") == 1
    x = np.load(FIX / "loopnet" / "input.npy")
    (out,) = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)
    np.testing.assert_allclose(out, np.load(FIX / "loopnet" / "output.npy"), rtol=1e-5,
                               atol=1e-6)
    desc = messages().ProgramDesc()
    desc.ParseFromString(_model("loopnet"))
    for op in desc.blocks[0].ops:
        if op.type == "while":
            op.type = "conditional_block"
    with pytest.raises(ProgramError, match="conditional_block of block 1 does not build"):
        fluid.Program.parse_from_string(desc.SerializeToString())


def test_graphc_writes_a_while_loop_as_paddles_block_structure(tmp_path):
    """save_inference_model of a While program (fc cell, tensor array) writes Paddle's
    structure: a while op holding a sub-block whose ops write the carried variables in place;
    it loads back with the same outputs. (Paddle 3.3.1's legacy executor runs the same file
    with the same outputs: checked by hand with make_fixtures.py --check.)"""
    x = fluid.data("x", [-1, 4], "float32")
    h = fluid.layers.fc(x, 8, act="tanh")
    i = fluid.layers.fill_constant([1], "int64", 0)
    n = fluid.layers.fill_constant([1], "int64", 3)
    arr = fluid.layers.create_array("float32")
    cond = fluid.layers.less_than(i, n)
    loop = fluid.layers.While(cond)
    with loop.block():
        fluid.layers.assign(fluid.layers.fc(h, 8, act="tanh"), h)
        fluid.layers.array_write(h, i, array=arr)
        fluid.layers.increment(i)
        fluid.layers.less_than(i, n, cond=cond)
    second = fluid.layers.array_read(arr, fluid.layers.fill_constant([1], "int64", 1))
    y = fluid.layers.softmax(fluid.layers.fc(fluid.layers.elementwise_add(h, second), 3))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, params_filename="__params__")
    xv = np.random.default_rng(0).standard_normal((2, 4)).astype("float32")
    (want,) = exe.run(feed={"x": xv}, fetch_list=[y])
    desc = messages().ProgramDesc()
    desc.ParseFromString((tmp_path / "__model__").read_bytes())
    assert len(desc.blocks) == 2 and desc.blocks[1].parent_idx == 0
    (w,) = [op for op in desc.blocks[0].ops if op.type == "while"]
    slots = {s.parameter: list(s.arguments) for s in w.inputs}
    outs = {s.parameter: list(s.arguments) for s in w.outputs}
    assert set(outs["Out"]) <= set(slots["X"]) and slots["Condition"][0] in outs["Out"]
    assert [a.block_idx for a in w.attrs if a.name == "sub_block"] == [1]
    body_types = [op.type for op in desc.blocks[1].ops]
    assert "write_to_array" in body_types and "less_than" in body_types
    with fluid.scope_guard(fluid.Scope()):
        exe2 = fluid.Executor(fluid.CPUPlace())
        program, feeds, fetches = fluid.io.load_inference_model(
            str(tmp_path), exe2, params_filename="__params__")
        (got,) = exe2.run(program, feed={feeds[0]: xv}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)
