"""fuse-all-optimizer-ops: golden IR, declined cases with their statistics, graphs that a
naive fusion would make cyclic, random programs under every optimizer (interpreter), and
Paddle's test_fuse_optimizer_pass (fc_with_batchnorm, 5 steps, fused vs plain under XLA,
also with sequential execution, the combination that built a cycle in Paddle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from graphc.backward import append_backward
from graphc.param_attr import ParamAttr
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import initializer, layers, optimizer
from graphc.ir import parse
from graphc.ir.errors import ShapeError
from graphc.ir.opdef import get_op_def
from graphc.ir.types import TensorType
from graphc.passes import PassError, PassManager, make_pass, parse_pipeline
from graphc.testing import check_golden, check_pass, random_programs

GOLDEN = Path(__file__).parent / "golden" / "fuse-all-optimizer-ops"
PASS = "fuse-all-optimizer-ops"
OPTIMIZERS = {"sgd": lambda: optimizer.SGD(0.1), "momentum": lambda: optimizer.Momentum(0.1, 0.9),
              "adam": lambda: optimizer.Adam(0.01), "adamw": lambda: optimizer.AdamW(0.01)}


def run_pass(graph, **options):
    """Apply the pass (verifying before and after); returns its statistics."""
    report = PassManager([make_pass(PASS, **options)], verify_each=True).run(graph)
    return report.passes[0].stats


def fused_ops(graph):
    return [op for op in graph.ops() if op.type.startswith("fused_")]


def mlp(opt, second_weight_attr=None):
    """x -> fc(3, relu) -> fc(2) -> mean, minimized by ``opt``; returns the loss."""
    x = layers.data("x", [-1, 4], "float32")
    h = layers.fc(x, 3, act="relu")
    loss = layers.mean(layers.fc(h, 2, param_attr=second_weight_attr))
    opt.minimize(loss)
    return loss


def feeds_and_state(main, startup, batch=5, seed=0):
    from graphc.backends.interpreter import run_graph
    state, _ = run_graph(graphc.lower(startup))
    rng = np.random.default_rng(seed)
    feeds = {v.var.name: rng.uniform(-1, 1, [batch if d < 0 else d for d in v.type.shape])
             .astype(v.type.dtype) for v in graphc.lower(main).inputs if v.var.kind == "feed"}
    return state, feeds


def assert_equivalent(main, startup, fetch=(), **options):
    """The fused graph computes what the program does (interpreter, 1e-6); returns stats."""
    from graphc.testing import assert_same_results
    before, after = graphc.lower(main), graphc.lower(main)
    stats = run_pass(after, **options)
    state, feeds = feeds_and_state(main, startup)
    assert_same_results(before, after, state, feeds, list(fetch))
    return stats, after


# -- golden IR --------------------------------------------------------------------------

@pytest.mark.parametrize("opt_name", ["sgd", "momentum", "adam"])
def test_golden_mlp(opt_name):
    mlp(OPTIMIZERS[opt_name]())
    graph = graphc.lower(graphc.default_main_program())
    check_golden(GOLDEN / f"mlp_{opt_name}.before.ir", graph.to_text())
    stats = run_pass(graph)
    check_golden(GOLDEN / f"mlp_{opt_name}.after.ir", graph.to_text())
    assert stats == {"groups": 1, "fused": 4, f"fused {opt_name}": 4}
    assert parse(graph.to_text()).structurally_equal(graph)  # the fused op round-trips


def test_golden_param_lr_keeps_the_odd_one_out():
    mlp(optimizer.Momentum(0.1, 0.9), ParamAttr(learning_rate=0.5))
    graph = graphc.lower(graphc.default_main_program())
    stats = run_pass(graph, layout="coalesced")
    check_golden(GOLDEN / "mlp_momentum_param_lr.after.ir", graph.to_text())
    assert stats == {"groups": 1, "fused": 3, "fused momentum": 3,
                     "skipped: momentum: different learning rate": 1}


# -- what is fused, what is declined ------------------------------------------------------

@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("layout", ["multi_tensor", "coalesced"])
def test_fused_update_equals_unfused(opt_name, layout):
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    loss = mlp(OPTIMIZERS[opt_name]())
    stats, graph = assert_equivalent(main, startup, [loss.name, "fc_0.w_0"], layout=layout)
    assert stats["fused"] == 4
    (op,) = fused_ops(graph)
    assert op.type == f"fused_{opt_name}" and op.attrs["layout"] == layout
    assert op.role == "optimize"
    # names and versions stay: the graph outputs are the same values as before
    assert [v.name for v in graph.outputs] == [v.name for v in graphc.lower(main).outputs]
    assert {p[0] for p in op.provenance if p[0] != "pass"} == {opt_name}


def test_different_learning_rate_vars_are_not_fused():
    """ParamAttr(learning_rate=...) scales the rate into a var of its own per parameter."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    x = layers.data("x", [-1, 4], "float32")
    h = layers.fc(x, 3, param_attr=ParamAttr(learning_rate=0.5), bias_attr=False)
    loss = layers.mean(layers.fc(h, 2, param_attr=ParamAttr(learning_rate=0.5),
                                 bias_attr=False))
    optimizer.SGD(0.1).minimize(loss)
    stats, graph = assert_equivalent(main, startup, [loss.name])
    assert stats == {"skipped: sgd: different learning rate": 2}
    assert not fused_ops(graph)


def test_differing_hyper_parameters_split_groups():
    """Two Momentum optimizers on one shared learning-rate var: mu tells them apart."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    x = layers.data("x", [-1, 4], "float32")
    h = layers.fc(layers.fc(x, 3, act="relu"), 3, act="tanh")
    loss = layers.mean(layers.fc(h, 2, bias_attr=False))
    lr = layers.piecewise_decay([100], [0.1, 0.01])
    params_grads = append_backward(loss)
    optimizer.Momentum(lr, 0.9).apply_gradients(params_grads[:2])
    optimizer.Momentum(lr, 0.5).apply_gradients(params_grads[2:4])
    optimizer.Momentum(lr, 0.9, use_nesterov=True).apply_gradients(params_grads[4:])
    stats, graph = assert_equivalent(main, startup, [loss.name])
    assert stats == {"groups": 2, "fused": 4, "fused momentum": 4,
                     "skipped: momentum: different attributes (use_nesterov)": 1}
    assert sorted(op.attrs["mu"] for op in fused_ops(graph)) == [0.5, 0.9]


def test_mixed_dtypes_are_grouped_apart():
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    x32 = layers.data("x", [-1, 4], "float32")
    x64 = layers.data("y", [-1, 4], "float64")
    loss32 = layers.mean(layers.fc(x32, 3))
    loss64 = layers.cast(layers.mean(layers.fc(x64, 2, bias_attr=False)), "float32")
    loss = layers.elementwise_add(loss32, loss64)
    optimizer.Adam(0.01).minimize(loss)
    stats, graph = assert_equivalent(main, startup, [loss.name])
    assert stats == {"groups": 1, "fused": 2, "fused adam": 2,
                     "skipped: adam: different dtypes": 1}
    (op,) = fused_ops(graph)
    assert {v.dtype for v in op.inputs["Param"]} == {"float32"}


def test_every_optimizer_type_is_fused_and_single_ops_declined():
    """Paddle fuses one optimizer type per graph; graphc fuses each type in its own op."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    x = layers.data("x", [-1, 4], "float32")
    a = layers.fc(x, 3)
    b = layers.fc(x, 3, bias_attr=False)
    loss = layers.mean(layers.elementwise_add(a, b))
    params_grads = append_backward(loss)
    optimizer.Adam(0.01).apply_gradients(params_grads[:2])
    optimizer.SGD(0.1).apply_gradients(params_grads[2:])
    stats, graph = assert_equivalent(main, startup, [loss.name])
    assert stats == {"groups": 1, "fused": 2, "fused adam": 2,
                     "skipped: sgd: only op of its type": 1}


def test_no_optimizer_ops():
    layers.mean(layers.fc(layers.data("x", [-1, 4], "float32"), 2))
    graph = graphc.lower(graphc.default_main_program())
    assert run_pass(graph) == {"skipped: no optimizer ops": 1}


def test_op_types_option_limits_the_fusion():
    mlp(optimizer.SGD(0.1))
    graph = graphc.lower(graphc.default_main_program())
    assert run_pass(graph, op_types=["adam"]) == {"skipped: no optimizer ops": 1}


def test_options_parse_and_are_checked():
    (p,) = parse_pipeline('fuse-all-optimizer-ops{layout="coalesced"}')
    assert p.layout == "coalesced" and str(p) == 'fuse-all-optimizer-ops{layout="coalesced"}'
    with pytest.raises(PassError, match="layout"):
        make_pass(PASS, layout="flat")
    with pytest.raises(PassError, match="lamb"):
        make_pass(PASS, op_types=["lamb"])


def test_reader_of_an_updated_parameter_sees_the_new_version():
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    loss = mlp(optimizer.Momentum(0.1, 0.9))
    after = layers.reduce_sum(main.global_block().var("fc_0.w_0"))  # reads fc_0.w_0#1
    stats, graph = assert_equivalent(main, startup, [after.name, loss.name])
    assert stats["fused"] == 4
    (op,) = fused_ops(graph)
    (reader,) = [o for o in graph.ops() if o.type == "reduce_sum"]
    assert reader.input("X").producer is op and reader.input("X").name == "fc_0.w_0#1"


# -- cycles: Paddle's HasVarDepsBetweenOps and issue 18876 ---------------------------------

CHAINED = """
graph @main {
  input %g: f32[2] {feed}
  input %w: f32[2] {param}
  input %v: f32[2] {param}
  input %u: f32[2] {param}
  input %lr: f32[1] {persistable}
  %w#1: f32[2] = sgd(Param=%w, Grad=%g, LearningRate=%lr) {op_role="optimize"}
  %h: f32[2] = scale(X=%w#1) {scale=2.0}
  %v#1: f32[2] = sgd(Param=%v, Grad=%h, LearningRate=%lr) {op_role="optimize"}
  %u#1: f32[2] = sgd(Param=%u, Grad=%g, LearningRate=%lr) {op_role="optimize"}
  output %w#1
  output %v#1
  output %u#1
  output %lr
}
"""


def test_dependent_optimizer_ops_are_split_not_cycled():
    """v's gradient is computed from w's update: fusing w and v would make a cycle."""
    graph = parse(CHAINED)
    before = parse(CHAINED)
    stats = run_pass(graph)
    assert stats == {"groups": 1, "fused": 2, "fused sgd": 2,
                     "skipped: sgd: depends on another optimizer op through other ops": 1}
    (op,) = fused_ops(graph)
    assert [v.name for v in op.inputs["Param"]] == ["w", "u"]
    from graphc.testing import assert_same_results
    state = {n: np.arange(2, dtype=np.float32) + i for i, n in enumerate("wvu")}
    state["lr"] = np.array([0.5], np.float32)
    assert_same_results(before, graph, state, {"g": np.ones(2, np.float32)}, ["h"])


def test_direct_data_dependency_between_optimizer_ops_is_declined():
    text = CHAINED.replace("Grad=%h", "Grad=%w#1").replace(
        "  %h: f32[2] = scale(X=%w#1) {scale=2.0}\n", "")
    graph = parse(text)
    stats = run_pass(graph)
    assert stats["skipped: sgd: reads another optimizer op's output"] == 1
    assert stats["fused"] == 2
    graph.verify()


def test_after_sequential_execution_control_deps_are_merged():
    """Run after the control-dependency passes (Paddle's order): the chain between the
    optimizer ops is dropped inside the group, the others are merged, and no cycle appears."""
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    loss = mlp(optimizer.Adam(0.01))
    before, graph = graphc.lower(main), graphc.lower(main)
    PassManager([make_pass("backward-optimizer-op-deps", force=True),
                 make_pass("sequential-execution"), make_pass(PASS)], verify_each=True).run(graph)
    (op,) = fused_ops(graph)
    # three members waited for the last backward op, each for the one before: one dep left
    (dep,) = op.inputs["_deps"]
    assert dep.producer.role == "backward"
    from graphc.testing import assert_same_results
    state, feeds = feeds_and_state(main, startup)
    assert_same_results(before, graph, state, feeds, [loss.name])


def test_after_sequential_execution_interleaved_ops_split_the_group():
    """ParamAttr learning rates put a scale op between the optimizer ops; chained in program
    order, fusing across it would close a cycle (what Paddle did), so the group splits."""
    mlp(optimizer.SGD(0.1), ParamAttr(learning_rate=0.5))
    graph = graphc.lower(graphc.default_main_program())
    report = PassManager([make_pass("sequential-execution"), make_pass(PASS)],
                         verify_each=True).run(graph)
    assert report.passes[1].stats == {
        "groups": 1, "fused": 2, "fused sgd": 2, "skipped: sgd: different learning rate": 1,
        "skipped: sgd: depends on another optimizer op through other ops": 1}
    (op,) = fused_ops(graph)
    assert [v.name for v in op.inputs["Param"]] == ["fc_0.w_0", "fc_0.b_0"]


# -- the op definitions ---------------------------------------------------------------------

def test_fused_op_inference_checks_every_member():
    opdef = get_op_def("fused_momentum")
    t = TensorType
    ins = {"Param": [t((3, 2), "float32"), t((2,), "float32")],
           "Grad": [t((3, 2), "float32"), t((2,), "float32")],
           "Velocity": [t((3, 2), "float32"), t((2,), "float32")],
           "LearningRate": [t((1,), "float32")]}
    attrs = opdef.normalize_attrs({"mu": 0.9}, "test")
    assert opdef.infer_types(ins, attrs, "test") == {"ParamOut": ins["Param"],
                                                     "VelocityOut": ins["Velocity"]}
    with pytest.raises(ShapeError, match="Velocity has 1 values but Param has 2"):
        opdef.infer_types({**ins, "Velocity": ins["Velocity"][:1]}, attrs, "test")
    with pytest.raises(ShapeError, match="parameter 1"):
        opdef.infer_types({**ins, "Grad": [ins["Grad"][0], t((3,), "float32")]}, attrs, "t")
    with pytest.raises(ShapeError, match="layout"):
        opdef.infer_types(ins, {**attrs, "layout": "flat"}, "test")


# -- random programs (interpreter) ------------------------------------------------------------

@settings(max_examples=8, deadline=None)
@given(random_programs(max_ops=3, with_loss=True), st.sampled_from(sorted(OPTIMIZERS)),
       st.sampled_from(["multi_tensor", "coalesced"]))
def test_random_programs(gen, opt_name, layout):
    with graphc.program_guard(gen.main, gen.startup):
        _, params_grads = OPTIMIZERS[opt_name]().minimize(gen.main.global_block().var(gen.loss))
    fetch = [gen.loss] + [p.name for p, _ in params_grads]
    report = check_pass(make_pass(PASS, layout=layout), gen, fetch=fetch)
    stats = report.passes[0].stats
    kinds = {k.split(":")[0] for k in stats}
    assert kinds <= {"groups", "fused", f"fused {opt_name}", "skipped"}
    # parameters with a ParamAttr learning rate get a rate of their own, row-sparse gradients
    # (an is_sparse embedding) keep their own op; the others group by dtype
    shared = [p.dtype for p, g in params_grads if p.optimize_attr.get("learning_rate") == 1.0
              and not g.selected_rows]
    expected = sum(n for n in map(shared.count, set(shared)) if n > 1)
    assert stats.get("fused", 0) == expected


# -- Paddle's test_fuse_optimizer_pass (reference section 9) ------------------------------------

def fc_with_batchnorm(opt):
    """simple_nets.fc_with_batchnorm: 2 x (fc 200 relu, bias 1.0, + batch_norm), fc softmax,
    cross-entropy mean; seeds 0 as Paddle's harness."""
    main, startup = graphc.Program(), graphc.Program()
    main.random_seed = startup.random_seed = 0
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        img = layers.data("image", [-1, 784], "float32")
        label = layers.data("label", [-1, 1], "int64")
        hidden = img
        for _ in range(2):
            hidden = layers.fc(hidden, 200, act="relu",
                               bias_attr=ParamAttr(initializer=initializer.Constant(1.0)))
            hidden = layers.batch_norm(hidden)
        prediction = layers.fc(hidden, 10, act="softmax")
        loss = layers.mean(layers.cross_entropy(prediction, label))
        opt.minimize(loss)
    return main, startup, loss


PADDLE_OPTIMIZERS = {"adam": lambda: optimizer.Adam(1e-4), "sgd": lambda: optimizer.SGD(1e-3),
                     "momentum": lambda: optimizer.Momentum(1e-3, 0.1)}


def train(main, startup, loss, build_strategy, steps=5):
    rng = np.random.default_rng(5)  # Paddle's init_data: 32 x 784, labels in [0, 9)
    feed = {"image": rng.random((32, 784), dtype=np.float32),
            "label": rng.integers(0, 9, (32, 1), dtype=np.int64)}
    compiled = graphc.CompiledProgram(main, build_strategy=build_strategy)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(steps + 1)]
    params = {p.name: np.asarray(scope[p.name]) for p in main.all_parameters()}
    return losses, params, compiled


@pytest.mark.parametrize("opt_name", sorted(PADDLE_OPTIMIZERS))
def test_paddle_fuse_optimizer_pass(opt_name):
    main, startup, loss = fc_with_batchnorm(PADDLE_OPTIMIZERS[opt_name]())
    plain_losses, plain_params, _ = train(main, startup, loss, graphc.BuildStrategy())
    for sequential in (False, True):
        bs = graphc.BuildStrategy(fuse_all_optimizer_ops=True,
                                  enable_sequential_execution=sequential)
        losses, params, compiled = train(main, startup, loss, bs)
        assert abs(losses[0] - plain_losses[0]) <= 1e-6
        assert abs(losses[-1] - plain_losses[-1]) <= 1e-6
        assert losses[-1] != losses[0]  # it trained
        for name, value in plain_params.items():
            np.testing.assert_allclose(params[name], value, rtol=1e-6, atol=1e-6,
                                       err_msg=f"{name} (sequential={sequential})")
        graph = compiled.graph(fetch_list=[loss])
        (op,) = fused_ops(graph)
        assert op.type == f"fused_{opt_name}" and len(op.inputs["Param"]) == 10
        assert not [o for o in graph.ops() if o.type == opt_name]
        stats = compiled.last_report.stats()[PASS]
        assert stats == {"groups": 1, "fused": 10, f"fused {opt_name}": 10}
