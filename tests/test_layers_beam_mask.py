"""gather_tree (beam paths backtraced through the parent indices) and generate_mask_labels
against NumPy references of Paddle's algorithms, on the jitted step and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ShapeError
from graphc.runtime.lod import LoDError


def gather_tree_reference(ids, parents):
    """Paddle's gather_tree_op: per (batch, beam), start at the last step and follow parents."""
    out = np.empty_like(ids)
    steps, batch, beams = ids.shape
    for b in range(batch):
        for k in range(beams):
            if steps == 0:
                continue
            out[-1, b, k] = ids[-1, b, k]
            parent = parents[-1, b, k]
            for t in range(steps - 2, -1, -1):
                out[t, b, k] = ids[t, b, parent]
                parent = parents[t, b, parent]
    return out


def _run_both(feed, fetch):
    (got,) = graphc.Executor().run(feed=feed, fetch_list=[fetch])
    _, (ref,) = run_graph(graphc.lower(graphc.default_main_program()), {}, feed, [fetch.name])
    return np.asarray(got), np.asarray(ref)


@pytest.mark.parametrize("dtype, steps, batch, beams", [
    ("int64", 5, 2, 3), ("int32", 1, 3, 2), ("int64", 4, 1, 1), ("int32", 6, 2, 4)])
def test_gather_tree_matches_numpy(dtype, steps, batch, beams):
    rng = np.random.default_rng(steps * 10 + beams)
    ids = rng.integers(0, 50, (steps, batch, beams)).astype(dtype)
    parents = rng.integers(0, beams, (steps, batch, beams)).astype(dtype)
    x = graphc.data("ids", [steps, -1, beams], dtype)
    p = graphc.data("parents", [steps, -1, beams], dtype)
    out = layers.gather_tree(x, p)
    assert (out.shape, out.dtype) == ((steps, -1, beams), dtype)
    got, ref = _run_both({"ids": ids, "parents": parents}, out)
    want = gather_tree_reference(ids, parents)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)
    assert got.dtype == np.dtype(dtype)


def test_gather_tree_paddle_doc_example():
    ids = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], "int64")
    parents = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], "int64")
    x = fluid.layers.data("ids", [3, 2, 2], dtype="int64", append_batch_size=False)
    p = fluid.layers.data("parents", [3, 2, 2], dtype="int64",
                          append_batch_size=False)
    out = fluid.layers.gather_tree(x, p)
    got, ref = _run_both({"ids": ids, "parents": parents}, out)
    want = [[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)


def test_gather_tree_has_no_gradient_and_checks_its_inputs():
    x = graphc.data("ids", [3, -1, 2], "int64")
    out = layers.gather_tree(x, graphc.data("parents", [3, -1, 2], "int64"))
    assert out.stop_gradient
    from graphc.ir.opdef import NO_GRAD, get_op_def
    assert NO_GRAD in get_op_def("gather_tree").traits
    with pytest.raises(ShapeError, match="Parents .* must have the shape of Ids"):
        layers.gather_tree(x, graphc.data("bad", [3, -1, 4], "int64"))
    with pytest.raises(ShapeError, match="Ids must be int32/int64"):
        layers.gather_tree(graphc.data("f", [3, -1, 2]), graphc.data("q", [3, -1, 2], "int64"))


def test_gather_tree_fluid_spelling():
    assert fluid.layers.gather_tree is layers.gather_tree
    assert "gather_tree" in fluid.layers.__all__


# -- LoD level 3 (image -> object -> polygon -> points) -----------------------------------------

def _polygons(rng, images):
    """Samples nested 3 deep: per image, per object, per polygon, points [x, y]."""
    return [[[rng.standard_normal((int(rng.integers(3, 6)), 2)).astype("float32")
              for _ in range(int(rng.integers(1, 3)))]
             for _ in range(int(rng.integers(0, 3)))] for _ in range(images)]


def _lengths(samples):
    objs = [len(img) for img in samples]
    polys = [len(obj) for img in samples for obj in img]
    points = [len(poly) for img in samples for obj in img for poly in obj]
    return [objs, polys, points]


def _level3_program():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        segms = fluid.layers.data("segms", [2], dtype="float32", lod_level=3)
        h = layers.scale(segms, scale=2.0, bias=1.0)
        total = layers.reduce_sum(h)
    return main, startup, segms, h, total


def test_level3_feeds_and_fetches_through_the_data_feeder():
    rng = np.random.default_rng(3)
    samples = _polygons(rng, 4)
    main, _, segms, h, total = _level3_program()
    assert segms.lod_level == 3 and h.lod_level == 3 and total.lod_level == 0
    feed = fluid.DataFeeder([segms], fluid.CPUPlace()).feed([(s,) for s in samples])
    assert feed["segms"].recursive_sequence_lengths() == _lengths(samples)
    points = np.concatenate([p for img in samples for obj in img for p in obj])
    got, tot = graphc.Executor().run(main, feed=feed, fetch_list=[h, total],
                                     return_numpy=False)
    assert got.recursive_sequence_lengths() == _lengths(samples)
    np.testing.assert_allclose(np.asarray(got), points * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tot).reshape(()), (points * 2 + 1).sum(), rtol=1e-5)


def test_level3_create_lod_tensor_data_parallel_and_stacked_iterations():
    rng = np.random.default_rng(4)
    batches = [_polygons(rng, 4) for _ in range(2)]
    tensors = [fluid.create_lod_tensor(
        np.concatenate([p for img in b for obj in img for p in obj]), _lengths(b),
        fluid.CPUPlace()) for b in batches]
    assert tensors[0].recursive_sequence_lengths() == _lengths(batches[0])
    main, _, _, h, _ = _level3_program()
    exe = graphc.Executor()
    single = [exe.run(main, feed={"segms": t}, fetch_list=[h], return_numpy=False)[0]
              for t in tensors]
    cp = graphc.CompiledProgram(main).with_data_parallel(places=graphc.cpu_places(2))
    (split,) = exe.run(cp, feed={"segms": tensors[0]}, fetch_list=[h], return_numpy=False)
    assert split.recursive_sequence_lengths() == single[0].recursive_sequence_lengths()
    np.testing.assert_allclose(np.asarray(split), np.asarray(single[0]), rtol=1e-6)
    cp = graphc.CompiledProgram(main)
    cp.exec_strategy.num_iteration_per_run = 2
    (stacked,) = exe.run(cp, feed=[{"segms": t} for t in tensors], fetch_list=[h],
                         return_numpy=False)
    for one, many in zip(single, stacked):
        assert many.recursive_sequence_lengths() == one.recursive_sequence_lengths()
        np.testing.assert_allclose(np.asarray(many), np.asarray(one), rtol=1e-6)
    with pytest.raises(LoDError, match="at most 3 lists"):
        fluid.create_lod_tensor(np.zeros((3, 2), "float32"), [[1], [1], [1], [3]], None)
    with pytest.raises(LoDError, match="the last level's lengths sum to 2"):
        fluid.create_lod_tensor(np.zeros((3, 2), "float32"), [[1], [1], [2]], None)


def test_an_op_reading_the_lod_refuses_level_3():
    segms = graphc.data("segms", [-1, 2], lod_level=3)
    with pytest.raises(ShapeError, match="level-3 LoD value .* takes at most level 2"):
        layers.sequence_pool(segms, "sum")
    assert layers.scale(segms).lod_level == 3  # row-wise ops see the tokens: any level
