"""Issue 24's initializers: TruncatedNormal (statistics of a seeded draw, on the jitted step
and the interpreter), Uniform's diagonal, Constant(force_cpu=) and init_on_cpu,
NumpyArrayInitializer and Bilinear against NumPy, and their Fluid spellings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphc.param_attr import ParamAttr

import graphc
import graphc.fluid as fluid
from graphc import initializer, layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ProgramError


def _init(init, shape, dtype="float32", name="p"):
    """The startup value of a parameter ``name`` created with ``init``."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        helper_block = startup.global_block()
        var = helper_block.create_var(name, shape, dtype, persistable=True)
        init(var, helper_block)
    scope = graphc.Scope()
    graphc.Executor().run(startup, scope=scope)
    return np.asarray(scope[name]), startup


# truncated at +-2 standard deviations: the std shrinks by this factor
_PHI2 = math.exp(-2.0) / math.sqrt(2 * math.pi)
_MASS = math.erf(2 / math.sqrt(2))
TRUNCATED_STD = math.sqrt(1 - 2 * 2 * _PHI2 / _MASS)


@pytest.mark.parametrize("loc, scale", [(0.0, 1.0), (1.5, 0.02)])
def test_truncated_normal_statistics(loc, scale):
    value, startup = _init(initializer.TruncatedNormal(loc, scale, seed=11), [200, 150])
    assert value.dtype == np.float32
    assert value.min() >= loc - 2 * scale - 1e-6 and value.max() <= loc + 2 * scale + 1e-6
    assert abs(value.mean() - loc) < 0.02 * scale
    assert abs(value.std() / scale - TRUNCATED_STD) < 0.01
    # a sixth of an untruncated normal's mass lies beyond 1 std; the truncated one's less
    beyond = np.mean(np.abs(value - loc) > scale)
    assert abs(beyond - (1 - math.erf(1 / math.sqrt(2)) - (1 - _MASS)) / _MASS) < 0.01
    # the interpreter draws the same numbers
    _, (ref,) = run_graph(graphc.lower(startup), {}, {}, ["p"])
    np.testing.assert_allclose(ref, value, rtol=1e-6)  # XLA may fuse * std + mean


def test_truncated_normal_seeds():
    a, _ = _init(initializer.TruncatedNormal(seed=3), [50])
    b, _ = _init(initializer.TruncatedNormal(seed=3), [50])
    c, _ = _init(initializer.TruncatedNormal(seed=4), [50])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_truncated_normal_in_a_layer_and_float64():
    x = layers.data("x", [-1, 3], "float64")
    layers.fc(x, 4, param_attr=ParamAttr(name="w", initializer=fluid.initializer.
                                         TruncatedNormalInitializer(scale=0.5, seed=2)))
    graphc.Executor().run(graphc.default_startup_program())
    w = np.asarray(graphc.global_scope()["w"])
    assert w.dtype == np.float64 and w.shape == (3, 4) and np.abs(w).max() <= 1.0


@pytest.mark.parametrize("shape, num, step", [([4, 5], 3, 6), ([3, 3], 3, 3), ([7], 1, 0)])
def test_uniform_diagonal(shape, num, step):
    value, _ = _init(fluid.initializer.Uniform(-0.5, 0.5, seed=5, diag_num=num, diag_step=step,
                                               diag_val=7.0), shape)
    flat = value.ravel()
    diag = np.arange(num) * (step + 1)
    np.testing.assert_array_equal(flat[diag], 7.0)
    rest = np.delete(flat, diag)
    assert rest.min() >= -0.5 and rest.max() < 0.5
    plain, _ = _init(fluid.initializer.Uniform(-0.5, 0.5, seed=5), shape)
    np.testing.assert_array_equal(rest, np.delete(plain.ravel(), diag))  # same draw


def test_uniform_diagonal_too_long_is_refused():
    with pytest.raises(ProgramError, match="only 6 elements"):
        _init(initializer.Uniform(diag_num=3, diag_step=2), [2, 3])


def test_constant_force_cpu_and_init_on_cpu():
    assert fluid.initializer.force_init_on_cpu() is False
    value, startup = _init(fluid.initializer.Constant(2.5, force_cpu=True), [2, 2])
    np.testing.assert_array_equal(value, 2.5)
    assert startup.global_block().ops[-1].attrs["force_cpu"] is True
    with fluid.initializer.init_on_cpu():
        assert fluid.initializer.force_init_on_cpu() is True
        _, startup = _init(fluid.initializer.ConstantInitializer(1.0), [2])
        assert startup.global_block().ops[-1].attrs["force_cpu"] is True
    assert fluid.initializer.force_init_on_cpu() is False
    _, startup = _init(fluid.initializer.Constant(1.0), [2])
    assert startup.global_block().ops[-1].attrs["force_cpu"] is False


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32"])
def test_numpy_array_initializer(dtype):
    array = (np.arange(12).reshape(3, 4) - 5).astype(dtype)
    value, _ = _init(fluid.initializer.NumpyArrayInitializer(array), [3, 4], dtype)
    np.testing.assert_array_equal(value, array)
    assert value.dtype == np.dtype(dtype)


def test_numpy_array_initializer_checks_the_shape():
    with pytest.raises(ProgramError, match="has shape"):
        _init(fluid.initializer.NumpyArrayInitializer(np.zeros((2, 2))), [4])


def _bilinear_reference(shape):
    """Written from the bilinear-interpolation kernel's definition, element by element."""
    k = shape[3]
    f = math.ceil(k / 2)
    center = (2 * f - 1 - f % 2) / (2 * f)
    w = np.zeros(shape, np.float32)
    for idx in np.ndindex(*shape):
        y, x = idx[2], idx[3]
        w[idx] = (1 - abs(x / f - center)) * (1 - abs(y / f - center))
    return w


@pytest.mark.parametrize("shape", [[2, 2, 4, 4], [3, 1, 3, 3], [1, 1, 1, 1]])
def test_bilinear_kernel(shape):
    value, _ = _init(fluid.initializer.Bilinear(), shape)
    np.testing.assert_allclose(value, _bilinear_reference(shape), rtol=1e-6)


def test_bilinear_stride_two_kernel_is_the_outer_product_of_quarter_weights():
    """K = 4 (a stride-2 upsampling): each row and column weighs 1/4, 3/4, 3/4, 1/4."""
    value, _ = _init(initializer.Bilinear(), [1, 1, 4, 4])
    line = np.array([0.25, 0.75, 0.75, 0.25], np.float32)
    np.testing.assert_allclose(value[0, 0], np.outer(line, line), rtol=1e-6)


@pytest.mark.parametrize("shape", [[3, 3], [2, 2, 3, 4]])
def test_bilinear_shape_rules(shape):
    with pytest.raises(ProgramError, match="4-D|square"):
        _init(initializer.Bilinear(), shape)


def test_fluid_spellings_resolve():
    assert fluid.initializer.TruncatedNormalInitializer is fluid.initializer.TruncatedNormal
    assert fluid.initializer.BilinearInitializer is fluid.initializer.Bilinear
    assert fluid.initializer.NumpyArrayInitializer is initializer.NumpyArrayInitializer
