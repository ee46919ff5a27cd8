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
