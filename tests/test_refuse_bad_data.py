"""Data a step must refuse rather than learn from (issue 19): labels and embedding ids out of
range, empty or lossy feeds, user arrays in the scope, and fc on integer inputs."""

from __future__ import annotations

import graphc.amp
import jax.numpy as jnp
import numpy as np
import pytest

import graphc
from graphc import layers, optimizer
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph, run_replicas
from graphc.ir.errors import ProgramError
from graphc.ir.graph import lower
from graphc.passes import PassManager, make_pass
from graphc.runtime.executor import FeedError
from graphc.strategy import BuildStrategy, ExecutionStrategy

CLASSES, VOCAB = 4, 6


def classifier(loss_kind="softmax_ce", ignore_index=-100, opt=None):
    """fc(x, 4) then a hard-label loss, trained with Momentum (so there is optimizer state)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 3], "float32")
        label = graphc.data("label", [-1, 1], "int64")
        logits = layers.fc(x, CLASSES)
        if loss_kind == "softmax_ce":
            per = layers.softmax_with_cross_entropy(logits, label, ignore_index=ignore_index)
        else:
            per = layers.cross_entropy(layers.softmax(logits), label, ignore_index=ignore_index)
        loss = layers.mean(per)
        (opt or optimizer.Momentum(0.1, 0.9)).minimize(loss)
    return main, startup, loss


def embedder(is_sparse=False, padding_idx=None, computed_ids=False):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        if computed_ids:  # ids made by an op, not fed: the error names that variable
            raw = graphc.data("raw", [-1, 1], "float32")
            ids = layers.cast(raw, "int64")
        else:
            ids = graphc.data("ids", [-1, 1], "int64")
        emb = layers.embedding(ids, [VOCAB, 2], is_sparse=is_sparse, padding_idx=padding_idx)
        loss = layers.mean(emb)
        optimizer.SGD(0.5).minimize(loss)
    return main, startup, loss


def started(startup, exe=None):
    scope, exe = graphc.Scope(), exe or graphc.Executor()
    exe.run(startup, scope=scope)
    return scope, exe


def snapshot(scope):
    return {n: np.array(scope[n]) for n in scope.keys()}


def assert_untouched(scope, before, program):
    after = snapshot(scope)
    assert after.keys() == before.keys()
    for n, v in before.items():
        np.testing.assert_array_equal(after[n], v, err_msg=n)
    assert scope._run_counters.get(program, 0) == 0


def feed_xy(labels):
    labels = np.asarray(labels, np.int64).reshape(-1, 1)
    x = np.linspace(-1, 1, labels.size * 3, dtype=np.float32).reshape(-1, 3)
    return {"x": x, "label": labels}


# -- 1. labels and ids out of range ------------------------------------------------------

@pytest.mark.parametrize("loss_kind", ["softmax_ce", "cross_entropy"])
@pytest.mark.parametrize("bad", [4, 100, -1])
def test_out_of_range_label_is_refused_and_nothing_commits(loss_kind, bad):
    main, startup, loss = classifier(loss_kind)
    scope, exe = started(startup)
    before = snapshot(scope)
    with pytest.raises(DataError, match=rf"feed 'label' holds {bad} at \[2, 0\]") as info:
        exe.run(main, feed=feed_xy([0, 1, bad]), fetch_list=[loss], scope=scope)
    op = "softmax_with_cross_entropy" if loss_kind == "softmax_ce" else "cross_entropy"
    assert f"op {op} at " in str(info.value) and "[0, 4)" in str(info.value)
    assert "test_refuse_bad_data.py" in str(info.value)  # the op's source line
    assert_untouched(scope, before, main)
    # the scope is still usable, and a good batch trains as if the bad one never came
    (got,) = exe.run(main, feed=feed_xy([0, 1, 3]), fetch_list=[loss], scope=scope)
    fresh, exe2 = started(startup)
    (want,) = exe2.run(main, feed=feed_xy([0, 1, 3]), fetch_list=[loss], scope=fresh)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for n in before:
        np.testing.assert_allclose(scope[n], fresh[n], rtol=1e-6, err_msg=n)


def test_a_program_without_updates_is_checked_too():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [-1, 3], "float32")
        label = graphc.data("label", [-1, 1], "int64")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(x, CLASSES), label))
    scope, exe = started(startup)
    with pytest.raises(DataError, match=r"feed 'label' holds -3 at \[0, 0\]"):
        exe.run(main, feed=feed_xy([-3, 1]), fetch_list=[loss], scope=scope)
    (got,) = exe.run(main, feed=feed_xy([3, 1]), fetch_list=[loss], scope=scope)
    assert np.isfinite(got).all()


def test_ignore_index_is_legal_and_skipped():
    main, startup, loss = classifier(ignore_index=-1)
    scope, exe = started(startup)
    (got,) = exe.run(main, feed=feed_xy([0, -1, 2]), fetch_list=[loss], scope=scope)
    assert np.isfinite(got).all()


def test_interpreter_agrees():
    main, startup, loss = classifier()
    scope, _ = started(startup)
    state = snapshot(scope)
    with pytest.raises(DataError, match=r"Label holds 7 at \[1, 0\]; expected labels in "
                                        r"\[0, 4\)"):
        run_graph(lower(main), state, feed_xy([1, 7]), [loss.name])
    new_state, (value,) = run_graph(lower(main), state, feed_xy([1, 3]), [loss.name])
    assert np.isfinite(value).all()
    main_e, startup_e, loss_e = embedder()
    scope_e, _ = started(startup_e)
    with pytest.raises(DataError, match=r"Ids holds -1 at \[0, 0\]"):
        run_graph(lower(main_e), snapshot(scope_e), {"ids": np.array([[-1]])}, [])
    with pytest.raises(DataError, match="Label holds 9"):
        run_replicas(lower(main), state, feed_xy([1, 2, 3, 9]), [loss.name], num_replicas=2)


def test_amp_step_with_a_bad_label_is_refused():
    main, startup, loss = classifier()
    bs = BuildStrategy(amp=True)
    graphc.amp.init_state(startup, bs)
    passes = [make_pass("dce"), make_pass("amp", **bs.pass_options("amp"))]
    compiled = graphc.CompiledProgram(main, pass_manager=PassManager(passes))
    scope, exe = started(startup)
    exe.run(compiled, feed=feed_xy([0, 1]), fetch_list=[loss], scope=scope)  # amp state exists
    before = snapshot(scope)
    counter = scope._run_counters[main]
    with pytest.raises(DataError, match="feed 'label' holds 4"):
        exe.run(compiled, feed=feed_xy([0, 4]), fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    for n, v in before.items():
        np.testing.assert_array_equal(after[n], v, err_msg=n)
    assert scope._run_counters[main] == counter


@pytest.mark.parametrize("is_sparse", [False, True])
@pytest.mark.parametrize("bad", [VOCAB, 50, -1])
def test_embedding_id_outside_the_table_is_refused(is_sparse, bad):
    main, startup, loss = embedder(is_sparse)
    scope, exe = started(startup)
    before = snapshot(scope)
    with pytest.raises(DataError, match=rf"feed 'ids' holds {bad} at \[1, 0\].*lookup_table"):
        exe.run(main, feed={"ids": np.array([[0], [bad]])}, fetch_list=[loss], scope=scope)
    assert_untouched(scope, before, main)
    (got,) = exe.run(main, feed={"ids": np.array([[0], [VOCAB - 1]])}, fetch_list=[loss],
                     scope=scope)
    assert np.isfinite(got).all()


def test_padding_idx_is_legal_even_when_negative():
    main, startup, loss = embedder(padding_idx=-1)  # Paddle: -1 means the last row
    scope, exe = started(startup)
    exe.run(main, feed={"ids": np.array([[VOCAB - 1], [0]])}, fetch_list=[loss], scope=scope)
    with pytest.raises(DataError, match="holds -1"):
        exe.run(main, feed={"ids": np.array([[-1], [0]])}, fetch_list=[loss], scope=scope)


def test_a_computed_id_names_its_variable_and_source_line():
    main, startup, loss = embedder(computed_ids=True)
    scope, exe = started(startup)
    with pytest.raises(DataError) as info:
        exe.run(main, feed={"raw": np.array([[1.0], [9.0]], np.float32)}, fetch_list=[loss],
                scope=scope)
    msg = str(info.value)
    assert "variable 'cast_0.tmp_0' (input Ids of op lookup_table at " in msg
    assert "test_refuse_bad_data.py" in msg and "holds 9 at [1, 0]" in msg


def test_data_parallel_step_is_refused_on_every_device():
    main, startup, loss = classifier()
    compiled = graphc.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=graphc.cpu_places(2))
    scope, exe = started(startup)
    before = snapshot(scope)
    # the bad label is on the second device: position 3 of the global batch
    with pytest.raises(DataError, match=r"feed 'label' holds 5 at \[3, 0\]"):
        exe.run(compiled, feed=feed_xy([0, 1, 2, 5]), fetch_list=[loss], scope=scope)
    assert_untouched(scope, before, main)
    (got,) = exe.run(compiled, feed=feed_xy([0, 1, 2, 3]), fetch_list=[loss], scope=scope)
    assert np.isfinite(got).all()


def test_several_iterations_per_call_refuse_the_whole_call():
    main, startup, loss = classifier()
    compiled = graphc.CompiledProgram(main, exec_strategy=ExecutionStrategy(
        num_iteration_per_run=2))
    scope, exe = started(startup)
    before = snapshot(scope)
    with pytest.raises(DataError, match=r"holds 4 at \[0, 0\] in iteration 1"):
        exe.run(compiled, feed=[feed_xy([1, 2]), feed_xy([4, 0])], fetch_list=[loss],
                scope=scope)
    assert_untouched(scope, before, main)


@pytest.mark.parametrize("build", ["classifier", "sparse_embedder", "data_parallel"])
def test_checked_steps_equal_unchecked_ones_on_good_data(build):
    """The check only guards the update: on good data every value is bit-identical."""
    results = []
    for check in (True, False):
        with graphc.unique_name.guard():
            if build == "sparse_embedder":
                main, startup, loss = embedder(is_sparse=True)
                feeds = [{"ids": np.array([[i % VOCAB], [(3 * i) % VOCAB]])} for i in range(3)]
            else:
                main, startup, loss = classifier()
                feeds = [feed_xy([i % CLASSES, 1, 2, (i + 3) % CLASSES]) for i in range(3)]
        program = main if build != "data_parallel" else graphc.CompiledProgram(
            main).with_data_parallel(loss_name=loss.name, places=graphc.cpu_places(2))
        scope, exe = started(startup, graphc.Executor(check_data=check))
        losses = [exe.run(program, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
        results.append((losses, snapshot(scope)))
    (a_losses, a_state), (b_losses, b_state) = results
    np.testing.assert_array_equal(np.array(a_losses), np.array(b_losses))
    assert a_state.keys() == b_state.keys()
    for n in a_state:
        np.testing.assert_array_equal(a_state[n], b_state[n], err_msg=n)


def test_data_parallel_iterations_name_the_global_position_and_iteration():
    main, startup, loss = classifier()
    compiled = graphc.CompiledProgram(main, exec_strategy=ExecutionStrategy(
        num_iteration_per_run=2)).with_data_parallel(loss_name=loss.name,
                                                     places=graphc.cpu_places(2))
    scope, exe = started(startup)
    before = snapshot(scope)
    with pytest.raises(DataError, match=r"holds 9 at \[2, 0\] in iteration 1"):
        exe.run(compiled, feed=[feed_xy([1, 2, 3, 0]), feed_xy([0, 1, 9, 3])],
                fetch_list=[loss], scope=scope)
    assert_untouched(scope, before, main)


def test_checks_can_be_switched_off(monkeypatch):
    main, startup, loss = classifier()
    scope, exe = started(startup, graphc.Executor(check_data=False))
    (got,) = exe.run(main, feed=feed_xy([0, 100]), fetch_list=[loss], scope=scope)
    assert not np.isfinite(got).all()  # what the unchecked step computes
    monkeypatch.setenv("GRAPHC_CHECK_DATA", "0")
    assert not graphc.Executor().check_data
    monkeypatch.setenv("GRAPHC_CHECK_DATA", "1")
    assert graphc.Executor().check_data


# -- 2. feeds ------------------------------------------------------------------------------

def test_empty_batch_is_a_feed_error_naming_the_feed():
    main, startup, loss = classifier()
    scope, exe = started(startup)
    before = snapshot(scope)
    empty = {"x": np.zeros((0, 3), np.float32), "label": np.zeros((0, 1), np.int64)}
    with pytest.raises(FeedError, match="feed '(x|label)' has shape .*empty batch"):
        exe.run(main, feed=empty, fetch_list=[loss], scope=scope)
    assert_untouched(scope, before, main)


@pytest.mark.parametrize("label, message", [
    ([[0.5], [1.0]], r"holds 0.5, which converting to the declared int64 would change"),
    ([[1], [2 ** 40]], None),  # fits int64: accepted
    ([["a"], ["b"]], "holds strings"),
    ([[True], [False]], "holds bools"),
    ([[1], [2, 3]], "not a rectangular array"),
    ([[1.0], [float("nan")]], "nan"),
])
def test_python_list_labels_convert_without_loss(label, message):
    main, startup, loss = classifier()
    scope, exe = started(startup, graphc.Executor(check_data=False))
    feed = {"x": np.zeros((2, 3), np.float32), "label": label}
    if message is None:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return
    with pytest.raises(FeedError, match="feed 'label'") as info:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    assert info.match(message)


def test_whole_float_labels_in_a_list_become_ints():
    main, startup, loss = classifier()
    scope, exe = started(startup)
    (a,) = exe.run(main, feed={"x": np.ones((2, 3), np.float32), "label": [[1.0], [3.0]]},
                   fetch_list=[loss], scope=scope)
    scope2, exe2 = started(startup)
    (b,) = exe2.run(main, feed={"x": np.ones((2, 3), np.float32),
                                "label": np.array([[1], [3]])}, fetch_list=[loss],
                    scope=scope2)
    np.testing.assert_array_equal(a, b)


def test_out_of_range_int_for_an_int32_feed_is_refused():
    from graphc.runtime.feeds import convert_feed
    with pytest.raises(FeedError, match="feed 'n' holds 4294967296"):
        convert_feed("n", [1, 2 ** 32], np.int32)
    np.testing.assert_array_equal(convert_feed("f", [1, 2], np.float32), [1.0, 2.0])


def test_numpy_array_of_another_dtype_is_refused():
    main, startup, loss = classifier()
    scope, exe = started(startup)
    with pytest.raises(FeedError, match="feed 'label' has dtype float64"):
        exe.run(main, feed={"x": np.ones((1, 3), np.float32), "label": np.ones((1, 1))},
                fetch_list=[loss], scope=scope)


# -- 3. user arrays in the scope -----------------------------------------------------------

def test_a_users_jax_array_is_never_donated_and_may_be_set_twice():
    main, startup, loss = classifier()
    scope, exe = started(startup)
    params = [p.name for p in main.all_parameters()]
    mine = {n: jnp.array(scope[n]) for n in params}
    for n, arr in mine.items():
        scope.var(n).get_tensor().set(arr)
    # one buffer under two state names: the two weights' velocities
    velocities = sorted(n for n in scope.keys() if "velocity" in n)
    shared = jnp.zeros(scope[velocities[0]].shape, jnp.float32)
    scope[velocities[0]] = shared
    twin = [n for n in velocities[1:] if scope[n].shape == shared.shape]
    for n in twin:
        scope[n] = shared
    for _ in range(2):
        exe.run(main, feed=feed_xy([0, 1, 2]), fetch_list=[loss], scope=scope)
    for n, arr in mine.items():  # still readable and unchanged
        assert not np.array_equal(np.asarray(arr), scope[n])
    np.testing.assert_array_equal(np.asarray(shared), 0)


# -- 4. fc on an integer input ----------------------------------------------------------

def test_fc_on_an_int64_input_is_refused_at_the_call_site():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("ids", [-1, 2], "int64")
        with pytest.raises(ProgramError, match=r"fc at .*test_refuse_bad_data.py:\d+: input "
                                               r"'ids' is int64"):
            layers.fc(x, 3)
    assert not main.global_block().ops


# -- one_hot ids out of range (Paddle raises unless allow_out_of_range) -----------------------
def _one_hot_program(allow_out_of_range):
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        ids = graphc.data("ids", [-1, 1], "int64")
        out = layers.one_hot(ids, 3, allow_out_of_range=allow_out_of_range)
    return main, startup, out


@pytest.mark.parametrize("bad", [3, -1])
def test_one_hot_id_outside_depth_is_refused(bad):
    main, startup, out = _one_hot_program(False)
    scope, exe = started(startup)
    feed = {"ids": np.array([[0], [bad]], np.int64)}
    with pytest.raises(DataError, match=f"holds {bad}"):
        exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    with pytest.raises(DataError, match=f"holds {bad}"):  # the interpreter agrees
        run_graph(lower(main), {}, feed)


def test_one_hot_allow_out_of_range_gives_zero_rows():
    main, startup, out = _one_hot_program(True)
    scope, exe = started(startup)
    got, = exe.run(main, feed={"ids": np.array([[2], [3], [-1]], np.int64)}, fetch_list=[out],
                   scope=scope)
    np.testing.assert_array_equal(got, [[0, 0, 1], [0, 0, 0], [0, 0, 0]])
