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
