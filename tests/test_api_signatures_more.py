"""Issue 24, API signatures: optimizers take Paddle 1.8's positional order (lazy_mode and
initial_accumulator_value honoured), the coverage tool's 1.8 table, and the other entries."""

from __future__ import annotations

import inspect
import struct

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.fluid._missing import MissingAPIError
from graphc.ir.errors import GraphcError, ProgramError
from graphc.tools import api_coverage as cov


# -- optimizers: Paddle 1.8's positional order, each argument honoured ----------------------
@pytest.mark.parametrize("entry", sorted(cov.PADDLE_18_SIGNATURES))
def test_graphc_takes_exactly_paddle_18s_arguments(entry):
    args, why = cov.PADDLE_18_SIGNATURES[entry]
    assert why
    obj = cov._resolve("graphc" + entry[len("paddle"):])
    assert cov.compare_exact(args, obj) == ""
    assert cov.classify(cov.Entry(entry, ("learning_rate", "regularization", "name"), 3)
                        ).status == "same"


def test_the_18_table_still_catches_a_wrong_signature():
    def paddle16(learning_rate, regularization=None, name=None):
        pass

    def extra_required(learning_rate, parameter_list=None, regularization=None,
                       grad_clip=None, name=None, *, must):
        pass

    args = cov.PADDLE_18_SIGNATURES["paddle.fluid.optimizer.SGD.__init__"][0]
    assert "Paddle 1.8's" in cov.compare_exact(args, paddle16)
    assert "requires ['must']" in cov.compare_exact(args, extra_required)


def _embedding_program(make_opt):
    """loss = sum(emb[ids] * c) over an is_sparse table of 6 rows: d loss / d row = sum c."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, 1], "int64")
        c = layers.data("c", [-1, 3], "float32")
        emb = layers.embedding(ids, [6, 3], is_sparse=True,
                               param_attr=fluid.ParamAttr(name="table"))
        loss = layers.reduce_sum(layers.elementwise_mul(emb, c))
        make_opt().minimize(loss)
    return main, startup


def _train_table(make_opt, feeds):
    main, startup = _embedding_program(make_opt)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    table0 = np.array(scope["table"])
    for feed in feeds:
        exe.run(main, feed=feed, scope=scope)
    return table0, np.array(scope["table"])


def test_adam_lazy_mode_by_position_moves_only_the_looked_up_rows():
    ones = np.ones((2, 3), "float32")
    feeds = [{"ids": np.array([[0], [1]], "int64"), "c": ones},
             {"ids": np.array([[2], [2]], "int64"), "c": ones}]
    # 1.8's order: learning_rate, beta1, beta2, epsilon, parameter_list, regularization,
    # grad_clip, name, lazy_mode
    lazy0, lazy = _train_table(
        lambda: fluid.optimizer.Adam(0.1, 0.9, 0.999, 1e-8, None, None, None, None, True),
        feeds)
    dense0, dense = _train_table(lambda: fluid.optimizer.Adam(0.1), feeds)
    np.testing.assert_array_equal(lazy0, dense0)
    # step 2 looks up row 2 only: lazily, rows 0 and 1 keep their step-1 values, while the
    # dense update moves them again with their non-zero first moment
    step1 = 0.1 * 1.0 / (1.0 + 1e-8 * np.sqrt(1 - 0.999))  # Adam's first step is +-lr
    np.testing.assert_allclose(lazy[:2], lazy0[:2] - step1 * 1.0, rtol=1e-5)
    assert np.all(np.abs(dense[:2] - (dense0[:2] - step1)) > 1e-3)
    np.testing.assert_array_equal(lazy[3:], lazy0[3:])
    np.testing.assert_allclose(lazy[2], dense[2], rtol=1e-6)


def test_adagrad_initial_accumulator_value_by_position():
    feed = {"ids": np.array([[4]], "int64"), "c": np.array([[1.0, 2.0, -3.0]], "float32")}
    init, lr, eps = 0.5, 0.1, 1e-6
    t0, t1 = _train_table(
        lambda: fluid.optimizer.Adagrad(lr, eps, None, None, None, None, init), [feed])
    g = feed["c"][0].astype(np.float64)
    np.testing.assert_allclose(t1[4], t0[4] - lr * g / (np.sqrt(init + g * g) + eps),
                               rtol=1e-5)
    np.testing.assert_array_equal(np.delete(t1, 4, 0), np.delete(t0, 4, 0))


# -- stoppers24: Paddle 1.6's positional calls are served too ------------------------------
_ROWS = [{"ids": np.array([[0], [1], [1]], "int64"),
          "c": np.array([[1.0, -2.0, 0.5]] * 3, "float32")}] * 2
_L2 = fluid.regularizer.L2Decay(0.5)
_O = fluid.optimizer


@pytest.mark.parametrize("positional16, keywords", [
    (lambda: _O.SGD(0.1, _L2), lambda: _O.SGD(0.1, regularization=_L2)),
    (lambda: _O.SGD(0.1, _L2, "sgd"), lambda: _O.SGD(0.1, regularization=_L2, name="sgd")),
    (lambda: _O.Momentum(0.1, 0.9, True, _L2),
     lambda: _O.Momentum(0.1, 0.9, use_nesterov=True, regularization=_L2)),
    (lambda: _O.Adam(0.1, 0.9, 0.999, 1e-8, _L2, None, True),
     lambda: _O.Adam(0.1, regularization=_L2, lazy_mode=True)),
    (lambda: _O.Adagrad(0.1, 1e-6, None, "a", 0.5),
     lambda: _O.Adagrad(0.1, name="a", initial_accumulator_value=0.5)),
    (lambda: _O.RMSProp(0.1, 0.9, 1e-6, 0.5, True, _L2),
     lambda: _O.RMSProp(0.1, 0.9, 1e-6, 0.5, True, regularization=_L2)),
    (lambda: _O.Lamb(0.1, 0.01, 0.9, 0.999, 1e-6, _L2, lambda p: True),
     lambda: _O.Lamb(0.1, regularization=_L2, exclude_from_weight_decay_fn=lambda p: True)),
], ids=["sgd", "sgd-name", "momentum", "adam-lazy", "adagrad", "rmsprop", "lamb"])
def test_a_16_positional_call_trains_as_its_keyword_call(positional16, keywords):
    """1.8 put parameter_list where 1.6 had regularization (Momentum: use_nesterov): a value
    there that is no list can only be 1.6's, so graphc passes the 1.6 names."""
    want = _train_table(keywords, _ROWS)[1]
    got = _train_table(positional16, _ROWS)[1]
    np.testing.assert_array_equal(got, want)
    assert not np.allclose(got, _train_table(lambda: _O.SGD(0.1), _ROWS)[1])


def test_a_16_positional_call_refuses_what_it_cannot_mean():
    with pytest.raises(ProgramError, match="got regularization twice"):
        _O.SGD(0.1, _L2, regularization=_L2)
    with pytest.raises(ProgramError, match="too many positional"):
        _O.SGD(0.1, _L2, "n", 3)
    with pytest.raises(ProgramError, match="local_grad_clip_norm is gone.*GradientClipByNorm"):
        _O.DGCMomentumOptimizer(0.1, 0.9, 0, 1, [0.999], False, 1.0)
    with pytest.raises(ProgramError, match="parameter_list must be a list"):
        _O.SGD(0.1, parameter_list=_L2)  # by keyword it is no 1.6 call
    # 1.8's own positional parameter_list still works, and the signature is 1.8's
    assert list(inspect.signature(_O.Momentum).parameters)[:3] == [
        "learning_rate", "momentum", "parameter_list"]


# -- Program ----------------------------------------------------------------------------------
def _mlp():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 5
        x = layers.data("x", [-1, 4], "float32")
        h = layers.fc(x, 3, act="tanh")
        loss = layers.mean(h)
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def _run(main, startup, loss, steps=2):
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    return [exe.run(main, feed={"x": x}, fetch_list=[loss.name], scope=scope)[0]
            for _ in range(steps)]


def test_program_block_takes_index():
    main, _, _ = _mlp()
    assert main.block(index=0) is main.global_block()


def test_to_string_parse_from_string_round_trip_runs_the_same():
    main, startup, loss = _mlp()
    text = main.to_string(True)
    again = fluid.Program.parse_from_string(text.encode())
    assert again.to_string(False) == text
    np.testing.assert_array_equal(_run(main, startup, loss), _run(again, startup, loss))
    detailed = main.to_string(True, with_details=True)
    assert detailed.startswith(text.rstrip("\n")) and "persistable=True" in detailed


def test_parse_from_string_refuses_what_is_not_graphcs_text():
    with pytest.raises(GraphcError, match="neither"):
        fluid.Program.parse_from_string(b"\x8f\xff\x01\x10")
    with pytest.raises(GraphcError, match="not graphc's text IR"):
        fluid.Program.parse_from_string("blocks { idx: 0 }")
    with pytest.raises(GraphcError):
        graphc.Program().to_string("yes")


# a minimal protobuf writer for framework.proto's ProgramDesc, as Paddle serializes one
def _varint(v):
    v += 1 << 64 if v < 0 else 0
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _vi(n, v):
    return _varint(n << 3) + _varint(v)


def _ld(n, payload):
    return _varint(n << 3 | 2) + _varint(len(payload)) + payload


def _s(n, text):
    return _ld(n, text.encode())


def _var_desc(name, kind, dtype=None, dims=(), persistable=False):
    vtype = _vi(1, kind)
    if dtype is not None:
        tensor = _vi(1, dtype) + b"".join(_vi(2, d) for d in dims)
        vtype += _ld(3, _ld(1, tensor) + _vi(2, 0))
    return _ld(3, _s(1, name) + _ld(2, vtype) + _vi(3, int(persistable)))


def _attr(name, value):
    if isinstance(value, bool):
        body = _vi(2, 6) + _vi(10, int(value))
    elif isinstance(value, int):
        body = _vi(2, 0) + _vi(3, value)
    elif isinstance(value, float):
        body = _vi(2, 1) + _varint(4 << 3 | 5) + struct.pack("<f", value)
    elif isinstance(value, str):
        body = _vi(2, 2) + _s(5, value)
    else:  # a list of strings (op_callstack, op_role_var)
        body = _vi(2, 5) + b"".join(_s(8, v) for v in value)
    return _ld(4, _s(1, name) + body)


def _op_desc(op_type, ins, outs, attrs):
    slots = b"".join(_ld(1, _s(1, k) + b"".join(_s(2, n) for n in v)) for k, v in ins.items())
    slots += b"".join(_ld(2, _s(1, k) + b"".join(_s(2, n) for n in v)) for k, v in outs.items())
    paddle_extra = {"op_role": 0, "op_role_var": [], "op_namescope": "/",
                    "op_callstack": ["File x.py"], "use_mkldnn": False}
    body = slots + _s(3, op_type) + b"".join(_attr(k, v) for k, v in
                                              {**attrs, **paddle_extra}.items())
    return _ld(4, body)


def _paddle_program_desc():
    fp32, lod_tensor = 5, 7
    block = _vi(1, 0) + _vi(2, -1)
    block += _var_desc("feed", 9) + _var_desc("fetch", 10)
    block += _var_desc("x", lod_tensor, fp32, (-1, 4))
    block += _var_desc("w", lod_tensor, fp32, (4, 3), persistable=True)
    block += _var_desc("b", lod_tensor, fp32, (3,), persistable=True)
    for name in ("t0", "t1", "t2", "y"):
        block += _var_desc(name, lod_tensor, fp32, (-1, 3))
    block += _op_desc("feed", {"X": ["feed"]}, {"Out": ["x"]}, {"col": 0})
    block += _op_desc("mul", {"X": ["x"], "Y": ["w"]}, {"Out": ["t0"]},
                      {"x_num_col_dims": 1, "y_num_col_dims": 1})
    block += _op_desc("elementwise_add", {"X": ["t0"], "Y": ["b"]}, {"Out": ["t1"]},
                      {"axis": -1})
    block += _op_desc("relu", {"X": ["t1"]}, {"Out": ["t2"]}, {})
    block += _op_desc("scale", {"X": ["t2"]}, {"Out": ["y"]},
                      {"scale": 2.0, "bias": 0.5, "bias_after_scale": True})
    block += _op_desc("fetch", {"X": ["y"]}, {"Out": ["fetch"]}, {"col": 0})
    return _ld(1, block) + _ld(4, _vi(1, 0))


def test_parse_from_string_reads_paddles_binary_program_desc():
    program = fluid.Program.parse_from_string(_paddle_program_desc())
    block = program.global_block()
    assert [op.type for op in block.ops] == ["mul", "elementwise_add", "relu", "scale"]
    assert block.var("x").is_data and block.var("w").persistable
    assert not block.has_var("feed")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 4)).astype("float32")
    w = rng.normal(size=(4, 3)).astype("float32")
    b = rng.normal(size=3).astype("float32")
    scope = graphc.Scope()
    scope["w"], scope["b"] = w, b
    (y,) = graphc.Executor().run(program, feed={"x": x}, fetch_list=["y"], scope=scope)
    np.testing.assert_allclose(y, 2.0 * np.maximum(x @ w + b, 0) + 0.5, rtol=1e-5)
    with pytest.raises(GraphcError, match="truncated|past the end"):
        fluid.Program.parse_from_string(_paddle_program_desc()[:-9])


def test_global_seed_sets_this_and_later_programs():
    prog = graphc.Program()
    try:
        prog.global_seed(102)
        assert prog.random_seed == 102 and graphc.Program().random_seed == 102
    finally:
        prog.global_seed(0)
    assert graphc.Program().random_seed == 0
    with pytest.raises(ProgramError):
        prog.global_seed(1.5)


# -- Executor.run and CompiledProgram.with_data_parallel -----------------------------------------
def _dp_program():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 3
        x = layers.data("x", [-1, 4], "float32")
        out = layers.fc(x, 2)
        loss = layers.mean(out)
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, out, loss


def test_return_merged_false_stacks_per_device():
    main, startup, out, loss = _dp_program()
    x = np.random.default_rng(1).normal(size=(8, 4)).astype("float32")
    results = {}
    for merged in (True, False):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        # 1.8's order: loss_name, build_strategy, exec_strategy, share_vars_from, places
        cp = graphc.CompiledProgram(main).with_data_parallel(loss.name, None, None, None,
                                                             graphc.cpu_places(4))
        results[merged] = exe.run(cp, feed={"x": x}, fetch_list=[out, loss], scope=scope,
                                  return_merged=merged)
    (out_m, loss_m), (out_u, loss_u) = results[True], results[False]
    assert out_m.shape == (8, 2) and out_u.shape == (4, 2, 2)
    np.testing.assert_array_equal(out_u.reshape(8, 2), out_m)
    assert loss_u.shape == (4, 1)
    np.testing.assert_array_equal(loss_u.reshape(-1), loss_m.reshape(-1))


def test_return_merged_false_changes_nothing_on_one_device():
    main, startup, out, loss = _dp_program()
    x = np.ones((3, 4), "float32")
    got = []
    for merged in (True, False):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        got.append(exe.run(main, feed={"x": x}, fetch_list=[out], scope=scope,
                           return_merged=merged)[0])
    np.testing.assert_array_equal(got[0], got[1])


def _prune_program():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        main.random_seed = startup.random_seed = 4
        x = layers.data("x", [-1, 4], "float32")
        h = layers.fc(x, 3, act="tanh", param_attr=fluid.ParamAttr(name="w1"))
        out = layers.fc(h, 2, param_attr=fluid.ParamAttr(name="w2"))
        loss = layers.mean(out)
        result = fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, h, out, loss, result


def test_use_prune_runs_only_what_the_fetch_list_names():
    main, startup, h, out, loss, result = _prune_program()
    x = np.random.default_rng(3).normal(size=(5, 4)).astype("float32")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    w1 = np.array(scope["w1"])
    # the loss alone: no optimizer op named, so every one of the program runs (Paddle 1.8's
    # rule, its test_prune_fetches_with_optimizer): w1 moves
    (l0,) = exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope, use_prune=True)
    assert not np.array_equal(scope["w1"], w1)
    # minimize()'s result in fetch_list names those ops: a second update
    w1_once = np.array(scope["w1"])
    (l1,) = exe.run(main, feed={"x": x}, fetch_list=[loss, result], scope=scope,
                    use_prune=True)
    assert l1 != l0 and not np.array_equal(scope["w1"], w1_once)
    ref_scope = graphc.Scope()
    exe.run(startup, scope=ref_scope)
    for _ in range(2):
        exe.run(main, feed={"x": x}, scope=ref_scope)
    np.testing.assert_array_equal(scope["w1"], ref_scope["w1"])
    # a fed intermediate cuts off what computes it: x is neither fed nor needed (a program
    # without optimizer ops: with them, the update would need x's gradient path)
    test = main.clone(for_test=True)
    hv = np.full((2, 3), 0.5, "float32")
    (o,) = exe.run(test, feed={h.name: hv}, fetch_list=[out], scope=scope, use_prune=True)
    b2 = np.asarray(scope[main.global_block().all_parameters()[-1].name])
    np.testing.assert_allclose(o, hv @ np.asarray(scope["w2"]) + b2, rtol=1e-6)
    with pytest.raises(GraphcError, match="not a variable"):
        exe.run(main, feed={"x": x}, fetch_list=["nope"], scope=scope, use_prune=True)


def test_with_data_parallel_takes_paddles_order():
    names = list(inspect.signature(graphc.CompiledProgram.with_data_parallel).parameters)
    assert names[1:] == ["loss_name", "build_strategy", "exec_strategy", "share_vars_from",
                         "places"]


# -- layers -------------------------------------------------------------------------------------
def _bn_program(in_place, average_stats):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        x = layers.data("x", [-1, 3, 2, 2], "float32")
        # Paddle's positions: ..., data_layout, in_place, name, moving_mean_name,
        # moving_variance_name, do_model_average_for_mean_and_var, use_global_stats
        y = layers.batch_norm(x, None, False, 0.9, 1e-5, None, None, "NCHW", in_place, None,
                              "mm", "mv", average_stats, False)
    return main, startup, y


def test_batch_norm_in_place_is_a_hint_and_stats_follow_do_model_average():
    x = np.random.default_rng(2).normal(size=(4, 3, 2, 2)).astype("float32")
    outs = []
    for in_place in (False, True):
        main, startup, y = _bn_program(in_place, True)
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        outs.append(exe.run(main, feed={"x": x}, fetch_list=[y], scope=scope)[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    block = _bn_program(False, False)[0].global_block()
    assert block.var("mm").do_model_average is False
    assert block.var("mv").do_model_average is False
    assert _bn_program(False, True)[0].global_block().var("mm").do_model_average is True
    from graphc.build.optimizers.averaging import _averaged_parameters
    averaged = {p.name for p in _averaged_parameters(_bn_program(False, False)[0])}
    assert "mm" not in averaged and "mv" not in averaged and averaged


def _normal_samples(seed, sample_seed=0):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        s = layers.Normal(0.0, 1.0, seed).sample([64], seed=sample_seed)
    return graphc.Executor().run(main, fetch_list=[s], scope=graphc.Scope())[0]


def test_normal_seed_makes_sample_reproducible():
    a, b = _normal_samples(7), _normal_samples(7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, _normal_samples(8))
    # a seed given to sample() wins over the distribution's
    np.testing.assert_array_equal(_normal_samples(8, 7), _normal_samples(7))
    assert 0.5 < a.std() < 1.5
    with pytest.raises(ProgramError):
        layers.Normal(0.0, 1.0, 1.5)


def test_param_attr_takes_18s_order_and_gradient_clip_by_keyword_only():
    attr = fluid.ParamAttr("w", None, 2.0, None, True, False)
    assert attr.do_model_average is False and attr.learning_rate == 2.0
    clip = fluid.clip.GradientClipByValue(0.1)
    assert fluid.ParamAttr("w", gradient_clip=clip).gradient_clip is clip
    with pytest.raises(TypeError):
        fluid.ParamAttr("w", None, 1.0, None, True, False, clip)


def test_auc_trapezoid_area():
    assert fluid.metrics.Auc.trapezoid_area(0.0, 2.0, 1.0, 3.0) == 4.0
    assert fluid.metrics.Auc.trapezoid_area(2.0, 0.0, 1.0, 1.0) == 2.0


# -- device_guard, pinned places, double_buffer, ComplexVariable -------------------------------
def test_device_guard_builds_the_same_program_and_checks_the_device():
    main, startup, loss = _mlp()
    guarded, gstartup = graphc.Program(), graphc.Program()
    with graphc.program_guard(guarded, gstartup), graphc.unique_name.guard():
        guarded.random_seed = gstartup.random_seed = 5
        x = layers.data("x", [-1, 4], "float32")
        with fluid.device_guard("gpu:0"):
            h = layers.fc(x, 3, act="tanh")
        with fluid.device_guard("cpu"):
            gloss = layers.mean(h)
        with fluid.device_guard(None), fluid.device_guard("gpu"):
            fluid.optimizer.SGD(0.1).minimize(gloss)
    np.testing.assert_array_equal(_run(main, startup, loss), _run(guarded, gstartup, gloss))
    for bad in ("tpu", "cpu:0", "gpu:x", 3):
        with pytest.raises(ValueError), fluid.device_guard(bad):
            pass


def test_cuda_pinned_places_feed_like_cpu_places():
    place = fluid.CUDAPinnedPlace()
    assert isinstance(place, fluid.CPUPlace) and repr(place) == "CUDAPinnedPlace()"
    assert len(fluid.cuda_pinned_places(3)) == 3
    with pytest.raises(GraphcError):
        fluid.cuda_pinned_places(0)
    main, startup, loss = _mlp()
    x = np.random.default_rng(0).normal(size=(5, 4)).astype("float32")
    loader = fluid.io.DataLoader.from_generator(
        feed_list=[main.global_block().var("x")], capacity=2)
    loader.set_batch_generator(lambda: iter([[x], [x]]), places=fluid.cuda_pinned_places(1))
    assert fluid.layers.double_buffer(loader) is loader
    assert fluid.layers.double_buffer(loader, place, "buf") is loader
    with pytest.raises(ProgramError):
        fluid.layers.double_buffer(loader, place="gpu")
    scope, exe = graphc.Scope(), graphc.Executor(place)
    exe.run(startup, scope=scope)
    got = [exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0] for feed in loader()]
    np.testing.assert_array_equal(got, _run(main, startup, loss))


def test_complex_variable_is_refused_as_dygraph_only():
    with pytest.raises(MissingAPIError, match="dygraph"):
        fluid.ComplexVariable  # noqa: B018
