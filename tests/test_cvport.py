"""What stopped PaddleCV 1.8 programs ported by the rule alone (cvport), each checked against
Paddle's documented operator behaviour, never against the program itself."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError

pytestmark = pytest.mark.timeout(120)


# -- concat of inputs of different ranks ------------------------------------------------------
def _concat_reference(xs, axis):
    """Paddle's concat kernel: rows are the first input's dimensions before axis, every input
    is viewed as rows x (its elements / rows), the columns are joined; Out has the first
    input's shape with the axis dimensions summed."""
    rows = int(np.prod(xs[0].shape[:axis]))
    cols = np.concatenate([x.reshape(rows, -1) for x in xs], axis=1)
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return cols.reshape(shape)


@pytest.mark.parametrize(("shapes", "axis", "declared"), [
    # CGAN's noise [N, 100] beside its label reshaped to [N, 1, 1, 1]
    ([(3, 5), (3, 1, 1, 1)], 1, [-1, 6]),
    ([(3, 2, 4), (3, 1, 4), (3, 3, 2, 2)], 1, [-1, 6, 4]),
    ([(2, 3, 1), (2, 3)], -2, [-1, 6, 1]),
])
def test_concat_of_different_ranks_joins_as_paddles_kernel_on_both_backends(shapes, axis,
                                                                            declared):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xs = [fluid.data(f"x{i}", [-1, *s[1:]], "float32") for i, s in enumerate(shapes)]
        out = fluid.layers.concat(xs, axis=axis)
    assert list(out.shape) == declared
    rng = np.random.default_rng(0)
    vals = [rng.standard_normal(s).astype("float32") for s in shapes]
    feed = {f"x{i}": v for i, v in enumerate(vals)}
    ref = _concat_reference(vals, axis % len(shapes[0]))
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out])
    np.testing.assert_array_equal(got, ref)
    _, (interp,) = run_graph(graphc.lower(main), {}, feed, [out.name])
    np.testing.assert_array_equal(np.asarray(interp), ref)


@pytest.mark.parametrize(("shapes", "match"), [
    ([(-1, 5), (-1, 2, 3)], r"differ in rank.*after axis 1"),      # 6 columns, not 1
    ([(-1, 5, 2), (-1, 1)], r"differ in rank"),                    # [N, 1] cannot hold a trailing 2
    ([(-1, 5), (-1, 1, -1)], r"differ in rank"),                   # unknown trailing dims
    ([(4, 5), (3, 1, 1)], r"differ off axis 1"),                   # rows disagree
])
def test_concat_refuses_ranks_whose_columns_do_not_match(shapes, match):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        xs = [fluid.data(f"x{i}", list(s), "float32") for i, s in enumerate(shapes)]
        with pytest.raises(ShapeError, match=match):
            fluid.layers.concat(xs, axis=1)


# -- DataLoader: called before its generator is set; per-device LoD feeds ----------------------
def _lod_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2], "float32", lod_level=1)
        out = fluid.layers.sequence_pool(x, "sum")
    return main, x, out


def test_a_loader_called_before_its_generator_is_set_is_the_loader_itself():
    """PaddleCV video keeps ``model.dataloader()`` at build time and sets its generator later:
    Paddle's call returns the loader, iterating it starts the epoch."""
    from graphc.io import DataLoader, DataLoaderError
    main, x, out = _lod_program()
    loader = DataLoader.from_generator(feed_list=[x], capacity=2, iterable=True)
    kept = loader()
    assert kept is loader
    with pytest.raises(DataLoaderError, match="no generator set"):
        next(iter(kept))
    seqs = [np.arange(6, dtype="float32").reshape(3, 2), np.ones((1, 2), "float32")]
    kept.set_sample_list_generator(lambda: iter([[(s,) for s in seqs]]),
                                   places=fluid.cpu_places(1))
    exe = fluid.Executor(fluid.CPUPlace())
    (data,) = list(kept())
    (got,) = exe.run(main, feed=data, fetch_list=[out])
    np.testing.assert_array_equal(got, [[6.0, 9.0], [1.0, 1.0]])


def test_a_list_of_per_device_feed_dicts_takes_a_loaders_packed_lod_feeds():
    """A loader over a list of places yields one feed dict per device; their LoD feeds (packed
    by the loader's thread) join as the per-device LoDTensors they pack."""
    from graphc.io import DataLoader
    main, x, out = _lod_program()
    loader = DataLoader.from_generator(feed_list=[x], capacity=2, iterable=True)
    seqs = [np.full((2, 2), 2.0, "float32"), np.full((3, 2), 1.0, "float32")]
    loader.set_sample_list_generator(lambda: iter([[(s,) for s in seqs]]),
                                     places=fluid.cpu_places(1))
    (feeds,) = list(loader())
    assert isinstance(feeds, list) and len(feeds) == 1
    compiled = fluid.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(1))
    (got,) = fluid.Executor(fluid.CPUPlace()).run(compiled, feed=feeds, fetch_list=[out])
    np.testing.assert_array_equal(got, [[4.0, 4.0], [3.0, 3.0]])


# -- matmul of two LoD values of one LoD (video NeXtVLAD), and by a dense [K, N] Y ------------
@pytest.mark.parametrize("y_lod", [True, False])
def test_matmul_of_lod_values_multiplies_token_by_token_on_both_backends(y_lod):
    """Paddle's matmul of [T, M, K] and [T, K, N] (both sharing one LoD) is one product per
    token, Out sharing X's LoD; a dense square Y ([K, K], the rank of a [T, K] X) is the matrix
    every token meets, never paired with the tokens row for row."""
    from graphc.testing.lod_checks import fd_check, token_loss
    rng = np.random.default_rng(3)
    lengths = [[2, 0, 3]]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        if y_lod:
            x = fluid.data("x", [-1, 2, 3], "float64", lod_level=1)
            y = fluid.data("y", [-1, 3, 4], "float64", lod_level=1)
        else:
            x = fluid.data("x", [-1, 3], "float64", lod_level=1)
            y = fluid.data("y", [3, 3], "float64")
        x.stop_gradient = y.stop_gradient = False
        out = fluid.layers.matmul(x, y)
        assert out.lod_level == 1
        loss, w = token_loss(out, rng)
    xs = rng.standard_normal((5, 2, 3) if y_lod else (5, 3))
    ys = rng.standard_normal((5, 3, 4) if y_lod else (3, 3))
    ref = np.matmul(xs, ys)
    feed = {"x": fluid.create_lod_tensor(xs, lengths, fluid.CPUPlace()),
            "y": fluid.create_lod_tensor(ys, lengths, fluid.CPUPlace()) if y_lod else ys, **w}
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out],
                                                  return_numpy=False)
    assert got.recursive_sequence_lengths() == lengths
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-12)
    fd_check(main, loss, feed, ["x", "y"], rng, coords=4)


def test_matmul_refuses_a_lod_y_beside_a_dense_or_other_rank_x():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        y = fluid.data("y", [-1, 3, 4], "float32", lod_level=1)
        with pytest.raises(ShapeError, match="needs X a LoD value of the same LoD"):
            fluid.layers.matmul(fluid.data("x", [-1, 2, 3], "float32"), y)
        x2 = fluid.data("x2", [-1, 3], "float32", lod_level=1)
        with pytest.raises(ShapeError, match="needs X a LoD value of the same LoD"):
            fluid.layers.matmul(x2, fluid.data("y2", [-1, 3], "float32", lod_level=1))


def test_set_sample_generator_takes_a_whole_float_batch_size():
    """PaddleCV metric_learning passes ``train_batch_size / device_count`` (a float)."""
    from graphc.io import DataLoader, DataLoaderError
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [-1, 1], "float32")
    loader = DataLoader.from_generator(feed_list=[x], capacity=2, iterable=True)
    samples = [(np.array([float(i)], "float32"),) for i in range(5)]
    loader.set_sample_generator(lambda: iter(samples), batch_size=4 / 2,
                                places=fluid.cpu_places(1))
    got = [np.array(d[0]["x"]).ravel().tolist() for d in loader()]
    assert got == [[0.0, 1.0], [2.0, 3.0]]
    with pytest.raises(DataLoaderError, match="whole number"):
        loader.set_sample_generator(lambda: iter(samples), batch_size=2.5)


def test_fluid_reexports_load_and_set_program_state(tmp_path):
    """Paddle 1.8's ``fluid.load_program_state``/``fluid.set_program_state`` are fluid.io's."""
    assert fluid.load_program_state is fluid.io.load_program_state
    assert fluid.set_program_state is fluid.io.set_program_state
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 2], "float32")
        fluid.layers.fc(x, 3, param_attr=fluid.ParamAttr(name="w"), bias_attr=False)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    fluid.io.save_persistables(exe, str(tmp_path), main)
    state = fluid.load_program_state(str(tmp_path))
    w = np.asarray(fluid.global_scope().find_var("w").get_tensor())
    np.testing.assert_array_equal(state["w"], w)
    fluid.set_program_state(main, {"w": np.ones((2, 3), "float32")})
    np.testing.assert_array_equal(np.asarray(fluid.global_scope().find_var("w").get_tensor()),
                                  np.ones((2, 3)))
