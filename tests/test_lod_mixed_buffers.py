"""LoD values of one token count held in buffers of different sizes (a per-sequence value
beside a reshaped and reduced one, as PaddleRec's tagspace hinge loss), and dense values sized
by a LoD value's token count (``fill_constant([layers.shape(x)[0], 1])``): Paddle pairs them
token for token, so does graphc (moving one into the other's buffer), gradients included."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.interpreter import run_graph
from graphc.testing.lod import as_feed
from graphc.testing.lod_checks import fd_check, token_loss


def _hinge(n: int, neg: int, rng):
    """loss = max(0, margin - pos + max over each sequence's neg values), pos one token per
    sequence, neg `neg` tokens per sequence reshaped to one row of `neg` and reduced."""
    pos = fluid.data("pos", [-1, 1], "float64", lod_level=1)
    negs = fluid.data("negs", [-1, 1], "float64", lod_level=1)
    pos.stop_gradient = negs.stop_gradient = False
    worst = layers.reduce_max(layers.sequence_reshape(negs, new_dim=neg), dim=1, keep_dim=True)
    margin = layers.fill_constant([layers.shape(pos)[0], 1], "float64", 0.1)
    part = layers.elementwise_add(layers.elementwise_sub(margin, pos), worst)
    zero = layers.fill_constant([layers.shape(part)[0], 1], "float64", 0.0)
    hinge = layers.elementwise_max(zero, part)
    feeds = {"pos": fluid.create_lod_tensor(rng.standard_normal((n, 1)), [[1] * n],
                                            fluid.CPUPlace()),
             "negs": fluid.create_lod_tensor(rng.standard_normal((n * neg, 1)), [[neg] * n],
                                             fluid.CPUPlace())}
    return hinge, feeds


def test_tokens_in_buffers_of_other_sizes_meet_token_for_token():
    rng = np.random.default_rng(0)
    n, neg = 3, 5
    hinge, feeds = _hinge(n, neg, rng)
    assert hinge.lod_level == 1
    pos = np.asarray(feeds["pos"])[:, 0]
    worst = np.asarray(feeds["negs"]).reshape(n, neg).max(1)
    want = np.maximum(0.0, 0.1 - pos + worst)[:, None]
    main = graphc.default_main_program()
    (got,) = graphc.Executor().run(main, feed=feeds, fetch_list=[hinge], return_numpy=False)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    assert got.recursive_sequence_lengths() == [[1] * n]
    packed = {k: as_feed(main, k, v) for k, v in feeds.items()}
    _, (ref,) = run_graph(graphc.lower(main), {}, packed, [hinge.name])
    np.testing.assert_allclose(np.asarray(ref.data)[:n], want, rtol=1e-12)
    # a LoD value's token count (layers.shape(x)[0]) is data: [count, ...]
    (shape,) = graphc.Executor().run(main, feed=feeds, fetch_list=[layers.shape(hinge)])
    np.testing.assert_array_equal(shape, [n, 1])


def test_gradients_flow_back_into_each_buffer():
    rng = np.random.default_rng(1)
    hinge, feeds = _hinge(4, 5, rng)
    loss, weights = token_loss(hinge, rng)
    fd_check(graphc.default_main_program(), loss, {**feeds, **weights}, ["pos", "negs"], rng)


def test_token_counts_that_differ_are_refused():
    a = fluid.data("a", [-1, 1], "float32", lod_level=1)
    b = fluid.data("b", [-1, 1], "float32", lod_level=1)
    rows = layers.reduce_sum(layers.sequence_reshape(b, new_dim=20), dim=1, keep_dim=True)
    out = layers.elementwise_add(a, rows)  # 3 tokens beside 2 rows, in another buffer
    feeds = {"a": fluid.create_lod_tensor(np.ones((3, 1), "float32"), [[1, 1, 1]],
                                          fluid.CPUPlace()),
             "b": fluid.create_lod_tensor(np.ones((40, 1), "float32"), [[20, 20]],
                                          fluid.CPUPlace())}
    with pytest.raises(DataError, match="as many tokens"):
        graphc.Executor().run(feed=feeds, fetch_list=[out])
