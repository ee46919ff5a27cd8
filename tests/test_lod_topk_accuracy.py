"""top_k and accuracy(k>1) on LoD inputs (issue 24): row-wise per token, and accuracy counts
the real tokens only (the packed buffer's padding rows are no samples)."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.testing.lod import as_feed


@pytest.mark.parametrize("interpreter", [False, True], ids=["jax", "interpreter"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_topk_and_accuracy_on_lod_rows(k, interpreter):
    rng = np.random.RandomState(k)
    x_val = rng.rand(5, 6).astype("float32")
    label_val = rng.randint(0, 6, (5, 1)).astype("int64")
    x = graphc.data("x", [-1, 6], "float32", lod_level=1)
    label = graphc.data("label", [-1, 1], "int64", lod_level=1)
    values, indices = layers.topk(x, k)
    acc = layers.accuracy(x, label, k=k)
    place = fluid.CPUPlace()
    feed = {"x": fluid.create_lod_tensor(x_val, [[2, 3]], place),
            "label": fluid.create_lod_tensor(label_val, [[2, 3]], place)}
    order = np.argsort(-x_val, axis=1, kind="stable")[:, :k]
    want_acc = np.mean([label_val[i, 0] in order[i] for i in range(5)])
    names = [values.name, indices.name, acc.name]
    if interpreter:
        main = graphc.default_main_program()
        packed = {name: as_feed(main, name, value) for name, value in feed.items()}
        _, got = run_graph(graphc.lower(main), {}, packed, names)
    else:
        got = graphc.Executor().run(feed=feed, fetch_list=names, return_numpy=False)
    got_values, got_indices, got_acc = (np.asarray(getattr(g, "data", g))[:5] for g in got)
    np.testing.assert_array_equal(got_indices[:5], order)
    np.testing.assert_allclose(got_values[:5], np.take_along_axis(x_val, order, 1))
    np.testing.assert_allclose(np.asarray(got[2]).reshape(-1), [want_acc], rtol=1e-6)
    assert got_acc.size == 1
