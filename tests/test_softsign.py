"""softsign (Out = X / (1 + |X|)), the op added end to end by docs/adding_an_op.md's recipe:
NumPy reference on both backends, the closed-form gradient, row-wise LoD behaviour, and the
Fluid spelling. Its shape case, finite-difference check and round trip live with the other
ops' (tests/test_shape_inference.py, test_gradients.py, test_roundtrip.py)."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.ir.errors import ShapeError
from graphc.testing.lod import lod_grad_check, pool_reference


def softsign(x):
    return x / (1 + np.abs(x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_numpy_on_the_jitted_step_and_the_interpreter(dtype):
    value = np.array([[-3.0, -0.5, 0.0], [0.25, 2.0, 1e4]], dtype)
    x = graphc.data("x", [-1, 3], dtype)
    out = layers.softsign(x)
    assert (out.shape, out.dtype) == ((-1, 3), dtype)
    (got,) = graphc.Executor().run(feed={"x": value}, fetch_list=[out])
    np.testing.assert_allclose(got, softsign(value), rtol=1e-6)
    _, (ref,) = run_graph(graphc.lower(graphc.default_main_program()), {}, {"x": value},
                          [out.name])
    np.testing.assert_allclose(ref, softsign(value), rtol=1e-6)


def test_gradient_is_one_over_one_plus_abs_x_squared():
    value = np.linspace(-3, 3, 12).reshape(3, 4)
    x = graphc.data("x", [3, 4], "float64")
    x.stop_gradient = False
    loss = layers.reduce_sum(layers.softsign(x))
    append_backward(loss)
    (grad,) = graphc.Executor().run(feed={"x": value}, fetch_list=["x@GRAD"])
    np.testing.assert_allclose(grad, 1 / (1 + np.abs(value)) ** 2, rtol=1e-12)


def test_lod_input_is_taken_row_wise_and_keeps_its_lod():
    rng = np.random.default_rng(0)
    lengths = [[2, 0, 3]]
    tokens = rng.standard_normal((5, 3))
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    h = layers.softsign(x)
    assert h.lod_level == 1
    pooled = layers.sequence_pool(h, "sum")
    loss = layers.reduce_sum(layers.square(pooled))
    main = graphc.default_main_program()
    t = fluid.create_lod_tensor(tokens, lengths, fluid.CPUPlace())
    exe = graphc.Executor()
    (got,) = exe.run(main, feed={"x": t}, fetch_list=[pooled])
    np.testing.assert_allclose(got, pool_reference(softsign(tokens), lengths[0], "SUM"),
                               rtol=1e-12)
    lod_grad_check(main, loss, {"x": t}, ["x"], rng)  # finite differences over the tokens


def test_level_2_lod_is_kept_and_the_op_is_listed_as_taking_lod():
    x = graphc.data("x", [-1, 3], lod_level=2)
    assert layers.softsign(x).lod_level == 2
    with pytest.raises(ShapeError, match=r"ops that do: .*\bsoftsign\b"):
        layers.argmax(x, 1)  # arg_max takes no LoD value; the error lists the ops that do


def test_fluid_layers_spelling_resolves():
    assert fluid.layers.softsign is layers.softsign
    assert "softsign" in fluid.layers.__all__
