"""Paddle 1.8's argument checks of the layers its unit tests' API and error classes exercise
(unitops): the error type Paddle raises (TypeError, AssertionError) as graphc's typed errors,
and split's int-Variable ``dim``/sections against NumPy through interpreter and Executor."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.ir.errors import (
    ArgumentAssertionError,
    ArgumentTypeError,
    ArgumentValueError,
    DtypeError,
    GraphcError,
    ProgramError,
    ShapeError,
)


def data(name, shape, dtype="float32"):
    return fluid.data(name, shape, dtype)


def lod_tensor():
    return fluid.create_lod_tensor(np.array([[-1.0]]), [[1]], fluid.CPUPlace())


# (case, layer call on a fresh program) -> each must be an ArgumentTypeError: a ProgramError
# naming the layer and the argument, and the TypeError Paddle 1.8 raises
TYPE_ERRORS = {
    "cast-int16-x": lambda: layers.cast(data("x", [4], "int16"), "int32"),
    "cast-int16-dtype": lambda: layers.cast(data("x", [4], "int32"), "int16"),
    "cast-lodtensor": lambda: layers.cast(lod_tensor(), "int32"),
    "clip-int": lambda: layers.clip(data("x", [1], "int32"), -1.0, 1.0),
    "clip-ndarray": lambda: layers.clip(np.ones((2, 4), "float32"), -1.0, 1.0),
    "mean-int": lambda: layers.mean(data("x", [12, 10], "int32")),
    "mean-number": lambda: layers.mean(12),
    "dropout-int": lambda: layers.dropout(data("x", [3, 4], "int32"), 0.5),
    "batch_norm-int": lambda: layers.batch_norm(data("x", [3, 4, 5, 6], "int32")),
    "cross_entropy-int": lambda: layers.cross_entropy(data("x", [3, 4], "int32"),
                                                      data("l", [3, 1], "int64")),
    "one_hot-float": lambda: layers.one_hot(data("x", [4, 1]), 4),
    "one_hot-float-depth": lambda: layers.one_hot(data("x", [4, 1], "int32"), 4.1),
    "one_hot-array-depth": lambda: layers.one_hot(data("x", [4, 1], "int32"), np.array([4])),
    "fluid.one_hot-float": lambda: fluid.one_hot(data("x", [4]), 4),
    "embedding-float-ids": lambda: layers.embedding(data("x", [4, 1]), (10, 4)),
    "embedding-int-table": lambda: layers.embedding(data("x", [4, 1], "int64"), (10, 4),
                                                    dtype="int64"),
    "matmul-int": lambda: layers.matmul(data("x", [2, 2], "int32"), data("y", [2, 2], "int32")),
    "matmul-number": lambda: layers.matmul(12, 12),
    "huber_loss-int": lambda: layers.huber_loss(data("x", [-1, 6], "int32"), data("y", [-1, 6]),
                                                1.0),
    "huber_loss-ndarray": lambda: layers.huber_loss(data("x", [-1, 6]),
                                                    np.ones((6, 6), "float32"), 1.0),
    "elementwise_add-uint8": lambda: layers.elementwise_add(data("x", [3], "uint8"),
                                                            data("y", [3], "uint8")),
    "elementwise_mul-lodtensor": lambda: layers.elementwise_mul(lod_tensor(), lod_tensor()),
    "expand-uint8": lambda: layers.expand(data("x", [4], "uint8"), [2]),
    "expand-lodtensor": lambda: layers.expand(lod_tensor(), [2, 2]),
    "softmax-int": lambda: layers.softmax(data("x", [4], "int32")),
    "softmax-lodtensor": lambda: layers.softmax(lod_tensor()),
    "sequence_expand_as-ndarray-y": lambda: layers.sequence_expand_as(
        fluid.data("x", [-1, 4], "float32", lod_level=1), np.ones((2, 4), "float32")),
    "mul-int": lambda: layers.mul(data("x", [2, 4], "int32"), data("y", [4, 3], "int32")),
    "sign-int64": lambda: layers.sign(data("x", [3], "int64")),
    "sqrt-int": lambda: layers.sqrt(data("x", [3], "int32")),
    "selu-int": lambda: layers.selu(data("x", [3], "int32")),
    "sum-int8": lambda: layers.sum([data("a", [3], "int8"), data("b", [3], "int8")]),
    "sums-int8": lambda: layers.sums([data("a", [3], "int8"), data("b", [3], "int8")]),
    "sums-numbers": lambda: layers.sums([11, 22]),
    "sums-out-int8": lambda: layers.sums([data("a", [3]), data("b", [3])],
                                         out=data("o", [3], "int8")),
    "assign-uint8": lambda: layers.assign(data("x", [4], "uint8")),
    "assign-uint8-array": lambda: layers.assign(np.array([[2, 2]], "uint8")),
    "assign-lodtensor": lambda: layers.assign(lod_tensor()),
    "reshape-int8": lambda: layers.reshape(data("x", [2, 25], "int8"), [2, 5, 5]),
    "reshape-shape-int": lambda: layers.reshape(data("x", [2, 25]), 1),
    "reshape-actual-shape-int": lambda: layers.reshape(data("x", [2, 25]), [25, 2],
                                                       actual_shape=1),
    "split-float-dim": lambda: layers.split(data("x", [4, 6]), 2, dim=1.5),
    "split-float-dim-var": lambda: layers.split(data("x", [4, 6]), 2,
                                                dim=data("d", [1], "float16")),
    "split-float-num": lambda: layers.split(data("x", [4, 6]), 2.1, dim=1),
    "fill_constant-int16": lambda: layers.fill_constant([1], "int16", 5),
    "fill_constant-uint8": lambda: layers.fill_constant([1], "uint8", 5),
    "fill_constant-shape-int": lambda: layers.fill_constant(1, "float32", 1),
    "fill_constant-shape-float": lambda: layers.fill_constant([1.1], "float32", 1),
    "fill_constant-out-dtype": lambda: layers.fill_constant([1], "float64", 5,
                                                            out=data("o", [1], "int32")),
    "fill_constant-out-ndarray": lambda: layers.fill_constant(
        [2, 2], "float64", 5, out=np.zeros((2, 2), "int32")),
}


@pytest.mark.parametrize("case", sorted(TYPE_ERRORS))
def test_bad_argument_types_are_type_errors(case):
    with pytest.raises(ArgumentTypeError) as info:
        TYPE_ERRORS[case]()
    assert isinstance(info.value, TypeError) and isinstance(info.value, ProgramError)
    layer = case.split("-")[0].removeprefix("fluid.")
    assert layer in str(info.value), info.value


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_inputs_still_pass_the_checks(dtype):
    x = data("x", [3, 4], dtype)
    for out in (layers.mean(x), layers.sqrt(x), layers.sign(x), layers.clip(x, 0.0, 1.0),
                layers.dropout(x, 0.5), layers.batch_norm(data("b", [2, 3, 4, 4], dtype))):
        assert out.dtype == dtype


def test_integer_ids_of_either_width_still_embed():
    # Paddle 1.8 takes int64 ids only; graphc's lookup reads int32 too and keeps doing so
    for dtype in ("int32", "int64"):
        ids = data(f"ids_{dtype}", [4, 1], dtype)
        assert layers.embedding(ids, (10, 3)).shape == (4, 3)


@pytest.mark.parametrize("dtype", ["uint4", "flaot32"])
def test_unknown_dtype_names_are_shape_and_type_errors(dtype):
    with pytest.raises(DtypeError) as info:
        fluid.data("x", [4], dtype)
    assert isinstance(info.value, ShapeError) and isinstance(info.value, TypeError)


def test_float_shape_tensor_is_a_shape_and_type_error():
    with pytest.raises(DtypeError, match="must be int32 or int64") as info:
        layers.fill_constant(data("s", [2], "float32"), "float32", 1.0)
    assert isinstance(info.value, TypeError)
    with pytest.raises(DtypeError):
        layers.fill_constant([data("b", [1], "bool"), 2], "float32", 1.0)


# Paddle 1.8 checks these with a bare ``assert``: ArgumentAssertionError is an
# ArgumentValueError (graphc's) and the AssertionError Paddle raises
ASSERTION_ERRORS = {
    "reshape-two-minus-ones": lambda x: layers.reshape(x, [-1, -1, 5]),
    "reshape-zero-past-rank": lambda x: layers.reshape(x, [2, 5, 5, 0]),
    "reshape-minus-two": lambda x: layers.reshape(x, [-1, -2, 5]),
    "fill_constant-empty-shape": lambda x: layers.fill_constant([], "float32", 1.0),
}


@pytest.mark.parametrize("case", sorted(ASSERTION_ERRORS))
def test_asserted_argument_rules_are_assertion_errors(case):
    with pytest.raises(ArgumentAssertionError) as info:
        ASSERTION_ERRORS[case](data("x", [2, 25]))
    assert isinstance(info.value, AssertionError)
    assert isinstance(info.value, ArgumentValueError)


def test_reshape_keeps_zero_and_one_minus_one():
    assert layers.reshape(data("x", [4, 6]), [0, -1, 3]).shape == (4, 2, 3)
    assert layers.fill_constant((2, 3.0), "int64", 7).shape == (2, 3)


def run_both(feeds: dict, outs: list) -> list[np.ndarray]:
    """``outs`` from the interpreter and the jitted Executor, which must agree."""
    program = graphc.default_main_program()
    _, interp = run_graph(graphc.lower(program), {}, feeds, [o.name for o in outs])
    compiled = graphc.Executor().run(program, feed=feeds, fetch_list=outs, scope=graphc.Scope())
    for a, b in zip(interp, compiled):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12)
    return [np.asarray(a) for a in interp]


def test_split_takes_int_variables_the_build_can_fold():
    x_np = np.arange(4 * 5 * 6, dtype="int32").reshape(4, 5, 6)
    x = data("x", [4, 5, 6], "int32")
    one32 = layers.fill_constant([1], "int32", 1)
    one64 = layers.fill_constant([1], "int64", 1)
    two64 = layers.fill_constant([1], "int64", 2)
    # sections [2, 1, -1] along dim 1, each given as an int Variable or an int
    parts = layers.split(x, [two64, one32, -1], dim=one64)
    more = layers.split(x, [2, 1, 2], dim=one32)
    # the dim from shape arithmetic: rank - 1 = 2
    last = layers.split(x, 3, dim=layers.fill_constant([1], "int32", 3) - 1)
    got = run_both({"x": x_np}, [*parts, *more, *last])
    want = np.split(x_np, [2, 3], 1) * 2 + np.split(x_np, 3, 2)
    assert len(got) == len(want) == 9
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_split_refuses_a_dim_computed_from_data():
    x = data("x", [4, 6])
    with pytest.raises(ShapeError, match="split: argument dim .*data values"):
        layers.split(x, 2, dim=data("d", [1], "int32"))


def test_fluid_op_imports_and_its_operator_refuses_with_advice():
    from graphc.fluid.op import Operator

    with pytest.raises(GraphcError, match="no per-op kernels") as info:
        Operator("scale", X="x", Out="y", scale=2.0)
    assert isinstance(info.value, AttributeError)  # MissingAPIError's Python side


def test_a_wrong_input_dtype_is_also_the_shape_error_it_was():
    # before these checks the op's inference refused it with a ShapeError; both hold now
    with pytest.raises(ShapeError) as info:
        layers.elu(data("x", [3], "int64"))
    assert isinstance(info.value, ArgumentTypeError)


def paddle_matmul(x, y, tx, ty):
    """Paddle's matmul in NumPy: a 1-D X is the row [1, K] and a 1-D Y the column [K, 1]
    before the transposes; the result loses the rows (1-D X) or columns (1-D Y) that are 1."""
    xm = x[None, :] if x.ndim == 1 else x
    ym = y[:, None] if y.ndim == 1 else y
    xm = np.swapaxes(xm, -1, -2) if tx else xm
    ym = np.swapaxes(ym, -1, -2) if ty else ym
    out = np.matmul(xm, ym)
    dims = list(out.shape)
    if x.ndim == 1 and dims[-2] == 1:
        del dims[-2]
    if y.ndim == 1 and dims[-1] == 1:
        del dims[-1]
    return out.reshape(dims or [1])


# (x shape, y shape, transpose_x, transpose_y, Paddle's output shape): transposed vectors
# are columns (x) or rows (y), so [3]^T @ [1, 4] is an outer product [3, 4]
MATMUL_VECTORS = [((1,), (4,), False, True, (4,)), ((3,), (1,), True, False, (3,)),
                  ((3,), (4,), True, True, (3, 4)), ((3,), (1, 4), True, False, (3, 4)),
                  ((3,), (4, 1), True, True, (3, 4)), ((3,), (2, 1, 4), True, False, (2, 3, 4)),
                  ((3, 1), (4,), False, True, (3, 4)), ((2, 1, 3), (4,), True, True, (2, 3, 4)),
                  ((5,), (5,), False, False, (1,)), ((5,), (2, 5, 4), False, False, (2, 4))]


@pytest.mark.parametrize("xs,ys,tx,ty,want", MATMUL_VECTORS)
def test_matmul_of_vectors_follows_paddles_rule(xs, ys, tx, ty, want):
    rng = np.random.default_rng(7)
    x_np, y_np = rng.standard_normal(xs), rng.standard_normal(ys)
    x, y = data("x", list(xs), "float64"), data("y", list(ys), "float64")
    out = layers.matmul(x, y, tx, ty)
    assert out.shape == want
    (got,) = run_both({"x": x_np, "y": y_np}, [out])
    ref = paddle_matmul(x_np, y_np, tx, ty)
    assert ref.shape == want
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    # a -1 declared dimension infers the same rank
    assert layers.matmul(data("xu", [-1] * len(xs), "float64"), data("yu", list(ys), "float64"),
                         tx, ty).shape[-1:] in ((want[-1],), (-1,))


POOL_VALUE_ERRORS = {
    "data-format": {"pool_padding": [1, 1], "data_format": "NHWCC"},
    "padding-name": {"pool_padding": "VALIDSAME", "data_format": "NHWC"},
    "valid-ceil": {"pool_padding": "VALID", "ceil_mode": True, "data_format": "NHWC"},
    "batch-pair": {"pool_padding": [[1, 1], [0, 0], [0, 0], [1, 1]], "data_format": "NHWC"},
    "channel-pair": {"pool_padding": [[0, 0], [1, 0], [0, 0], [0, 0]], "data_format": "NCHW"},
    "pool-type": {"pool_type": "min"},
}


@pytest.mark.parametrize("case", sorted(POOL_VALUE_ERRORS))
def test_pool2d_argument_values_are_value_errors(case):
    x = data("x", [2, 5, 5, 3])
    kw = {"pool_type": "max", **POOL_VALUE_ERRORS[case]}
    with pytest.raises(ArgumentValueError, match="pool2d") as info:
        layers.pool2d(x, pool_size=[3, 3], **kw)
    assert isinstance(info.value, ValueError)


def max_pool_ref(x, k, pads):
    """Max pooling of NCHW x, stride 1, padding [top, bottom, left, right] never chosen."""
    t, b, l, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf)
    h, w = xp.shape[2] - k + 1, xp.shape[3] - k + 1
    return np.stack([[xp[:, :, i:i + k, j:j + k].max(axis=(2, 3)) for j in range(w)]
                     for i in range(h)]).transpose(2, 3, 0, 1)


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_pool2d_takes_paddles_padding_pairs(fmt):
    rng = np.random.default_rng(3)
    x_nchw = rng.standard_normal((2, 3, 5, 4))
    x_np = x_nchw if fmt == "NCHW" else x_nchw.transpose(0, 2, 3, 1)
    x = data("x", list(x_np.shape), "float64")
    spatial = [[1, 0], [2, 1]]
    pairs = [[0, 0], [0, 0], *spatial] if fmt == "NCHW" else [[0, 0], *spatial, [0, 0]]
    by_pairs = layers.pool2d(x, 2, "max", 1, pairs, data_format=fmt)
    by_ints = layers.pool2d(x, 2, "max", 1, [1, 0, 2, 1], data_format=fmt)
    got_pairs, got_ints = run_both({"x": x_np}, [by_pairs, by_ints])
    ref = max_pool_ref(x_nchw, 2, [1, 0, 2, 1])
    ref = ref if fmt == "NCHW" else ref.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got_pairs, ref, rtol=1e-12)
    np.testing.assert_allclose(got_ints, ref, rtol=1e-12)


def test_slice_takes_int_variables_the_build_can_fold():
    x_np = np.random.default_rng(5).standard_normal((3, 4, 5, 6))
    x = data("x", [3, 4, 5, 6], "float64")
    minus_1 = layers.fill_constant([1], "int32", -1)
    minus_3 = layers.fill_constant([1], "int64", -3)
    a = layers.slice(x, axes=[0, 1, 3], starts=[minus_3, 0, 2], ends=[3, 100, minus_1])
    b = layers.slice(x, axes=[2], starts=[minus_1 - 1], ends=[100])
    got_a, got_b = run_both({"x": x_np}, [a, b])
    np.testing.assert_array_equal(got_a, x_np[-3:3, 0:100, :, 2:-1])
    np.testing.assert_array_equal(got_b, x_np[:, :, -2:])
    with pytest.raises(ProgramError, match="depend on data"):
        layers.slice(x, axes=[0], starts=[data("s", [1], "int32")], ends=[3])
    with pytest.raises(ProgramError, match="'starts' must be a list of ints; the Variable 'st'"):
        layers.slice(x, axes=[0, 1], starts=data("st", [2], "int32"), ends=[3, 3])
    whole = layers.slice(x, axes=[0, 1], starts=layers.fill_constant([2], "int64", 1),
                         ends=[3, 3])
    assert whole.shape == (2, 2, 5, 6)
