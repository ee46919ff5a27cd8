"""What stopped porting PaddlePaddle/models 1.8 programs (PaddleCV image_classification,
gan/c_gan, PaddleRec ctr/dnn, PaddleNLP sentiment_classification) by renaming imports only."""

from __future__ import annotations

import contextlib
import importlib
import inspect

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc.fluid import MissingModuleError
from graphc.fluid.reader_decorators import ReaderError
from graphc.ir.errors import ProgramError, ShapeError


def _samples():
    return iter(range(20))


@pytest.mark.parametrize("batch", [graphc.batch, fluid.io.batch])
def test_batch_truncates_a_float_size_as_paddle_does(batch):
    # PaddleCV: paddle.batch(reader, batch_size=args.batch_size / dev_count)
    groups = list(batch(_samples, 8.0)())
    assert [len(g) for g in groups] == [8, 8, 4]
    assert [len(g) for g in batch(_samples, 6.9, drop_last=True)()] == [6, 6, 6]


@pytest.mark.parametrize("size", [0.5, 0.0, -2.0, 0, True, "8"])
def test_batch_still_refuses_a_size_that_is_not_positive(size):
    with pytest.raises(ReaderError, match="batch_size"):
        graphc.batch(_samples, size)


def test_dataset_factory_at_fluid_top_level():
    assert fluid.DatasetFactory is graphc.DatasetFactory
    assert fluid.DatasetFactory is fluid.dataset.DatasetFactory
    dataset = fluid.DatasetFactory().create_dataset("QueueDataset")
    assert type(dataset).__name__ == "QueueDataset"


_OPS = ("sigmoid", "logsigmoid", "exp", "tanh", "atan", "tanh_shrink", "softshrink", "sqrt",
        "rsqrt", "abs", "ceil", "floor", "cos", "acos", "asin", "sin", "round", "reciprocal",
        "square", "softplus", "softsign", "hard_shrink", "cumsum", "thresholded_relu", "gelu",
        "erf", "uniform_random")


def test_layers_ops_module_re_exports_the_generated_layers():
    ops = importlib.import_module("graphc.fluid.layers.ops")
    assert ops is importlib.import_module("graphc.layers.ops")
    for name in _OPS:
        assert getattr(ops, name) is getattr(fluid.layers, name), name
    assert set(_OPS) <= set(ops.__all__)
    with pytest.raises(fluid.MissingAPIError):
        ops.fc  # noqa: B018  (fc is fluid.layers', not layers.ops')


def test_layers_ops_sigmoid_runs():
    ops = importlib.import_module("graphc.fluid.layers.ops")
    x = fluid.data("x", [-1, 3], "float32")
    out = ops.sigmoid(ops.square(x))
    value = np.array([[-1.0, 0.0, 2.0]], "float32")
    (got,) = fluid.Executor(fluid.CPUPlace()).run(feed={"x": value}, fetch_list=[out])
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-value**2)), rtol=1e-6)


@pytest.mark.parametrize("name", ["nn", "tensor", "learning_rate_scheduler", "utils", "ops",
                                  "math_op_patch"])
def test_layers_submodules_are_graphc_layers_own_modules(name):
    alias = importlib.import_module(f"graphc.fluid.layers.{name}")
    assert alias is importlib.import_module(f"graphc.layers.{name}")


def test_layers_utils_nest_helpers():
    from graphc.fluid.layers import utils

    nest = {"b": [1, (2, 3)], "a": 4}
    assert utils.flatten(nest) == [4, 1, 2, 3]
    assert utils.pack_sequence_as(nest, [40, 10, 20, 30]) == {"a": 40, "b": [10, (20, 30)]}
    assert utils.map_structure(lambda x, y: x * y, [1, (2, 3)], [4, (5, 6)]) == [4, (10, 18)]
    assert utils.is_sequence((1,)) and not utils.is_sequence("ab")
    with pytest.raises(ProgramError, match="2 leaves"):
        utils.pack_sequence_as([1, [2]], [1])
    with pytest.raises(ProgramError, match="differ"):
        utils.map_structure(lambda x, y: x, [1, 2], [1, [2]])


def test_decay_step_counter_counts_from_begin():
    lrs = importlib.import_module("graphc.fluid.layers.learning_rate_scheduler")
    step = lrs._decay_step_counter(begin=5)
    assert (step.shape, step.dtype) == ((1,), "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    got = [float(exe.run(fetch_list=[step])[0][0]) for _ in range(3)]
    assert got == [5.0, 6.0, 7.0]
    assert lrs._decay_step_counter() is step  # one counter per program, as Paddle's


def test_global_learning_rate_is_the_lr_variable():
    x = fluid.data("x", [-1, 2], "float32")
    loss = fluid.layers.reduce_mean(fluid.layers.fc(x, 1))
    opt = fluid.optimizer.Momentum(learning_rate=0.125, momentum=0.9)
    assert opt._global_learning_rate() is None  # Paddle: none before minimize
    opt.minimize(loss)
    lr = opt._global_learning_rate()
    assert lr is opt._global_learning_rate(fluid.default_main_program())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    (got,) = exe.run(feed={"x": np.ones((2, 2), "float32")}, fetch_list=[lr])
    np.testing.assert_allclose(got, [0.125])
    assert opt._global_learning_rate(fluid.Program()) is None


def test_global_learning_rate_of_a_schedule_is_the_schedule():
    lr = fluid.layers.exponential_decay(0.1, 10, 0.5)
    assert fluid.optimizer.SGD(learning_rate=lr)._global_learning_rate() is lr


def test_wrapped_decorator_keeps_signatures():
    from graphc.fluid.wrapped_decorator import signature_safe_contextmanager, wrap_decorator

    @signature_safe_contextmanager
    def guard(tag, depth=1):
        """Doc."""
        yield (tag, depth)

    assert list(inspect.signature(guard).parameters) == ["tag", "depth"]
    assert guard.__name__ == "guard" and guard.__doc__ == "Doc."
    with guard("t") as got:
        assert got == ("t", 1)
    assert isinstance(guard("t"), contextlib.AbstractContextManager)

    def twice(func):
        return lambda *a, **k: 2 * func(*a, **k)

    @wrap_decorator(twice)
    def add(a, b=1):
        return a + b

    assert add(3) == 8 and list(inspect.signature(add).parameters) == ["a", "b"]


def test_fill_constant_with_a_variable_shape_folds_it_when_traced():
    # Paddle 1.8 takes a shape Variable (or Variable elements, e.g. shape(x)[0]); graphc folds
    # such shape tensors when the step is traced (tests/test_porting_blockers_more.py)
    x = fluid.data("x", [-1, 4], "float32")
    x_shape = fluid.layers.shape(x)
    ones = fluid.layers.fill_constant(shape=[x_shape[0], 1], dtype="float32", value=1.0)
    like = fluid.layers.fill_constant(shape=x_shape, dtype="float32", value=2.0)
    assert ones.shape == (-1, 1) and like.shape == (-1, 4)
    got = fluid.Executor(fluid.CPUPlace()).run(
        feed={"x": np.zeros((3, 4), "float32")}, fetch_list=[ones, like])
    np.testing.assert_array_equal(got[0], np.ones((3, 1), "float32"))
    np.testing.assert_array_equal(got[1], np.full((3, 4), 2, "float32"))
    with pytest.raises(ShapeError, match=r"fill_constant: argument shape\[0\].*data values"):
        fluid.layers.fill_constant(shape=[fluid.data("n", [1], "int32"), 1], dtype="float32",
                                   value=1.0)


def test_fill_constant_still_takes_int_like_shapes():
    out = fluid.layers.fill_constant(shape=(np.int64(2), 3.0), dtype="int64", value=7)
    assert out.shape == (2, 3)


@pytest.mark.parametrize("module", ["graphc.fluid.incubate.no_such",
                                    "graphc.fluid.layers.no_such", "graphc.fluid.no_such",
                                    "graphc.fluid.transpiler.no_such"])
def test_unknown_fluid_submodules_raise_missing_module_error(module):
    with pytest.raises(MissingModuleError, match="docs/porting_from_paddle.md") as info:
        importlib.import_module(module)
    assert info.value.name == module
    assert isinstance(info.value, ImportError)


def test_advised_modules_keep_their_advice():
    # (dygraph's own modules are test_fluid_surface's: importing them sets fluid.dygraph)
    with pytest.raises(MissingModuleError, match="custom operators"):
        importlib.import_module("graphc.fluid.load_op_library")
