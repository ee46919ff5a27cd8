"""Issue 24's "things that stopped real programs" audit (stoppers24 block of
docs/porting_from_paddle.md): each fix checked against Paddle 1.8's documented behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph

pytestmark = pytest.mark.timeout(120)


def _both(main, startup, feed, fetch):
    """Fetch ``fetch`` (names) through the jitted Executor and the interpreter."""
    scope, exe = fluid.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    state = {v.name: np.asarray(scope[v.name]) for v in startup.list_vars() if v.persistable}
    jit = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    _, interp = run_graph(graphc.lower(main), state, feed, fetch)
    return [np.asarray(v) for v in jit], [np.asarray(v) for v in interp]


# -- an out= variable from create_tensor has no shape until the op writing it gives one -------
def test_create_tensor_filled_by_fill_constant_and_sums_out():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        t = fluid.layers.create_tensor("int64", name="t")
        fluid.layers.fill_constant([2, 3], "int64", 4, out=t)
        s = fluid.layers.create_tensor("float32", name="s")
        a = fluid.layers.fill_constant([2], "float32", 1.5)
        fluid.layers.sums([a, a], out=s)
    assert tuple(t.shape) == (2, 3) and tuple(s.shape) == (2,)
    for got in _both(main, startup, {}, ["t", "s"]):
        np.testing.assert_array_equal(got[0], np.full((2, 3), 4, "int64"))
        np.testing.assert_array_equal(got[1], [3.0, 3.0])
    with pytest.raises(TypeError, match="'out'.*must be a int64"):
        fluid.layers.fill_constant([1], "int64", 0, out=fluid.layers.create_tensor("float32"))
