"""What stopped PaddleNLP/PaddleRec 1.8 programs ported by the rule alone (nlpport block of
docs/porting_from_paddle.md), each checked against Paddle's documented behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError

pytestmark = pytest.mark.timeout(120)


# -- BeamSearchDecoder.tile_beam_merge_with_batch of a tensor with a second unknown dim ----
@pytest.mark.parametrize("shape,feed_shape", [([-1, -1, 4], (2, 3, 4)),
                                              ([-1, 3, -1, 2], (2, 3, 5, 2)),
                                              ([-1, 3, 4], (3, 3, 4))])
def test_tile_beam_merge_with_batch_keeps_unknown_inner_dims(shape, feed_shape):
    """seq2seq's attention decoder tiles its encoder output ``[batch, -1, hidden]``: each
    entry repeated beam_size times in a row, whatever the dimensions after the batch."""
    beam = 3
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape, "float32")
        out = fluid.layers.BeamSearchDecoder.tile_beam_merge_with_batch(x, beam)
    assert list(out.shape) == [-1, *shape[1:]]
    xv = np.random.default_rng(0).standard_normal(feed_shape).astype("float32")
    want = np.repeat(xv, beam, axis=0)
    (got,) = graphc.Executor().run(main, feed={"x": xv}, fetch_list=[out])
    np.testing.assert_array_equal(got, want)
    _, (ref,) = run_graph(graphc.lower(main), {}, {"x": xv}, [out.name])
    np.testing.assert_array_equal(ref, want)


# -- Program._lr_schedule_guard / _optimized_guard ------------------------------------------
def _noam(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def test_lr_schedule_guard_marks_the_schedule_and_the_rate_is_noams():
    """The Transformer's and BERT's train scripts compute their warmup rate inside
    ``program._lr_schedule_guard()``; the ops are the schedule's, the rate Paddle's noam."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        before = {id(op) for op in main.global_block().ops}
        with main._lr_schedule_guard():
            lr = fluid.layers.learning_rate_scheduler.noam_decay(16, 4) * 2.0
        # the step counter's increment goes first in the block, as Paddle places it
        guarded = [op for op in main.global_block().ops if id(op) not in before]
        fluid.optimizer.Adam(learning_rate=lr).minimize(loss)
    assert guarded and {op.role for op in guarded} == {"lr_sched"}
    assert main.global_block().ops[-1].role == "optimize"
    exe = graphc.Executor()
    exe.run(startup)
    xv = np.ones((2, 3), "float32")
    got = [float(np.asarray(exe.run(main, feed={"x": xv}, fetch_list=[lr])[0]).item())
           for _ in range(6)]
    np.testing.assert_allclose(got, [2.0 * _noam(s, 16, 4) for s in range(1, 7)], rtol=1e-6)


def test_optimized_guard_gives_the_optimize_role_and_names_a_bad_argument():
    """BERT's weight decay appends its update ops inside ``_optimized_guard([param, grad])``."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 3], "float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1, param_attr="w"))
        _, grads = zip(*fluid.optimizer.SGD(0.1).minimize(loss)[1])
        w = main.global_block().var("w")
        before = len(main.global_block().ops)
        with main._optimized_guard([w, grads[0]]):
            fluid.layers.assign(w * 0.5, w)
        assert {op.role for op in main.global_block().ops[before:]} == {"optimize"}
        with pytest.raises(ProgramError, match="_optimized_guard.*int"):
            with main._optimized_guard([w, 3]):
                pass


# -- clipping a row-sparse gradient (auto_dialogue_evaluation: is_sparse + ByValue) ---------
_C = np.array([[0.4, -0.7]] * 3, "float32")
_IDS = np.array([[1], [1], [3]], "int64")  # row 1 twice: its gradient rows sum to 2 * c


def _sparse_clip_step(clip):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, 1], "int64")
        c = fluid.data("c", [-1, 2], "float32")
        emb = fluid.layers.embedding(ids, [5, 2], is_sparse=True, param_attr=fluid.ParamAttr(
            name="emb", initializer=fluid.initializer.Constant(0.0)))
        loss = fluid.layers.reduce_sum(emb * c)
        fluid.optimizer.SGD(1.0, grad_clip=clip).minimize(loss)
    assert main.global_block().var("emb@GRAD").selected_rows
    scope = fluid.Scope()
    exe = graphc.Executor()
    exe.run(startup, scope=scope)
    feed = {"ids": _IDS, "c": _C}
    state = {v.name: np.asarray(scope[v.name]) for v in startup.list_vars() if v.persistable}
    exe.run(main, feed=feed, scope=scope)
    new_state, _ = run_graph(graphc.lower(main), state, feed, [])
    return np.asarray(scope["emb"]), np.asarray(new_state["emb"])


def _dense_grad():
    g = np.zeros((5, 2), "float32")
    np.add.at(g, _IDS[:, 0], _C)
    return g


@pytest.mark.parametrize("kind", ["value", "norm"])
def test_clipping_a_row_sparse_gradient_merges_its_rows_first(kind):
    """Paddle's clip and clip_by_norm kernels sum a SelectedRows' repeated rows, then clip:
    row 1's summed gradient [0.8, -1.4] clips to [0.5, -0.5] (clipping each copy first would
    give [0.8, -1.0]); by norm, the dense gradient's norm scales every row."""
    g = _dense_grad()
    if kind == "value":
        clip, want = fluid.clip.GradientClipByValue(0.5), -np.clip(g, -0.5, 0.5)
    else:
        clip = fluid.clip.GradientClipByNorm(1.0)
        want = -g / np.sqrt(np.sum(g * g))
    got, ref = _sparse_clip_step(clip)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-7)


# -- stoppers24: global-norm clipping of a row-sparse gradient --------------------------------
@pytest.mark.parametrize("clip_norm", [1.0, 5.0])
def test_global_norm_clip_of_a_row_sparse_gradient_merges_its_rows(clip_norm):
    """Paddle merges the rows before squaring: the norm is the dense gradient's, sqrt(3.25)
    (squaring each copy of row 1 would give sqrt(1.95)); clip_norm 5 leaves it as it is."""
    g = _dense_grad()
    norm = np.sqrt(np.sum(g.astype("float64") ** 2))
    want = -g * clip_norm / max(clip_norm, norm)
    got, ref = _sparse_clip_step(fluid.clip.GradientClipByGlobalNorm(clip_norm))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref, want, rtol=1e-6, atol=1e-7)


def test_squared_l2_norm_of_a_row_sparse_gradient_sums_repeated_rows_first():
    """The op itself (no merge before it): row 1 looked up twice counts as its summed row."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, 1], "int64")
        c = fluid.data("c", [-1, 2], "float32")
        emb = fluid.layers.embedding(ids, [5, 2], is_sparse=True, param_attr="emb")
        fluid.backward.append_backward(fluid.layers.reduce_sum(emb * c))
        block = main.global_block()
        out = block.create_var("sq", None, "float32")
        block.append_op("squared_l2_norm", {"X": block.var("emb@GRAD")}, {"Out": out})
    feed = {"ids": _IDS, "c": _C}
    want = np.sum(_dense_grad().astype("float64") ** 2)
    scope, exe = fluid.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {v.name: np.asarray(scope[v.name]) for v in startup.list_vars() if v.persistable}
    got = exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]
    _, (ref,) = run_graph(graphc.lower(main), state, feed, ["sq"])
    np.testing.assert_allclose(got, [want], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ref), [want], rtol=1e-6)


def _emb_model(is_sparse, need_clip):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, 1], "int64")
        y = fluid.data("y", [-1, 1], "float32")
        emb = fluid.layers.embedding(ids, [6, 3], is_sparse=is_sparse, param_attr="emb")
        pred = fluid.layers.fc(emb, 1, param_attr="w", bias_attr="b")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        clip = fluid.clip.GradientClipByGlobalNorm(0.05, need_clip=need_clip)
        fluid.optimizer.Adam(0.1, grad_clip=clip).minimize(loss)
    main._stoppers24_loss = loss.name  # for with_data_parallel
    return main, startup


@pytest.mark.parametrize("need_clip", [None, lambda p: p.name != "w", lambda p: p.name != "emb"],
                         ids=["all", "not-w", "not-emb"])
def test_global_norm_clip_of_an_is_sparse_embedding_trains_as_the_dense_one(need_clip):
    """Four Adam steps with repeated ids: is_sparse=True ends at the parameters of
    is_sparse=False (the clip binds: the norm is far above 0.05), whichever is clipped."""
    rng = np.random.default_rng(3)
    feeds = [{"ids": rng.integers(0, 6, (5, 1)).astype("int64"),
              "y": rng.normal(size=(5, 1)).astype("float32")} for _ in range(4)]
    finals = []
    for sparse in (False, True):
        main, startup = _emb_model(sparse, need_clip)
        assert main.global_block().var("emb@GRAD").selected_rows == sparse
        scope, exe = fluid.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        for f in feeds:
            exe.run(main, feed=f, scope=scope)
        finals.append({n: np.asarray(scope[n]) for n in ("emb", "w", "b")})
    for n in ("emb", "w", "b"):
        np.testing.assert_allclose(finals[1][n], finals[0][n], rtol=2e-6, atol=1e-7, err_msg=n)


def test_global_norm_clip_of_a_row_sparse_gradient_on_two_devices_equals_one():
    """Data parallel: the clip reads the gathered rows of both replicas, so two devices on
    halves of the batch end where one device on the whole batch does."""
    rng = np.random.default_rng(5)
    feeds = [{"ids": rng.integers(0, 6, (4, 1)).astype("int64"),
              "y": rng.normal(size=(4, 1)).astype("float32")} for _ in range(2)]
    finals = []
    for n in (1, 2):
        main, startup = _emb_model(True, None)
        scope, exe = fluid.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        program = main if n == 1 else fluid.CompiledProgram(main).with_data_parallel(
            loss_name=main._stoppers24_loss,
            places=fluid.cpu_places(n))
        for f in feeds:
            exe.run(program, feed=f, scope=scope)
        finals.append({k: np.asarray(scope[k]) for k in ("emb", "w", "b")})
    for k in ("emb", "w", "b"):
        np.testing.assert_allclose(finals[1][k], finals[0][k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_global_norm_clip_of_a_row_sparse_gradient_on_parameter_servers_is_refused_by_name():
    """The server receives the rows but not the other servers' norms' sparse chains: the
    transpile says so rather than clipping on a partial norm."""
    from graphc.distributed.pserver import Transpiler
    from graphc.passes import PassError

    main, startup = _emb_model(True, None)
    eps = ["127.0.0.1:6170", "127.0.0.1:6171"]
    with pytest.raises(PassError, match="row-sparse gradient of 'emb'.*clipped"):
        Transpiler(eps, trainers=1).transpile(main, startup).server_graph(eps[0])
# -- end stoppers24


# -- paddle.version (ELMo's train.py logs paddle.version.commit) ----------------------------
def test_paddle_version_module_names_the_followed_release(capsys):
    import subprocess
    import sys
    # `import paddle` alone binds paddle.version, as Paddle's package imports it
    code = "import graphc as paddle; print(paddle.version.full_version)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "1.8.0", out.stderr[-2000:]
    import graphc.version as version
    assert graphc.version is version
    assert version.full_version == "1.8.0"
    assert (version.major, version.minor, version.patch) == ("1", "8", "0")
    assert isinstance(version.commit, str) and version.commit
    fluid.require_version(version.full_version)  # the same release require_version checks
    version.show()
    assert capsys.readouterr().out.splitlines()[0] == "full_version: 1.8.0"
    assert version.mkl() == "OFF"


# -- one_hot of a LoD X (ELMo's next-word labels) -------------------------------------------
@pytest.mark.parametrize("v2", [False, True])
def test_one_hot_of_lod_ids_keeps_the_lod(v2):
    """Paddle's one_hot shares X's LoD with Out: one row per token."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        y = fluid.data("y", [-1, 1], "int64", lod_level=1)
        out = fluid.one_hot(y, depth=5) if v2 else fluid.layers.one_hot(y, depth=5)
        pooled = fluid.layers.sequence_pool(fluid.layers.reshape(out, [-1, 5]), "sum")
    assert out.lod_level == 1
    ids = np.array([[1], [4], [4], [0], [2]], "int64")
    feed = {"y": fluid.create_lod_tensor(ids, [[2, 3]], fluid.CPUPlace())}
    eye = np.eye(5, dtype="float32")[ids[:, 0]]
    want = eye[:, None, :] if v2 else eye
    got_out, got_pool = graphc.Executor().run(main, feed=feed, fetch_list=[out, pooled],
                                              return_numpy=False)
    assert got_out.lod() == [[0, 2, 5]]
    np.testing.assert_array_equal(np.array(got_out), want)
    np.testing.assert_array_equal(np.array(got_pool), [eye[:2].sum(0), eye[2:].sum(0)])
