"""gru_unit on LoD rows (PaddleCV's OCR attention decoder steps a beam's live candidates, a LoD
batch, through gru_unit): row by row equal to the dense op, the LoD kept, gradients over the
tokens by finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.runtime.lod import create_lod_tensor, unpack
from graphc.testing.lod import as_feed, lod_grad_check

D = 3
LENGTHS = [[2, 0, 3, 1]]  # an empty sequence among them


def _unit(x, h, origin_mode=False):
    return fluid.layers.gru_unit(x, h, 3 * D, param_attr=fluid.ParamAttr(name="w"),
                                 bias_attr=fluid.ParamAttr(name="b"), origin_mode=origin_mode)


@pytest.mark.parametrize("origin_mode", [False, True])
@pytest.mark.parametrize("hidden_lod", [True, False])
def test_lod_rows_step_as_the_dense_rows_do(origin_mode, hidden_lod):
    rng = np.random.default_rng(0)
    tokens = sum(LENGTHS[0])
    xv = rng.standard_normal((tokens, 3 * D)).astype("float32")
    hv = rng.standard_normal((tokens, D)).astype("float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        dense = _unit(fluid.data("xd", [-1, 3 * D]), fluid.data("hd", [-1, D]), origin_mode)
        # a dense hidden beside the LoD input pairs with its tokens row for row
        h = fluid.data("hl", [-1, D], lod_level=1 if hidden_lod else 0)
        lod = _unit(fluid.data("xl", [-1, 3 * D], lod_level=1), h, origin_mode)
    assert all(v.lod_level == 1 for v in lod) and all(v.lod_level == 0 for v in dense)
    feed = {"xd": xv, "hd": hv, "xl": create_lod_tensor(xv, LENGTHS),
            "hl": create_lod_tensor(hv, LENGTHS) if hidden_lod else hv}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    names = [v.name for v in (*dense, *lod)]
    jitted = exe.run(main, feed=feed, fetch_list=names, return_numpy=False)
    state = {n: np.asarray(fluid.global_scope().find_var(n).get_tensor()) for n in ("w", "b")}
    interp = run_graph(graphc.lower(main), state, {k: as_feed(main, k, v)
                                                   for k, v in feed.items()}, names)[1]
    for got in (jitted, [unpack(v) if not isinstance(v, np.ndarray) else v for v in interp]):
        for want, have in zip(got[:3], got[3:]):
            assert have.recursive_sequence_lengths() == LENGTHS
            np.testing.assert_allclose(np.array(have), np.array(want), rtol=1e-6, atol=1e-6)


def test_gradients_over_the_tokens_equal_finite_differences():
    rng = np.random.default_rng(1)
    tokens = sum(LENGTHS[0])
    x = fluid.data("x", [-1, 3 * D], "float64", lod_level=1)
    h = fluid.data("h", [-1, D], "float64", lod_level=1)
    x.stop_gradient = h.stop_gradient = False
    hidden, _, _ = _unit(x, h)
    loss = fluid.layers.reduce_sum(fluid.layers.square(hidden))
    feeds = {"x": create_lod_tensor(rng.standard_normal((tokens, 3 * D)), LENGTHS),
             "h": create_lod_tensor(rng.standard_normal((tokens, D)), LENGTHS)}
    state = {"w": rng.standard_normal((D, 3 * D)) * 0.5, "b": rng.standard_normal((1, 3 * D))}
    lod_grad_check(fluid.default_main_program(), loss, feeds, ["x", "h", "w"], rng,
                   state=state)
