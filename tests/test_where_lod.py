"""layers.where as a one-sequence LoD value (issue 24): the rows through gather_nd, gather,
cast, elementwise, the LoD-aware reductions and fetches, against NumPy, both backends."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc import layers
from graphc.backends.interpreter import run_graph

X = np.arange(12, dtype="float32").reshape(4, 3) - 5.0
MASKS = {  # [4, 3] masks: some, no and every element true
    "some": np.array([[0, 2, 0], [1, 0, 0], [0, 0, 0], [0, -1, 3]], "float32"),
    "none": np.zeros((4, 3), "float32"),
    "all": np.ones((4, 3), "float32"),
}


@pytest.fixture(scope="module")
def chain():
    """One program (and one Executor: its compiled step is reused across masks)."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [4, 3], dtype="float32")
        m = graphc.data("m", [4, 3], dtype="float32")
        idx = layers.where(m != 0)                       # [n, 2]
        picked = layers.gather_nd(x, idx)                # [n]
        rows_idx = layers.where(layers.reduce_sum(m, dim=1) != 0)  # [r, 1]
        outs = {
            "idx": idx, "picked": picked, "shape": layers.shape(idx),
            "sum": layers.reduce_sum(picked), "reduce_mean": layers.reduce_mean(picked),
            "mean": layers.mean(picked), "max": layers.reduce_max(picked),
            "shifted": layers.elementwise_add(layers.cast(idx, "float32"),
                                              layers.fill_constant([2], "float32", 0.5)),
            "rows_gather_nd": layers.gather_nd(x, rows_idx),  # [r, 3]
            "rows_gather": layers.gather(x, rows_idx),
        }
    return main, outs, graphc.Executor()


def _reference(mv):
    idx = np.argwhere(mv != 0)
    picked = X[tuple(idx.T)]
    n = len(picked)
    rows = np.argwhere(mv.sum(1) != 0)[:, 0]
    return {"idx": idx, "picked": picked, "shape": [n, 2], "sum": [picked.sum()],
            "reduce_mean": [picked.sum() / max(n, 1)], "mean": [picked.sum() / max(n, 1)],
            "max": [picked.max() if n else -np.inf],
            "shifted": idx.astype("float32") + 0.5, "rows_gather_nd": X[rows],
            "rows_gather": X[rows]}


@pytest.mark.parametrize("mask", sorted(MASKS))
def test_the_chain_against_numpy_on_both_backends(chain, mask):
    main, outs, exe = chain
    mv = MASKS[mask]
    ref = _reference(mv)
    names = sorted(outs)
    fetched = exe.run(main, feed={"x": X, "m": mv}, fetch_list=[outs[k] for k in names],
                      scope=graphc.Scope())
    _, interp = run_graph(graphc.lower(main), {}, {"x": X, "m": mv},
                          [outs[k].name for k in names])
    for name, got, raw in zip(names, fetched, interp):
        want = np.asarray(ref[name])
        if hasattr(raw, "lengths"):  # a LoD value: its one sequence holds the real rows
            assert [np.asarray(raw.lengths[0]).tolist()] == [[len(want)]], name
            raw = np.asarray(raw.data)[:len(want)]
        for value in (got, raw):
            assert value.shape == want.shape, (name, value.shape, want.shape)
            np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=name)
    assert fetched[names.index("idx")].dtype == np.int64


def test_a_fetch_gives_the_real_rows_and_one_sequence(chain):
    main, outs, exe = chain
    mv = MASKS["some"]
    t, = exe.run(main, feed={"x": X, "m": mv}, fetch_list=[outs["picked"]],
                 scope=graphc.Scope(), return_numpy=False)
    # the one deviation from Paddle (docs/lod.md): the fetched value carries LoD [[n]]
    assert t.recursive_sequence_lengths() == [[4]]
    np.testing.assert_array_equal(np.array(t), X[tuple(np.argwhere(mv != 0).T)])


def test_jitted_gradient_of_the_masked_mean():
    # TDM's pattern: reduce_mean(gather_nd(cost, where(mask != 0))); d/dcost = mask / n
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        cost = graphc.data("cost", [5, 1], dtype="float32")
        mask = graphc.data("mask", [5, 1], dtype="float32")
        cost.stop_gradient = False
        loss = layers.reduce_mean(layers.gather_nd(cost, layers.where(mask != 0)))
        graphc.append_backward(loss)
    exe = graphc.Executor()
    cv = np.array([[0.5], [1.5], [-2.0], [4.0], [3.0]], "float32")
    for mv in ([[1], [0], [1], [1], [0]], [[0]] * 5):
        mv = np.array(mv, "float32")
        n = int((mv != 0).sum())
        lv, g = exe.run(main, feed={"cost": cv, "mask": mv},
                        fetch_list=[loss, "cost@GRAD"], scope=graphc.Scope())
        np.testing.assert_allclose(lv, [cv[mv != 0].sum() / max(n, 1)], rtol=1e-6)
        np.testing.assert_allclose(g, (mv != 0) / max(n, 1), rtol=1e-6)
    # the row count is a length, not a shape: every mask runs the one compiled step
    (prep,) = exe._prepared[main][1].values()
    assert len(prep.steps) == 1


def test_refusals_name_the_op():
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = graphc.data("x", [4], dtype="float32")
        flat = layers.where(x != 0)  # [n, 1]
        ids = layers.reshape(flat, [-1])  # 1-D: its tokens would be the coordinates
        with pytest.raises(graphc.GraphcError, match="gather_nd: Index"):
            layers.gather_nd(x, ids)
        # an op that is not row-wise refuses the rows, naming itself (docs/lod.md)
        with pytest.raises(graphc.GraphcError, match="op slice"):
            layers.slice(flat, axes=[1], starts=[0], ends=[1])
        with pytest.raises(graphc.GraphcError, match="op where_index"):
            layers.where(layers.where(x != 0) != 0)
