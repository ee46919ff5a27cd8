"""fluid.optimizer.PipelineOptimizer (issue 24): microbatch gradient accumulation checked against
a NumPy reference and the plain step, batch_norm's per-microbatch statistics, one optimizer
update per minibatch, the jitted Executor against the interpreter, train_from_dataset, the
1.8 arguments and device_guard sections recorded, and bad input refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError, ShapeError
from graphc.ir.text import parse
from graphc.ir.verify import verify

pytestmark = pytest.mark.timeout(120)

RNG = np.random.RandomState(0)
X = RNG.standard_normal((8, 4)).astype("float32")
Y = RNG.standard_normal((8, 1)).astype("float32")


def _mlp(micro, opt=None, **pipe):
    """x -> fc(3, tanh) [gpu:0] -> fc(1) -> mean square error [gpu:1]; micro=None: no
    PipelineOptimizer, else PipelineOptimizer(opt, num_microbatches=micro, **pipe)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        with fluid.device_guard("gpu:0"):
            h = fluid.layers.fc(x, 3, act="tanh")
        with fluid.device_guard("gpu:1"):
            p = fluid.layers.fc(h, 1)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        opt = opt() if opt else fluid.optimizer.SGD(0.1)
        if micro is not None:
            opt = fluid.optimizer.PipelineOptimizer(opt, num_microbatches=micro, **pipe)
        opt.minimize(loss)
    return main, startup, loss, p


def _train(built, feeds, fetch_more=()):
    main, startup, loss, p = built
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    init = {q.name: np.asarray(scope[q.name]) for q in main.global_block().all_parameters()}
    out = [exe.run(main, feed=f, fetch_list=[loss, p, *fetch_more], scope=scope)
           for f in feeds]
    return init, out, scope


def _reference(params, x, y, micro, lr=0.1):
    """One SGD update from the microbatches' gradients, each of its microbatch's mean loss
    scaled by 1/micro and summed (Paddle 2.x's pipeline); returns (params, mean loss)."""
    w1, b1, w2, b2 = (params[k].astype("float64") for k in
                      ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"))
    grads, losses = [np.zeros_like(a) for a in (w1, b1, w2, b2)], []
    for xs, ys in zip(np.split(x, micro), np.split(y, micro)):
        h = np.tanh(xs @ w1 + b1)
        p = h @ w2 + b2
        losses.append(np.mean((p - ys) ** 2))
        dp = 2 * (p - ys) / len(xs) / micro
        dz = (dp @ w2.T) * (1 - h ** 2)
        for g, d in zip(grads, (xs.T @ dz, dz.sum(0), h.T @ dp, dp.sum(0))):
            g += d
    new = {k: v - lr * g for (k, v), g in zip(
        (("fc_0.w_0", w1), ("fc_0.b_0", b1), ("fc_1.w_0", w2), ("fc_1.b_0", b2)), grads)}
    return new, np.mean(losses)


@pytest.mark.parametrize("micro", [2, 4])
def test_microbatch_update_matches_numpy_and_the_plain_step(micro):
    feeds = [{"x": X, "y": Y}, {"x": X[::-1].copy(), "y": Y[::-1].copy()}]
    init, out, scope = _train(_mlp(micro), feeds)
    params, ref_losses = dict(init), []
    for f in feeds:
        params, loss = _reference(params, f["x"], f["y"], micro)
        ref_losses.append(loss)
    for k, v in params.items():
        np.testing.assert_allclose(np.asarray(scope[k]), v, rtol=1e-5, atol=1e-6)
    # the fetched loss is the microbatches' mean, the prediction every row of the batch
    np.testing.assert_allclose([o[0][0] for o in out], ref_losses, rtol=1e-5)
    # fc + mean loss has no cross-row interaction: the same update as the whole batch's
    _, plain, plain_scope = _train(_mlp(None), feeds)
    for k in params:
        np.testing.assert_allclose(np.asarray(scope[k]), np.asarray(plain_scope[k]),
                                   rtol=1e-5, atol=1e-6)
    for o, q in zip(out, plain):
        np.testing.assert_allclose(o[1], q[1], rtol=1e-5, atol=1e-6)


def test_data_parallel_and_a_test_clone_after_minimize():
    """Over 2 devices each replica splits its half of the batch; the all-reduced update is the
    plain step's. clone(for_test=True) after minimize gets the forward ops back."""
    results = []
    for micro in (None, 2):
        main, startup, loss, p = _mlp(micro)
        test = main.clone(for_test=True)
        assert "microbatch_loop" not in [op.type for op in test.global_block().ops]
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        compiled = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(2))
        out = exe.run(compiled, feed={"x": X, "y": Y}, fetch_list=[loss], scope=scope)
        pred = exe.run(test, feed={"x": X, "y": Y}, fetch_list=[p], scope=scope)
        results.append((out[0], pred[0], np.asarray(scope["fc_0.w_0"])))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_saved_inference_model_is_the_forward(tmp_path):
    main, startup, loss, p = _mlp(2)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss], scope=scope)
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(str(tmp_path), ["x"], [p], exe, main)
        prog, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
        got = exe.run(prog, feed={"x": X}, fetch_list=fetches)[0]
        want = exe.run(main.clone(for_test=True), feed={"x": X, "y": Y}, fetch_list=[p])[0]
    assert feeds == ["x"] and "microbatch_loop" not in [op.type for op in prog.global_block().ops]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_schedule_counts_steps_and_dropout_draws_per_microbatch():
    """A learning-rate schedule advances once per step (it stays outside the loop); dropout
    draws its own mask for each microbatch."""
    def build(micro):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [-1, 16], "float32")
            d = fluid.layers.dropout(x, 0.5)
            loss = fluid.layers.mean(fluid.layers.fc(d, 1))
            lr = fluid.layers.exponential_decay(0.1, decay_steps=1, decay_rate=0.5)
            opt = fluid.optimizer.SGD(lr)
            if micro:
                opt = fluid.optimizer.PipelineOptimizer(opt, num_microbatches=micro)
            opt.minimize(loss)
        return main, startup, lr, d
    main, startup, lr, d = build(2)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    ones = np.ones((8, 16), "float32")
    got = [exe.run(main, feed={"x": ones}, fetch_list=[lr, d], scope=scope) for _ in range(3)]
    np.testing.assert_allclose([g[0][0] for g in got], [0.1, 0.05, 0.025], rtol=1e-6)
    masks = got[0][1] != 0
    assert not np.array_equal(masks[:4], masks[4:])  # the two microbatches' masks differ


def test_one_optimizer_update_per_minibatch():
    """Adam's moments and beta powers advance once per run, as with the whole batch."""
    def adam():
        return fluid.optimizer.Adam(0.01)
    _, _, scope = _train(_mlp(4, adam), [{"x": X, "y": Y}] * 2)
    main, *_ = built = _mlp(None, adam)
    _, _, plain = _train(built, [{"x": X, "y": Y}] * 2)
    names = [n for n, v in main.global_block().vars.items() if v.persistable]
    assert any("beta1_pow" in n for n in names)
    for n in names:
        np.testing.assert_allclose(np.asarray(scope[n]), np.asarray(plain[n]), rtol=1e-5,
                                   atol=1e-6, err_msg=n)


def _bn_net(micro):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4], "float32")
        bn = fluid.layers.batch_norm(x, momentum=0.8, moving_mean_name="mm",
                                     moving_variance_name="mv")
        loss = fluid.layers.mean(fluid.layers.fc(bn, 1))
        opt = fluid.optimizer.SGD(0.1)
        if micro:
            opt = fluid.optimizer.PipelineOptimizer(opt, num_microbatches=micro)
        opt.minimize(loss)
    return main, startup, loss, bn


def test_batch_norm_normalises_each_microbatch_and_updates_its_statistics_in_turn():
    """Each microbatch's forward is batch_norm's training step on that microbatch: its own
    mean and variance, the running statistics moved once per microbatch, in order."""
    x = (RNG.standard_normal((8, 4)) * 3 + 1).astype("float32")
    _, out, scope = _train(_bn_net(2), [{"x": x}])
    mm, mv = np.zeros(4), np.ones(4)
    rows = []
    for part in np.split(x.astype("float64"), 2):
        mu, var = part.mean(0), part.var(0)
        rows.append((part - mu) / np.sqrt(var + 1e-5))
        mm, mv = 0.8 * mm + 0.2 * mu, 0.8 * mv + 0.2 * var
    np.testing.assert_allclose(out[0][1], np.concatenate(rows), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(scope["mm"]), mm, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(scope["mv"]), mv, rtol=1e-5, atol=1e-6)
    # and so differs from the whole batch's normalisation
    _, plain, _ = _train(_bn_net(None), [{"x": x}])
    assert not np.allclose(out[0][1], plain[0][1], atol=1e-3)


def test_interpreter_equals_jitted_executor():
    main, startup, loss, p = _mlp(2)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    state = {q.name: np.asarray(scope[q.name]) for q in main.global_block().all_parameters()}
    state.update({n: np.asarray(scope[n]) for n, v in main.global_block().vars.items()
                  if v.persistable and n not in state and scope.find_var(n) is not None})
    new_state, interp = run_graph(graphc.lower(main), state, {"x": X, "y": Y},
                                  [loss.name, p.name])
    jitted = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[loss, p], scope=scope)
    for a, b in zip(jitted, interp):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    for q in main.global_block().all_parameters():
        np.testing.assert_allclose(np.asarray(scope[q.name]), new_state[q.name], rtol=1e-5,
                                   atol=1e-6)


def test_loop_op_in_the_ir_with_device_sections():
    main, *_ = _mlp(2)
    ops = main.global_block().ops
    loop = [op for op in ops if op.type == "microbatch_loop"]
    assert len(loop) == 1 and loop[0].attr("num_microbatches") == 2
    assert [s.split(":")[:2] for s in loop[0].attr("sections")] == [["gpu", "0"], ["gpu", "1"]]
    assert main._pipeline_opt["num_microbatches"] == 2
    assert main._pipeline_opt["sections"] == loop[0].attr("sections")
    text = graphc.lower(main).to_text()
    assert "microbatch_loop" in text and "gpu:1: ops" in text
    verify(parse(text))
    assert parse(text).to_text() == text  # the loop and its body round-trip as text
    assert fluid.Program()._pipeline_opt is None  # Paddle's attribute on any program
    # the forward and backward run inside the loop; the update once, after it
    assert [op.type for op in ops if op.role == "optimize"] == ["sgd"] * 4


def test_paddle_18_arguments_record_sections_and_train_as_the_inner_optimizer():
    def build():
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [-1, 4], "float32")
            y = fluid.data("y", [-1, 1], "float32")
            h = fluid.layers.fc(x, 3, act="tanh")
            p = fluid.layers.fc(h, 1)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
            opt = fluid.optimizer.PipelineOptimizer(
                fluid.optimizer.SGD(0.1), cut_list=[[h], [loss]],
                place_list=[fluid.CPUPlace()] * 3, concurrency_list=[1, 1, 4], queue_size=2,
                sync_steps=1)
            assert opt.minimize(loss) is None  # as Paddle 1.8's
        return main, startup, loss, p
    main, _, loss, _ = built = build()
    cuts = main._pipeline_opt["cut_list"]
    assert len(cuts) == 2 and len(cuts[0]) == 1 and cuts[1] == [loss.name]
    assert main._pipeline_opt["concurrency_list"] == [1, 1, 4]
    assert main._pipeline_opt["queue_size"] == 2
    _, out, scope = _train(built, [{"x": X, "y": Y}])
    _, plain, plain_scope = _train(_mlp(None), [{"x": X, "y": Y}])
    for q in main.global_block().all_parameters():
        np.testing.assert_array_equal(np.asarray(scope[q.name]), np.asarray(plain_scope[q.name]))


def test_train_from_dataset(tmp_path):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((12, 4)).astype("float32")
    ys = rng.standard_normal((12, 1)).astype("float32")
    path = tmp_path / "part-0.txt"
    path.write_text("".join("4 " + " ".join(repr(float(v)) for v in a) + f" 1 {float(b[0])!r}\n"
                            for a, b in zip(xs, ys)))
    main, startup, loss, p = _mlp(2)
    block = main.global_block()
    ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    ds.set_use_var([block.var("x"), block.var("y")])
    ds.set_filelist([str(path)])
    ds.set_batch_size(4)
    ds.set_thread(1)
    ds.load_into_memory()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss], print_period=100)
    _, _, ref = _train(_mlp(2), [{"x": xs[i:i + 4], "y": ys[i:i + 4]} for i in (0, 4, 8)])
    for q in block.all_parameters():
        np.testing.assert_allclose(np.asarray(scope[q.name]), np.asarray(ref[q.name]),
                                   rtol=1e-6, atol=1e-6)


def test_a_batch_that_does_not_split_is_refused_by_name():
    main, startup, loss, _ = _mlp(4)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(graphc.FetchError, match="computed inside PipelineOptimizer's loop"):
        exe.run(main, feed={"x": X, "y": Y}, fetch_list=["fc_0.tmp_2@GRAD"], scope=scope)
    with pytest.raises(ShapeError, match=r"PipelineOptimizer\(num_microbatches=4\): a batch "
                                         r"of 6 rows .* does not split into 4"):
        exe.run(main, feed={"x": X[:6], "y": Y[:6]}, fetch_list=[loss], scope=scope)


def test_a_bad_label_in_a_microbatch_refuses_the_step():
    """Checks made inside the loop reach the step: nothing is committed (jitted), and the
    interpreter refuses at once."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 4], "float32")
        label = fluid.data("label", [-1, 1], "int64")
        logits = fluid.layers.fc(x, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.PipelineOptimizer(fluid.optimizer.SGD(0.1),
                                          num_microbatches=2).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    state = {n: np.asarray(scope[n]).copy() for n in ("fc_0.w_0", "fc_0.b_0", "learning_rate_0")}
    feed = {"x": X, "label": np.array([[0], [1], [2], [1], [0], [7], [1], [2]], "int64")}
    with pytest.raises(DataError, match="holds 7"):
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    np.testing.assert_array_equal(np.asarray(scope["fc_0.w_0"]), state["fc_0.w_0"])
    with pytest.raises(DataError, match="holds 7"):
        run_graph(graphc.lower(main), state, feed, [loss.name])


def _bad_program(make):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        return make()


def test_bad_arguments_are_refused_by_name():
    sgd = fluid.optimizer.SGD(0.1)
    with pytest.raises(ProgramError, match="num_microbatches is a keyword here"):
        fluid.optimizer.PipelineOptimizer(sgd, 4)
    with pytest.raises(ProgramError, match="num_microbatches must be an int >= 1"):
        fluid.optimizer.PipelineOptimizer(sgd, num_microbatches=0)
    with pytest.raises(ProgramError, match="optimizer must be a graphc optimizer"):
        fluid.optimizer.PipelineOptimizer("sgd")
    with pytest.raises(ProgramError, match="place_list has 2 entries, but a cut_list of 2 "
                                           "cuts makes 3 sections"):
        x = _bad_program(lambda: fluid.data("x", [-1, 4], "float32"))
        fluid.optimizer.PipelineOptimizer(sgd, [[x], [x]], [fluid.CPUPlace()] * 2)


@pytest.mark.parametrize("feed, message", [
    (dict(shape=[8, 4]), r"feed 'x' is .*first dimension, which must be the batch"),
    (dict(shape=[-1, 4], lod_level=1), r"feed 'x' is .*non-LoD"),
])
def test_feeds_that_cannot_split_are_refused_at_minimize(feed, message):
    def make():
        x = fluid.data("x", dtype="float32", **feed)
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        fluid.optimizer.PipelineOptimizer(fluid.optimizer.SGD(0.1),
                                          num_microbatches=2).minimize(loss)
    with pytest.raises(ProgramError, match=message):
        _bad_program(make)


def test_sparse_gradients_are_refused():
    def make():
        ids = fluid.data("ids", [-1, 1], "int64")
        emb = fluid.layers.embedding(ids, [10, 3], is_sparse=True)
        loss = fluid.layers.mean(emb)
        fluid.optimizer.PipelineOptimizer(fluid.optimizer.SGD(0.1),
                                          num_microbatches=2).minimize(loss)
    with pytest.raises(ProgramError, match="row-sparse"):
        _bad_program(make)
