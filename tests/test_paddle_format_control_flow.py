"""Paddle's conditional_block/select_input and recurrent sub-blocks: Paddle-written models run
in graphc with Paddle's outputs; graphc writes cond/case/switch_case/Switch/StaticRNN back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.dataio.paddle_format.schema import messages
from graphc.ir.errors import ProgramError

pytestmark = pytest.mark.timeout(300)
FIX = Path(__file__).resolve().parent / "fixtures" / "paddle_format"
PADDLE = Path("/work/paddle-venv/bin/python")  # PaddlePaddle 3.3.1 (make_fixtures.py)
L = fluid.layers


@pytest.fixture(autouse=True)
def fresh_scope():
    with fluid.scope_guard(fluid.Scope()):
        yield


def _desc(data: bytes):
    desc = messages().ProgramDesc()
    desc.ParseFromString(data)
    return desc


def _slots(vars_):
    return {v.parameter: list(v.arguments) for v in vars_}


def _load(path):
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fluid.io.load_inference_model(str(path), exe,
                                                            params_filename="__params__")
    return exe, program, feeds, fetches


def _run_both(exe, program, feed, fetches):
    """The jitted step's output, checked equal to the interpreter's."""
    (jitted,) = exe.run(program, feed=feed, fetch_list=fetches)
    scope = fluid.global_scope()
    state = {v.name: scope[v.name] for v in program.list_vars()
             if v.persistable and v.name in scope}
    _, (interp,) = run_graph(graphc.lower(program), state, feed, [f.name for f in fetches])
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(interp), rtol=1e-6, atol=1e-6)
    return np.asarray(jitted)


# -- Paddle-written -> graphc -----------------------------------------------------------------
def test_paddles_cond_case_switch_case_model_runs_with_paddles_outputs():
    """Paddle 3.3.1's cond, switch_case and case (conditional_block pairs merged by
    select_input, nested for the multi-way ones) and a ConditionalBlock writing an outer
    variable in place, on inputs that take every branch."""
    exe, program, feeds, fetches = _load(FIX / "condnet" / "infer")
    types = [op.type for op in program.global_block().ops]
    assert types.count("cond") == 4 and "conditional_block" not in types
    xs, want = np.load(FIX / "condnet" / "inputs.npy"), np.load(FIX / "condnet" / "outputs.npy")
    s = [op for op in program.global_block().ops if op.type == "reduce_mean"][0].output("Out")
    means = [float(exe.run(program, feed={feeds[0]: x}, fetch_list=s)[0].ravel()[0])
             for x in xs]
    assert min(means) < 0 < max(means) and any(0 < m < 0.5 for m in means)  # every branch
    for x, y in zip(xs, want):
        np.testing.assert_allclose(_run_both(exe, program, {feeds[0]: x}, fetches), y,
                                   rtol=1e-5, atol=1e-6)


def test_paddle_18_static_rnn_model_runs_as_a_recurrent_region():
    """A recurrent op in Paddle 1.8's layout (step-input slices named like their sequences,
    ex_states/states, rnn_memory_helper copies) becomes graphc's recurrent op."""
    exe, program, feeds, fetches = _load(FIX / "rnnnet" / "infer")
    assert [op.type for op in program.global_block().ops].count("recurrent") == 1
    x = np.load(FIX / "rnnnet" / "input.npy")
    np.testing.assert_allclose(_run_both(exe, program, {feeds[0]: x}, fetches),
                               np.load(FIX / "rnnnet" / "output.npy"), rtol=1e-5, atol=1e-6)


def test_paddle_control_flow_graphc_cannot_map_is_refused_by_name():
    data = (FIX / "condnet" / "infer" / "__model__").read_bytes()
    desc = _desc(data)
    for op in desc.blocks[0].ops:  # the first cond's false block no longer under not(pred)
        if op.type == "logical_not":
            op.type = "assign"
            break
    with pytest.raises(ProgramError, match="select_input.*conditions are not"):
        fluid.Program.parse_from_string(desc.SerializeToString())
    desc = _desc((FIX / "rnnnet" / "infer" / "__model__").read_bytes())
    (rec,) = [op for op in desc.blocks[0].ops if op.type == "recurrent"]
    next(a for a in rec.attrs if a.name == "reverse").b = True
    with pytest.raises(ProgramError, match="recurrent op of block 1 has reverse=True"):
        fluid.Program.parse_from_string(desc.SerializeToString())


# -- graphc -> Paddle's format ----------------------------------------------------------------
def _paddle_check(tmp_path, xs):
    """Paddle 3.3.1's outputs of the model graphc saved in tmp_path, on each of ``xs``."""
    np.save(tmp_path / "input.npy", xs[0])
    np.save(tmp_path / "inputs.npy", xs)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX", "XLA"))}
    done = subprocess.run([str(PADDLE), str(FIX / "make_fixtures.py"), "--check",
                           str(tmp_path)], capture_output=True, text=True, timeout=240,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(tmp_path / "paddle_outs.npy")


def _shifted():
    base = np.random.default_rng(0).standard_normal((2, 4)).astype("float32")
    return np.stack([base + c for c in np.linspace(-3, 3, 9, dtype="float32")])


def test_graphc_writes_conditionals_as_paddles_blocks_and_paddle_runs_them(tmp_path):
    """cond, switch_case, case, Switch, ConditionalBlock (a carried variable) and a cond in a
    While body saved by graphc: conditional_block sub-blocks and select_input; graphc reads
    the file back with the same outputs, and Paddle 3.3.1 (where installed) runs it with the
    same outputs."""
    x = fluid.data("x", [-1, 4], "float32")
    h = L.fc(x, 3)
    s = L.reshape(L.reduce_mean(h, dim=[0, 1], keep_dim=True), [1])
    pred = L.less_than(s, L.fill_constant([1], "float32", 0.0))
    pred2 = L.less_than(s, L.fill_constant([1], "float32", 0.5))
    y1 = L.cond(pred, lambda: L.scale(L.tanh(h), 2.0), lambda: L.relu(h))
    idx = L.elementwise_add(L.cast(pred, "int32"), L.cast(pred2, "int32"))
    y2 = L.switch_case(idx, {0: lambda: L.scale(h, 1.0, bias=1.0), 1: lambda: L.scale(h, 3.0)},
                       default=lambda: L.sigmoid(h))
    y3 = L.case([(pred, lambda: L.tanh(h)), (pred2, lambda: L.scale(h, -1.0))],
                default=lambda: L.relu(h))
    gain = L.fill_constant([1], "float32", 0.0)
    with L.Switch() as switch:
        with switch.case(pred):
            L.assign(L.scale(s, -2.0), gain)
        with switch.case(pred2):
            L.assign(L.scale(s, 3.0, bias=1.0), gain)
        with switch.default():
            L.assign(L.fill_constant([1], "float32", 0.5), gain)
    block = L.ConditionalBlock([L.less_than(gain, L.fill_constant([1], "float32", 1.5))],
                               is_scalar_condition=True)
    with block.block():
        L.assign(L.scale(gain, 2.0), gain)
    carried = L.assign(h)  # a cond inside a while body
    i, n = L.fill_constant([1], "int64", 0), L.fill_constant([1], "int64", 3)
    more = L.less_than(i, n)
    loop = L.While(more)
    with loop.block():
        odd = L.equal(L.elementwise_mod(i, L.fill_constant([1], "int64", 2)),
                      L.fill_constant([1], "int64", 1))
        L.assign(L.cond(odd, lambda: L.scale(carried, 0.5),
                        lambda: L.tanh(L.scale(carried, 2.0))), carried)
        L.increment(i)
        L.less_than(i, n, cond=more)
    total = L.elementwise_add(L.elementwise_add(L.elementwise_add(y1, y2), y3), carried)
    y = L.softmax(L.elementwise_mul(total, gain))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, params_filename="__params__")
    xs = _shifted()
    want = np.stack([exe.run(feed={"x": v}, fetch_list=[y])[0] for v in xs])
    desc = _desc((tmp_path / "__model__").read_bytes())
    top = [op.type for op in desc.blocks[0].ops]
    assert top.count("conditional_block") == 2 + 3 + 3 + 3 + 2 and "cond" not in top
    assert top.count("select_input") == 5 and "switch_case" not in top
    (loop_op,) = [op for op in desc.blocks[0].ops if op.type == "while"]
    body = desc.blocks[next(a.block_idx for a in loop_op.attrs if a.name == "sub_block")]
    assert [op.type for op in body.ops].count("conditional_block") == 2
    for op in desc.blocks[0].ops:
        if op.type == "conditional_block":
            sub = next(a.block_idx for a in op.attrs if a.name == "sub_block")
            assert desc.blocks[sub].parent_idx == 0 and desc.blocks[sub].ops
            outs = _slots(op.outputs)
            assert len(outs["Scope"]) == 1 and outs["Out"]
    with fluid.scope_guard(fluid.Scope()):
        exe2, program, feeds, fetches = _load(tmp_path)
        assert "cond" in [op.type for op in program.global_block().ops]
        for v, w in zip(xs, want):
            np.testing.assert_allclose(_run_both(exe2, program, {feeds[0]: v}, fetches), w,
                                       rtol=1e-6, atol=1e-7)
    if PADDLE.exists():
        np.testing.assert_allclose(_paddle_check(tmp_path, xs), want, rtol=1e-5, atol=1e-6)


def test_graphc_writes_static_rnn_in_paddle_18_layout(tmp_path):
    """StaticRNN saved by graphc: Paddle 1.8's recurrent op (Paddle 3.3.1 has none to run
    it), with its slots, ex_states/states and rnn_memory_helper copies; it reads back (by the
    same reader as the Paddle-written fixture) with the same outputs."""
    x = fluid.data("x", [3, -1, 4], "float32")
    rnn = L.StaticRNN()
    with rnn.step():
        w = rnn.step_input(x)
        prev = rnn.memory(shape=[-1, 5], batch_ref=w)
        hid = L.fc([w, prev], 5, act="tanh")
        rnn.update_memory(prev, hid)
        rnn.step_output(hid)
        rnn.step_output(w)
    out, word = rnn()
    y = L.softmax(L.elementwise_add(out, L.reduce_sum(word, dim=-1, keep_dim=True)))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, params_filename="__params__")
    xv = np.random.default_rng(1).standard_normal((3, 2, 4)).astype("float32")
    (want,) = exe.run(feed={"x": xv}, fetch_list=[y])
    desc = _desc((tmp_path / "__model__").read_bytes())
    (rec,) = [op for op in desc.blocks[0].ops if op.type == "recurrent"]
    ins, outs = _slots(rec.inputs), _slots(rec.outputs)
    attrs = {a.name: a for a in rec.attrs}
    assert ins["inputs"] == ["x"] and len(ins["initial_states"]) == 1
    assert len(ins["parameters"]) == 3 and len(outs["outputs"]) == 2
    assert attrs["has_states"].b and not attrs["reverse"].b
    sub = desc.blocks[attrs["sub_block"].block_idx]
    names = {v.name: v for v in sub.vars}
    assert "x" in names and list(names["x"].type.lod_tensor.tensor.dims) == [-1, 4]
    assert list(attrs["ex_states"].strings)[0] in names
    helpers = [op for op in sub.ops if op.type == "rnn_memory_helper"]
    assert [_slots(h.outputs)["Out"][0] for h in helpers] == \
        list(attrs["states"].strings) + outs["outputs"]
    assert _slots(helpers[-1].inputs)["X"] == ["x"]  # the step input's slice, output as is
    with fluid.scope_guard(fluid.Scope()):
        exe2, program, feeds, fetches = _load(tmp_path)
        got = _run_both(exe2, program, {feeds[0]: xv}, fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    if PADDLE.exists():  # Paddle's own ProgramDesc parser reads the layout back
        script = ("import os, sys, json; os.environ['FLAGS_enable_pir_api'] = '0'\n"
                  "from paddle.base import core\n"
                  "d = core.ProgramDesc(open(sys.argv[1], 'rb').read())\n"
                  "b = d.block(0); ops = [b.op(j) for j in range(b.op_size())]\n"
                  "r = [o for o in ops if o.type() == 'recurrent'][0]\n"
                  "s = d.block(1); print(json.dumps([r.attr('ex_states'), r.attr('states'), "
                  "r.inputs(), r.outputs(), [s.op(j).type() for j in range(s.op_size())]]))")
        done = subprocess.run([str(PADDLE), "-c", script, str(tmp_path / "__model__")],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        ex, st, pins, pouts, body = json.loads(done.stdout.strip().splitlines()[-1])
        assert ex == list(attrs["ex_states"].strings) and st == list(attrs["states"].strings)
        assert pins == ins and pouts["outputs"] == outs["outputs"]
        assert body.count("rnn_memory_helper") == 3


@pytest.mark.parametrize("name", ["condnet", "rnnnet"])
def test_paddles_models_resaved_by_graphc_keep_paddles_outputs(tmp_path, name):
    """Paddle's file -> graphc's region ops -> graphc's file: graphc reads it back with
    Paddle's outputs, and Paddle 3.3.1 runs the re-saved condnet with its own outputs."""
    exe, program, feeds, fetches = _load(FIX / name / "infer")
    fluid.io.save_inference_model(str(tmp_path), feeds, fetches, exe, main_program=program,
                                  params_filename="__params__")
    many = FIX / name / "inputs.npy"
    xs = np.load(many) if many.exists() else np.load(FIX / name / "input.npy")[None]
    want = np.load(FIX / name / "outputs.npy") if many.exists() else \
        np.load(FIX / name / "output.npy")[None]
    with fluid.scope_guard(fluid.Scope()):
        exe2, again, feeds2, fetches2 = _load(tmp_path)
        for x, y in zip(xs, want):
            (got,) = exe2.run(again, feed={feeds2[0]: x}, fetch_list=fetches2)
            np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-6)
    if PADDLE.exists() and name == "condnet":
        np.testing.assert_allclose(_paddle_check(tmp_path, xs), want, rtol=1e-5, atol=1e-6)


# -- ifelse26: IfElse in Paddle 1.8's layout (split_lod_tensor, conditional_blocks, merge)
def test_graphc_writes_ifelse_in_paddle_18_layout_and_reads_it_back(tmp_path):
    """IfElse saved by graphc as Paddle 1.8's IfElse writes it (Paddle 3.3.1 has no
    split_lod_tensor to run it): split_lod_tensor of the rows, a conditional_block per side
    (is_scalar_condition False) assigning its results, merge_lod_tensor with x = cond; graphc
    reads it back (the blocks inline, on the sides' LoD values) with the same outputs."""
    x = fluid.data("x", [-1, 2], "float32")
    c = L.less_than(L.reduce_sum(x, dim=1, keep_dim=True), L.fill_constant([1], "float32", 0))
    ie = L.IfElse(c)
    with ie.true_block():
        ie.output(L.fc(L.scale(ie.input(x), 2.0), 3, act="tanh"))
    with ie.false_block():
        ie.output(L.fc(L.relu(ie.input(x)), 3))
    (y,) = ie()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    xs = np.random.default_rng(4).standard_normal((6, 2)).astype("float32")
    (want,) = exe.run(fluid.default_main_program(), feed={"x": xs}, fetch_list=[y])
    fluid.io.save_inference_model(str(tmp_path), ["x"], [y], exe, params_filename="__params__")
    desc = _desc((tmp_path / "__model__").read_bytes())
    ops = [o for o in desc.blocks[0].ops if o.type not in ("feed", "fetch")]
    types = [o.type for o in ops]
    assert types.count("split_lod_tensor") == 1 and types.count("merge_lod_tensor") == 1
    blocks = [o for o in ops if o.type == "conditional_block"]
    assert len(blocks) == 2 and len(desc.blocks) == 3
    for o in blocks:
        scalar = [a.b for a in o.attrs if a.name == "is_scalar_condition"]
        assert scalar == [False] and _slots(o.inputs)["Cond"] == [c.name]
    split = ops[types.index("split_lod_tensor")]
    merge = ops[types.index("merge_lod_tensor")]
    assert _slots(split.inputs) == {"X": ["x"], "Mask": [c.name]}
    assert _slots(merge.inputs)["X"] == [c.name] and _slots(merge.outputs)["Out"] == [y.name]
    with fluid.scope_guard(fluid.Scope()):
        exe2, again, feeds2, fetches2 = _load(tmp_path)
        assert "ifelse" not in {op.type for op in again.global_block().ops}
        got = _run_both(exe2, again, {feeds2[0]: xs}, fetches2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # as Paddle 1.8 declares them: the sides and their values without a LoD level
    for b in desc.blocks:
        for v in b.vars:
            if v.type.HasField("lod_tensor"):
                v.type.lod_tensor.lod_level = 0
    (tmp_path / "__model__").write_bytes(desc.SerializeToString())
    with fluid.scope_guard(fluid.Scope()):
        exe3, paddles, feeds3, fetches3 = _load(tmp_path)
        got = _run_both(exe3, paddles, {feeds3[0]: xs}, fetches3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
# -- end ifelse26


# -- book: Paddle's book tests save a DynamicRNN model, then load it back in graphc
def test_a_dynamic_rnn_program_saves_graphcs_own_format_and_says_so(tmp_path):
    words = fluid.data("w", [-1, 1], "int64", lod_level=1)
    emb = L.embedding(words, size=[20, 4])
    drnn = L.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(emb)
        mem = drnn.memory(shape=[3], value=0.0)
        hidden = L.fc([word, mem], 3, act="tanh")
        drnn.update_memory(mem, hidden)
        drnn.output(hidden)
    y = L.sequence_last_step(drnn())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    ids = fluid.create_lod_tensor(np.array([[1], [4], [7], [2], [3]], "int64"), [[2, 3]],
                                  fluid.CPUPlace())
    (want,) = exe.run(feed={"w": ids}, fetch_list=[y])
    with pytest.warns(UserWarning, match="'dynamic_rnn' has no form in Paddle's format.*"
                                         "graphc's own inference format instead"):
        fluid.io.save_inference_model(str(tmp_path), ["w"], [y], exe)
    assert (tmp_path / "__model__.json").is_file()
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetch = fluid.io.load_inference_model(str(tmp_path), exe)
        (got,) = exe.run(program, feed={feeds[0]: ids}, fetch_list=fetch)
    np.testing.assert_allclose(got, want, rtol=1e-6)
# -- end book

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
