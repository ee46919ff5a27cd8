"""Issue 24's activation and elementwise math layers against NumPy references of Paddle 1.8's
formulas, through the reference interpreter and the jitted Executor; prelu, maxout, cumsum, the
sum/mul/rank/size/overflow-check layers, LoD, build-time errors and the Fluid signatures."""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
from graphc import layers
from graphc.backends.interpreter import run_graph
from graphc.build.backward import append_backward
from graphc.ir.errors import ShapeError
from graphc.testing.lod import lod_grad_check

SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# layer call -> NumPy reference (Paddle's formulas, defaults as Paddle's op makers)
REFERENCES = {
    "selu": (layers.selu,
             lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.exp(x) - SELU_ALPHA)),
    "selu-attrs": (lambda x: layers.selu(x, scale=2.0, alpha=0.5),
                   lambda x: 2.0 * np.where(x > 0, x, 0.5 * np.exp(x) - 0.5)),
    "elu": (layers.elu, lambda x: np.maximum(0, x) + np.minimum(0, np.exp(x) - 1)),
    "elu-alpha": (lambda x: layers.elu(x, alpha=-0.5),
                  lambda x: np.maximum(0, x) + np.minimum(0, -0.5 * (np.exp(x) - 1))),
    "relu6": (layers.relu6, lambda x: np.minimum(np.maximum(0, x), 6.0)),
    "relu6-threshold": (lambda x: layers.relu6(x, threshold=1.5),
                        lambda x: np.minimum(np.maximum(0, x), 1.5)),
    "stanh": (layers.stanh, lambda x: 1.7159 * np.tanh(0.67 * x)),
    "hard_sigmoid": (layers.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    "swish": (layers.swish, lambda x: x * _sigmoid(x)),
    "swish-beta": (lambda x: layers.swish(x, beta=2.0), lambda x: x * _sigmoid(2 * x)),
    "brelu": (layers.brelu, lambda x: np.clip(x, 0.0, 24.0)),
    "brelu-bounds": (lambda x: layers.brelu(x, -1.0, 2.0), lambda x: np.clip(x, -1.0, 2.0)),
    "soft_relu": (layers.soft_relu, lambda x: np.log1p(np.exp(np.clip(x, -40, 40)))),
    "soft_relu-threshold": (lambda x: layers.soft_relu(x, 1.0),
                            lambda x: np.log1p(np.exp(np.clip(x, -1, 1)))),
    "logsigmoid": (layers.logsigmoid, lambda x: np.log(_sigmoid(x))),
    "hard_swish": (layers.hard_swish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hard_swish-attrs": (lambda x: layers.hard_swish(x, 4.0, 5.0, 1.0),
                         lambda x: x * np.clip(x + 1, 0, 4) / 5),
    "thresholded_relu": (layers.thresholded_relu, lambda x: np.where(x > 1.0, x, 0)),
    "softplus": (layers.softplus, lambda x: np.log1p(np.exp(x))),
    "softshrink": (layers.softshrink,
                   lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0))),
    "softshrink-alpha": (lambda x: layers.softshrink(x, alpha=1.0),
                         lambda x: np.where(x > 1, x - 1, np.where(x < -1, x + 1, 0))),
    "hard_shrink": (layers.hard_shrink, lambda x: np.where(np.abs(x) > 0.5, x, 0)),
    "hard_shrink-threshold": (lambda x: layers.hard_shrink(x, threshold=1.0),
                              lambda x: np.where(np.abs(x) > 1.0, x, 0)),
    "tanh_shrink": (layers.tanh_shrink, lambda x: x - np.tanh(x)),
    "erf": (layers.erf, np.vectorize(math.erf)),
    "atan": (layers.atan, np.arctan),
    "cos": (layers.cos, np.cos),
    "sin": (layers.sin, np.sin),
    "ceil": (layers.ceil, np.ceil),
    "floor": (layers.floor, np.floor),
    "round": (layers.round, _round_half_away),
}
# on (-1, 1) or (0, inf) only
BOUNDED = {
    "acos": (layers.acos, np.arccos),
    "asin": (layers.asin, np.arcsin),
    "rsqrt": (layers.rsqrt, lambda x: 1 / np.sqrt(x)),
    "reciprocal": (layers.reciprocal, lambda x: 1 / x),
}
# the kinks, halves and thresholds themselves, and values either side of them
EDGES = np.array([-41.0, -6.5, -3.0, -2.5, -1.0, -0.5, -0.49, 0.0, 0.5, 0.51, 1.0, 1.5, 2.5,
                  3.0, 6.0, 6.2, 24.5, 41.0], dtype=np.float64)


def run_both(feeds: dict, outs: list, state: dict | None = None) -> list[np.ndarray]:
    """Fetch ``outs`` through the interpreter and the jitted Executor; they must agree."""
    program = graphc.default_main_program()
    _, interp = run_graph(graphc.lower(program), state or {}, feeds, [o.name for o in outs])
    scope = graphc.Scope()
    exe = graphc.Executor()
    if state:
        for name, value in state.items():
            scope[name] = value
    compiled = exe.run(program, feed=feeds, fetch_list=outs, scope=scope)
    for out, a, b in zip(outs, interp, compiled):
        a = np.asarray(a)
        assert a.dtype == np.dtype(out.dtype) and b.dtype == a.dtype, (out, a.dtype, b.dtype)
        assert len(out.shape) == a.ndim and all(d < 0 or d == s
                                                for d, s in zip(out.shape, a.shape)), out
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=1e-12 if a.dtype == np.float64 else 2e-6,
                                       atol=1e-7, err_msg=out.name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=out.name)
    return [np.asarray(a) for a in interp]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_layers_match_numpy(dtype):
    rng = np.random.default_rng(24)
    value = np.concatenate([EDGES, rng.standard_normal(18) * 3]).reshape(2, 3, 6).astype(dtype)
    bounded = np.concatenate([rng.uniform(-0.99, 0.99, 12)]).reshape(2, 1, 6).astype(dtype)
    positive = rng.uniform(0.1, 5.0, 12).reshape(2, 1, 6).astype(dtype)
    x = graphc.data("x", [-1, 3, 6], dtype)  # unknown batch
    b = graphc.data("b", [-1, 1, 6], dtype)
    p = graphc.data("p", [-1, 1, 6], dtype)
    outs = {name: fn(x) for name, (fn, _) in REFERENCES.items()}
    outs.update({name: fn(b if name in ("acos", "asin") else p)
                 for name, (fn, _) in BOUNDED.items()})
    for out in outs.values():
        assert out.dtype == dtype and out.shape[0] == -1
    got = dict(zip(outs, run_both({"x": value, "b": bounded, "p": positive},
                                  list(outs.values()))))
    tol = {"rtol": 1e-6 if dtype == "float32" else 1e-12, "atol": 1e-6 if dtype == "float32"
           else 1e-12}
    for name, (_, ref) in REFERENCES.items():
        want = ref(value.astype(np.float64))
        np.testing.assert_allclose(got[name], want, err_msg=name, **tol)
    for name, (_, ref) in BOUNDED.items():
        arg = bounded if name in ("acos", "asin") else positive
        np.testing.assert_allclose(got[name], ref(arg.astype(np.float64)), err_msg=name, **tol)


def test_round_takes_halves_away_from_zero_and_steps_have_zero_gradient():
    value = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -0.51], np.float64)
    x = graphc.data("x", [8], "float64")
    x.stop_gradient = False
    outs = [layers.round(x), layers.ceil(x), layers.floor(x)]
    loss = layers.reduce_sum(layers.sum([layers.elementwise_mul(o, x) for o in outs]))
    append_backward(loss)
    (r,) = run_both({"x": value}, outs[:1])
    np.testing.assert_array_equal(r, [-3, -2, -1, 1, 2, 3, 0, -1])
    # d/dx sum(step(x) * x) = step(x): the step's own gradient contributes nothing
    (grad,) = graphc.Executor().run(feed={"x": value}, fetch_list=["x@GRAD"])
    np.testing.assert_allclose(grad, _round_half_away(value) + np.ceil(value) + np.floor(value))


def test_activation_gradients_in_closed_form():
    value = np.array([-3.0, -0.7, -0.2, 0.3, 0.8, 4.0])
    x = graphc.data("x", [6], "float64")
    x.stop_gradient = False
    loss = layers.sum([layers.reduce_sum(layers.selu(x)), layers.reduce_sum(layers.swish(x)),
                       layers.reduce_sum(layers.softshrink(x, 0.5))])
    append_backward(loss)
    (grad,) = graphc.Executor().run(feed={"x": value}, fetch_list=["x@GRAD"])
    s = _sigmoid(value)
    want = (SELU_SCALE * np.where(value > 0, 1, SELU_ALPHA * np.exp(value))
            + s + value * s * (1 - s) + (np.abs(value) > 0.5))
    np.testing.assert_allclose(grad, want, rtol=1e-12)


def _prelu_ref(x, alpha, mode):
    shape = {"all": (), "channel": (1, -1, 1, 1), "element": (1,) + x.shape[1:]}[mode]
    a = alpha.reshape(shape)
    return np.where(x > 0, x, a * x)


@pytest.mark.parametrize("mode, alpha_shape", [("all", (1,)), ("channel", (1, 3, 1, 1)),
                                               ("element", (1, 3, 2, 2))])
def test_prelu_modes_and_their_parameter(mode, alpha_shape):
    rng = np.random.default_rng(1)
    value = rng.standard_normal((2, 3, 2, 2))
    x = graphc.data("x", [-1, 3, 2, 2], "float64")
    out = layers.prelu(x, mode, param_attr=fluid.ParamAttr(name="alpha"))
    block = graphc.default_main_program().global_block()
    alpha = block.var("alpha")
    assert tuple(alpha.shape) == alpha_shape and alpha.dtype == "float64"
    # initialised to 0.25 by the startup program
    scope = graphc.Scope()
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program(), scope=scope)
    (got,) = exe.run(feed={"x": value}, fetch_list=[out], scope=scope)
    np.testing.assert_allclose(got, _prelu_ref(value, np.full(alpha_shape, 0.25), mode))
    a = rng.uniform(-1, 1, alpha_shape)
    (got,) = run_both({"x": value}, [out], state={"alpha": a})
    np.testing.assert_allclose(got, _prelu_ref(value, a, mode), rtol=1e-12)


def test_prelu_rejects_a_bad_mode_and_unknown_channels():
    assert layers.prelu(graphc.data("s", [-1, 3], lod_level=1), "channel").lod_level == 1
    with pytest.raises(graphc.ProgramError, match="mode must be 'all', 'channel' or 'element'"):
        layers.prelu(graphc.data("x", [-1, 3]), "row")
    with pytest.raises(graphc.ProgramError, match=r"needs known dimensions after the batch"):
        layers.prelu(graphc.data("y", [-1, -1, 4, 4]), "channel")


@pytest.mark.parametrize("axis", [1, -1])
def test_maxout_takes_the_max_of_consecutive_channel_groups(axis):
    rng = np.random.default_rng(2)
    nchw = rng.standard_normal((2, 6, 3, 2)).astype("float32")
    value = nchw if axis == 1 else nchw.transpose(0, 2, 3, 1)
    x = graphc.data("x", [-1, *value.shape[1:]], "float32")
    out = layers.maxout(x, groups=3, axis=axis)
    (got,) = run_both({"x": value}, [out])
    want = nchw.reshape(2, 2, 3, 3, 2).max(axis=2)  # channel i*3+k -> output channel i
    np.testing.assert_array_equal(got, want if axis == 1 else want.transpose(0, 2, 3, 1))


def test_maxout_channels_must_divide_by_groups_at_build_time():
    x = graphc.data("x", [-1, 5, 4, 4])
    with pytest.raises(ShapeError, match=r"maxout.*channels 5 of X \[-1, 5, 4, 4\] must divide"):
        layers.maxout(x, groups=2)


def _cumsum_ref(x, axis, exclusive, reverse):
    x = np.flip(x, axis) if reverse else x
    out = np.cumsum(x, axis=axis)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reverse else out


def test_cumsum_axis_exclusive_reverse_on_floats_and_ints():
    rng = np.random.default_rng(3)
    fv = rng.standard_normal((2, 3, 4))
    iv = rng.integers(-50, 50, (2, 3, 4)).astype("int64")
    f = graphc.data("f", [-1, 3, 4], "float64")
    i = graphc.data("i", [-1, 3, 4], "int64")
    combos = [(None, None, None), (0, True, False), (1, False, True), (-2, True, True),
              (2, True, False)]
    outs = [layers.cumsum(v, axis=a, exclusive=e, reverse=r) for v in (f, i)
            for a, e, r in combos]
    assert [o.dtype for o in outs] == ["float64"] * 5 + ["int64"] * 5
    got = run_both({"f": fv, "i": iv}, outs)
    for k, (value, (a, e, r)) in enumerate([(v, c) for v in (fv, iv) for c in combos]):
        want = _cumsum_ref(value, -1 if a is None else a, bool(e), bool(r))
        np.testing.assert_allclose(got[k], want, rtol=1e-12, err_msg=str((a, e, r)))


def test_sum_mul_rank_size_and_the_overflow_checks():
    rng = np.random.default_rng(4)
    av, bv = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    yv = rng.standard_normal((4, 5))
    a = graphc.data("a", [-1, 3, 4], "float64")
    b = graphc.data("b", [-1, 3, 4], "float64")
    y = graphc.data("y", [4, 5], "float64")
    bad = graphc.data("bad", [3], "float32")
    outs = [layers.sum([a, b, a]), layers.sum(a), layers.mul(a, y, x_num_col_dims=2),
            layers.mul(a, layers.reshape(y, [4, 5]), 2, 1), layers.rank(a), layers.size(a),
            layers.has_inf(bad), layers.has_nan(bad), layers.isfinite(bad)]
    assert outs[2].shape == (-1, 3, 5)
    assert [o.dtype for o in outs[4:]] == ["int32", "int64", "bool", "bool", "bool"]
    for case, flags in (([1.0, 2.0, 3.0], [False, False, True]),
                        ([1.0, np.inf, 3.0], [True, False, False]),
                        ([np.nan, -np.inf, 0.0], [True, True, False]),
                        ([np.nan, 1.0, 0.0], [False, True, False])):
        got = run_both({"a": av, "b": bv, "y": yv, "bad": np.array(case, "float32")}, outs)
        np.testing.assert_allclose(got[0], 2 * av + bv, rtol=1e-12)
        np.testing.assert_array_equal(got[1], av)
        np.testing.assert_allclose(got[2], av @ yv, rtol=1e-12)
        np.testing.assert_allclose(got[3], av @ yv, rtol=1e-12)
        assert got[4].tolist() == [3] and got[5].tolist() == [24]
        assert [g.tolist() for g in got[6:]] == [[f] for f in flags], case


def test_lod_input_is_taken_row_wise_and_keeps_its_lod():
    rng = np.random.default_rng(5)
    lengths = [[2, 0, 3]]
    tokens = rng.standard_normal((5, 3))
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    outs = [layers.selu(x), layers.hard_swish(x), layers.softshrink(x)]
    assert all(o.lod_level == 1 for o in outs)
    pooled = layers.sequence_pool(layers.sum([outs[0], outs[1]]), "sum")
    loss = layers.reduce_sum(layers.square(pooled))
    main = graphc.default_main_program()
    t = fluid.create_lod_tensor(tokens, lengths, fluid.CPUPlace())
    exe = graphc.Executor()
    exe.run(graphc.default_startup_program())
    (got,) = exe.run(main, feed={"x": t}, fetch_list=[outs[0]], return_numpy=False)
    np.testing.assert_allclose(np.asarray(got), REFERENCES["selu"][1](tokens), rtol=1e-12)
    lod_grad_check(main, loss, {"x": t}, ["x"], rng)


def test_bad_dtypes_raise_shape_errors_naming_the_layer():
    x = graphc.data("x", [-1, 3], "int64")
    # -- unitops: the layer's Paddle 1.8 dtype check (ArgumentDtypeError, a ShapeError and a
    # TypeError) now speaks before the op's inference
    with pytest.raises(ShapeError, match=r"elu: 'x' \(x\) must be a float16/float32/float64 "
                                         r"tensor, got int64"):
        layers.elu(x)
    with pytest.raises(ShapeError, match=r"cumsum.*axis 2 is out of range for rank 2"):
        layers.cumsum(graphc.data("y", [-1, 3]), axis=2)


SLICE = ("selu elu relu6 stanh hard_sigmoid swish brelu soft_relu logsigmoid hard_swish "
         "thresholded_relu softplus softshrink hard_shrink tanh_shrink erf atan rsqrt ceil floor "
         "cos acos asin sin round reciprocal prelu maxout cumsum sum mul rank size has_inf "
         "has_nan isfinite").split()
API_LIST = Path(__file__).resolve().parents[1] / ".." / "shared" / "reference" / \
    "paddle-fluid-api.txt"


def _reference_signatures() -> dict[str, list[str]]:
    for path in (API_LIST, Path("/work/shared/reference/paddle-fluid-api.txt")):
        if path.exists():
            break
    else:
        pytest.skip("the Paddle Fluid API list is not here")
    sigs: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"paddle\.fluid\.layers\.(\w+)\((.*?)\)(\s|$)", line)
        if m and m.group(1) in SLICE:
            sigs.setdefault(m.group(1), []).append(m.group(2))
    return sigs


def test_fluid_spellings_resolve_with_paddles_signatures():
    sigs = _reference_signatures()
    for name in SLICE:
        fn = getattr(fluid.layers, name)
        assert fn is getattr(layers, name) and name in fluid.layers.__all__
        ours = ", ".join(p.name if p.default is inspect.Parameter.empty
                         else f"{p.name}={p.default!r}"
                         for p in inspect.signature(fn).parameters.values())
        assert ours in sigs[name], (name, ours, sigs[name])
