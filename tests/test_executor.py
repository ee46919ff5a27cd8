"""Executor, Scope and checkpoints: feeds checked with clear errors, nothing changes on a
failed run, compiled steps cached per feed signature, atomic all-or-nothing checkpoints."""

from __future__ import annotations

import os

import numpy as np
import pytest
from graphc.models import mlp

import graphc as fluid
from graphc import layers, optimizer


@pytest.fixture
def trained():
    """A small MLP with Momentum, initialised in a private scope."""
    model = mlp(input_dim=6, hidden=(5,), num_classes=3)
    with fluid.program_guard(model.main, model.startup):
        optimizer.Momentum(0.1, 0.9).minimize(model.loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(model.startup, scope=scope)
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((4, 6)).astype("float32"),
            "label": rng.integers(0, 3, (4, 1)).astype("int64")}
    return model, exe, scope, feed


def snapshot(scope):
    return {k: scope[k].copy() for k in scope.keys()}


def test_startup_initialises_every_persistable(trained):
    model, exe, scope, feed = trained
    names = {v.name for v in model.main.global_block().vars.values() if v.persistable}
    assert names <= set(scope.keys())
    assert np.all(scope["batch_norm_0.w_2"] == 1.0) and np.all(scope["fc_0.b_0"] == 0.0)
    assert scope["fc_0.w_0"].std() > 0


@pytest.mark.parametrize("bad, message", [
    ({"label": None}, "missing feed 'x'"),
    ({"y": np.zeros((4, 6), "float32")}, "feed 'y' is not a variable of the program"),
    # x is a layers.data variable: another float dtype converts (Paddle 1.8 checks no dtype
    # there); a value no conversion keeps is refused
    ({"x": np.zeros((4, 6), "complex64")}, "feed 'x' holds complex64 values"),
    ({"x": np.zeros((4, 7), "float32")}, r"feed 'x' has shape \[4, 7\] but the program "
                                         r"declares \[-1, 6\]"),
    ({"x": np.zeros((4,), "float32")}, r"feed 'x' has shape \[4\]"),
    ({"fc_0.w_0": np.zeros((6, 4), "float32")},
     r"feed 'fc_0.w_0' \(a persistable variable\) has shape \[6, 4\]"),
])
def test_feed_errors_leave_the_scope_unchanged(trained, bad, message):
    model, exe, scope, feed = trained
    before = snapshot(scope)
    feed = dict(feed)
    for k, v in bad.items():
        if v is None:
            feed = {k2: v2 for k2, v2 in feed.items() if k2 != "x"}
        else:
            feed[k] = v
    with pytest.raises(fluid.FeedError, match=message):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    after = snapshot(scope)
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_a_fed_parameter_is_written_before_the_step_and_updated_from_there():
    """As Paddle's feed op does: the step reads the fed value, the optimizer updates it."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 3], "float32")
        y = fluid.layers.fc(x, 2, param_attr="w", bias_attr=False)
        fluid.optimizer.SGD(0.5).minimize(fluid.layers.mean(y))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    xs, w = np.arange(6, dtype="float32").reshape(2, 3), np.ones((3, 2), "float32")
    out, = exe.run(main, feed={"x": xs, "w": w}, fetch_list=[y], scope=scope)
    np.testing.assert_allclose(out, xs @ w)
    # d mean(x @ w) / dw = column sums of x / (2 * 2), for every output column
    grad = np.repeat(xs.sum(0, keepdims=True).T / 4, 2, axis=1)
    np.testing.assert_allclose(scope["w"], w - 0.5 * grad, rtol=1e-6)


def test_lists_are_converted_to_the_declared_dtype(trained):
    model, exe, scope, feed = trained
    feed = {"x": feed["x"].tolist(), "label": feed["label"].tolist()}
    (loss,) = exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    assert loss.shape == (1,) and np.isfinite(loss).all()


def test_fetch_errors(trained):
    model, exe, scope, feed = trained
    with pytest.raises(fluid.FetchError, match="cannot fetch 'nope'"):
        exe.run(model.main, feed=feed, fetch_list=["nope"], scope=scope)
    with pytest.raises(fluid.FetchError, match="must be Variables or names"):
        exe.run(model.main, feed=feed, fetch_list=[3], scope=scope)


def test_uninitialised_scope_is_a_clear_error(trained):
    model, exe, _, feed = trained
    with pytest.raises(fluid.GraphcError, match="not initialised in the scope; run the startup"):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=fluid.Scope())


def test_state_of_the_wrong_shape_is_reported(trained):
    model, exe, scope, feed = trained
    scope["fc_0.w_0"] = np.zeros((2, 2), "float32")
    with pytest.raises(fluid.GraphcError, match=r"scope variable 'fc_0.w_0' holds float32\[2, 2\]"):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)


def test_state_replaced_after_a_run_is_checked_again(trained):
    model, exe, scope, feed = trained
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    before = snapshot(scope)
    scope["fc_0.b_0"] = np.zeros((7,), "float32")
    with pytest.raises(fluid.GraphcError, match=r"scope variable 'fc_0.b_0' holds float32\[7\]"):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    scope["fc_0.b_0"] = before["fc_0.b_0"].astype("float64")
    with pytest.raises(fluid.GraphcError, match="holds float64"):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[k], after[k]) for k in before if k != "fc_0.b_0")


def test_dropped_programs_are_freed():
    import gc
    import weakref
    exe, scope = fluid.Executor(), fluid.Scope()
    model = mlp(input_dim=3, hidden=(2,), num_classes=2, batch_norm=False)
    exe.run(model.startup, scope=scope)
    feed = {"x": np.ones((2, 3), "float32"), "label": np.zeros((2, 1), "int64")}
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    refs = [weakref.ref(model.main), weakref.ref(model.startup)]
    del model
    gc.collect()
    assert [r() for r in refs] == [None, None] and len(exe._prepared) == 0


def test_training_updates_state_and_loss_falls(trained):
    model, exe, scope, feed = trained
    w0 = scope["fc_0.w_0"].copy()
    losses = [exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)[0][0]
              for _ in range(20)]
    assert losses[-1] < losses[0] * 0.5
    assert not np.array_equal(w0, scope["fc_0.w_0"])
    assert np.abs(scope["fc_0.w_0_velocity_0"]).sum() > 0


def test_fetch_gradients_and_intermediates(trained):
    model, exe, scope, feed = trained
    w0 = scope["fc_0.w_0"].copy()
    grad, hidden, w_after = exe.run(model.main, feed=feed, scope=scope,
                                    fetch_list=["fc_0.w_0@GRAD", "fc_0.tmp_1", "fc_0.w_0"])
    assert grad.shape == (6, 5) and hidden.shape == (4, 5)
    # fetching a parameter gives its value after this step's update (its last version)
    np.testing.assert_allclose(w_after, w0 - 0.1 * grad, rtol=1e-5, atol=1e-7)


def test_compiled_step_is_cached_per_feed_shape(trained):
    model, exe, scope, feed = trained
    for _ in range(3):
        exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    prep = exe._prepared[model.main][1][(model.loss.name,)]
    assert len(prep.steps) == 1
    (step,) = prep.steps.values()
    assert step.traces == 1
    half = {k: v[:2] for k, v in feed.items()}
    exe.run(model.main, feed=half, fetch_list=[model.loss], scope=scope)
    assert len(prep.steps) == 2
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    assert len(prep.steps) == 2 and step.traces == 1
    # changing the program invalidates the cache
    with fluid.program_guard(model.main, model.startup):
        layers.relu(model.loss)
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    assert exe._prepared[model.main][1][(model.loss.name,)] is not prep


def test_clone_for_test_shares_parameters_through_the_scope():
    model = mlp(input_dim=4, hidden=(3,), num_classes=2)
    test_prog = model.main.clone(for_test=True)
    with fluid.program_guard(model.main, model.startup):
        optimizer.SGD(0.5).minimize(model.loss)
    assert all(op.role == "forward" for op in test_prog.global_block().ops)
    bn = [op for op in test_prog.global_block().ops if op.type == "batch_norm"][0]
    assert bn.attr("is_test") is True
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(model.startup, scope=scope)
    feed = {"x": np.ones((2, 4), "float32"), "label": np.zeros((2, 1), "int64")}
    before = exe.run(test_prog, feed=feed, fetch_list=[model.loss.name], scope=scope)[0]
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    after = exe.run(test_prog, feed=feed, fetch_list=[model.loss.name], scope=scope)[0]
    assert not np.allclose(before, after)  # the test program sees the trained weights
    mean_before = scope["batch_norm_0.w_1"].copy()
    exe.run(test_prog, feed=feed, fetch_list=[model.loss.name], scope=scope)
    np.testing.assert_array_equal(mean_before, scope["batch_norm_0.w_1"])  # is_test: frozen


def test_scope_spellings():
    scope = fluid.Scope()
    assert scope.find_var("w") is None
    scope.var("w").get_tensor().set(np.arange(3, dtype="float32"), fluid.CPUPlace())
    t = scope.find_var("w").get_tensor()
    assert np.array(t).tolist() == [0.0, 1.0, 2.0] and t.shape() == [3]
    scope["w"] = np.ones(2, "float32")
    assert scope["w"].tolist() == [1.0, 1.0] and "w" in scope
    with pytest.raises(fluid.GraphcError, match="no variable 'v'"):
        scope["v"]
    with fluid.scope_guard(scope):
        assert fluid.global_scope() is scope
    assert fluid.global_scope() is not scope


def test_return_numpy_false_keeps_device_arrays(trained):
    import jax
    model, exe, scope, feed = trained
    (loss,) = exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope,
                      return_numpy=False)
    # issue 25: a LoDTensor as Paddle returns (empty LoD), its array left on the device
    # until it is read
    from graphc.fluid import LoDTensor
    assert isinstance(loss, LoDTensor) and loss.lod() == []
    assert isinstance(loss._device, jax.Array) and loss._host is None


def test_dropout_is_deterministic_per_seed_and_varies_per_step():
    def build(seed):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = seed
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [-1, 64])
            out = layers.dropout(x, 0.5)
        return main, out

    feed = {"x": np.ones((2, 64), "float32")}
    results = {}
    for seed in (1, 2):
        main, out = build(seed)
        exe, scope = fluid.Executor(), fluid.Scope()
        results[seed] = [exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]
                         for _ in range(2)]
    main, out = build(1)
    again = fluid.Executor().run(main, feed=feed, fetch_list=[out], scope=fluid.Scope())[0]
    np.testing.assert_array_equal(again, results[1][0])
    assert not np.array_equal(results[1][0], results[1][1])
    assert not np.array_equal(results[1][0], results[2][0])
    assert set(np.unique(results[1][0])) <= {0.0, 1.0}  # downgrade_in_infer: no scaling


def test_cuda_place_without_gpu_is_a_clear_error():
    if fluid.is_compiled_with_cuda():
        pytest.skip("a GPU is present: this checks the CPU-only error path")
    with pytest.raises(fluid.GraphcError, match="no GPU devices"):
        fluid.Executor(fluid.CUDAPlace(0))


# -- checkpoints ------------------------------------------------------------------------


def test_checkpoint_round_trip(trained, tmp_path):
    model, exe, scope, feed = trained
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    saved = snapshot(scope)
    fluid.save(model.main, str(tmp_path), scope=scope)
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "persistables.safetensors"]
    other = fluid.Scope()
    fluid.load(model.main, str(tmp_path), scope=other)
    persistable = {v.name for v in model.main.global_block().vars.values() if v.persistable}
    assert set(other.keys()) == persistable
    for name in persistable:
        np.testing.assert_array_equal(other[name], saved[name])
    import json
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    entry = manifest["tensors"]["fc_0.w_0"]
    assert (entry["shape"], entry["dtype"], len(entry["sha256"])) == ([6, 5], "float32", 64)
    # training continues identically from the loaded state
    a = exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)[0]
    b = exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=other)[0]
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_checkpoint_errors_change_nothing(trained, tmp_path):
    model, exe, scope, feed = trained
    with pytest.raises(fluid.CheckpointError, match="no checkpoint at"):
        fluid.load(model.main, str(tmp_path / "missing"), scope=scope)
    fluid.save(model.main, str(tmp_path), scope=scope)
    before = snapshot(scope)
    # a program whose parameter has another shape
    other = mlp(input_dim=7, hidden=(5,), num_classes=3)
    with pytest.raises(fluid.CheckpointError, match=r"tensor 'fc_0.w_0' is float32\[6, 5\] but "
                                                    r"the program declares float32\[7, 5\]"):
        fluid.load(other.main, str(tmp_path), scope=scope)
    # a program with a persistable the checkpoint lacks
    model.main.global_block().create_var("extra_state", [2], persistable=True)
    with pytest.raises(fluid.CheckpointError, match="has no tensor 'extra_state'"):
        fluid.load(model.main, str(tmp_path), scope=scope)
    # a truncated file
    path = tmp_path / "persistables.safetensors"
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(fluid.CheckpointError, match="cannot read .*persistables.safetensors"):
        fluid.load(model.main, str(tmp_path), scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_save_is_atomic_and_needs_values(trained, tmp_path, monkeypatch):
    model, exe, scope, feed = trained
    fluid.save(model.main, str(tmp_path), scope=scope)
    good = (tmp_path / "persistables.safetensors").read_bytes()
    import safetensors.numpy

    def crash(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.numpy, "save_file", crash)
    with pytest.raises(fluid.CheckpointError, match="cannot write .*: disk full"):
        fluid.save(model.main, str(tmp_path), scope=scope)
    assert (tmp_path / "persistables.safetensors").read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "persistables.safetensors"]
    with pytest.raises(fluid.CheckpointError, match="has no value in the scope"):
        fluid.save(model.main, str(tmp_path / "b"), scope=fluid.Scope())


def test_inspecting_the_compiled_step(trained):
    model, exe, scope, feed = trained
    step = exe.compile(model.main, feed=feed, fetch_list=[model.loss])
    text = step.lowered_text()
    assert "stablehlo.dot_general" in text and "func.func public @main" in text
    assert "dot(" in step.compiled_text() or "dot." in step.compiled_text()
    cost = step.cost_analysis()
    assert cost["flops"] > 2 * 4 * 6 * 5  # at least the first fc's multiply-adds
    mem = step.memory_analysis()
    # the updated state (params, velocities, running stats) is donated and aliased
    assert mem.alias_size_in_bytes > 0 and mem.argument_size_in_bytes > 0
    # the same step object that run() then uses: compiling did not add another
    exe.run(model.main, feed=feed, fetch_list=[model.loss], scope=scope)
    assert list(exe._prepared[model.main][1][(model.loss.name,)].steps.values()) == [step]
    with pytest.raises(ValueError, match="concrete shape for feed 'x'"):
        step.lower({"x": (-1, 6)})


def test_feeds_a_dataloader_placed_compile_the_step_once():
    # PaddleRec's ncf/mmoe: the DataLoader places (pins) its feeds on the device, so a
    # step's outputs are pinned too; state the startup program made unpinned then made the
    # second step compile again (~10 s per model). New state is pinned where it is made.
    import graphc.fluid as gfluid
    main, startup = gfluid.Program(), gfluid.Program()
    with gfluid.program_guard(main, startup), gfluid.unique_name.guard():
        x = gfluid.data("x", [-1, 4])
        loss = gfluid.layers.mean(gfluid.layers.fc(x, 3))
        gfluid.optimizer.Adam(0.01).minimize(loss)
    scope = gfluid.Scope()
    exe = gfluid.Executor(gfluid.CPUPlace())
    exe.run(startup, scope=scope)
    loader = gfluid.io.DataLoader.from_generator(feed_list=[x], capacity=2, iterable=True)
    loader.set_batch_generator(
        lambda: iter([(np.full((2, 4), i, "float32"),) for i in range(3)]),
        places=gfluid.CPUPlace())
    for data in loader():
        exe.run(main, feed=data, fetch_list=[loss], scope=scope)
    (prep,) = exe._prepared[main][1].values()
    (step,) = prep.steps.values()
    assert step.traces == 1


def test_feeding_a_persistable_variable_sets_it_as_paddles_feed_op_does():
    """PaddleNLP's language model feeds its create_global_var learning rate every run."""
    import graphc.fluid as gfluid
    main, startup = gfluid.Program(), gfluid.Program()
    with gfluid.program_guard(main, startup):
        x = gfluid.data("x", [-1, 2], "float32")
        loss = gfluid.layers.mean(gfluid.layers.fc(x, 1, param_attr=gfluid.ParamAttr(name="w"),
                                                   bias_attr=False))
        lr = gfluid.layers.create_global_var([1], 1.0, "float32", persistable=True,
                                             name="learning_rate")
        gfluid.optimizer.SGD(learning_rate=lr).minimize(loss)
    scope = gfluid.Scope()
    exe = gfluid.Executor(gfluid.CPUPlace())
    exe.run(startup, scope=scope)
    w0 = np.asarray(scope["w"]).copy()
    exe.run(main, feed={"x": np.ones((2, 2), "float32"), "learning_rate": np.array([0.5])},
            fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(w0 - np.asarray(scope["w"]), 0.5)  # d mean / d w = 1
    np.testing.assert_allclose(np.asarray(scope["learning_rate"]), [0.5])  # kept, as Paddle
    with pytest.raises(fluid.FeedError, match="learning_rate.*shape"):
        exe.run(main, feed={"x": np.ones((2, 2), "float32"), "learning_rate": np.ones(2)},
                fetch_list=[loss], scope=scope)
    # a run that fails after the state was written puts the old value back
    with pytest.raises(fluid.FeedError, match="feed 'x'"):
        exe.run(main, feed={"x": np.ones((2, 3), "float32"), "learning_rate": np.array([0.1])},
                fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(np.asarray(scope["learning_rate"]), [0.5])
