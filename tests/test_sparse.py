"""Sparse embedding updates (``is_sparse=True``) end to end: the row-sparse (SelectedRows) type
in the IR, text form and verifier; merging repeated ids; SGD/Momentum/Adam from sparse
gradients against dense ones and against the documented lazy-Adam and L2 formulas; data
parallelism (all-gathered rows, 1 device == 4 devices for Paddle's bow_net, bucketing and
Reduce mode); the passes that decline sparse values; fetching them."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphc.models import bow_net
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc
from graphc import layers, optimizer
from graphc.backends.interpreter import run_graph, run_replicas
from graphc.ir import lower, parse
from graphc.passes import PassManager, make_pass
from graphc.passes.fuse_all_reduce_ops import bucket_plan

DICT, SEQ, EMB, BATCH, STEPS = 40, 6, 8, 16, 4
TABLE = "embedding_0.w_0"

OPTIMIZERS = {
    "sgd": lambda: optimizer.SGD(0.5),
    "momentum": lambda: optimizer.Momentum(0.1, 0.9),
    "nesterov": lambda: optimizer.Momentum(0.1, 0.9, use_nesterov=True),
    "adam": lambda: optimizer.Adam(0.02),
    "adamw": lambda: optimizer.AdamW(0.02, weight_decay=0.1),
    "lazy_adam": lambda: optimizer.Adam(0.02, lazy_mode=True),
    "sgd_l2": lambda: optimizer.SGD(0.5, regularization=graphc.regularizer.L2Decay(0.01)),
}


def model(opt: str, sparse: bool = True):
    m = bow_net(DICT, SEQ, EMB, hid_dim=16, hid_dim2=12, is_sparse=sparse,
                optimizer_fn=OPTIMIZERS[opt])
    m.main.random_seed = m.startup.random_seed = 3
    return m


def batches(steps: int = STEPS, batch: int = BATCH, seed: int = 0) -> list[dict]:
    """Words from a small vocabulary, so every batch repeats ids; 0 is padding."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        words = rng.integers(0, DICT // 2, (batch, SEQ, 1)).astype("int64")
        label = (words[:, :, 0].sum(axis=1, keepdims=True) % 2).astype("int64")
        out.append({"words": words, "label": label})
    return out


def params_of(m, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in m.main.global_block().all_parameters()}


def train(opt: str, sparse: bool = True, places: int = 0, strategy=None, steps: int = STEPS):
    """(losses, parameters, scope) after ``steps`` runs; ``places`` > 0: data parallel."""
    m = model(opt, sparse)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    prog = m.main
    if places:
        prog = graphc.CompiledProgram(m.main, build_strategy=strategy).with_data_parallel(
            loss_name=m.loss.name, places=graphc.cpu_places(places))
    losses = [float(np.mean(exe.run(prog, feed=f, fetch_list=[m.loss], scope=scope)[0]))
              for f in batches(steps)]
    return losses, params_of(m, scope), scope


@functools.cache
def trained(opt: str, sparse: bool = True, places: int = 0, mode: str = "all_reduce",
            bucketing: bool = False):
    strategy = None
    if places:
        strategy = graphc.BuildStrategy()
        strategy.fuse_all_reduce_ops = bucketing
        if mode == "reduce":
            strategy.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
    return train(opt, sparse, places, strategy)


def assert_params_close(got: dict, want: dict, tol: float = 1e-6):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=name)


# -- 1. the IR: type, text form, verifier ----------------------------------------------------
def test_lookup_table_grad_is_row_sparse_in_program_and_graph():
    m = model("sgd")
    block = m.main.global_block()
    grad = block.var(TABLE + "@GRAD")
    assert grad.selected_rows and tuple(grad.shape) == (DICT, EMB)
    assert "selected_rows" in repr(grad)
    g = lower(m.main).verify()
    assert g.latest(TABLE + "@GRAD").type == graphc.TensorType((DICT, EMB), "float32", True)
    text = g.to_text()
    assert f"%{TABLE}@GRAD: selected_rows<f32[{DICT},{EMB}]>" in text
    dense = lower(model("sgd", sparse=False).main)
    assert "selected_rows" not in dense.to_text()


def test_sparse_type_round_trips_through_text_and_program():
    g = lower(model("sgd_l2").main)
    text = g.to_text()
    again = parse(text)
    assert again.structurally_equal(g) and again.to_text() == text
    back = lower(g.to_program()).verify()
    assert back.structurally_equal(g)
    assert back.latest(TABLE + "@GRAD").type.sparse


@pytest.mark.parametrize("bad, message", [
    ("selected_rows<f32[-1,4]>", "needs a fully known dense shape"),
    ("selected_rows<f32[10,4]", "expected '>'"),
])
def test_parser_rejects_bad_sparse_types(bad, message):
    text = f"graph @g {{\n  input %w: {bad} {{param}}\n}}\n"
    with pytest.raises(graphc.ParseError, match=re.escape(message)):
        parse(text)


GRAPH = """graph @g {{
  input %ids: i64[4,1] {{feed}}
  input %w: f32[10,4] {{param}}
  %g: f32[4,4] = fill_constant() {{shape=[4,4], value=1.0}}
  (W@GRAD=%w@GRAD: {grad_type}) = lookup_table_grad(W=%w, Ids=%ids, Out@GRAD=%g) {{is_sparse=true}}
{more}}}
"""


@pytest.mark.parametrize("grad_type, more, message", [
    ("f32[10,4]", "", "is declared f32[10,4] but the op produces selected_rows<f32[10,4]> "
                      "(row-sparse and dense differ)"),
    ("selected_rows<f32[10,4]>", "  %r: f32[10,4] = relu(X=%w@GRAD)\n",
     "input 'X' of op relu is a row-sparse value (SelectedRows), which this op does not take"),
    ("selected_rows<f32[10,4]>", "  output %w@GRAD\n", "graph output %w@GRAD is row-sparse"),
])
def test_verifier_rejects_misused_sparse_values(grad_type, more, message):
    g = parse(GRAPH.format(grad_type=grad_type, more=more))
    with pytest.raises(graphc.VerifyError, match=re.escape(message)):
        g.verify()
    parse(GRAPH.format(grad_type="selected_rows<f32[10,4]>", more="")).verify()


@pytest.mark.parametrize("decl, message", [
    ("input %ids: selected_rows<i64[4,1]> {feed}", "graph input %ids is row-sparse"),
    ("input %w: selected_rows<f32[10,4]> {param}", "graph input %w is row-sparse"),
])
def test_verifier_rejects_sparse_feeds_and_state(decl, message):
    g = parse(f"graph @g {{\n  {decl}\n}}\n")
    with pytest.raises(graphc.VerifyError, match=re.escape(message)):
        g.verify()


def test_verifier_rejects_a_persistable_sparse_value():
    text = GRAPH.format(grad_type="selected_rows<f32[10,4]>", more="")
    g = parse(text.replace("(W@GRAD=%w@GRAD:", "(W@GRAD=%w#1:"))
    with pytest.raises(graphc.VerifyError, match="persistable variable 'w' holds a row-sparse"):
        g.verify()


def test_rewriter_refuses_a_sparse_value_in_a_dense_slot():
    g = lower(model("sgd").main)
    grad = g.latest(TABLE + "@GRAD")
    before = g.to_text()
    with pytest.raises(graphc.ShapeError, match="does not take"):
        g.rewriter().create_op("scale", {"X": grad}, {"Out": "scaled"}, {"scale": 2.0})
    assert g.to_text() == before


def test_a_computed_table_with_is_sparse_is_a_clear_error():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        ids = layers.data("ids", [-1, 1], "int64")
        layers.embedding(ids, [10, 4])
        table = layers.scale(main.global_block().all_parameters()[0], 2.0)
        out = main.global_block().create_var("looked_up")
        main.global_block().append_op("lookup_table", {"W": table, "Ids": ids},
                                      {"Out": out}, {"is_sparse": True})
        with pytest.raises(graphc.ShapeError, match=r"op scale_grad .*'Out@GRAD' of op "
                                                    r"scale_grad is a row-sparse value"):
            optimizer.SGD(0.1).minimize(layers.mean(out))


def second_lookup(table: str, ids, sparse: bool):
    """Another lookup in an existing table (a shared embedding)."""
    block = graphc.default_main_program().global_block()
    out = block.create_var(graphc.unique_name.generate("shared_lookup"))
    block.append_op("lookup_table", {"W": block.var(table), "Ids": ids}, {"Out": out},
                    {"is_sparse": sparse})
    return out


def shared_table_program(second_sparse: bool):
    """Ids ``a`` (sparse) and ``b`` looked up in one table 'shared': (main, startup)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        a = layers.data("a", [-1, 1], "int64")
        b = layers.data("b", [-1, 1], "int64")
        ea = layers.embedding(a, [10, 4], is_sparse=True,
                              param_attr=graphc.ParamAttr(name="shared"))
        eb = second_lookup("shared", b, second_sparse)
        loss = layers.mean(layers.elementwise_mul(ea, eb))
        optimizer.SGD(0.1).minimize(loss)
    return main, startup


def test_shared_table_sums_sparse_gradients_and_mixed_use_densifies():
    results = {}
    feeds = {"a": np.array([[1], [2], [2]]), "b": np.array([[2], [3], [1]])}
    for second_sparse in (True, False):
        main, startup = shared_table_program(second_sparse)
        assert main.global_block().var("shared@GRAD").selected_rows == second_sparse
        state, _ = run_graph(lower(startup))
        results[second_sparse] = run_graph(lower(main).verify(), state, feeds)[0]["shared"]
    np.testing.assert_allclose(results[True], results[False], rtol=1e-6, atol=1e-7)


# -- 2. the runtime value: merging repeated rows ----------------------------------------------
@jax.jit
def _merged_dense(rows, values):
    sr = graphc.SelectedRows(rows, values, 7)
    merged = sr.merged()
    return merged.rows, merged.values, sr.to_dense(), merged.to_dense()


@given(st.lists(st.integers(0, 7), min_size=1, max_size=12))
def test_merged_sums_repeated_rows_and_pads_after_them(rows):
    rows = np.asarray(rows, np.int32)  # 7 == the height: padding
    values = np.random.default_rng(len(rows)).normal(size=(len(rows), 3)).astype("float32")
    values[rows == 7] = 0.0
    m_rows, m_values, dense, merged_dense = map(np.asarray, _merged_dense(rows, values))
    unique = np.unique(rows[rows < 7])
    np.testing.assert_array_equal(m_rows[:len(unique)], unique)
    assert (m_rows[len(unique):] == 7).all() and len(m_rows) == len(rows)
    np.testing.assert_array_equal(m_values[len(unique):], 0.0)
    want = np.zeros((7, 3), "float32")
    np.add.at(want, rows[rows < 7], values[rows < 7])
    np.testing.assert_allclose(dense, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(merged_dense, want, rtol=1e-6, atol=1e-6)
    host = graphc.SelectedRows(rows, values, 7)
    np.testing.assert_allclose(np.asarray(host), want, rtol=1e-6, atol=1e-6)


def test_merge_and_densify_layers_on_a_sparse_gradient():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, 1], "int64")
        emb = layers.embedding(ids, [6, 2], is_sparse=True)
        loss = layers.mean(emb)
        (_, grad), = graphc.append_backward(loss)
        merged = layers.merge_selected_rows(grad)
        dense = layers.get_tensor_from_selected_rows(merged)
        with pytest.raises(graphc.ProgramError, match="is a dense tensor"):
            layers.merge_selected_rows(dense)
    assert merged.selected_rows and not dense.selected_rows
    state, _ = run_graph(lower(startup))
    ids_value = np.array([[4], [1], [4], [4]])
    _, (m, d) = run_graph(lower(main), state, {"ids": ids_value}, [merged, dense])
    np.testing.assert_array_equal(m.rows, [1, 4, 6, 6])  # unique, then padding (height 6)
    np.testing.assert_allclose(m.values[:2], [[1 / 8] * 2, [3 / 8] * 2])
    want = np.zeros((6, 2))
    want[1], want[4] = 1 / 8, 3 / 8
    np.testing.assert_allclose(d, want)


# -- 3. optimizers: sparse == dense, and the documented formulas ------------------------------
@pytest.mark.parametrize("opt", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_sparse_training_equals_dense(opt):
    sparse_losses, sparse_params, _ = trained(opt, True)
    dense_losses, dense_params, _ = trained(opt, False)
    np.testing.assert_allclose(sparse_losses, dense_losses, rtol=1e-6, atol=1e-6)
    assert_params_close(sparse_params, dense_params)
    assert sparse_losses[-1] < sparse_losses[0] or opt == "sgd"


def test_sparse_interpreter_equals_jax():
    m = model("adam")
    state, _ = run_graph(lower(m.startup))
    graph = lower(m.main)
    feed = batches(1)[0]
    want, (want_grad,) = run_graph(graph, state, feed, [TABLE + "@GRAD"])
    scope, exe = graphc.Scope(), graphc.Executor()
    for k, v in state.items():
        scope[k] = v
    got_grad, = exe.run(m.main, feed=feed, fetch_list=[TABLE + "@GRAD"], scope=scope)
    assert isinstance(got_grad, graphc.SelectedRows)
    np.testing.assert_array_equal(got_grad.rows, want_grad.rows)
    np.testing.assert_allclose(got_grad.values, want_grad.values, rtol=1e-6, atol=1e-7)
    for name, value in want.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def _linear_table_program(opt_fn, vocab=12, width=3, sparse=True, dtype="float32"):
    """loss = sum(emb * C) / n: the table's gradient is C / n per looked-up id, whatever the
    table holds, so a NumPy reference can follow the optimizer alone."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, 1], "int64")
        coef = layers.data("coef", [-1, width], dtype)
        emb = layers.embedding(ids, [vocab, width], is_sparse=sparse, dtype=dtype)
        loss = layers.mean(layers.elementwise_mul(emb, coef))
        opt = opt_fn()
        opt.minimize(loss)
    return main, startup, opt


def _linear_table_run(opt_fn, steps=3, vocab=12, width=3, sparse=True, dtype="float32"):
    main, startup, opt = _linear_table_program(opt_fn, vocab, width, sparse, dtype)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(1)
    table0 = np.asarray(scope[TABLE]).copy()
    feeds = []
    for _ in range(steps):
        ids = rng.integers(0, vocab // 2, (8, 1))  # rows vocab/2.. are never looked up
        ids[1] = ids[0]  # a repeated id
        feeds.append({"ids": ids, "coef": rng.normal(size=(8, width)).astype(dtype)})
        exe.run(main, feed=feeds[-1], scope=scope)
    return table0, feeds, scope, opt


def _dense_grad(feed, vocab, width):
    g = np.zeros((vocab, width))
    np.add.at(g, feed["ids"][:, 0], feed["coef"] / feed["coef"].size)
    return g, np.unique(feed["ids"][:, 0])


def test_lazy_adam_matches_its_formula():
    """lazy_mode: only the merged rows of the gradient update their moments and parameters,
    with the step's bias correction; other rows keep their values bit for bit."""
    lr, b1, b2, eps = 0.02, 0.9, 0.999, 1e-8
    table0, feeds, scope, opt = _linear_table_run(
        lambda: optimizer.Adam(lr, b1, b2, eps, lazy_mode=True))
    p, m1, m2 = table0.astype(np.float64), np.zeros_like(table0, np.float64), \
        np.zeros_like(table0, np.float64)
    for t, feed in enumerate(feeds, 1):
        g, touched = _dense_grad(feed, *table0.shape)
        m1[touched] = b1 * m1[touched] + (1 - b1) * g[touched]
        m2[touched] = b2 * m2[touched] + (1 - b2) * g[touched] ** 2
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p[touched] -= lr_t * m1[touched] / (np.sqrt(m2[touched]) + eps * np.sqrt(1 - b2 ** t))
    np.testing.assert_allclose(np.asarray(scope[TABLE]), p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(scope[opt.get_accumulator("moment1", TABLE).name]),
                               m1, rtol=1e-5, atol=1e-7)
    never = slice(table0.shape[0] // 2, None)
    np.testing.assert_array_equal(np.asarray(scope[TABLE])[never], table0[never])
    assert np.asarray(scope[opt.get_accumulator("beta1_pow_acc", TABLE).name])[0] == \
        pytest.approx(b1 ** (len(feeds) + 1), rel=1e-6)


def test_lazy_adamw_decays_and_updates_only_the_looked_up_rows():
    lr, coeff, b1, b2, eps = 0.02, 0.1, 0.9, 0.999, 1e-8
    table0, feeds, scope, _ = _linear_table_run(
        lambda: optimizer.AdamW(lr, b1, b2, eps, weight_decay=coeff, lazy_mode=True))
    p, m1, m2 = table0.astype(np.float64), np.zeros_like(table0, np.float64), \
        np.zeros_like(table0, np.float64)
    for t, feed in enumerate(feeds, 1):
        g, touched = _dense_grad(feed, *table0.shape)
        p[touched] *= 1 - lr * coeff
        m1[touched] = b1 * m1[touched] + (1 - b1) * g[touched]
        m2[touched] = b2 * m2[touched] + (1 - b2) * g[touched] ** 2
        lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p[touched] -= lr_t * m1[touched] / (np.sqrt(m2[touched]) + eps * np.sqrt(1 - b2 ** t))
    np.testing.assert_allclose(np.asarray(scope[TABLE]), p, rtol=1e-5, atol=1e-6)
    never = slice(table0.shape[0] // 2, None)
    np.testing.assert_array_equal(np.asarray(scope[TABLE])[never], table0[never])


@pytest.mark.parametrize("opt", ["sgd", "momentum", "nesterov", "adam", "adamw"])
def test_sparse_equals_dense_in_float64(opt):
    """float64 tables: the sparse updates are the dense ones up to float64 rounding."""
    results = [_linear_table_run(OPTIMIZERS[opt], sparse=sparse, dtype="float64")
               for sparse in (True, False)]
    sparse_scope, dense_scope = results[0][2], results[1][2]
    assert np.asarray(sparse_scope[TABLE]).dtype == np.float64
    np.testing.assert_allclose(np.asarray(sparse_scope[TABLE]), np.asarray(dense_scope[TABLE]),
                               rtol=1e-12, atol=1e-14)


def test_sparse_l2_decays_every_row_as_paddle_18():
    """-- unitrd3: L2Decay on a sparse gradient, as Paddle 1.8's append_regularization_ops:
    the row-sparse gradient plus the dense decay is a dense gradient (``@NEWGRAD@``), so
    every row decays, looked up or not, and the table trains as a dense one."""
    lr, coeff = 0.5, 0.1
    table0, feeds, scope, _ = _linear_table_run(
        lambda: optimizer.SGD(lr, regularization=graphc.regularizer.L2Decay(coeff)))
    w = table0.astype(np.float64)
    for feed in feeds:
        g, _touched = _dense_grad(feed, *table0.shape)
        w -= lr * (g + coeff * w)
    np.testing.assert_allclose(np.asarray(scope[TABLE]), w, rtol=1e-5, atol=1e-6)
    never = slice(table0.shape[0] // 2, None)
    assert not np.allclose(np.asarray(scope[TABLE])[never], table0[never])


def test_repeated_ids_add_up_in_sgd():
    main, startup, _ = _linear_table_program(lambda: optimizer.SGD(1.0), vocab=5, width=2)
    state, _ = run_graph(lower(startup))
    coef = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "float32")
    new, _ = run_graph(lower(main), state, {"ids": np.array([[2], [2], [2]]), "coef": coef})
    want = state[TABLE].copy()
    want[2] -= coef.sum(axis=0) / coef.size
    np.testing.assert_allclose(new[TABLE], want, rtol=1e-6)


# -- 4. data parallelism ------------------------------------------------------------------------
@pytest.mark.parametrize("opt", ["sgd", "momentum", "adam", "lazy_adam"])
def test_bow_net_four_devices_equal_one(opt):
    losses1, params1, _ = trained(opt, True)
    losses4, params4, _ = trained(opt, True, places=4)
    np.testing.assert_allclose(losses4, losses1, rtol=1e-6, atol=1e-6)
    assert_params_close(params4, params1)


@pytest.mark.parametrize("mode, bucketing", [("all_reduce", True), ("reduce", False)])
def test_bow_net_bucketed_and_reduce_mode_equal_one_device(mode, bucketing):
    _, params1, _ = trained("momentum", True)
    _, params4, _ = trained("momentum", True, places=4, mode=mode, bucketing=bucketing)
    assert_params_close(params4, params1)


def _dp_graph(opt="sgd", mode="all_reduce", bucketing=True, **pipeline):
    m = model(opt)
    bs = graphc.BuildStrategy(fuse_all_reduce_ops=bucketing, **pipeline)
    if mode == "reduce":
        bs.reduce_strategy = graphc.BuildStrategy.ReduceStrategy.Reduce
    cp = graphc.CompiledProgram(m.main, build_strategy=bs).with_data_parallel(
        loss_name=m.loss.name, places=graphc.cpu_places(4))
    return m, cp


def test_sparse_gradient_is_all_gathered_and_left_out_of_buckets():
    m, cp = _dp_graph()
    graph = cp.graph([m.loss])
    gathers = [op for op in graph.ops() if op.type == "c_allgather_rows"]
    assert [op.inputs["X"][0].var.name for op in gathers] == [TABLE + "@GRAD"]
    assert gathers[0].attrs == {"nranks": 4, "reduce": "mean"}
    exchanged = {v.var.name for op in graph.ops() if op.type.startswith("c_")
                 for v in op.inputs["X"]}
    assert exchanged == {v.name for v in m.main.global_block().vars.values()
                         if v.name.endswith("@GRAD") and v.name[:-5] in
                         {p.name for p in m.main.global_block().all_parameters()}}
    plan = cp.bucket_plan([m.loss])
    assert TABLE not in {p for b in plan for p in b.params}
    assert plan.left_out == [(TABLE, "row-sparse gradient: its rows are all-gathered on their "
                                     "own, not bucketed")]
    assert f"left out: {TABLE} (row-sparse gradient" in plan.table()
    graph = lower(m.main)
    report = PassManager([make_pass("data-parallel", nranks=4),
                          make_pass("fuse-all-reduce-ops")], verify_each=True).run(graph)
    stats = report.stats()
    assert stats["data-parallel"] == {"all_reduce": 6, "all_gather_rows": 1}
    assert stats["fuse-all-reduce-ops"]["skipped: c_allgather_rows: row-sparse gradient: its "
                                        "rows are all-gathered on their own, not bucketed"] == 1
    assert bucket_plan(graph).left_out[0][0] == TABLE


def test_the_step_all_gathers_rows_and_never_all_reduces_the_table():
    m, cp = _dp_graph()
    exe = graphc.Executor()
    step = exe.compile(cp, feed=batches(1)[0], fetch_list=[m.loss])
    text = step.lowered_text()
    gathers = [line for line in text.splitlines() if "all_gather" in line]
    per_device = BATCH // 4 * SEQ
    assert any(f"tensor<{per_device}xi32>" in line for line in gathers), gathers
    assert any(f"tensor<{per_device}x{EMB}xf32>" in line for line in gathers), gathers
    reduces = [line for line in text.splitlines() if "all_reduce" in line]
    assert reduces and not any(f"{DICT}x{EMB}" in line for line in reduces), reduces


def test_reduce_mode_all_gathers_the_sparse_gradient_and_shards_the_rest():
    graph = lower(model("adam").main)
    report = PassManager([make_pass("data-parallel", nranks=4, mode="reduce")],
                         verify_each=True).run(graph)
    stats = report.stats()["data-parallel"]
    assert stats["skipped: adam: row-sparse gradient (its rows are all-gathered, not "
                 "reduce-scattered); not sharded"] == 1
    assert stats["all_gather_rows"] == 1 and stats["sharded optimizer ops"] == 6
    assert graph.vars[TABLE + "_moment1_0"].shard is None


def test_replicas_in_the_interpreter_equal_the_jax_step():
    m = model("momentum")
    state, _ = run_graph(lower(m.startup))
    graph = lower(m.main)
    PassManager([make_pass("data-parallel", nranks=4)], verify_each=True).run(graph)
    feed = batches(1)[0]
    want, (grad,) = run_replicas(graph, state, feed, [TABLE + "@GRAD"], num_replicas=4)
    # every replica holds all 4 replicas' rows; the fetch stands for the 4 replicas' dense
    # gradients concatenated along dim 0, as a dense fetch is: each block the 1-device one
    assert grad.num_rows == 4 * 4 * BATCH * SEQ // 4 and grad.height == 4 * DICT
    _, (one,) = run_graph(lower(m.main), state, feed, [TABLE + "@GRAD"])
    np.testing.assert_allclose(np.asarray(grad), np.concatenate([np.asarray(one)] * 4),
                               rtol=1e-6, atol=1e-7)
    scope, exe = graphc.Scope(), graphc.Executor()
    for k, v in state.items():
        scope[k] = v
    cp = graphc.CompiledProgram(m.main).with_data_parallel(loss_name=m.loss.name,
                                                           places=graphc.cpu_places(4))
    got, = exe.run(cp, feed=feed, fetch_list=[TABLE + "@GRAD"], scope=scope)
    assert got.height == 4 * DICT
    np.testing.assert_array_equal(got.rows, grad.rows)
    np.testing.assert_allclose(got.values, grad.values, rtol=1e-6, atol=1e-7)
    for name in (TABLE, "fc_0.w_0"):
        np.testing.assert_allclose(np.asarray(scope[name]), want[name], rtol=1e-6,
                                   atol=1e-6, err_msg=name)


# -- 5. passes that cannot handle sparse values decline them ---------------------------------
def test_fuse_all_optimizer_ops_leaves_the_sparse_update_alone():
    graph = lower(model("adam").main)
    report = PassManager([make_pass("fuse-all-optimizer-ops")], verify_each=True).run(graph)
    stats = report.stats()["fuse-all-optimizer-ops"]
    assert stats["skipped: adam: row-sparse gradient (a fused optimizer takes dense ones; "
                 "its own op scatters the rows)"] == 1
    assert stats["fused"] == 6
    assert sorted(op.type for op in graph.ops() if "adam" in op.type) == ["adam", "fused_adam"]


def test_full_pipeline_on_sparse_bow_net_trains_like_the_plain_program():
    bs = graphc.BuildStrategy(fuse_all_optimizer_ops=True, enable_inplace=True,
                              memory_optimize=True, fuse_elewise_add_act_ops=True,
                              enable_sequential_execution=True)
    m = model("adam")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    cp = graphc.CompiledProgram(m.main, build_strategy=bs)
    for f in batches():
        exe.run(cp, feed=f, fetch_list=[m.loss], scope=scope)
    assert_params_close(params_of(m, scope), trained("adam", True)[1], 1e-5)
    plan = cp.graph([m.loss]).memory_plan
    assert plan is not None


def test_enable_inplace_declines_sparse_values():
    main, _ = shared_table_program(second_sparse=True)
    graph = lower(main)
    assert any(op.type == "sum" and op.output("Out").type.sparse for op in graph.ops())
    PassManager([make_pass("enable-inplace")], verify_each=True).run(graph)
    assert any("row-sparse value" in reason for reason in graph.memory_plan.declined)


def test_hierarchical_allreduce_leaves_the_sparse_all_gather_flat():
    graph = lower(model("sgd").main)
    report = PassManager([make_pass("data-parallel", nranks=4),
                          make_pass("hierarchical-allreduce", inter_nranks=2)],
                         verify_each=True).run(graph)
    stats = report.stats()["hierarchical-allreduce"]
    assert stats["skipped: c_allgather_rows: a row-sparse gradient's all-gather stays flat"] \
        == 1
    assert stats["hierarchical"] == 6


def test_amp_keeps_sparse_ops_in_float32_and_unscales_sparse_gradients():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, 1], "int64")
        label = layers.data("label", [-1, 1], "int64")
        emb = layers.embedding(ids, [DICT, EMB], is_sparse=True)
        logits = layers.fc(emb, 4)  # mul is white: its input gradient comes back low
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        optimizer.SGD(0.1).minimize(loss)
    graph = lower(main)
    report = PassManager([make_pass("amp")], verify_each=True).run(graph)
    stats = report.stats()["amp"]
    assert stats["skipped: lookup_table_grad: row-sparse operand (kept float32)"] == 1
    (check,) = [op for op in graph.ops() if op.type == "check_finite_and_unscale"]
    assert any(v.type.sparse for v in check.inputs["X"])
    state, _ = run_graph(lower(startup))
    feed = {"ids": np.arange(8)[:, None] % 5, "label": np.arange(8)[:, None] % 4}
    new, (found,) = run_graph(graph, state, feed, ["found_infinite"])
    assert not found[0]
    ref, _ = run_graph(lower(main), state, feed)
    np.testing.assert_allclose(new[TABLE], ref[TABLE], rtol=1e-2, atol=1e-3)


def test_amp_finds_an_overflow_only_in_a_sparse_gradient_and_skips_the_step():
    main, startup, _ = _linear_table_program(lambda: optimizer.SGD(0.5))
    graph = lower(main)
    PassManager([make_pass("amp")], verify_each=True).run(graph)
    state, _ = run_graph(lower(startup))
    coef = np.ones((4, 3), "float32")
    feed = {"ids": np.array([[1], [2], [1], [3]]), "coef": coef}
    new, (found,) = run_graph(graph, state, feed, ["found_infinite"])
    assert not found[0] and not np.array_equal(new[TABLE], state[TABLE])
    coef[2, 1] = np.inf  # reaches the table's (sparse) gradient only
    new, (found,) = run_graph(graph, state, {**feed, "coef": coef}, ["found_infinite"])
    assert found[0]
    np.testing.assert_array_equal(new[TABLE], state[TABLE])


# -- 6. fetching sparse values -------------------------------------------------------------------
def test_fetching_a_sparse_gradient_per_iteration():
    m = model("sgd")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(m.startup, scope=scope)
    cp = graphc.CompiledProgram(m.main, exec_strategy=graphc.ExecutionStrategy(
        num_iteration_per_run=2))
    grads, = exe.run(cp, feed=batches(2), fetch_list=[TABLE + "@GRAD"], scope=scope)
    assert isinstance(grads, list) and len(grads) == 2
    for g, f in zip(grads, batches(2)):
        ids = f["words"].reshape(-1)
        np.testing.assert_array_equal(g.rows, np.where(ids == 0, DICT, ids))
    raw, = exe.run(m.main, feed=batches(1)[0], fetch_list=[TABLE + "@GRAD"], scope=scope,
                   return_numpy=False)
    assert isinstance(raw, graphc.SelectedRows) and isinstance(raw.values, jax.Array)
    assert raw.shape == (DICT, EMB) and jnp.asarray(raw.to_dense()).shape == (DICT, EMB)
    raws, = exe.run(cp, feed=batches(2), fetch_list=[TABLE + "@GRAD"], scope=scope,
                    return_numpy=False)
    assert [type(g) for g in raws] == [graphc.SelectedRows] * 2
    assert all(isinstance(g.rows, jax.Array) and g.rows.shape == (BATCH * SEQ,) and
               g.shape == (DICT, EMB) for g in raws)


def test_a_data_parallel_sparse_fetch_stands_for_the_dense_fetch():
    """Fetched on 4 devices, a sparse gradient equals the dense model's fetch of its dense
    gradient: the 4 devices' (all-reduced) gradients concatenated along dim 0."""
    fetched = {}
    for sparse in (True, False):
        m = model("sgd", sparse)
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(m.startup, scope=scope)
        cp = graphc.CompiledProgram(m.main).with_data_parallel(loss_name=m.loss.name,
                                                               places=graphc.cpu_places(4))
        fetched[sparse], = exe.run(cp, feed=batches(1)[0], fetch_list=[TABLE + "@GRAD"],
                                   scope=scope)
    assert isinstance(fetched[True], graphc.SelectedRows)
    assert fetched[False].shape == (4 * DICT, EMB)
    np.testing.assert_allclose(np.asarray(fetched[True]), fetched[False], rtol=1e-6,
                               atol=1e-7)


def test_a_replica_block_past_int32_gets_int64_rows():
    from graphc.backends.selected_rows import replica_block
    height = 2 ** 30
    sr = graphc.SelectedRows(np.array([0, 5, height], np.int32), np.ones((3, 2)), height)
    block = replica_block(sr, 3, 4)
    assert block.height == 4 * height and np.asarray(block.rows).dtype == np.int64
    np.testing.assert_array_equal(block.rows, [3 * height, 3 * height + 5, 4 * height])
    small = replica_block(graphc.SelectedRows(np.array([1, 6], np.int32), np.ones((2, 2)), 6),
                          1, 4)
    assert np.asarray(small.rows).dtype == np.int32
    np.testing.assert_array_equal(small.rows, [7, 24])


def test_many_data_parallel_steps_without_fetches_do_not_hang():
    """XLA:CPU aborts in a collective's rendezvous when ~100 multi-device steps are queued
    unwaited; the step waits now and then, so a loop without fetches runs to the end."""
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(f"""
        import jax
        jax.config.update("jax_num_cpu_devices", 4)
        import numpy as np
        import graphc
        from graphc.models import bow_net
        m = bow_net({DICT}, {SEQ}, {EMB}, hid_dim=8, hid_dim2=8,
                    optimizer_fn=lambda: graphc.optimizer.SGD(0.1))
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(m.startup, scope=scope)
        cp = graphc.CompiledProgram(m.main).with_data_parallel(
            loss_name=m.loss.name, places=graphc.cpu_places(4))
        rng = np.random.default_rng(0)
        feed = {{"words": rng.integers(0, {DICT}, (64, {SEQ}, 1)),
                 "label": rng.integers(0, 2, (64, 1))}}
        for _ in range(300):
            exe.run(cp, feed=feed, scope=scope)
        print("done", np.isfinite(np.asarray(scope["{TABLE}"])).all())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "done True" in proc.stdout, proc.stderr[-2000:]


# -- 7. golden IR ------------------------------------------------------------------------------
def _tiny_sparse_program():
    """ids -> sparse embedding -> sum pool -> fc -> loss, Momentum with L2: small enough to read."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, 3, 1], "int64")
        label = layers.data("label", [-1, 1], "int64")
        emb = layers.embedding(ids, [10, 4], is_sparse=True, padding_idx=0)
        logits = layers.fc(layers.reduce_sum(emb, dim=1), 2)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        optimizer.Momentum(0.1, 0.9, regularization=graphc.regularizer.L2Decay(1e-3)
                           ).minimize(loss)
    return main, loss


@pytest.mark.parametrize("case, passes", [
    ("all_reduce", [("data-parallel", {"nranks": 4})]),
    ("reduce", [("data-parallel", {"nranks": 4, "mode": "reduce"})]),
    ("bucketed", [("data-parallel", {"nranks": 4}), ("fuse-all-reduce-ops", {})]),
])
def test_golden_data_parallel_with_a_sparse_embedding(case, passes):
    from pathlib import Path

    from pass_harness import golden_text

    from graphc.backends.interpreter import resolve_fetch
    from graphc.testing import check_golden
    main, loss = _tiny_sparse_program()
    made = [make_pass(name, **options) for name, options in passes]
    before, after = lower(main), lower(main)
    if made[:-1]:
        for g in (before, after):
            PassManager(made[:-1], verify_each=True).run(g, keep=[resolve_fetch(g, loss.name)])
    report = PassManager(made[-1:], verify_each=True).run(
        after, keep=[resolve_fetch(after, loss.name)])
    stats = report.stats()[made[-1].name]
    check_golden(Path(__file__).parent / "golden" / made[-1].name / f"sparse_embedding_{case}.ir",
                 golden_text(made[-1].name, before, after, stats))
    assert any(op.type == "c_allgather_rows" for op in after.ops())


# -- 8. properties over random sparse programs ---------------------------------------------------
SPARSE_OPTIMIZERS = ["sgd", "momentum", "nesterov", "adam", "adamw", "lazy_adam", "sgd_l2"]


@st.composite
def sparse_programs(draw):
    """Random programs around is_sparse embeddings: vocabulary, width, sequence length,
    padding, a second lookup in the same table (sparse or dense), pooling, optimizer."""
    from graphc.testing.programs import GeneratedProgram
    vocab, width, seq = draw(st.integers(2, 9)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    padding = draw(st.sampled_from([None, 0]))
    second = draw(st.sampled_from([None, "sparse", "dense"]))
    pool = draw(st.sampled_from(["reduce_sum", "reduce_mean"]))
    opt = draw(st.sampled_from(SPARSE_OPTIMIZERS))
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = layers.data("ids", [-1, seq, 1], "int64")
        label = layers.data("label", [-1, 1], "int64")
        emb = layers.embedding(ids, [vocab, width], is_sparse=True, padding_idx=padding)
        pooled = getattr(layers, pool)(emb, dim=1)
        if second is not None:
            other = second_lookup(TABLE, layers.reshape(ids, [-1, 1]), second == "sparse")
            pooled = layers.elementwise_add(pooled, layers.reduce_mean(
                layers.reshape(other, [-1, seq, width]), dim=1))
        logits = layers.fc(layers.tanh(pooled), 2)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        OPTIMIZERS[opt]().minimize(loss)
    return GeneratedProgram(main, startup, {"ids": ((-1, seq, 1), "int64"),
                                            "label": ((-1, 1), "int64")},
                            [loss.name], loss.name, {"ids": vocab, "label": 2},
                            [f"{opt} vocab={vocab} width={width} seq={seq} pad={padding} "
                             f"second={second} pool={pool}"])


@st.composite
def build_strategies(draw):
    from graphc.passes import ORDER, all_passes
    switches = [f for f, name in ORDER if f and name in all_passes() and name != "amp"]
    return graphc.BuildStrategy(**{f: draw(st.booleans()) for f in switches})


@settings(max_examples=15)
@given(sparse_programs(), build_strategies())
def test_every_strategy_preserves_sparse_training(gen, strategy):
    from graphc.passes import pipeline_for
    from graphc.testing import check_pass
    assert gen.main.global_block().var(TABLE + "@GRAD").selected_rows or \
        "second=dense" in gen.steps[0]
    check_pass(pipeline_for(strategy, verify_each=True), gen)


@settings(max_examples=15)
@given(sparse_programs(), st.sampled_from([2, 4]), st.sampled_from(["all_reduce", "reduce"]),
       st.booleans())
def test_replicas_equal_one_device_on_sparse_programs(gen, n, mode, bucketing):
    from graphc.testing import feeds_for
    state, _ = run_graph(lower(gen.startup))
    feeds = feeds_for(gen, batch=4)
    want, (want_loss,) = run_graph(lower(gen.main), state, feeds, [gen.loss])
    graph = lower(gen.main)
    passes = [make_pass("data-parallel", nranks=n, mode=mode)]
    if bucketing:
        passes.append(make_pass("fuse-all-reduce-ops"))
    PassManager(passes, verify_each=True).run(graph)
    got, (losses,) = run_replicas(graph, state, feeds, [gen.loss], num_replicas=n)
    np.testing.assert_allclose(np.mean(losses), want_loss[0], rtol=1e-5, atol=1e-6)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)


@settings(max_examples=8)  # each example compiles a step
@given(sparse_programs())
def test_jax_equals_the_interpreter_on_sparse_programs(gen):
    from graphc.testing import feeds_for
    state, _ = run_graph(lower(gen.startup))
    feeds = feeds_for(gen)
    want, (want_loss,) = run_graph(lower(gen.main), state, feeds, [gen.loss])
    scope, exe = graphc.Scope(), graphc.Executor()
    for k, v in state.items():
        scope[k] = v
    loss, = exe.run(gen.main, feed=feeds, fetch_list=[gen.loss], scope=scope)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
    for name, value in want.items():
        np.testing.assert_allclose(np.asarray(scope[name]), value, rtol=1e-5, atol=1e-6,
                                   err_msg=name)
