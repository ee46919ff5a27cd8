"""Finite-difference checks (float64, interpreter) of every differentiable op's gradient, and
of append_backward's naming, pruning, roles and scaling.

Each case builds a tiny program; the loss is reduce_sum(out * fixed random weights). The
analytic gradients (``name@GRAD``) are compared with central differences of that loss, both
computed by the reference interpreter. ``test_every_differentiable_op_has_a_case`` fails when
an op is registered without a case here.
"""

from __future__ import annotations

import os
import sys
import zlib

import numpy as np
import pytest

import graphc
from graphc import layers, models
from graphc.backends.interpreter import run_graph
from graphc.ir.grad_defs import GRAD_SUFFIX, grad_op_type, is_differentiable
from graphc.ir.opdef import OPTIMIZER, all_op_types, get_op_def

THIS_FILE = os.path.basename(__file__)


# -- the checker -----------------------------------------------------------------------------
class GradCheck:
    """Collects a case's inputs (feeds, parameter values, what to differentiate) and checks
    the analytic gradients of reduce_sum(out * w) against central differences."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.feeds: dict[str, np.ndarray] = {}
        self.state: dict[str, np.ndarray] = {}
        self.wrt: list[graphc.Variable] = []
        self.rtol, self.atol, self.eps = 1e-5, 1e-6, 1e-6
        self.parameter_list = None  # passed to append_backward when set
        # Tensors up to max_coords elements: every coordinate. Larger ones: coords_if_large
        # random coordinates plus `directions` random directions (a wrong gradient is all but
        # never orthogonal to a random direction), which keeps the interpreter runs few.
        self.max_coords, self.coords_if_large, self.directions = 8, 4, 3
        self.step = 0

    @property
    def program(self) -> graphc.Program:
        return graphc.default_main_program()

    # inputs
    def data(self, name, value, grad=True, dtype="float64") -> graphc.Variable:
        value = np.asarray(value).astype(dtype)
        var = graphc.data(name, list(value.shape), dtype=dtype)
        var.stop_gradient = not grad  # data is stop_gradient by default, as in Paddle
        self.feeds[name] = value
        if grad:
            self.wrt.append(var)
        return var

    def randn(self, *shape, scale=1.0):
        return self.rng.standard_normal(shape) * scale

    def uniform(self, low, high, *shape):
        return self.rng.uniform(low, high, shape)

    def away_from_zero(self, *shape, margin=0.2):
        """Values with |v| in [margin, 1 + margin] and random signs (for kinks at 0)."""
        mag = self.rng.uniform(margin, 1.0 + margin, shape)
        return mag * self.rng.choice([-1.0, 1.0], shape)

    def set_param(self, var, value):
        self.state[getattr(var, "name", var)] = np.asarray(value, dtype=_dtype_of(var))

    # running
    def _default_state(self, graph) -> dict:
        state = dict(self.state)
        for v in graph.inputs:
            if v.var.kind in ("param", "persistable") and v.var.name not in state:
                shape, dt = v.type.shape, v.type.dtype
                if v.var.kind == "param" and v.var.trainable:
                    state[v.var.name] = self.rng.uniform(-1, 1, shape).astype(dt)
                else:  # running statistics: a variance must be positive
                    state[v.var.name] = self.rng.uniform(0.5, 1.5, shape).astype(dt)
        return state

    def build_loss(self, outputs) -> graphc.Variable:
        outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
        terms = []
        for i, out in enumerate(outputs):
            assert out.shape is not None and all(d > 0 for d in out.shape), out
            w = self.data(f"gradcheck_w{i}", self.randn(*out.shape), grad=False,
                          dtype=out.dtype)
            terms.append(layers.reduce_sum(layers.elementwise_mul(out, w)))
        return terms[0] if len(terms) == 1 else layers.sums(terms)

    def check(self, outputs=None, loss=None, wrt=None):
        """Append backward, run, compare; returns {var name: analytic gradient}."""
        if loss is None:
            loss = self.build_loss(outputs)
        block = self.program.global_block()
        if wrt is None:
            wrt = self.wrt + [p for p in block.all_parameters() if p.trainable]
        forward = graphc.lower(self.program)
        pairs = graphc.append_backward(loss, parameter_list=self.parameter_list)
        full = graphc.lower(self.program)
        param_grads = {p.name: g.name for p, g in pairs}
        grad_names = []
        for var in wrt:
            name = param_grads.get(var.name, var.name + GRAD_SUFFIX)
            assert name == var.name + GRAD_SUFFIX
            gvar = block.var(name)
            assert gvar.dtype == var.dtype and tuple(gvar.shape) == tuple(var.shape), \
                (var, gvar)
            grad_names.append(name)
        state = self._default_state(full)
        _, fetched = run_graph(full, state, self.feeds, [loss.name, *grad_names], self.step)
        loss0, grads = fetched[0], dict(zip((v.name for v in wrt), fetched[1:]))

        def loss_at(name=None, value=None):
            feeds, st = self.feeds, state
            if name in feeds:
                feeds = {**feeds, name: value}
            elif name is not None:
                st = {**state, name: value}
            return float(run_graph(forward, st, feeds, [loss.name], self.step)[1][0][0])

        assert loss_at() == pytest.approx(float(loss0[0]), rel=1e-12, abs=1e-12)
        self.fetched = dict(grads)  # as fetched: a row-sparse gradient is a SelectedRows
        for var in wrt:
            g = grads[var.name]
            if isinstance(g, graphc.SelectedRows):  # checked as the dense tensor it stands for
                assert block.var(param_grads.get(var.name, var.name + GRAD_SUFFIX)).selected_rows
                g = grads[var.name] = np.asarray(g)
            assert g.dtype == np.dtype(var.dtype) and g.shape == tuple(var.shape)
            value = self.feeds.get(var.name, state.get(var.name))
            self._compare(var.name, value, g, loss_at)
        return grads

    def _compare(self, name, value, analytic, loss_at):
        dtype = value.dtype
        x = value.astype(np.float64).reshape(-1)
        g = analytic.astype(np.float64).reshape(-1)

        def diff(delta):
            """(L(x + delta) - L(x - delta), the realised 2*delta after rounding to dtype)."""
            xp, xm = (x + delta).astype(dtype), (x - delta).astype(dtype)
            lp = loss_at(name, xp.reshape(value.shape))
            lm = loss_at(name, xm.reshape(value.shape))
            return lp - lm, xp.astype(np.float64) - xm.astype(np.float64)

        coords, directions = np.arange(x.size), 0
        if x.size > self.max_coords:  # a few coordinates, and random directions for the rest
            coords = np.sort(self.rng.choice(x.size, self.coords_if_large, replace=False))
            directions = self.directions
        numeric = np.empty(len(coords))
        for k, i in enumerate(coords):
            delta = np.zeros_like(x)
            delta[i] = self.eps * max(1.0, abs(x[i]))
            d, step = diff(delta)
            numeric[k] = d / step[i]
        np.testing.assert_allclose(g[coords], numeric, rtol=self.rtol, atol=self.atol,
                                   err_msg=f"d loss / d {name} at coordinates {coords}")
        for _ in range(directions):
            v = self.rng.standard_normal(x.size)
            v *= self.eps / np.abs(v).max() * max(1.0, np.abs(x).max())
            d, step = diff(v)
            scale = np.abs(step).max()  # compare slopes along the (unnormalised) direction
            np.testing.assert_allclose(g @ step / scale, d / scale, rtol=self.rtol,
                                       atol=self.atol * np.sqrt(x.size),
                                       err_msg=f"d loss / d {name} along a random direction")


def _dtype_of(var):
    return getattr(var, "dtype", "float64")


# -- the case registry -------------------------------------------------------------------------
CASES = []


def grad_case(*covers, params=({},), ids=None):
    """Register ``fn(c: GradCheck, **param) -> outputs`` (or None after c.check) once per
    parameter set; ``covers`` (plus param ``op``) are the op types whose gradient it checks."""

    def deco(fn):
        for i, kw in enumerate(params):
            cov = set(covers) | ({kw["op"]} if "op" in kw else set())
            label = ids[i] if ids else "-".join(f"{k}={v}" for k, v in kw.items()) or "default"
            CASES.append(pytest.param(fn, kw, frozenset(cov),
                                      id=f"{fn.__name__}[{label}]".replace(" ", "")))
        return fn

    return deco


@pytest.mark.parametrize(("fn", "kw", "covers"), CASES)
def test_gradient(fn, kw, covers):
    c = GradCheck(zlib.crc32(repr((fn.__name__, sorted(kw.items()))).encode()))
    outputs = fn(c, **kw)
    if outputs is not None:
        c.check(outputs)
    ops = c.program.global_block().ops
    forward = {op.type for op in ops if op.role == "forward"}
    backward = {op.type for op in ops if op.role == "backward"}
    for t in covers:
        assert t in forward, f"case claims {t} but builds no {t} op"
        assert grad_op_type(t) in backward, f"case claims {t} but {t} is not differentiated"


def differentiable_ops() -> set[str]:
    return {t for t in all_op_types() if not t.endswith("_grad") and is_differentiable(t)
            and OPTIMIZER not in get_op_def(t).traits}


def test_every_differentiable_op_has_a_case():
    covered = set().union(*(p.values[2] for p in CASES))
    missing = differentiable_ops() - covered
    assert not missing, f"differentiable ops without a gradient check: {sorted(missing)}"
    assert {"conv2d", "batch_norm", "elementwise_add", "softmax"} <= differentiable_ops()


# -- elementwise binary ops ------------------------------------------------------------------
ELEMENTWISE = ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
               "elementwise_max", "elementwise_min", "elementwise_pow"]
# (X shape, Y shape, Paddle axis): every op gets the first five, add and mul all of them
BROADCASTS = [((2, 3, 4), (2, 3, 4), -1), ((2, 3, 4), (3, 4), -1), ((2, 3, 4), (3,), 1),
              ((2, 3, 4), (3, 1), 1), ((3, 4), (2, 3, 4), -1),
              ((2, 3, 4), (4,), -1), ((2, 3, 4), (2, 3), 0), ((2, 3, 4), (1, 3, 1), -1)]
ELEMENTWISE_CASES = [(op, xs, ys, axis) for op in ELEMENTWISE
                     for xs, ys, axis in (BROADCASTS if op in ("elementwise_add",
                                                                "elementwise_mul")
                                          else BROADCASTS[:5])]


def _binary_inputs(c, op, xs, ys):
    if op == "elementwise_pow":
        return c.uniform(0.5, 1.5, *xs), c.uniform(-1.0, 2.0, *ys)
    if op == "elementwise_div":
        return c.randn(*xs), c.away_from_zero(*ys, margin=0.5)
    if op in ("elementwise_max", "elementwise_min"):
        # X on a grid offset by 0.03 from Y's grid: no ties within eps, whatever broadcasts
        return (c.rng.integers(-10, 10, xs) * 0.1 + 0.03,
                c.rng.integers(-10, 10, ys) * 0.1)
    return c.randn(*xs), c.randn(*ys)


@grad_case(params=[{"op": op, "xs": xs, "ys": ys, "axis": axis}
                   for op, xs, ys, axis in ELEMENTWISE_CASES],
           ids=[f"{op[12:]}-{'x'.join(map(str, xs))}-{'x'.join(map(str, ys))}-axis{axis}"
                for op, xs, ys, axis in ELEMENTWISE_CASES])
def elementwise(c, op, xs, ys, axis):
    xv, yv = _binary_inputs(c, op, xs, ys)
    x, y = c.data("x", xv), c.data("y", yv)
    out = c.program.global_block().create_var("out", None, "float64")
    c.program.global_block().append_op(op, {"X": x, "Y": y}, {"Out": out}, {"axis": axis})
    assert tuple(out.shape) == (2, 3, 4)
    return out


@grad_case("elementwise_mul", "elementwise_add")
def same_var_on_both_sides(c):
    x = c.data("x", c.randn(2, 3))
    return layers.elementwise_add(layers.elementwise_mul(x, x), x)


@grad_case("elementwise_add", "elementwise_mul", "tanh", "sigmoid")
def diamond(c):
    """a = x * y feeds two branches that meet again: a@GRAD sums two contributions."""
    x, y = c.data("x", c.randn(2, 3)), c.data("y", c.randn(3))
    a = layers.elementwise_mul(x, y)
    out = layers.elementwise_add(layers.tanh(a), layers.sigmoid(a))
    return layers.elementwise_mul(out, x)


# -- activations ---------------------------------------------------------------------------
def _act(name):
    """An activation op without a layer function of its own."""

    def build(x):
        block = graphc.default_main_program().global_block()
        out = block.create_var(f"{name}_out", None, x.dtype)
        block.append_op(name, {"X": x}, {"Out": out})
        return out

    return build


ACTIVATIONS = {
    "relu": (layers.relu, "kink"),
    "leaky_relu": (lambda x: layers.leaky_relu(x, alpha=0.1), "kink"),
    "gelu": (lambda x: layers.gelu(x, approximate=False), "any"),
    "gelu-approximate": (lambda x: layers.gelu(x, approximate=True), "any"),
    "sigmoid": (layers.sigmoid, "any"),
    "softsign": (layers.softsign, "any"),
    "tanh": (layers.tanh, "any"),
    "exp": (_act("exp"), "any"),
    "sqrt": (_act("sqrt"), "positive"),
    "square": (_act("square"), "any"),
    "abs": (_act("abs"), "kink"),
    "scale": (lambda x: layers.scale(x, 2.5, 0.7), "any"),
    "scale-bias-before": (lambda x: layers.scale(x, -1.5, 0.3, bias_after_scale=False), "any"),
}


def activation(c, name):
    fn, domain = ACTIVATIONS[name]
    value = {"kink": c.away_from_zero(2, 3, 2, margin=0.1), "any": c.randn(2, 3, 2),
             "positive": c.uniform(0.2, 2.0, 2, 3, 2)}[domain]
    out = fn(c.data("x", value))
    assert c.program.global_block().ops[-1].type == name.split("-")[0]
    return out


for _name in ACTIVATIONS:
    grad_case(_name.split("-")[0], params=[{"name": _name}], ids=[_name])(activation)
del _name


@grad_case("softmax", params=[{"axis": -1}, {"axis": 1}, {"axis": 0}])
def softmax(c, axis):
    return layers.softmax(c.data("x", c.randn(2, 3, 4)), axis=axis)


# -- sums, copies, matrices, reductions -------------------------------------------------------
@grad_case("sum", params=[{"same": False}, {"same": True}])
def sum_op(c, same):
    a, b = c.data("a", c.randn(2, 3)), c.data("b", c.randn(2, 3))
    # the same variable twice: its grad comes back as @RENAME@ parts that are summed
    return layers.sums([a, b, a] if same else [a, b, c.data("d", c.randn(2, 3))])


@grad_case("assign")
def assign(c):
    return layers.assign(layers.scale(c.data("x", c.randn(3, 2)), 2.0))


@grad_case("mul", params=[{"x": (2, 6), "y": (6, 3), "xn": 1, "yn": 1},
                          {"x": (2, 3, 4), "y": (4, 5), "xn": 2, "yn": 1},
                          {"x": (2, 3, 4), "y": (12, 5), "xn": 1, "yn": 1},
                          {"x": (2, 6), "y": (2, 3, 5), "xn": 1, "yn": 2}])
def mul(c, x, y, xn, yn):
    xv, yv = c.data("x", c.randn(*x)), c.data("y", c.randn(*y))
    block = c.program.global_block()
    out = block.create_var("out", None, "float64")
    block.append_op("mul", {"X": xv, "Y": yv}, {"Out": out},
                    {"x_num_col_dims": xn, "y_num_col_dims": yn})
    return out


@grad_case("mul", "elementwise_add")
def fc_params(c):
    """fc's weight and bias are parameters; their grads are returned by append_backward."""
    return layers.fc(c.data("x", c.randn(3, 2, 2)), 3, num_flatten_dims=1)


@grad_case("mul", "sum", "elementwise_add")
def fc_of_several_inputs(c):
    """fc over a list: one mul per input, summed, plus the bias (num_flatten_dims=2)."""
    x, y = c.data("x", c.randn(2, 2, 3)), c.data("y", c.randn(2, 2, 2))
    return layers.fc([x, y], 2, num_flatten_dims=2)


MATMULS = [((2, 3), (3, 4), False, False, 1.0), ((3, 2), (3, 4), True, False, 1.0),
           ((2, 3), (4, 3), False, True, 1.0), ((3, 2), (4, 3), True, True, 0.5),
           ((2, 2, 3), (2, 3, 4), False, False, 1.0), ((2, 2, 3), (3, 4), False, False, 1.0),
           ((2, 3, 2), (2, 4, 3), True, True, 2.0), ((3,), (3,), False, False, 1.0),
           ((3,), (3, 4), False, False, 1.0), ((2, 3), (3,), False, False, 1.0),
           ((2, 2, 3), (3,), False, False, 1.0), ((3, 4), (2, 4, 2), False, False, 1.0)]


@grad_case("matmul", params=[{"x": x, "y": y, "tx": tx, "ty": ty, "alpha": a}
                             for x, y, tx, ty, a in MATMULS])
def matmul(c, x, y, tx, ty, alpha):
    return layers.matmul(c.data("x", c.randn(*x)), c.data("y", c.randn(*y)), tx, ty, alpha)


@grad_case("mean")
def mean(c):
    return layers.mean(c.data("x", c.randn(2, 3, 2)))


REDUCES = [{"dim": [1], "keep_dim": False}, {"dim": [0, 2], "keep_dim": True},
           {"dim": [-1], "keep_dim": False}, {"dim": None, "keep_dim": False},
           {"dim": None, "keep_dim": True}]


@grad_case(params=[{"op": op, **r} for op in ("reduce_sum", "reduce_mean", "reduce_max")
                   for r in REDUCES])
def reduce(c, op, dim, keep_dim):
    fn = {"reduce_sum": layers.reduce_sum, "reduce_mean": layers.reduce_mean,
          "reduce_max": layers.reduce_max}[op]
    x = c.data("x", c.rng.permutation(24).reshape(2, 3, 4) * 0.1)  # distinct: no ties for max
    out = fn(x, dim=dim, keep_dim=keep_dim)
    assert c.program.global_block().ops[-1].attrs["reduce_all"] == (dim is None)
    return out


# -- shape ops -----------------------------------------------------------------------------------
@grad_case("reshape2", params=[{"shape": [3, -1]}, {"shape": [0, 2, 3]}])
def reshape2(c, shape):
    return layers.reshape(c.data("x", c.randn(2, 3, 2)), shape)


@grad_case("transpose2", params=[{"perm": [1, 0, 2]}, {"perm": [2, 0, 1]}])
def transpose2(c, perm):
    return layers.transpose(c.data("x", c.randn(2, 3, 4)), perm)


@grad_case("concat", params=[{"axis": 0}, {"axis": 1}, {"axis": -1}])
def concat(c, axis):
    xs = [c.data(f"x{i}", c.randn(2, i + 1, 2) if axis == 1 else c.randn(2, 2, 2))
          for i in range(3)]
    return layers.concat(xs, axis=axis)


@grad_case("split", params=[{"how": 3, "dim": 1}, {"how": [1, 3, 2], "dim": -1},
                            {"how": 2, "dim": 0}])
def split(c, how, dim):
    x = c.data("x", c.randn(2, 6, 6))
    parts = layers.split(x, how, dim=dim)
    return [layers.tanh(p) for p in parts]


@grad_case("split")
def split_with_an_unused_output(c):
    """The unused part's gradient is zero-filled, so split_grad still sees every position."""
    x = c.data("x", c.randn(2, 6))
    a, _, b = layers.split(x, 3, dim=1)
    grads = c.check([layers.tanh(a), b])
    np.testing.assert_array_equal(grads["x"][:, 2:4], 0.0)


def test_split_with_an_unused_output_of_unknown_shape():
    """The zero gradient of the unused part takes its shape at run time (fill_zeros_like)."""
    x = graphc.data("x", [-1, 6], dtype="float64")
    x.stop_gradient = False
    a, _, b = layers.split(x, 3, dim=1)
    graphc.append_backward(layers.mean(layers.elementwise_add(a, b)))
    types = [op.type for op in graphc.default_main_program().global_block().ops]
    assert "fill_zeros_like" in types
    feed = {"x": np.arange(18, dtype="float64").reshape(3, 6)}
    (grad,) = graphc.Executor().run(feed=feed, fetch_list=["x@GRAD"], scope=graphc.Scope())
    expected = np.zeros((3, 6))
    expected[:, [0, 1, 4, 5]] = 1.0 / 6.0  # mean over 3 x 2 elements of a + b
    np.testing.assert_allclose(grad, expected)


@grad_case(params=[{"op": "concat"}, {"op": "sum"}])
def duplicable_input_partly_needing_grad(c, op):
    """Some inputs of a duplicable slot need no gradient (stop_gradient data, twice)."""
    x, y = c.data("x", c.randn(2, 3)), c.data("y", c.randn(2, 3), grad=False)
    z = c.data("z", c.randn(2, 3))
    parts = [y, x, y, z]
    return layers.concat(parts, axis=1) if op == "concat" else layers.sums(parts)


@grad_case("cast", params=[{"out": "float32"}])
def cast_to_float32(c, out):
    """float64 -> float32 -> float64: the input's gradient stays float64."""
    x = c.data("x", c.randn(2, 3))
    c.eps, c.rtol, c.atol = 1e-3, 1e-3, 1e-4  # float32 rounding in the middle
    y = layers.cast(layers.cast(x, out), "float64")
    grads = c.check(y)
    assert grads["x"].dtype == np.float64


@grad_case("cast")
def cast(c):
    """float32 -> float64: the input's gradient is float32, and exact (the op is linear)."""
    x = c.data("x", c.randn(2, 3), dtype="float32")
    c.eps = 1e-3  # float32 input: the realised step is used, so the quotient stays exact
    out = layers.cast(x, "float64")
    assert out.dtype == "float64"
    grads = c.check(layers.elementwise_mul(out, out))
    assert grads["x"].dtype == np.float32
    assert c.program.global_block().var("x@GRAD").dtype == "float32"


# -- convolution, pooling, normalisation ---------------------------------------------------------
CONVS = [
    dict(shape=(2, 3, 5, 5), filters=4, k=3, stride=1, padding=0),
    dict(shape=(1, 3, 6, 5), filters=2, k=3, stride=2, padding=1),
    dict(shape=(1, 2, 7, 7), filters=2, k=3, stride=1, padding=2, dilation=2),
    dict(shape=(1, 4, 5, 5), filters=4, k=3, stride=1, padding=1, groups=2),
    dict(shape=(1, 5, 5, 3), filters=2, k=3, stride=1, padding=1, data_format="NHWC"),
    dict(shape=(1, 2, 7, 6), filters=2, k=3, stride=2, padding="SAME"),
    dict(shape=(1, 6, 6, 2), filters=3, k=(3, 2), stride=(2, 1), padding="SAME",
         data_format="NHWC"),
    dict(shape=(1, 2, 5, 5), filters=2, k=2, stride=1, padding="VALID"),
    dict(shape=(1, 4, 4, 4), filters=2, k=3, stride=2, padding=1, groups=2,
         data_format="NHWC"),
]


@grad_case("conv2d", params=CONVS,
           ids=["basic", "stride2-pad1", "dilation2", "groups2", "nhwc", "same-stride2",
                "same-nhwc-rect", "valid", "groups2-nhwc"])
def conv2d(c, shape, filters, k, **kw):
    x = c.data("x", c.randn(*shape))
    out = layers.conv2d(x, filters, k, bias_attr=False, **kw)
    assert c.program.global_block().ops[-1].type == "conv2d"
    return out


@grad_case("conv2d")
def conv2d_asymmetric_padding(c):
    block = c.program.global_block()
    x, w = c.data("x", c.randn(1, 2, 4, 5)), c.data("w", c.randn(3, 2, 2, 3))
    out = block.create_var("out", None, "float64")
    block.append_op("conv2d", {"Input": x, "Filter": w}, {"Output": out},
                    {"strides": [1, 2], "paddings": [1, 0, 2, 1], "dilations": [1, 1],
                     "groups": 1})
    return out


@grad_case("depthwise_conv2d", "elementwise_add",
           params=[{"filters": 3, "fmt": "NCHW"}, {"filters": 6, "fmt": "NCHW"},
                   {"filters": 3, "fmt": "NHWC"}])
def depthwise_conv2d(c, filters, fmt):
    shape = (1, 3, 5, 5) if fmt == "NCHW" else (1, 5, 5, 3)
    x = c.data("x", c.randn(*shape))
    out = layers.conv2d(x, filters, 3, stride=1, padding=1, groups=3, data_format=fmt)
    assert c.program.global_block().ops[-2].type == "depthwise_conv2d"
    return out


POOLS = [
    dict(pool_size=2, pool_type="max", pool_stride=2),
    dict(pool_size=3, pool_type="max", pool_stride=1, pool_padding=1),
    dict(pool_size=2, pool_type="avg", pool_stride=2),
    dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1, exclusive=True),
    dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1, exclusive=False),
    dict(pool_size=2, pool_type="max", pool_stride=2, ceil_mode=True),
    dict(pool_size=2, pool_type="avg", pool_stride=2, ceil_mode=True),
    dict(pool_type="max", global_pooling=True),
    dict(pool_type="avg", global_pooling=True),
    dict(pool_size=2, pool_type="max", pool_stride=2, data_format="NHWC"),
    dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding="SAME"),
    dict(pool_size=2, pool_type="avg", pool_stride=2, pool_padding=[1, 0, 0, 1]),
    dict(pool_size=2, pool_type="max", pool_stride=1, pool_padding="VALID"),
]


@grad_case("pool2d", params=POOLS,
           ids=["max", "max-pad", "avg", "avg-exclusive", "avg-inclusive", "max-ceil",
                "avg-ceil", "global-max", "global-avg", "max-nhwc", "avg-same",
                "avg-asymmetric-pad", "max-valid"])
def pool2d(c, **kw):
    nhwc = kw.get("data_format") == "NHWC"
    # distinct values: max pooling has no ties
    x = c.data("x", c.rng.permutation(50).reshape((1, 5, 5, 2) if nhwc else (1, 2, 5, 5)) * 0.1)
    return layers.pool2d(x, **kw)


@grad_case("pool2d", params=[{"type": "max", "out": [2, 2]}, {"type": "avg", "out": [2, 3]},
                             {"type": "avg", "out": [1, 1]}])
def adaptive_pool2d(c, type, out):
    x = c.data("x", c.rng.permutation(50).reshape(1, 2, 5, 5) * 0.1)
    block = c.program.global_block()
    y = block.create_var("out", None, "float64")
    block.append_op("pool2d", {"X": x}, {"Out": y},
                    {"pooling_type": type, "ksize": out, "adaptive": True})
    assert tuple(y.shape) == (1, 2, *out)
    return y


@grad_case("batch_norm", params=[{"layout": "NCHW", "is_test": False},
                                 {"layout": "NHWC", "is_test": False},
                                 {"layout": "NCHW", "is_test": True},
                                 {"layout": "NHWC", "is_test": True},
                                 {"layout": "2d", "is_test": False},
                                 {"layout": "NCHW", "is_test": False, "global_stats": True}])
def batch_norm(c, layout, is_test, global_stats=False):
    shape = {"NCHW": (3, 2, 2, 3), "NHWC": (3, 2, 3, 2), "2d": (5, 2)}[layout]
    x = c.data("x", c.randn(*shape) * 2 + 1)
    out = layers.batch_norm(x, is_test=is_test, data_layout="NHWC" if layout == "NHWC"
                            else "NCHW", name="bn", use_global_stats=global_stats)
    block = c.program.global_block()
    assert block.ops[-1].type == "batch_norm"
    c.set_param("bn.w_1", c.randn(2))  # running mean
    c.set_param("bn.w_2", c.uniform(0.5, 2.0, 2))  # running variance
    grads = c.check(out)
    assert set(grads) == {"x", "bn.w_0", "bn.b_0"}  # running statistics get no grad
    for name in ("bn.w_1", "bn.w_2"):
        assert not block.has_var(name + GRAD_SUFFIX)


@grad_case("layer_norm", params=[{"axis": 1, "scale": True, "shift": True},
                                 {"axis": 2, "scale": True, "shift": True},
                                 {"axis": 1, "scale": False, "shift": False},
                                 {"axis": 2, "scale": True, "shift": False},
                                 {"axis": 1, "scale": False, "shift": True}])
def layer_norm(c, axis, scale, shift):
    x = c.data("x", c.randn(2, 3, 4))
    return layers.layer_norm(x, scale=scale, shift=shift, begin_norm_axis=axis)


# -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
@grad_case("conv2d_transpose", params=[
    {"shape": (1, 4, 3, 3), "kw": dict(num_filters=2, filter_size=3, stride=2, padding=1)},
    {"shape": (1, 4, 2, 3), "kw": dict(num_filters=4, filter_size=2, groups=2, dilation=2,
                                       output_size=[4, 5])},
    {"shape": (1, 3, 3, 2), "kw": dict(num_filters=2, filter_size=2, stride=2,
                                       data_format="NHWC")}], ids=["pad", "groups", "nhwc"])
def conv2d_transpose(c, shape, kw):
    return layers.conv2d_transpose(c.data("x", c.randn(*shape)), bias_attr=False, **kw)


@grad_case("depthwise_conv2d_transpose")
def depthwise_conv2d_transpose(c):
    x = c.data("x", c.randn(1, 3, 3, 3))
    return layers.conv2d_transpose(x, 3, filter_size=2, stride=2, groups=3, use_cudnn=False,
                                   bias_attr=False)


@grad_case("conv3d", "conv3d_transpose")
def conv3d_and_transpose(c):
    x = c.data("x", c.randn(1, 2, 3, 3, 3))
    y = layers.conv3d(x, 2, 2, padding=1, bias_attr=False)
    return layers.conv3d_transpose(y, 2, filter_size=2, stride=2, padding=1, bias_attr=False)


@grad_case("pool3d", params=[dict(pool_size=2, pool_type="max", pool_stride=2),
                             dict(pool_size=3, pool_type="avg", pool_stride=2, pool_padding=1),
                             dict(pool_size=[2, 3, 2], pool_type="avg", ceil_mode=True,
                                  pool_stride=2)], ids=["max", "avg-pad", "avg-ceil"])
def pool3d(c, **kw):
    x = c.data("x", c.rng.permutation(72).reshape(1, 2, 3, 4, 3) * 0.1)
    return layers.pool3d(x, **kw)


@grad_case("pool3d", "pool2d", params=[{"type": "max"}, {"type": "avg"}])
def adaptive_pools_and_pool_past_input(c, type):
    x = c.data("x", c.rng.permutation(60).reshape(1, 2, 5, 3, 2) * 0.1)
    y = layers.adaptive_pool3d(x, [2, 2, 1], type)
    z = c.data("z", c.rng.permutation(18).reshape(1, 2, 3, 3) * 0.1)
    w = layers.pool2d(z, 4, type, 2)
    return [y, w]


@grad_case("max_pool2d_with_index", "max_pool3d_with_index")
def max_pool_with_index(c):
    x = c.data("x", c.rng.permutation(50).reshape(1, 2, 5, 5) * 0.1)
    block = c.program.global_block()
    out = block.create_var("out", None, "float64")
    mask = block.create_var("mask", None, "int32")
    block.append_op("max_pool2d_with_index", {"X": x}, {"Out": out, "Mask": mask},
                    {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]})
    y = c.data("y", c.rng.permutation(48).reshape(1, 2, 4, 3, 2) * 0.1)
    pooled, _ = layers.adaptive_pool3d(y, [2, 2, 1], require_index=True)
    return [out, pooled]


@grad_case("instance_norm", "group_norm", params=[{"layout": "NCHW"}, {"layout": "NHWC"}])
def instance_and_group_norm(c, layout):
    x = c.data("x", c.randn(*((2, 4, 2, 3) if layout == "NCHW" else (2, 2, 3, 4))) * 2 + 1)
    a = layers.instance_norm(x)
    b = layers.group_norm(x, 2, data_layout=layout)
    return [a, b]


@grad_case("lrn", "affine_channel")
def lrn_and_affine_channel(c):
    x = c.data("x", c.randn(2, 4, 2, 2))
    s, b = c.data("s", c.randn(4)), c.data("b", c.randn(4))
    return layers.affine_channel(layers.lrn(x, n=3, alpha=0.3), s, b)


@grad_case("bilinear_interp", "nearest_interp", "trilinear_interp",
           params=[{"ac": True, "mode": 1}, {"ac": False, "mode": 0}, {"ac": False, "mode": 1}])
def interps(c, ac, mode):
    x = c.data("x", c.randn(1, 2, 3, 4))
    a = layers.resize_bilinear(x, [5, 3], align_corners=ac, align_mode=mode)
    b = layers.resize_nearest(x, [5, 7], align_corners=ac)
    y = c.data("y", c.randn(1, 1, 2, 3, 2))
    d = layers.resize_trilinear(y, [3, 2, 4], align_corners=ac, align_mode=mode)
    return [a, b, d]


@grad_case("temporal_shift", "unfold", "bilinear_tensor_product")
def temporal_shift_unfold_bilinear(c):
    x = c.data("x", c.randn(4, 5, 3, 3))
    a = layers.temporal_shift(x, seg_num=2, shift_ratio=0.2)
    b = layers.unfold(x, [2, 2], strides=[1, 2], paddings=1, dilations=[2, 1])
    p, q = c.data("p", c.randn(2, 3)), c.data("q", c.randn(2, 4))
    return [a, b, layers.bilinear_tensor_product(p, q, 3)]


# -- issue 24: nn tail (data_norm, spectral_norm, lstm, cvm)
@grad_case("data_norm", params=[{"slot_dim": -1, "shift": False},
                                {"slot_dim": 2, "shift": True}])
def data_norm(c, slot_dim, shift):
    # (an empty slot, show 0, is a step: tests/test_layers_nn_tail.py checks it)
    x = c.data("x", c.randn(3, 4))
    return layers.data_norm(x, slot_dim=slot_dim, enable_scale_and_shift=shift)


@grad_case("spectral_norm", params=[{"dim": 0}, {"dim": 1}])
def spectral_norm(c, dim):
    # power_iters=0: u and v are U and V, so Paddle's gradient (u, v held constant) is the
    # derivative finite differences see
    w = c.data("w", c.randn(3, 4, 2))
    return layers.spectral_norm(w, dim=dim, power_iters=0)


@grad_case("cudnn_lstm", params=[{"bidi": False, "depth": 1, "drop": 0.0},
                                 {"bidi": True, "depth": 2, "drop": 0.5}])
def cudnn_lstm(c, bidi, depth, drop):
    dirs = 2 if bidi else 1
    x = c.data("x", c.randn(3, 2, 3))
    h0 = c.data("h0", c.randn(depth * dirs, 2, 2))
    c0 = c.data("c0", c.randn(depth * dirs, 2, 2))
    out, h, cell = layers.lstm(x, h0, c0, 3, 2, depth, dropout_prob=drop, is_bidirec=bidi,
                               seed=7)
    return [out, h, cell]


@grad_case("cvm", params=[{"use_cvm": True}, {"use_cvm": False}])
def cvm(c, use_cvm):
    # Paddle's gradient of the show/click columns is CVM, not a derivative: with CVM = 0 and
    # a loss that does not read Y's show/click columns it equals the derivative
    x = c.data("x", c.uniform(0.5, 2.0, 3, 5))
    cv = c.data("cv", np.zeros((3, 2)), grad=False)
    y = layers.continuous_value_model(x, cv, use_cvm=use_cvm)
    tail = layers.slice(y, [1], [2], [5]) if use_cvm else y
    return tail


@grad_case("filter_by_instag", params=[{"is_lod": True}, {"is_lod": False}])
def filter_by_instag(c, is_lod):
    # Out's rows are Ins's kept rows: the gradient scatters back, dropped rows get 0
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod_checks import fd_check, token_loss
    ins = graphc.data("ins", [-1, 2], "float64", lod_level=1 if is_lod else 0)
    ins.stop_gradient = False
    tag = graphc.data("tag", [-1, 1], "int64", lod_level=1)
    flt = graphc.data("flt", [-1], "int64")
    out, _ = layers.filter_by_instag(ins, tag, flt, is_lod)
    loss, w = token_loss(out, c.rng)
    value = c.randn(6, 2)
    tags = create_lod_tensor(np.array([[1], [2], [3], [2], [4], [5]], "int64"),
                             [[1, 2, 1, 2]] if is_lod else [[1, 2, 1, 1, 1, 0]])
    feeds = {"ins": create_lod_tensor(value, [[1, 2, 0, 3]]) if is_lod else value,
             "tag": tags, "flt": np.array([2, 5], "int64"), **w}
    fd_check(c.program, loss, feeds, ["ins"], c.rng)


@grad_case("elementwise_div", "reduce_mean")
def dice_loss(c):
    x = c.data("x", c.uniform(0.1, 1.0, 2, 3, 4))
    lab = c.data("lab", c.rng.integers(0, 4, (2, 3, 1)), grad=False, dtype="int64")
    return layers.dice_loss(x, lab)


# -- random, embedding and losses -----------------------------------------------------------------
@grad_case("dropout", params=[{"impl": "downgrade_in_infer", "is_test": False},
                              {"impl": "upscale_in_train", "is_test": False},
                              {"impl": "downgrade_in_infer", "is_test": True},
                              {"impl": "upscale_in_train", "is_test": True}])
def dropout(c, impl, is_test):
    """With a fixed seed the mask is the same in every run at one step, so differences of the
    loss are meaningful; the grads also equal the mask formula."""
    p = 0.4
    x = c.data("x", c.randn(4, 5))
    out = layers.dropout(x, p, is_test=is_test, seed=7, dropout_implementation=impl)
    dmask = c.program.global_block().ops[-1].output("Mask")[0]
    block = c.program.global_block()
    c.step = 3
    grads = c.check(out)
    w = c.feeds["gradcheck_w0"]
    mask = run_graph(graphc.lower(c.program), {}, c.feeds, [dmask], step=3)[1][0]
    assert mask.dtype == np.uint8 and mask.shape == (4, 5)
    if is_test:
        assert mask.all()
        expected = w * (1.0 if impl == "upscale_in_train" else 1 - p)
    else:
        assert 0 < mask.sum() < mask.size
        expected = w * mask / (1 - p) if impl == "upscale_in_train" else w * mask
    np.testing.assert_allclose(grads["x"], expected, rtol=1e-12, atol=1e-12)
    assert block.ops[-1].role == "backward"


def test_dropout_mask_fixed_per_step_and_grad_follows_it():
    x = graphc.data("x", [4, 5], dtype="float64")
    x.stop_gradient = False
    out = layers.dropout(x, 0.5, seed=11, dropout_implementation="upscale_in_train")
    loss = layers.reduce_sum(out)
    graphc.append_backward(loss)
    g = graphc.lower(graphc.default_main_program())
    feeds = {"x": np.ones((4, 5))}
    o0, g0 = run_graph(g, {}, feeds, [out.name, "x@GRAD"], step=0)[1]
    again = run_graph(g, {}, feeds, [out.name], step=0)[1][0]
    np.testing.assert_array_equal(o0, again)  # same step, same mask
    o1, g1 = run_graph(g, {}, feeds, [out.name, "x@GRAD"], step=1)[1]
    assert not np.array_equal(o0, o1)  # another step draws another mask
    for o, grad in ((o0, g0), (o1, g1)):
        np.testing.assert_allclose(grad, o)  # d sum(x * mask/(1-p)) / dx = mask/(1-p) = out


@grad_case("lookup_table", params=[{"padding_idx": None}, {"padding_idx": 3},
                                   {"padding_idx": -1}, {"padding_idx": None, "sparse": True},
                                   {"padding_idx": 3, "sparse": True}])
def lookup_table(c, padding_idx, sparse=False):
    ids = c.data("ids", np.array([[1], [3], [1], [0], [5]]), grad=False, dtype="int64")
    out = layers.embedding(ids, [6, 3], is_sparse=sparse, padding_idx=padding_idx,
                           dtype="float64")
    grads = c.check(out)
    w = next(iter(c.program.global_block().all_parameters()))
    g = grads[w.name]
    pad = {None: None, 3: 3, -1: 5}[padding_idx]
    if pad is not None:
        np.testing.assert_array_equal(g[pad], 0.0)
    np.testing.assert_array_equal(g[[2, 4] if pad != 5 else [2, 4, 5]], 0.0)  # unused rows
    if sparse:  # one row per id, in id order, never the whole table (repeats not merged);
        # an id at padding_idx becomes a padding row (row = height, zero values)
        rows = c.fetched[w.name]
        assert isinstance(rows, graphc.SelectedRows) and rows.height == 6
        np.testing.assert_array_equal(rows.rows, [1, 6 if pad == 3 else 3, 1, 0, 5])
        assert (rows.values[1] == 0.0).all() == (pad == 3)  # a padding row holds zeros
        assert rows.values.shape == (5, 3)


@grad_case("softmax_with_cross_entropy", params=[
    {"soft": False, "ignore": -100, "axis": -1}, {"soft": False, "ignore": 2, "axis": -1},
    {"soft": True, "ignore": -100, "axis": -1}, {"soft": False, "ignore": -100, "axis": 1},
    {"soft": True, "ignore": -100, "axis": 1}, {"soft": False, "ignore": 0, "axis": 1}])
def softmax_with_cross_entropy(c, soft, ignore, axis):
    shape = (4, 5) if axis == -1 else (2, 4, 3)
    logits = c.data("logits", c.randn(*shape))
    lshape = list(shape)
    lshape[axis] = 1
    if soft:
        p = c.uniform(0.1, 1.0, *shape)
        label = c.data("label", p / p.sum(axis=axis, keepdims=True), grad=False)
    else:
        hard = c.rng.integers(0, shape[axis], lshape)
        hard.flat[0] = 2 if ignore == 2 else hard.flat[0]
        if ignore == -100:
            hard.flat[-1] = -100  # out of range: ignored, gives no gradient
        label = c.data("label", hard, grad=False, dtype="int64")
    loss = layers.softmax_with_cross_entropy(logits, label, soft_label=soft,
                                             ignore_index=ignore, axis=axis)
    grads = c.check(loss)
    g = np.moveaxis(grads["logits"], axis, -1).reshape(-1, shape[axis])
    if ignore == 2 or (ignore == -100 and not soft):
        np.testing.assert_array_equal(g[0 if ignore == 2 else -1], 0.0)  # the ignored row


@grad_case("softmax_with_cross_entropy", params=[{"use": "both"}, {"use": "softmax"}])
def softmax_with_cross_entropy_softmax_used(c, use):
    """return_softmax: a loss that also reads Softmax needs Softmax@GRAD in Logits@GRAD."""
    logits = c.data("logits", c.randn(3, 4))
    label = c.data("label", np.array([[0], [3], [1]]), grad=False, dtype="int64")
    loss, sm = layers.softmax_with_cross_entropy(logits, label, return_softmax=True)
    return [loss, sm] if use == "both" else sm


@grad_case("cross_entropy", params=[{"soft": False, "ignore": -100},
                                    {"soft": True, "ignore": -100},
                                    {"soft": False, "ignore": 1}])
def cross_entropy(c, soft, ignore):
    x = c.data("x", c.uniform(0.1, 1.0, 4, 3))  # probabilities need not be normalised
    if soft:
        label = c.data("label", c.uniform(0, 1, 4, 3), grad=False)
    else:
        label = c.data("label", np.array([[0], [1], [2], [1]]), grad=False, dtype="int64")
    return layers.cross_entropy(x, label, soft_label=soft, ignore_index=ignore)


@grad_case("softmax", "cross_entropy", "mean")
def softmax_then_cross_entropy(c):
    x = c.data("x", c.randn(3, 4))
    label = c.data("label", np.array([[3], [0], [1]]), grad=False, dtype="int64")
    return layers.mean(layers.cross_entropy(layers.softmax(x), label))


# -- whole models ---------------------------------------------------------------------------------
@grad_case("mul", "elementwise_add", "tanh", "relu", "softmax_with_cross_entropy", "mean")
def mlp_float64(c):
    x = c.data("x", c.randn(4, 3))
    label = c.data("label", np.array([[0], [2], [1], [2]]), grad=False, dtype="int64")
    h = layers.fc(x, 4, act="tanh")
    h = layers.fc(h, 4, act="relu")
    logits = layers.fc(h, 3)
    c.check(loss=layers.mean(layers.softmax_with_cross_entropy(logits, label)))


@grad_case("conv2d", "batch_norm", "relu", "pool2d", "mul", "elementwise_add",
           "softmax_with_cross_entropy", "mean")
def cnn_float64(c):
    """demo_cnn's structure (conv, batch_norm + relu, max pool; twice; fc) in float64."""
    image = c.data("image", c.randn(2, 1, 6, 6))
    label = c.data("label", np.array([[1], [3]]), grad=False, dtype="int64")
    x = image
    for ch in (2, 3):
        x = layers.conv2d(x, ch, 3, padding=1, bias_attr=False)
        x = layers.batch_norm(x, act="relu")
        x = layers.pool2d(x, 2, "max", 2)
    logits = layers.fc(x, 4)
    c.rtol, c.atol = 1e-4, 1e-6
    c.check(loss=layers.mean(layers.softmax_with_cross_entropy(logits, label)))


def test_demo_cnn_float32():
    """graphc.models.demo_cnn as built (float32): larger steps and a looser tolerance."""
    m = models.demo_cnn(image_shape=(1, 6, 6), num_classes=3, channels=(2, 2))
    with graphc.program_guard(m.main, m.startup):
        c = GradCheck(1)
        c.feeds = {"image": c.randn(2, 1, 6, 6).astype("float32"), "label": np.array([[0], [2]])}
        c.eps, c.rtol, c.atol = 1e-3, 2e-2, 1e-3
        for p in m.main.all_parameters():
            if p.trainable:
                c.set_param(p, c.rng.uniform(-1, 1, p.shape))
        grads = c.check(loss=m.loss)
    assert sorted(grads) == sorted(p.name for p in m.main.all_parameters() if p.trainable)
    assert all(g.dtype == np.float32 for g in grads.values())


# -- append_backward behaviour ------------------------------------------------------------------
def _mlp(depth=2, width=3):
    x = graphc.data("x", [2, width], dtype="float64")
    h = x
    for _ in range(depth):
        h = layers.fc(h, width, act="tanh")
    return x, h, layers.mean(h)


def _backward_ops(program=None):
    program = program or graphc.default_main_program()
    return [op for op in program.global_block().ops if op.role == "backward"]


def test_parameter_gradient_names():
    _, _, loss = _mlp()
    pairs = graphc.append_backward(loss)
    assert [(p.name, g.name) for p, g in pairs] == [
        ("fc_0.w_0", "fc_0.w_0@GRAD"), ("fc_0.b_0", "fc_0.b_0@GRAD"),
        ("fc_1.w_0", "fc_1.w_0@GRAD"), ("fc_1.b_0", "fc_1.b_0@GRAD")]
    for p, g in pairs:
        assert g.shape == p.shape and g.dtype == p.dtype
        assert isinstance(p, graphc.Parameter)
    # data is stop_gradient by default: no grad for x
    assert not graphc.default_main_program().global_block().has_var("x@GRAD")


def test_no_grad_set_removes_gradients():
    _, _, loss = _mlp()
    block = graphc.default_main_program().global_block()
    pairs = graphc.append_backward(loss, no_grad_set={"fc_0.b_0", block.var("fc_1.w_0")})
    assert [p.name for p, _ in pairs] == ["fc_0.w_0", "fc_1.b_0"]
    produced = {n for op in _backward_ops() for n in op.output_arg_names}
    assert "fc_0.b_0@GRAD" not in produced and "fc_1.w_0@GRAD" not in produced
    assert "fc_0.w_0@GRAD" in produced


def test_no_grad_set_on_an_intermediate_blocks_everything_before_it():
    _, _, loss = _mlp()
    first_out = graphc.default_main_program().global_block().ops[2].output("Out")[0]
    pairs = graphc.append_backward(loss, no_grad_set={first_out})
    assert [p.name for p, _ in pairs] == ["fc_1.w_0", "fc_1.b_0"]
    assert {op.type for op in _backward_ops()} >= {"mul_grad", "tanh_grad"}
    assert len([op for op in _backward_ops() if op.type == "mul_grad"]) == 1


def test_parameter_list_limits_the_returned_pairs():
    _, _, loss = _mlp()
    block = graphc.default_main_program().global_block()
    pairs = graphc.append_backward(loss, parameter_list=["fc_1.w_0", block.var("fc_0.b_0")])
    assert [(p.name, g.name) for p, g in pairs] == [("fc_1.w_0", "fc_1.w_0@GRAD"),
                                                      ("fc_0.b_0", "fc_0.b_0@GRAD")]


@grad_case("mul", "elementwise_add", "tanh")
def parameter_list_case(c):
    """The gradients returned for a parameter_list subset are still correct."""
    x = c.data("x", c.randn(2, 3), grad=False)
    h = layers.fc(layers.fc(x, 3, act="tanh"), 2)
    c.parameter_list = ["fc_1.w_0", "fc_0.w_0"]
    block = c.program.global_block()
    c.check(h, wrt=[block.var("fc_1.w_0"), block.var("fc_0.w_0")])


def test_stop_gradient_on_an_intermediate_blocks_flow():
    x = graphc.data("x", [2, 3], dtype="float64")
    h = layers.fc(x, 3, act="tanh")
    h.stop_gradient = True
    loss = layers.mean(layers.fc(h, 2))
    pairs = graphc.append_backward(loss)
    assert [p.name for p, _ in pairs] == ["fc_1.w_0", "fc_1.b_0"]
    assert all(not op.type.startswith("tanh") for op in _backward_ops())
    assert not graphc.default_main_program().global_block().has_var("fc_0.w_0@GRAD")


def test_parameters_that_do_not_affect_the_loss_get_no_grad():
    x = graphc.data("x", [2, 3], dtype="float64")
    used = layers.fc(x, 2)
    layers.fc(x, 4)  # a dead branch
    ids = graphc.data("ids", [2, 1], dtype="int64")
    layers.embedding(ids, [5, 2], dtype="float64")  # another
    pairs = graphc.append_backward(layers.mean(used))
    assert [p.name for p, _ in pairs] == ["fc_0.w_0", "fc_0.b_0"]
    block = graphc.default_main_program().global_block()
    assert not any(block.has_var(n + GRAD_SUFFIX) for n in ("fc_1.w_0", "fc_1.b_0",
                                                            "embedding_0.w_0"))


def test_non_trainable_parameter_gets_no_grad():
    x = graphc.data("x", [2, 3], dtype="float64")
    loss = layers.mean(layers.fc(x, 2, param_attr=graphc.ParamAttr(trainable=False)))
    assert [p.name for p, _ in graphc.append_backward(loss)] == ["fc_0.b_0"]


def test_loss_with_unknown_shape_raises():
    x = graphc.data("x", [-1, 3], dtype="float64")
    x.stop_gradient = False
    per_row = layers.reduce_sum(layers.fc(x, 2), dim=1)
    assert per_row.shape == (-1,)
    with pytest.raises(graphc.ProgramError, match="known shape"):
        graphc.append_backward(per_row)
    assert not _backward_ops()  # nothing was appended


def test_bad_losses_raise():
    x = graphc.data("x", [2, 3], dtype="float64")
    with pytest.raises(graphc.ProgramError, match="must be a Variable"):
        graphc.append_backward("x")
    with pytest.raises(graphc.ProgramError, match="no op computes"):
        graphc.append_backward(x)
    ids = graphc.data("ids", [2, 1], dtype="int64")
    with pytest.raises(graphc.ProgramError, match="floating point"):
        graphc.append_backward(layers.reduce_sum(ids))


def here() -> int:
    return sys._getframe(1).f_lineno


def test_backward_ops_have_backward_role_and_forward_source_lines():
    x = graphc.data("x", [2, 3], dtype="float64")
    x.stop_gradient = False
    lines = {}
    lines["mul"], h = here(), layers.fc(x, 3, bias_attr=False)
    lines["tanh"], h = here(), layers.tanh(h)
    lines["sum"], h = here(), layers.sums([h, h])
    lines["mean"], loss = here(), layers.mean(h)
    n_forward = len(graphc.default_main_program().global_block().ops)
    graphc.append_backward(loss)
    ops = graphc.default_main_program().global_block().ops
    assert all(op.role == "forward" for op in ops[:n_forward])
    backward = ops[n_forward:]
    assert backward and all(op.role == "backward" for op in backward)
    assert backward[0].type == "fill_constant"
    assert backward[0].source.endswith(f"{THIS_FILE}:{lines['mean']}")
    for op in backward[1:]:
        fwd = op.type.removesuffix("_grad")
        if op.type == "sum":  # accumulates the two parts of tanh's output grad: tanh's line
            assert op.source.endswith(f"{THIS_FILE}:{lines['tanh']}")
            continue
        assert op.source.endswith(f"{THIS_FILE}:{lines[fwd]}"), (op.type, op.source)
    # the grad of h, used twice by sum, is accumulated from @RENAME@ parts
    renamed = [n for op in backward for n in op.output_arg_names if "@RENAME@" in n]
    assert len(renamed) == 2
    g = graphc.lower(graphc.default_main_program())
    assert all(op.role == "backward" for op in g.ops() if op.type.endswith("_grad"))


def test_backward_of_a_deep_mlp_is_linear():
    depth = 2000
    x = graphc.data("x", [1, 2], dtype="float64")
    h = x
    for _ in range(depth):
        h = layers.fc(h, 2)
    loss = layers.mean(h)
    n_forward = len(graphc.default_main_program().global_block().ops)
    assert n_forward == 2 * depth + 1
    pairs = graphc.append_backward(loss)
    assert len(pairs) == 2 * depth
    backward = _backward_ops()
    # one grad op per forward op plus the loss's fill_constant; nothing to accumulate
    assert len(backward) == n_forward + 1
    assert sum(op.type == "mul_grad" for op in backward) == depth


@grad_case("fused_batch_norm_act",
           params=[{"act": "relu", "layout": "NCHW"}, {"act": "leaky_relu", "layout": "NHWC"},
                   {"act": "tanh", "layout": "NCHW", "is_test": True},
                   {"act": "sigmoid", "layout": "NHWC", "global_stats": True}])
def fused_batch_norm_act(c, act, layout, is_test=False, global_stats=False):
    shape = (3, 2, 2, 3) if layout == "NCHW" else (3, 2, 3, 2)
    x = c.data("x", c.randn(*shape) * 2 + 1)
    layers.batch_norm(x, is_test=is_test, data_layout=layout, name="bn",
                      use_global_stats=global_stats)
    block = c.program.global_block()
    bn = block.ops[-1]  # batch_norm becomes fused_batch_norm_act, writing Y to a new var
    block._remove_op(len(block.ops) - 1)
    out = block.create_var("out", None, "float64")
    block.append_op("fused_batch_norm_act", {s: bn.input(s) for s in bn.input_names},
                    {**{s: bn.output(s) for s in bn.output_names}, "Y": [out.name]},
                    {**bn.all_attrs(), "act_type": act, "alpha": 0.1})
    c.set_param("bn.w_1", c.randn(2))
    c.set_param("bn.w_2", c.uniform(0.5, 2.0, 2))
    grads = c.check(out)
    assert set(grads) == {"x", "bn.w_0", "bn.b_0"}
    assert "fused_batch_norm_act_grad" in [op.type for op in block.ops]


@grad_case("fused_relu_depthwise_conv2d",
           params=[{"filters": 3, "fmt": "NCHW"}, {"filters": 6, "fmt": "NHWC"}])
def fused_relu_depthwise_conv2d(c, filters, fmt):
    shape = (1, 3, 5, 5) if fmt == "NCHW" else (1, 5, 5, 3)
    x = c.data("x", c.away_from_zero(*shape))  # away from relu's kink
    w = c.data("w", c.randn(filters, 1, 3, 3))
    block = c.program.global_block()
    out = block.create_var("out", None, "float64")
    block.append_op("fused_relu_depthwise_conv2d", {"Input": x, "Filter": w}, {"Output": out},
                    {"groups": 3, "paddings": [1, 1], "data_format": fmt})
    return out


FUSED_EA = [(["relu", "elementwise_add"], "Y", (2, 3, 4), (3,), 1),
            (["gelu", "elementwise_add"], "Y", (2, 3), (2, 3), -1),
            (["elementwise_add", "tanh"], "Y", (2, 3, 4), (3,), 1),
            (["elementwise_add", "leaky_relu"], "X", (3,), (2, 3, 4), 1),
            (["elementwise_add", "scale"], "X", (2, 3), (2, 3), -1)]


@grad_case("fused_elemwise_activation",
           params=[dict(functors=f, operand=o, xs=xs, ys=ys, axis=a)
                   for f, o, xs, ys, a in FUSED_EA],
           ids=[f"{'-'.join(f)}-{o}" for f, o, *_ in FUSED_EA])
def fused_elemwise_activation(c, functors, operand, xs, ys, axis):
    block = c.program.global_block()
    x, y = c.data("x", c.away_from_zero(*xs)), c.data("y", c.away_from_zero(*ys))
    act = functors[0] if functors[1] == "elementwise_add" else functors[1]
    attrs = ({"alpha": 0.1} if act == "leaky_relu" else
             {"scale": 2.0, "bias": 0.5} if act == "scale" else {})
    out = block.create_var("out", None, "float64")
    inter = block.create_var("inter", None, "float64")
    block.append_op("fused_elemwise_activation", {"X": x, "Y": y},
                    {"Out": out, "IntermediateOut": inter},
                    {"functor_list": functors, "unary_operand": operand, "axis": axis, **attrs})
    return out


@grad_case("sync_batch_norm", params=[{"layout": "NCHW"}, {"layout": "NHWC"}])
def sync_batch_norm(c, layout):
    """One rank outside a data-parallel step (the replicated case is checked by finite
    differences of the cross-replica rule in test_pass_sync_batch_norm.py)."""
    shape = (3, 2, 2, 3) if layout == "NCHW" else (3, 2, 3, 2)
    x = c.data("x", c.randn(*shape) * 2 + 1)
    layers.batch_norm(x, data_layout=layout, name="bn")
    block = c.program.global_block()
    bn = block.ops[-1]
    block._remove_op(len(block.ops) - 1)
    out = block.create_var("out", None, "float64")
    block.append_op("sync_batch_norm", {s: bn.input(s) for s in bn.input_names},
                    {**{s: bn.output(s) for s in bn.output_names}, "Y": [out.name]},
                    {**bn.all_attrs(), "nranks": 1})
    c.set_param("bn.w_1", c.randn(2))
    c.set_param("bn.w_2", c.uniform(0.5, 2.0, 2))
    grads = c.check(out)
    assert set(grads) == {"x", "bn.w_0", "bn.b_0"}
    assert "sync_batch_norm_grad" in [op.type for op in block.ops]


# -- tensor manipulation (issue 15) ------------------------------------------------------------
def _ids(c, name, values):
    return c.data(name, np.asarray(values), grad=False, dtype="int64")


@grad_case("slice", params=[{"axes": [0, 2], "starts": [1, -3], "ends": [10000, -1]},
                            {"axes": [-2], "starts": [-3], "ends": [3]}])
def tensor_slice(c, axes, starts, ends):
    return layers.slice(c.data("x", c.randn(3, 4, 5)), axes, starts, ends)


@grad_case("slice")
def tensor_slice_decrease_axis(c):
    block = c.program.global_block()
    out = block.create_var("out", None, "float64")
    block.append_op("slice", {"Input": c.data("x", c.randn(3, 4))}, {"Out": out},
                    {"axes": [0], "starts": [1], "ends": [2], "decrease_axis": [0]})
    assert tuple(out.shape) == (4,)
    return out


@grad_case("strided_slice")
def tensor_strided_slice(c):
    return layers.strided_slice(c.data("x", c.randn(3, 4, 5)), [1, 2], [-1, 0], [-5, 5],
                                [-2, 2])


@grad_case("squeeze2", params=[{"axes": [1]}, {"axes": []}, {"axes": [-1, 1]}])
def tensor_squeeze(c, axes):
    return layers.squeeze(c.data("x", c.randn(2, 1, 3, 1)), axes)


@grad_case("unsqueeze2", params=[{"axes": [0, -1]}, {"axes": [1]}])
def tensor_unsqueeze(c, axes):
    return layers.unsqueeze(c.data("x", c.randn(2, 3)), axes)


@grad_case("flatten2", params=[{"axis": 0}, {"axis": 2}, {"axis": 3}])
def tensor_flatten(c, axis):
    return layers.flatten(c.data("x", c.randn(2, 3, 2)), axis)


@grad_case("expand")
def tensor_expand(c):
    return layers.expand(c.data("x", c.randn(2, 1, 3)), [1, 2, 2])


@grad_case("expand_as")
def tensor_expand_as(c):
    target = c.data("t", c.randn(4, 3), grad=False)
    return layers.expand_as(c.data("x", c.randn(2, 1)), target)


@grad_case("gather", params=[{"index": [3, 0, 3, 1], "overwrite": False, "column": False},
                             {"index": [4, 0, 2], "overwrite": True, "column": False},
                             {"index": [1, 1, 2], "overwrite": False, "column": True}])
def tensor_gather(c, index, overwrite, column):
    idx = np.asarray(index).reshape(-1, 1) if column else index
    return layers.gather(c.data("x", c.randn(5, 3)), _ids(c, "index", idx), overwrite)


@grad_case("gather_nd")
def tensor_gather_nd(c):
    index = _ids(c, "index", [[0, 1], [2, 3], [1, 0]])
    return layers.gather_nd(c.data("x", c.randn(3, 4, 2)), index)


@grad_case("scatter", params=[{"ids": [1, 3, 0], "overwrite": True},
                              {"ids": [1, 3, 1], "overwrite": False}])
def tensor_scatter(c, ids, overwrite):
    x, upd = c.data("x", c.randn(5, 3)), c.data("updates", c.randn(3, 3))
    return layers.scatter(x, _ids(c, "ids", ids), upd, overwrite=overwrite)


@grad_case("stack", params=[{"axis": 0}, {"axis": -1}])
def tensor_stack(c, axis):
    return layers.stack([c.data(f"x{i}", c.randn(2, 3)) for i in range(3)], axis=axis)


@grad_case("unstack", params=[{"axis": 1}, {"axis": -1}])
def tensor_unstack(c, axis):
    return layers.unstack(c.data("x", c.randn(2, 3, 2)), axis=axis)


# -- issue 24: tensor creation and manipulation ------------------------------------------------
@grad_case("pad", params=[{"paddings": [1, 0, 2, 1]}, {"paddings": [0, 2, 0, 0]}])
def tensor_pad(c, paddings):
    return layers.pad(c.data("x", c.randn(2, 3)), paddings, pad_value=0.5)


@grad_case("pad2d", params=[{"mode": m, "fmt": f} for m in ("constant", "reflect", "edge")
                            for f in ("NCHW", "NHWC")])
def tensor_pad2d(c, mode, fmt):
    return layers.pad2d(c.data("x", c.randn(1, 3, 4, 3)), [1, 2, 2, 1], mode, 0.3, fmt)


@grad_case("pad_constant_like")
def tensor_pad_constant_like(c):
    x = c.data("x", c.randn(3, 4), grad=False)
    return layers.pad_constant_like(x, c.data("y", c.randn(2, 3)), pad_value=1.0)


@grad_case("crop", "crop_tensor")
def tensor_crop(c):
    x = c.data("x", c.randn(3, 4, 5))
    like = c.data("like", c.randn(2, 2, 3), grad=False)
    return [layers.crop(x, like, [1, 0, 2]), layers.crop_tensor(x, [2, -1, 3], [0, 1, 1])]


@grad_case("label_smooth", params=[{"prior": False}, {"prior": True}])
def tensor_label_smooth(c, prior):
    dist = c.data("prior", c.uniform(0.1, 1.0, 1, 4)) if prior else None
    return layers.label_smooth(c.data("x", c.uniform(0.0, 1.0, 3, 4)), dist, epsilon=0.2)


@grad_case("multiplex")
def tensor_multiplex(c):
    xs = [c.data(f"x{i}", c.randn(4, 3)) for i in range(3)]
    return layers.multiplex(xs, _ids(c, "ids", [[2], [0], [2], [1]]))


@grad_case("scatter_nd_add")
def tensor_scatter_nd_add(c):
    ref, upd = c.data("ref", c.randn(3, 4, 2)), c.data("upd", c.randn(3, 2))
    return layers.scatter_nd_add(ref, _ids(c, "index", [[0, 1], [2, 3], [0, 1]]), upd)


@grad_case("space_to_depth", "pixel_shuffle", "shuffle_channel")
def tensor_rearrange_channels(c):
    x = c.data("x", c.randn(1, 8, 4, 2))
    return [layers.space_to_depth(x, 2), layers.pixel_shuffle(x, 2),
            layers.shuffle_channel(x, 4)]


@grad_case("log", "pow", "sign")
def tensor_log_pow_sign(c):
    x = c.data("x", c.uniform(0.5, 2.0, 2, 3))
    y = c.data("y", c.away_from_zero(2, 3))
    return [layers.log(x), layers.pow(x, 2.5), layers.sign(y)]


@grad_case("clip")
def tensor_clip(c):
    # a grid offset by 0.05 from the bounds: no value within eps of a kink
    return layers.clip(c.data("x", c.rng.integers(-10, 10, (3, 4)) * 0.1 + 0.05), -0.5, 0.6)


@grad_case("clip_by_norm", params=[{"max_norm": 0.5}, {"max_norm": 50.0}])
def tensor_clip_by_norm(c, max_norm):
    return layers.clip_by_norm(c.data("x", c.randn(2, 3)), max_norm)


# -- issue 24: math activations ---------------------------------------------------------------
def _grid(c, low, high, offset=0.05):
    """A 0.1 grid on [low, high) moved off it by offset: no value within eps of a kink at a
    multiple of 0.1 (or of a rounding step)."""
    return c.rng.integers(round(low * 10), round(high * 10), (2, 3, 2)) * 0.1 + offset


# name -> (layer call, values): kinks are kept away from by a grid or a margin
MATH_ACTIVATIONS = {
    "selu": (lambda x: layers.selu(x), lambda c: c.away_from_zero(2, 3, 2, margin=0.1)),
    "selu-attrs": (lambda x: layers.selu(x, scale=1.5, alpha=0.7),
                   lambda c: c.away_from_zero(2, 3, 2, margin=0.1)),
    "elu": (lambda x: layers.elu(x, alpha=0.7), lambda c: c.away_from_zero(2, 3, 2, margin=0.1)),
    "relu6": (lambda x: layers.relu6(x), lambda c: _grid(c, -2, 8)),
    "stanh": (lambda x: layers.stanh(x, 0.5, 2.0), lambda c: c.randn(2, 3, 2)),
    "hard_sigmoid": (lambda x: layers.hard_sigmoid(x), lambda c: _grid(c, -4, 4)),
    "swish": (lambda x: layers.swish(x, beta=1.5), lambda c: c.randn(2, 3, 2)),
    "brelu": (lambda x: layers.brelu(x, -0.5, 0.6), lambda c: _grid(c, -1, 1)),
    "soft_relu": (lambda x: layers.soft_relu(x, threshold=1.0), lambda c: _grid(c, -2, 2)),
    "logsigmoid": (layers.logsigmoid, lambda c: c.randn(2, 3, 2, scale=3.0)),
    "hard_swish": (lambda x: layers.hard_swish(x), lambda c: _grid(c, -5, 5)),
    "thresholded_relu": (lambda x: layers.thresholded_relu(x, 0.3), lambda c: _grid(c, -1, 1)),
    "softplus": (layers.softplus, lambda c: c.randn(2, 3, 2, scale=3.0)),
    "softshrink": (lambda x: layers.softshrink(x, 0.4), lambda c: _grid(c, -1, 1)),
    "hard_shrink": (lambda x: layers.hard_shrink(x, 0.4), lambda c: _grid(c, -1, 1)),
    "tanh_shrink": (layers.tanh_shrink, lambda c: c.randn(2, 3, 2)),
    "erf": (layers.erf, lambda c: c.randn(2, 3, 2)),
    "atan": (layers.atan, lambda c: c.randn(2, 3, 2)),
    "rsqrt": (layers.rsqrt, lambda c: c.uniform(0.2, 2.0, 2, 3, 2)),
    "cos": (layers.cos, lambda c: c.randn(2, 3, 2)),
    "sin": (layers.sin, lambda c: c.randn(2, 3, 2)),
    "acos": (layers.acos, lambda c: c.uniform(-0.9, 0.9, 2, 3, 2)),
    "asin": (layers.asin, lambda c: c.uniform(-0.9, 0.9, 2, 3, 2)),
    "reciprocal": (layers.reciprocal, lambda c: c.away_from_zero(2, 3, 2, margin=0.3)),
    # zero gradient (Paddle's): central differences off the steps agree
    "ceil": (layers.ceil, lambda c: _grid(c, -2, 2, 0.03)),
    "floor": (layers.floor, lambda c: _grid(c, -2, 2, 0.03)),
    "round": (layers.round, lambda c: _grid(c, -2, 2, 0.03)),
}


def math_activation(c, name):
    fn, values = MATH_ACTIVATIONS[name]
    out = fn(c.data("x", values(c)))
    assert c.program.global_block().ops[-1].type == name.split("-")[0]
    return out


for _name in MATH_ACTIVATIONS:
    grad_case(_name.split("-")[0], params=[{"name": _name}], ids=[_name])(math_activation)
del _name


@grad_case("prelu", params=[{"mode": "all"}, {"mode": "channel"}, {"mode": "element"}])
def prelu(c, mode):
    # Alpha is a parameter (its random value from the checker): both gradients are checked
    return layers.prelu(c.data("x", c.away_from_zero(2, 3, 2, 2, margin=0.1)), mode)


@grad_case("maxout", params=[{"axis": 1}, {"axis": -1}])
def maxout(c, axis):
    # distinct values, so each group's maximum is unique
    values = c.rng.permutation(48).reshape(2, 4, 3, 2) * 0.1
    return layers.maxout(c.data("x", values if axis == 1 else values.transpose(0, 2, 3, 1)),
                         groups=2, axis=axis)


@grad_case("cumsum", params=[{"axis": a, "exclusive": e, "reverse": r}
                             for a, e, r in ((-1, False, False), (0, True, False),
                                             (1, False, True), (1, True, True))])
def cumsum(c, axis, exclusive, reverse):
    return layers.cumsum(c.data("x", c.randn(2, 3, 2)), axis, exclusive, reverse)


@grad_case("sum")
def sum_layer(c):
    return layers.sum([c.data("a", c.randn(2, 3)), c.data("b", c.randn(2, 3))])


@grad_case("mul")
def mul_layer(c):
    return layers.mul(c.data("x", c.randn(2, 3, 4)), c.data("y", c.randn(4, 5)),
                      x_num_col_dims=2)
# -- end issue 24: math activations


# -- issue 24: detection ----------------------------------------------------------------------
@grad_case("roi_align", params=[{"ratio": -1}, {"ratio": 2}])
def roi_align(c, ratio):
    """Gradient to X only (Paddle's roi_align_grad has no ROIs gradient); boxes keep every
    sample away from a pixel edge so central differences see a smooth function."""
    x = c.data("x", c.randn(2, 2, 5, 6))
    rois = c.data("rois", np.array([[0.3, 0.2, 7.7, 6.1], [2.1, 1.3, 5.9, 8.3],
                                    [1.1, 0.7, 3.3, 2.9]]), grad=False)
    offsets = c.data("offsets", np.array([0, 2, 3]), grad=False, dtype="int64")
    return layers.roi_align(x, rois, 2, 2, 0.6, ratio, rois_lod=offsets)


@grad_case("roi_pool")
def roi_pool(c):
    """Gradient to each bin's maximum (distinct random values: no ties)."""
    x = c.data("x", c.randn(2, 2, 5, 6))
    rois = c.data("rois", np.array([[0.0, 0.0, 9.0, 7.0], [2.0, 1.0, 6.0, 8.0],
                                    [1.0, 1.0, 3.0, 3.0]]), grad=False)
    offsets = c.data("offsets", np.array([0, 2, 3]), grad=False, dtype="int64")
    return layers.roi_pool(x, rois, 2, 2, 0.6, rois_lod=offsets)
# -- end issue 24: detection


# -- issue 24: vision sampling ----------------------------------------------------------------
_VS_ROIS = np.array([[0.3, 0.2, 7.7, 6.1], [2.1, 1.3, 5.9, 8.3], [1.1, 0.7, 3.3, 2.9]])


def _vs_lod_check(c, out, feeds, wrt):
    """LoD ROIs: central differences on the interpreter by graphc.testing.lod_checks."""
    from graphc.testing.lod_checks import fd_check, token_loss
    loss, w = token_loss(out, c.rng)
    fd_check(c.program, loss, {**feeds, **w}, wrt, c.rng, coords=8)


def _vs_rois(c, width=4, value=_VS_ROIS):
    from graphc.runtime.lod import create_lod_tensor
    return (graphc.data("rois", [-1, width], "float64", lod_level=1),
            create_lod_tensor(value, [[2, 1]]))


def _vs_x(c, shape):
    x = graphc.data("x", list(shape), "float64")
    x.stop_gradient = False
    return x, c.randn(*shape)


@grad_case("psroi_pool")
def psroi_pool(c):
    x, xv = _vs_x(c, (2, 8, 5, 6))
    r, rv = _vs_rois(c)
    _vs_lod_check(c, layers.psroi_pool(x, r, 2, 0.6, 2, 2), {"x": xv, "rois": rv}, ["x"])


@grad_case("prroi_pool")
def prroi_pool(c):
    """Gradient to X and to ROIs (Paddle's prroi_pool_grad has both)."""
    x = c.data("x", c.randn(2, 2, 5, 6))
    rois = c.data("rois", _VS_ROIS)
    nums = c.data("nums", np.array([2, 1]), grad=False, dtype="int64")
    return layers.prroi_pool(x, rois, 0.6, 2, 2, batch_roi_nums=nums)


@grad_case(params=[{"op": "deformable_conv"}, {"op": "deformable_conv_v1"}])
def deformable_conv(c, op):
    """To Input, Offset, Mask and the Filter and bias parameters."""
    modulated = op == "deformable_conv"
    x = c.data("x", c.randn(1, 4, 4, 5))
    off = c.data("off", c.randn(1, 36, 2, 3, scale=0.7))
    mask = c.data("mask", c.uniform(0, 1, 1, 18, 2, 3)) if modulated else None
    return layers.deformable_conv(x, off, mask, 4, 3, stride=2, padding=1, groups=2,
                                  deformable_groups=2, modulated=modulated)


@grad_case("deformable_psroi_pooling")
def deformable_roi_pooling(c):
    """To Input and Trans (Paddle's grad op has both, no ROIs gradient)."""
    x, xv = _vs_x(c, (2, 8, 5, 6))
    r, rv = _vs_rois(c)
    t = graphc.data("trans", [-1, 4, 2, 2], "float64")
    t.stop_gradient = False
    out = layers.deformable_roi_pooling(x, r, t, False, 0.6, [2, 2], 2, 2, None, 2, 0.1, True)
    _vs_lod_check(c, out, {"x": xv, "rois": rv, "trans": c.randn(3, 4, 2, 2)}, ["x", "trans"])


@grad_case("roi_perspective_transform")
def roi_perspective_transform(c):
    x, xv = _vs_x(c, (2, 2, 6, 7))
    quads = np.array([[0.6, 0.4, 6.2, 1.1, 5.5, 5.3, 1.3, 4.2],
                      [1.1, 1.2, 5.3, 0.9, 5.2, 4.1, 0.8, 4.4],
                      [2.2, 0.3, 6.1, 2.5, 5.4, 5.8, 0.3, 5.1]])
    r, rv = _vs_rois(c, 8, quads)
    out, _, _ = layers.roi_perspective_transform(x, r, 3, 4)
    _vs_lod_check(c, out, {"x": xv, "rois": rv}, ["x"])


@grad_case("im2sequence")
def im2sequence(c):
    x, xv = _vs_x(c, (2, 2, 4, 5))
    sizes = graphc.data("sizes", [2, 2], "int32")
    out = layers.im2sequence(x, [2, 2], 1, [1, 0], input_image_size=sizes, out_stride=2)
    _vs_lod_check(c, out, {"x": xv, "sizes": np.array([[8, 10], [5, 6]], "int32")}, ["x"])
# -- end issue 24: vision sampling


# -- issue 24: detection targets --------------------------------------------------------------
@grad_case("yolov3_loss", params=[{"score": False, "scale": 1.0}, {"score": True, "scale": 1.1}])
def yolov3_loss(c, score, scale):
    """Gradient to X (Paddle's only one); small logits keep every |w/h residual| and the
    ignore decisions away from their kinks."""
    x = c.data("x", c.randn(2, 14, 3, 3, scale=0.1))
    box = c.data("box", np.array([[[0.3, 0.4, 0.3, 0.5], [0.7, 0.2, 0.2, 0.1],
                                   [0.0, 0.0, 0.0, 0.0]],
                                  [[0.55, 0.6, 0.4, 0.35], [0.1, 0.85, 0.1, 0.12],
                                   [0.3, 0.4, 0.3, 0.5]]]), grad=False)
    label = c.data("label", np.array([[0, 1, 0], [1, 1, 0]]), grad=False, dtype="int32")
    gt_score = c.data("score", c.uniform(0.5, 1.0, 2, 3), grad=False) if score else None
    return layers.yolov3_loss(x, box, label, [10, 13, 16, 30, 33, 23], [1, 2], 2, 0.9, 8,
                              gt_score=gt_score, scale_x_y=scale)
# -- end issue 24: detection targets


# -- issue 24: distributions and Variable -----------------------------------------------------
@grad_case("strided_slice", params=[{"index": "reversed"}, {"index": "int_and_step"}])
def variable_indexing(c, index):
    x = c.data("x", c.randn(3, 4, 5))
    return x[::-1, 1:, -2] if index == "reversed" else x[1, ::-2, 1:4]


@grad_case("slice")
def variable_indexing_slice(c):
    return c.data("x", c.randn(3, 4))[-1, 1:3]
# -- end issue 24: distributions and Variable


@grad_case("norm", params=[{"shape": (2, 3, 2), "axis": 1}, {"shape": (2, 3), "axis": -1},
                           {"shape": (4,), "axis": 3}])
def tensor_l2_normalize(c, shape, axis):
    return layers.l2_normalize(c.data("x", c.randn(*shape)), axis)


@grad_case(params=[{"op": op, **r} for op in ("reduce_min", "reduce_prod") for r in REDUCES])
def tensor_reduce(c, op, dim, keep_dim):
    fn = {"reduce_min": layers.reduce_min, "reduce_prod": layers.reduce_prod}[op]
    values = (c.rng.permutation(24).reshape(2, 3, 4) * 0.1 if op == "reduce_min"
              else c.away_from_zero(2, 3, 4, margin=0.5))  # distinct / away from 0
    return fn(c.data("x", values), dim=dim, keep_dim=keep_dim)


@grad_case("argsort", params=[{"axis": -1, "descending": False},
                              {"axis": 0, "descending": True}])
def tensor_argsort(c, axis, descending):
    x = c.data("x", c.rng.permutation(12).reshape(3, 4) * 0.1)  # distinct: no ties
    out, _ = layers.argsort(x, axis=axis, descending=descending)
    return out


@grad_case("top_k")
def tensor_top_k(c):
    x = c.data("x", c.rng.permutation(12).reshape(3, 4) * 0.1)
    block = c.program.global_block()
    out, idx = block.create_var("out", None, "float64"), block.create_var("idx", None, "int64")
    block.append_op("top_k", {"X": x}, {"Out": out, "Indices": idx}, {"k": 2})
    return out


# -- losses (issue 15) ---------------------------------------------------------------------------
@grad_case("sigmoid_cross_entropy_with_logits",
           params=[{"normalize": False, "ignore": False}, {"normalize": True, "ignore": True}])
def loss_sigmoid_cross_entropy_with_logits(c, normalize, ignore):
    label = c.uniform(0, 1, 3, 4)
    if ignore:
        label[0, 1] = label[2, 3] = -100  # ignored elements: zero loss, zero gradient
    x = c.data("x", c.randn(3, 4))
    return layers.sigmoid_cross_entropy_with_logits(
        x, c.data("label", label, grad=False), normalize=normalize)


@grad_case("cos_sim", params=[{"rows": 3}, {"rows": 1}])
def loss_cos_sim(c, rows):
    x, y = c.data("x", c.randn(3, 2, 2)), c.data("y", c.randn(rows, 2, 2))
    return layers.cos_sim(x, y)


@grad_case("log_loss")
def loss_log_loss(c):
    p = c.data("p", c.uniform(0.1, 0.9, 4, 1))
    return layers.log_loss(p, c.data("label", c.rng.integers(0, 2, (4, 1)), grad=False))


@grad_case("huber_loss")
def loss_huber(c):
    x = c.randn(2, 4)
    r = c.rng.choice([0.3, -0.6, 1.5, -2.0], (2, 4))  # both sides of delta, none on it
    return layers.huber_loss(c.data("x", x), c.data("y", x + r), delta=1.0)


@grad_case("smooth_l1_loss", params=[{"weights": False, "sigma": None},
                                     {"weights": True, "sigma": 2.0}])
def loss_smooth_l1(c, weights, sigma):
    x = c.randn(3, 4)
    d = c.rng.choice([0.05, -0.1, 1.5, -2.0], (3, 4))  # quadratic and linear parts
    kw = {}
    if weights:
        kw = {"inside_weight": c.data("iw", c.uniform(0.5, 1.0, 3, 4), grad=False),
              "outside_weight": c.data("ow", c.uniform(0.5, 1.5, 3, 4), grad=False)}
    return layers.smooth_l1(c.data("x", x), c.data("y", x + d), sigma=sigma, **kw)


@grad_case("bpr_loss")
def loss_bpr(c):
    x = c.data("x", c.randn(3, 4))
    return layers.bpr_loss(x, c.data("label", c.rng.integers(0, 4, (3, 1)), grad=False,
                                     dtype="int64"))


@grad_case("margin_rank_loss")
def loss_margin_rank(c):
    left = c.randn(4, 1)
    label = np.array([[1.0], [-1.0], [1.0], [-1.0]])
    # -label * (left - right) + 0.1 = +-0.5: two active, two clipped, none at the kink
    right = left + label * np.array([[-0.4], [-0.4], [0.6], [0.6]])
    return layers.margin_rank_loss(c.data("label", label, grad=False), c.data("left", left),
                                   c.data("right", right))


@grad_case("rank_loss")
def loss_rank(c):
    return layers.rank_loss(c.data("label", c.uniform(0, 1, 4, 1), grad=False),
                            c.data("left", c.randn(4, 1)), c.data("right", c.randn(4, 1)))


@grad_case("kldiv_loss", params=[{"reduction": r} for r in ("none", "batchmean", "mean", "sum")])
def loss_kldiv(c, reduction):
    target = c.uniform(0.1, 1.0, 3, 4)
    target[1, 2] = 0.0  # no contribution where the target is 0
    return layers.kldiv_loss(c.data("x", c.randn(3, 4)), c.data("target", target, grad=False),
                             reduction=reduction)


# -- LoD (issue 16): ops over variable-length sequences --------------------------------------
# GradCheck feeds dense arrays; a LoD input is checked by graphc.testing.lod's checker, which
# perturbs the ragged tokens themselves (tests/test_lod_core.py compares with the analytic
# gradient on the ragged data too).
@grad_case("sequence_pool", params=[{"pooltype": p} for p in
                                    ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")])
def sequence_pool_lod(c, pooltype):
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod import lod_grad_check
    lengths = [2, 0, 1, 3]
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    w = graphc.data("w", [-1, 3], "float64")
    out = layers.sequence_pool(x, pooltype.lower())
    loss = layers.reduce_sum(layers.elementwise_mul(out, w))
    feeds = {"x": create_lod_tensor(c.randn(6, 3), [lengths]), "w": c.randn(4, 3)}
    lod_grad_check(c.program, loss, feeds, ["x"], c.rng)


# -- LoD sequence ops beyond sequence_pool (issue 16, tests/test_lod_sequence_ops.py) --------------
# graphc.testing.lod_checks.fd_check perturbs LoD feeds token by token on the ragged data, dense
# feeds and parameters element by element; the loss weighs every token differently.
_SEQ_LENGTHS = [[2, 0, 1, 3]]


def _seq_check(c, out, feeds, wrt, state=None):
    from graphc.testing.lod_checks import fd_check, token_loss
    loss, w = token_loss(out, c.rng)
    fd_check(c.program, loss, {**feeds, **w}, wrt, c.rng, state, coords=8)


def _seq_x(c, name="x", width=2, lengths=None):
    from graphc.runtime.lod import create_lod_tensor
    lengths = lengths or _SEQ_LENGTHS
    x = graphc.data(name, [-1, width], "float64", lod_level=len(lengths))
    x.stop_gradient = False
    return x, create_lod_tensor(c.randn(sum(lengths[-1]), width), lengths)


@grad_case("sequence_softmax", params=[{"level": 1}, {"level": 2}])
def sequence_softmax_lod(c, level):
    x, t = _seq_x(c, width=1, lengths=_SEQ_LENGTHS if level == 1 else [[1, 2], [2, 0, 3]])
    _seq_check(c, layers.sequence_softmax(x), {"x": t}, ["x"])


@grad_case("sequence_conv", params=[{"n": 3, "start": None}, {"n": 2, "start": -2}])
def sequence_conv_lod(c, n, start):
    import graphc.fluid as fluid
    x, t = _seq_x(c)
    out = layers.sequence_conv(x, 2, n, padding_start=start, bias_attr=False,
                               param_attr=fluid.ParamAttr(name="seq_f"))
    _seq_check(c, out, {"x": t}, ["x", "seq_f"], {"seq_f": c.randn(2 * n, 2)})


@grad_case("sequence_expand", params=[{"ref_level": -1}, {"ref_level": 0}])
def sequence_expand_lod(c, ref_level):
    from graphc.runtime.lod import create_lod_tensor
    lengths = [[1, 2], [2, 0, 3]]
    rows = 2 if ref_level == 0 else 3
    d = graphc.data("d", [-1, 2], "float64")
    d.stop_gradient = False
    y = graphc.data("y", [-1, 1], "float64", lod_level=2)
    out = layers.sequence_expand(d, y, ref_level)
    _seq_check(c, out, {"d": c.randn(rows, 2), "y": create_lod_tensor(c.randn(5, 1), lengths)},
               ["d"])


@grad_case("sequence_expand_as")
def sequence_expand_as_lod(c):
    d = graphc.data("d", [-1, 2], "float64")
    d.stop_gradient = False
    y, t = _seq_x(c, "y", 1)
    _seq_check(c, layers.sequence_expand_as(d, y), {"d": c.randn(4, 2), "y": t}, ["d"])


@grad_case("sequence_concat")
def sequence_concat_lod(c):
    from graphc.runtime.lod import create_lod_tensor
    a, ta = _seq_x(c, "a")
    b = graphc.data("b", [-1, 2], "float64", lod_level=1)
    b.stop_gradient = False
    tb = create_lod_tensor(c.randn(4, 2), [[0, 3, 1, 0]])
    _seq_check(c, layers.sequence_concat([a, b, a]), {"a": ta, "b": tb}, ["a", "b"])


@grad_case("sequence_reshape")
def sequence_reshape_lod(c):
    x, t = _seq_x(c, width=4)
    _seq_check(c, layers.sequence_reshape(x, 2), {"x": t}, ["x"])


@grad_case("sequence_pad", "sequence_unpad")
def sequence_pad_unpad_lod(c):
    x, t = _seq_x(c)
    out, length = layers.sequence_pad(x, layers.fill_constant([1], "float64", 0.5), maxlen=4)
    back = layers.sequence_unpad(layers.scale(out, 3.0), length)
    loss_in = layers.concat([layers.reshape(out, [-1, 8]),
                             layers.reshape(layers.sequence_pool(back, "sqrt"), [-1, 2])], 1)
    _seq_check(c, loss_in, {"x": t}, ["x"])


@grad_case("sequence_reverse", params=[{"level": 1}, {"level": 2}])
def sequence_reverse_lod(c, level):
    x, t = _seq_x(c, lengths=_SEQ_LENGTHS if level == 1 else [[1, 2], [2, 0, 3]])
    _seq_check(c, layers.sequence_reverse(x), {"x": t}, ["x"])


@grad_case("sequence_slice")
def sequence_slice_lod(c):
    x, t = _seq_x(c)
    offset = graphc.data("o", [-1, 1], "int64")
    length = graphc.data("n", [-1, 1], "int64")
    _seq_check(c, layers.sequence_slice(x, offset, length),
               {"x": t, "o": np.array([[1], [0], [0], [1]]), "n": np.array([[1], [0], [1], [2]])},
               ["x"])


@grad_case("sequence_scatter")
def sequence_scatter_lod(c):
    from graphc.runtime.lod import create_lod_tensor
    d = graphc.data("d", [-1, 3], "float64")
    d.stop_gradient = False
    ids = graphc.data("ids", [-1, 1], "int64", lod_level=1)
    upd, tu = _seq_x(c, "u", 1)
    ti = create_lod_tensor(np.array([[2], [0], [1], [1], [0], [2]]), _SEQ_LENGTHS)
    _seq_check(c, layers.sequence_scatter(d, ids, upd), {"d": c.randn(4, 3), "ids": ti, "u": tu},
               ["d", "u"])


@grad_case("reduce_mean", "reduce_max", "reduce_min", "batch_norm", "layer_norm",
           params=[{"dims": [0]}, {"dims": [1]}, {"dims": None}])
def reductions_and_norms_lod(c, dims):
    import graphc.fluid as fluid
    x, t = _seq_x(c, width=3)
    kw = {"dim": dims} if dims is not None else {}
    bn = layers.batch_norm(x, param_attr=fluid.ParamAttr(name="bn_s"),
                           bias_attr=fluid.ParamAttr(name="bn_b"), moving_mean_name="bn_m",
                           moving_variance_name="bn_v")
    ln = layers.layer_norm(x, param_attr=fluid.ParamAttr(name="ln_s"),
                           bias_attr=fluid.ParamAttr(name="ln_b"))
    parts = [layers.reduce_mean(x, **kw), layers.reduce_max(bn, **kw),
             layers.reduce_min(ln, **kw)]
    parts = [layers.reshape(layers.sequence_pool(p, "sum"), [-1]) if p.lod_level else p
             for p in parts]
    state = {"bn_s": c.uniform(0.5, 1.5, 3), "bn_b": c.randn(3), "bn_m": np.zeros(3),
             "bn_v": np.ones(3), "ln_s": c.uniform(0.5, 1.5, 3), "ln_b": c.randn(3)}
    _seq_check(c, layers.reshape(layers.concat(parts, 0), [-1, 1]), {"x": t},
               ["x", "bn_s", "bn_b", "ln_s", "ln_b"], state)


@grad_case("reverse", params=[{"axis": [0]}, {"axis": [0, 2]}, {"axis": [-1]}])
def reverse_axes(c, axis):
    x = c.data("x", c.randn(2, 3, 2))
    out = c.program.global_block().create_var("reverse_out", None, "float64")
    c.program.global_block().append_op("reverse", {"X": x}, {"Out": out}, {"axis": axis})
    return out


# -- recurrent and CRF ops over LoD sequences (issue 16; more in tests/test_lod_rnn.py) -----------
@grad_case("lstm", "lstmp", "gru", "linear_chain_crf")
def recurrent_lod(c):
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod import lod_grad_check
    lengths = [2, 0, 1, 3]
    x = graphc.data("x", [-1, 8], "float64", lod_level=1)
    x.stop_gradient = False
    h, cell = layers.dynamic_lstm(x, 8, is_reverse=True, dtype="float64")
    p, _ = layers.dynamic_lstmp(x, 8, 3, dtype="float64")
    g = layers.dynamic_gru(layers.fc(layers.concat([h, cell, p], axis=1), 6), 2)
    nll = layers.linear_chain_crf(g, graphc.data("lab", [-1, 1], "int64", lod_level=1))
    w = graphc.data("w", [-1, 2], "float64", lod_level=1)
    loss = layers.elementwise_add(layers.reduce_sum(layers.elementwise_mul(g, w)),
                                  layers.mean(nll))
    feeds = {"x": create_lod_tensor(c.randn(6, 8), [lengths]),
             "w": create_lod_tensor(c.randn(6, 2), [lengths]),
             "lab": create_lod_tensor(c.rng.integers(0, 2, (6, 1)), [lengths])}
    state = c._default_state(graphc.lower(c.program))
    lod_grad_check(c.program, loss, feeds, ["x"], c.rng, state=state)


@grad_case("gru_unit", "lstm_unit", params=[{"origin": False}, {"origin": True}])
def recurrent_units(c, origin):
    x = c.data("x", c.randn(3, 6))
    hp = c.data("hp", c.randn(3, 2))
    cp = c.data("cp", c.randn(3, 2))
    out, reset, gate = layers.gru_unit(x, hp, 6, origin_mode=origin)
    h, cell = graphc.layers.lstm_unit(x, out, cp, forget_bias=0.5)
    return [out, reset, gate, h, cell]


@grad_case("dynamic_rnn")
def dynamic_rnn_lod(c):
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod import lod_grad_check
    lengths = [2, 0, 1, 3]
    x = graphc.data("x", [-1, 3], "float64", lod_level=1)
    x.stop_gradient = False
    drnn = layers.DynamicRNN()
    with drnn.block():
        prev = drnn.memory(shape=[2], value=0.1, dtype="float64")
        h = layers.fc([drnn.step_input(x), prev], 2, act="tanh")
        drnn.update_memory(prev, h)
        drnn.output(h)
    w = graphc.data("w", [-1, 2], "float64", lod_level=1)
    loss = layers.reduce_sum(layers.elementwise_mul(drnn(), w))
    feeds = {"x": create_lod_tensor(c.randn(6, 3), [lengths]),
             "w": create_lod_tensor(c.randn(6, 2), [lengths])}
    state = c._default_state(graphc.lower(c.program))
    lod_grad_check(c.program, loss, feeds, ["x"], c.rng, state=state)


# -- issue 24: losses ---------------------------------------------------------------------------
@grad_case("sigmoid_focal_loss", params=[{"gamma": 2.0}, {"gamma": 0.5}])
def loss_sigmoid_focal(c, gamma):
    label = c.data("label", [[0], [2], [-1], [3]], grad=False, dtype="int32")
    fg = c.data("fg", [2], grad=False, dtype="int32")
    return layers.sigmoid_focal_loss(c.data("x", c.randn(4, 3)), label, fg, gamma=gamma)


@grad_case("teacher_student_sigmoid_loss")
def loss_teacher_student(c):
    label = c.data("label", [[-2.0], [-0.5], [0.3], [1.6]], grad=False)
    return layers.teacher_student_sigmoid_loss(c.data("x", c.randn(4, 1)), label)


@grad_case("center_loss")
def loss_center(c):
    # no update: the centers (state) would move between the finite-difference runs
    label = c.data("label", [[0], [2], [0]], grad=False, dtype="int64")
    return layers.center_loss(c.data("x", c.randn(3, 4)), label, 3, 0.5, None,
                              update_center=False)


@grad_case("npair_loss")
def loss_npair(c):
    labels = c.data("labels", [1, 2, 1, 3], grad=False, dtype="int64")
    return layers.npair_loss(c.data("a", c.randn(4, 3)), c.data("p", c.randn(4, 3)), labels,
                             l2_reg=0.1)


# norm_by_times scales the gradient alone, so finite differences of the loss cannot check it:
# tests/test_layers_losses_more.py compares it with the scaled differences
@grad_case("warpctc", params=[{"norm_by_times": False}])
def loss_warpctc(c, norm_by_times):
    label = c.data("label", [[1, 2, 0], [2, 2, 1]], grad=False, dtype="int32")
    return layers.warpctc(c.data("x", c.randn(6, 2, 3)), label, norm_by_times=norm_by_times,
                          input_length=c.data("xl", [5, 6], grad=False, dtype="int64"),
                          label_length=c.data("ll", [2, 3], grad=False, dtype="int64"))


@grad_case("hierarchical_sigmoid", params=[{"custom": False}, {"custom": True}])
def nn_hsigmoid(c, custom):
    kw = {}
    if custom:
        kw = {"path_table": c.data("t", [[0, 2, -1], [1, 3, 4]], grad=False, dtype="int64"),
              "path_code": c.data("c", [[1, 0, 0], [0, 1, 1]], grad=False, dtype="int64"),
              "is_custom": True}
    label = c.data("label", [[1], [4]], grad=False, dtype="int64")
    return layers.hsigmoid(c.data("x", c.randn(2, 3)), label, 5, **kw)


@grad_case("row_conv")
def nn_row_conv(c):
    return layers.row_conv(c.data("x", c.randn(2, 4, 3)), 2)


@grad_case("fsp_matrix", "add_position_encoding")
def nn_fsp_position(c):
    return [layers.fsp_matrix(c.data("a", c.randn(2, 2, 3, 3)), c.data("b", c.randn(2, 3, 3, 3))),
            layers.add_position_encoding(c.data("s", c.randn(2, 3, 4)), 0.7, 1.5)]


@grad_case("affine_grid", "grid_sampler")
def nn_affine_grid_sampler(c):
    theta = c.data("theta", [[[0.9, 0.1, 0.05], [-0.2, 0.8, 0.1]]] * 2)
    grid = layers.affine_grid(theta, [2, 2, 3, 3])
    # grid points off the pixel lines: bilinear weights are smooth there
    return layers.grid_sampler(c.data("x", c.randn(2, 2, 4, 5)), grid)


@grad_case("nce", params=[{"bias": True}, {"bias": False}])
def nn_nce(c, bias):
    # fixed negatives (Paddle's custom_neg_classes attribute): no fresh draw between runs
    block = c.program.global_block()
    ins = {"Input": c.data("x", c.randn(3, 4)), "Weight": c.data("w", c.randn(6, 4)),
           "Label": c.data("label", [[1], [4], [0]], grad=False, dtype="int64"),
           "SampleWeight": c.data("sw", [[1.0], [0.5], [2.0]], grad=False)}
    if bias:
        ins["Bias"] = c.data("b", c.randn(6, 1))
    outs = {"Cost": block.create_var("cost", None, "float64"),
            "SampleLogits": block.create_var("so", None, "float64"),
            "SampleLabels": block.create_var("sl", None, "int64")}
    block.append_op("nce", ins, outs, {"num_total_classes": 6, "sampler": 1,
                                       "custom_neg_classes": [2, 5, 3]})
    return outs["Cost"]


@grad_case("sampled_softmax_with_cross_entropy")
def loss_sampled_softmax(c):
    # given samples (use_customized_samples): no fresh draw between the runs
    samples = c.data("s", [[2, 0, 5, 2], [4, 1, 3, 0], [0, 0, 1, 2]], grad=False,
                     dtype="int64")
    return layers.sampled_softmax_with_cross_entropy(
        c.data("x", c.randn(3, 6)), c.data("l", [[2], [4], [0]], grad=False, dtype="int64"), 3,
        use_customized_samples=True, customized_samples=samples,
        customized_probabilities=c.data("p", c.uniform(0.2, 0.9, 3, 4), grad=False))
# -- end issue 24: losses


# -- issue 24: host callbacks (py_func, Print) -------------------------------------------------
@grad_case("py_func")
def py_func_tanh(c):
    """backward_func's gradient (tanh's, from Out and Out@GRAD; x skipped) is the op's."""
    x = c.data("x", c.randn(2, 3))
    out = c.program.global_block().create_var("pyout", [2, 3], "float64")
    layers.py_func(np.tanh, x, out, backward_func=lambda o, g: g * (1 - o * o),
                   skip_vars_in_backward_input=[x])
    return layers.elementwise_mul(out, x)


@grad_case("print")
def print_passes_values_and_gradients(c):
    x = c.data("x", c.randn(2, 3))
    return layers.sigmoid(layers.Print(x, message="grad-check", summarize=2, first_n=1))
# -- end issue 24: host callbacks (py_func, Print)


# -- issue 26: conditionals (cond, case, switch_case, ifelse) ------------------------------------
@grad_case("cond", params=[{"taken": True}, {"taken": False}])
def cond_branches(c, taken):
    x = c.data("x", c.randn(2, 3))
    p = c.data("p", [taken], grad=False, dtype="bool")
    return list(layers.cond(p, lambda: (layers.fc(x, 2, act="tanh"), layers.exp(x)),
                            lambda: (layers.fc(x, 2, act="sigmoid"), x * x)))


@grad_case("case", params=[{"first": v} for v in (True, False)])
def case_branches(c, first):
    x = c.data("x", c.randn(3))
    p = c.data("p", [first], grad=False, dtype="bool")
    q = c.data("q", [True], grad=False, dtype="bool")
    return layers.case([(p, lambda: layers.sin(x)), (q, lambda: x * x)], lambda: x)


@grad_case("switch_case", params=[{"index": i} for i in (0, 3)])
def switch_case_branches(c, index):
    x = c.data("x", c.randn(3))
    i = c.data("i", [index], grad=False, dtype="int64")
    return layers.switch_case(i, {0: lambda: layers.tanh(x), 2: lambda: x * 3.0},
                              default=lambda: layers.exp(x))


@grad_case("ifelse")
def ifelse_rows(c):
    x = c.data("x", c.randn(4, 3))
    flags = c.data("flags", [[True], [False], [False], [True]], grad=False, dtype="bool")
    ie = layers.IfElse(flags)
    with ie.true_block():
        ie.output(layers.fc(ie.input(x), 2, act="tanh"))
    with ie.false_block():
        ie.output(layers.fc(ie.input(x), 2))
    return ie()[0]
# -- end issue 26: conditionals


# -- issue 26: loops ------------------------------------------------------------------------------
@grad_case("while", params=[{"steps": 1}, {"steps": 3}])
def while_counter_loop(c, steps):
    """A loop carrying a float state through an fc cell and reading a parameter and a feed."""
    x = c.data("x", c.randn(2, 3))
    h = layers.fc(x, 3, bias_attr=False)
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", steps)
    cond = layers.less_than(i, n)
    loop = layers.While(cond)
    with loop.block():
        step = layers.fc(h, 3, act="tanh", bias_attr=False)
        layers.assign(layers.elementwise_add(step, layers.scale(x, 0.5)), h)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    return [h]


@grad_case("write_to_array", "read_from_array")
def tensor_array_write_and_read(c):
    """Two writes (the second overwriting part of what the first wrote) and three reads."""
    x = c.data("x", c.randn(2, 3))
    y = c.data("y", c.randn(2, 3))
    zero, one = (layers.fill_constant([1], "int64", v) for v in (0, 1))
    arr = layers.array_write(x, zero)
    layers.array_write(layers.tanh(y), one, array=arr)
    layers.array_write(layers.scale(x, 3.0), one, array=arr)  # replaces tanh(y): y gets none
    first = layers.array_read(arr, zero)
    return [first, layers.array_read(arr, one), layers.elementwise_mul(first, y)]


# -- end issue 26: loops


# -- issue 26: StaticRNN's recurrent op ---------------------------------------------------------
@grad_case("recurrent", params=[{"cell": "fc"}, {"cell": "gru"}, {"cell": "lstm"}])
def recurrent_static_rnn(c, cell):
    """Gradients through the scan: w.r.t. the step inputs, the initial memories, values read
    from outside the step and the parameters created inside it (shared by every step)."""
    steps, batch = 3, 2
    x = c.data("x", c.randn(steps, batch, 3))
    if cell == "fc":
        h0 = c.data("h0", c.randn(batch, 2))
        s = c.data("s", c.randn(batch, 2))
        rnn = layers.StaticRNN()
        with rnn.step():
            prev = rnn.memory(init=h0)
            h = layers.fc([rnn.step_input(x), prev], 2, act="tanh")
            rnn.update_memory(prev, layers.elementwise_mul(h, s))
            rnn.step_output(h)
        return rnn()
    # rnn() over a cell, batch-major, with lengths (masked states) and reversed
    lengths = c.data("len", [3, 1], grad=False, dtype="int64")
    xb = layers.transpose(x, [1, 0, 2])
    if cell == "gru":
        out, final = layers.rnn(layers.GRUCell(2, dtype="float64"), xb,
                                initial_states=c.data("h0", c.randn(batch, 2)),
                                sequence_length=lengths, is_reverse=True)
        return [out, final]
    states = [c.data("h0", c.randn(batch, 2)), c.data("c0", c.randn(batch, 2))]
    out, (h, cell_state) = layers.rnn(layers.LSTMCell(2, forget_bias=0.5, dtype="float64"),
                                      xb, initial_states=states, sequence_length=lengths)
    return [out, h, cell_state]
# -- end issue 26: StaticRNN's recurrent op


# -- issue 26: LoD ops of control-flow programs (lod_reset, reorder_lod_tensor_by_rank) -----------
@grad_case("lod_reset", params=[{"how": "y_lod"}, {"how": "offsets"}, {"how": "append"},
                                {"how": "dense"}])
def lod_reset_is_identity_on_rows(c, how):
    from graphc.runtime.lod import create_lod_tensor
    x, t = _seq_x(c)  # 6 tokens in [[2, 0, 1, 3]]
    feeds = {"x": t}
    if how == "y_lod":
        y = graphc.data("y", [-1, 1], "float64", lod_level=2)
        feeds["y"] = create_lod_tensor(c.randn(6, 1), [[1, 2], [3, 0, 3]])
        out = layers.sequence_pool(layers.lod_reset(x, y=y), "sqrt")
    elif how == "offsets":
        feeds["off"] = np.array([[0, 5, 6]], "int32")
        out = layers.lod_reset(x, y=graphc.data("off", [1, 3], "int32"))
        out = layers.sequence_softmax(layers.reduce_sum(out, dim=[1], keep_dim=True))
    elif how == "append":
        out = layers.sequence_pool(layers.lod_append(x, [0, 2, 3, 6, 6, 6, 6]), "max")
    else:  # a dense x takes a LoD: its gradient is dense
        x = graphc.data("d", [6, 2], "float64")
        x.stop_gradient = False
        feeds = {"d": c.randn(6, 2)}
        out = layers.sequence_pool(layers.lod_reset(x, target_lod=[0, 1, 1, 6]), "sum")
        _seq_check(c, out, feeds, ["d"])
        return
    _seq_check(c, out, feeds, ["x"])


@grad_case("reorder_lod_tensor_by_rank", params=[{"level": 0}, {"level": 1}, {"level": 2}])
def reorder_by_rank_takes_the_gradient_back(c, level):
    lengths = [[1, 2, 0], [2, 0, 3]] if level == 2 else _SEQ_LENGTHS
    table = layers.lod_rank_table(graphc.data("k", [-1, 1], "float64", lod_level=len(lengths)))
    feeds = {"k": create_lod_tensor_of(c, lengths, 1)}
    if level == 0:  # dense rows: one per sequence
        x = graphc.data("d", [len(lengths[0]), 2], "float64")
        x.stop_gradient = False
        feeds["d"] = c.randn(len(lengths[0]), 2)
        wrt = ["d"]
    else:
        x, feeds["x"] = _seq_x(c, lengths=lengths)
        wrt = ["x"]
    out = layers.reorder_lod_tensor_by_rank(x, table)
    # token_loss weighs columns alike on every row: lay the rows out along one axis so that
    # each position has its own weight and a wrong order changes the loss
    rows = sum(lengths[-1]) if level else len(lengths[0])
    if level:  # all tokens as one sequence, padded to a dense [1, rows, 2]
        out, _ = layers.sequence_pad(layers.lod_reset(out, target_lod=[0, rows]),
                                     layers.fill_constant([1], "float64", 0.0), maxlen=rows)
    _seq_check(c, layers.reshape(out, [1, 2 * rows]), feeds, wrt)


def create_lod_tensor_of(c, lengths, width):
    from graphc.runtime.lod import create_lod_tensor
    return create_lod_tensor(c.randn(sum(lengths[-1]), width), lengths)
# -- end issue 26: LoD ops of control-flow programs


# -- ifelse26: split_lod_tensor / merge_lod_tensor ------------------------------------------------
@grad_case("split_lod_tensor", "merge_lod_tensor",
           params=[{"x": "dense"}, {"x": "lod1"}, {"x": "lod2"}])
def split_merge_route_each_row_through_its_side(c, x):
    """Each side through a different nonlinearity: a row sent to the wrong side, or a
    gradient sent back to the wrong row, changes the loss."""
    if x == "dense":
        xv = c.data("x", c.randn(5, 2))
        mask = np.array([[1], [0], [0], [1], [1]], bool)
    else:
        lengths = _SEQ_LENGTHS if x == "lod1" else [[1, 2, 0], [2, 0, 3]]
        xv, t = _seq_x(c, lengths=lengths)
        mask = (np.arange(len(lengths[0])) % 2 == 0)[:, None]
    m = graphc.data("m", list(mask.shape), "bool")
    yes, no = layers.split_lod_tensor(xv, m)
    out = layers.merge_lod_tensor(layers.tanh(yes), layers.square(no), xv, m)
    if x == "dense":
        c.feeds["m"] = mask
        return [out]
    _seq_check(c, out, {"x": t, "m": mask}, ["x"])


@grad_case("merge_lod_tensor", params=[{}])
def merge_takes_dense_sides_row_by_row(c):
    """Sides that are not split_lod_tensor's (dense, as many rows as their flags)."""
    x = c.data("x", c.randn(5, 2), grad=False)
    a, b = c.data("a", c.randn(3, 2)), c.data("b", c.randn(2, 2))
    c.feeds["m"] = np.array([[0], [1], [1], [0], [1]], bool)
    m = graphc.data("m", [5, 1], "bool")
    return [layers.merge_lod_tensor(layers.exp(a), b, x, m)]
# -- end ifelse26


# -- issue 28: fused_embedding_seq_pool (the fuse-embedding-seq-pool pass makes it) ----------
@grad_case("fused_embedding_seq_pool", params=[{"is_sparse": False, "padding_idx": -1},
                                               {"is_sparse": False, "padding_idx": 1}])
def fused_embedding_seq_pool_lod(c, is_sparse, padding_idx):
    """W's gradient through two slots of different lengths (an empty sequence in each),
    finite differences on the interpreter (graphc.testing.lod_checks.fd_check)."""
    from graphc.runtime.lod import create_lod_tensor
    from graphc.testing.lod_checks import fd_check, token_loss
    block = c.program.global_block()
    w = layers.create_parameter([6, 3], "float64", name="fused_w")
    ids = [graphc.data(n, [-1, 1], "int64", lod_level=1) for n in ("s0", "s1")]
    outs = [block.create_var(f"pooled_{i}", None, "float64") for i in range(2)]
    block.append_op("fused_embedding_seq_pool", {"W": w, "Ids": ids}, {"Out": outs},
                    {"is_sparse": is_sparse, "padding_idx": padding_idx})
    loss, weights = token_loss(layers.concat(outs, axis=1), c.rng)
    feeds = {"s0": create_lod_tensor([[1, 2], [], [5, 1, 1]], [[2, 0, 3]]),
             "s1": create_lod_tensor([[0], [3, 4, 1], []], [[1, 3, 0]]), **weights}
    fd_check(c.program, loss, feeds, ["fused_w"], c.rng, {"fused_w": c.randn(6, 3)}, coords=8)
# -- end issue 28: fused_embedding_seq_pool


# -- issue 26: tensor_array_to_tensor (decoding) ------------------------------------------------
@grad_case("tensor_array_to_tensor", params=[{"use_stack": True, "axis": 0},
                                             {"use_stack": False, "axis": 1}])
def tensor_array_to_tensor_stack_or_concat(c, use_stack, axis):
    x, y = c.data("x", c.randn(2, 3)), c.data("y", c.randn(2, 3))
    arr = layers.array_write(x, layers.fill_constant([1], "int64", 0))
    layers.array_write(layers.tanh(y), layers.fill_constant([1], "int64", 1), array=arr)
    out, _ = layers.tensor_array_to_tensor(arr, axis=axis, use_stack=use_stack)
    return [layers.slice(out, axes=[axis], starts=[0], ends=[2 if use_stack else 6])]


# -- port24: shuffle_batch (fluid.contrib.layers) -------------------------------------------------
@grad_case("shuffle_batch")
def shuffle_batch_rows(c):
    """A fixed seed and step draw one order, so differences of the loss are meaningful; the
    gradient routes each row's weight back to the row it came from."""
    from graphc.layers.reshuffle import shuffle_batch
    x = c.data("x", c.randn(3, 2, 4))
    out = shuffle_batch(x, seed=5)
    idx = c.program.global_block().ops[-1].output("ShuffleIdx")[0]
    grads = c.check(out)
    order = run_graph(graphc.lower(c.program), {}, c.feeds, [idx], step=c.step)[1][0]
    assert sorted(order.tolist()) == list(range(6))
    w = c.feeds["gradcheck_w0"].reshape(6, 4)
    want = np.zeros_like(w)
    want[order] = w
    np.testing.assert_allclose(grads["x"], want.reshape(3, 2, 4), rtol=1e-12, atol=1e-12)
# -- end port24


# -- portut: a value made by a non-differentiable op (fill_constant) that the user marks
# stop_gradient=False takes a gradient, as in Paddle; one left True does not
def test_a_constant_marked_trainable_takes_a_gradient():
    x = graphc.data("x", [2, 3], dtype="float64")
    a = layers.fill_constant([1], "float64", 1.5)
    a.stop_gradient = False
    b = layers.fill_constant([1], "float64", 0.5)  # stop_gradient stays True
    c = layers.fill_constant([1], "float64", -2.0)
    c.stop_gradient = False
    big = layers.cond(layers.reduce_sum(a) > 1.0, lambda: a, lambda: c)
    loss = layers.mean(layers.elementwise_mul(x * x, big) + b * x)
    graphc.append_backward(loss)
    block = graphc.default_main_program().global_block()
    assert not block.has_var(b.name + GRAD_SUFFIX)
    value = np.random.RandomState(5).rand(2, 3)
    prog = graphc.default_main_program()
    (ga, gc) = graphc.Executor().run(feed={"x": value},
                                     fetch_list=[a.name + GRAD_SUFFIX, c.name + GRAD_SUFFIX])
    _, (ia, ic) = run_graph(graphc.lower(prog), {}, {"x": value},
                            [a.name + GRAD_SUFFIX, c.name + GRAD_SUFFIX])
    for got_a, got_c in ((ga, gc), (ia, ic)):
        np.testing.assert_allclose(got_a, [np.mean(value ** 2)], rtol=1e-12)  # a's branch
        np.testing.assert_allclose(got_c, [0.0])


# -- book: layers as Paddle 1.8's test_layers builds them (bpr_loss of [N, T, C] scores,
# pad2d whose paddings are a fill_constant Variable)
@grad_case("bpr_loss")
def loss_bpr_rank3(c):
    x = c.data("x", c.randn(2, 3, 4))
    return layers.bpr_loss(x, c.data("label", c.rng.integers(0, 4, (2, 3, 1)), grad=False,
                                     dtype="int64"))


@grad_case("pad2d")
def pad2d_variable_paddings(c):
    paddings = layers.fill_constant(shape=[4], dtype="int32", value=1)
    return layers.pad2d(c.data("x", c.randn(1, 2, 3, 3)), paddings=paddings, mode="reflect")
# -- end book


# -- arr2lod: lod_tensor_to_array / array_to_lod_tensor / shrink_memory ---------------------------
@grad_case("lod_tensor_to_array", "array_to_lod_tensor", "read_from_array",
           params=[{"level": 1}, {"level": 2}])
def lod_to_array_steps_and_back(c, level):
    """x split into steps, steps 0 and 1 through different nonlinearities, written back and
    gathered into a LoD value: a row taken from the wrong step or sequence changes the loss."""
    lengths = [[2, 0, 3, 1]] if level == 1 else [[1, 2, 0], [2, 0, 3]]
    x, t = _seq_x(c, lengths=lengths)
    table = layers.lod_rank_table(x)
    array = layers.lod_tensor_to_array(x, table, capacity=4)
    for step, act in ((0, layers.tanh), (1, layers.sigmoid)):
        i = layers.fill_constant([1], "int64", step)
        layers.array_write(act(layers.array_read(array, i)), i, array=array)
    out = layers.array_to_lod_tensor(array, table)
    rows = sum(lengths[-1])
    out, _ = layers.sequence_pad(layers.lod_reset(out, target_lod=[0, rows]),
                                 layers.fill_constant([1], "float64", 0.0), maxlen=rows)
    _seq_check(c, layers.reshape(out, [1, 2 * rows]), {"x": t}, ["x"])


@grad_case("shrink_rnn_memory", params=[{"x": "dense"}, {"x": "lod"}])
def shrink_memory_passes_the_kept_rows(c, x):
    table = layers.lod_rank_table(graphc.data("k", [-1, 1], "float64", lod_level=1))
    feeds = {"k": create_lod_tensor_of(c, [[1, 3, 2]], 1)}
    if x == "dense":
        xv = graphc.data("d", [3, 2], "float64")
        xv.stop_gradient = False
        feeds["d"], wrt = c.randn(3, 2), ["d"]
    else:
        xv, feeds["x"] = _seq_x(c, lengths=[[2, 1, 0, 3]])
        wrt = ["x"]
    i = layers.fill_constant([1], "int64", 1)
    out = layers.shrink_memory(layers.tanh(xv), i, table)
    _seq_check(c, layers.sequence_pool(out, "sqrt"), feeds, wrt)  # entries dropped: zeros


@grad_case("while", "lod_tensor_to_array", "array_to_lod_tensor")
def plain_while_rnn_over_lod_steps(c):
    """Paddle's DynamicRNN written by hand (test_dyn_rnn's plain While): x's steps read in a
    While, the memory shrunk to the sequences that last, the outputs gathered back."""
    lengths = [[2, 0, 3, 1]]
    x, t = _seq_x(c, lengths=lengths)
    table = layers.lod_rank_table(x)
    steps = layers.lod_tensor_to_array(x, table, capacity=4)
    longest = layers.max_sequence_len(table)
    i = layers.fill_constant([1], "int64", 0)
    boot = layers.fill_constant_batch_size_like(layers.array_read(steps, i), [-1, 2],
                                                "float64", 0.5)
    mems = layers.array_write(boot, i)
    cond = layers.less_than(i, longest)
    loop = layers.While(cond, max_iterations=4)
    outs = layers.create_array("float64", capacity=4)
    with loop.block():
        mem = layers.shrink_memory(layers.array_read(mems, i), i, table)
        hidden = layers.tanh(layers.elementwise_mul(mem, layers.array_read(steps, i)) + mem)
        layers.array_write(hidden, i, array=outs)
        layers.increment(i, in_place=True)
        layers.array_write(hidden, i, array=mems)
        layers.less_than(i, longest, cond=cond)
    out = layers.array_to_lod_tensor(outs, table)
    rows = sum(lengths[-1])
    out, _ = layers.sequence_pad(layers.lod_reset(out, target_lod=[0, rows]),
                                 layers.fill_constant([1], "float64", 0.0), maxlen=rows)
    _seq_check(c, layers.reshape(out, [1, 2 * rows]), {"x": t}, ["x"])
# -- end arr2lod


# -- unitops: matmul of vectors with the transpose flags (Paddle's rule: a transposed 1-D X
# is a column, a transposed 1-D Y a row, e.g. an outer product)
@grad_case("matmul", params=[{"x": (3,), "y": (4,), "tx": True, "ty": True},
                             {"x": (3,), "y": (2, 1, 4), "tx": True, "ty": False},
                             {"x": (2, 1, 3), "y": (4,), "tx": True, "ty": True}],
           ids=["outer", "column-batch", "batch-row"])
def matmul_vectors_transposed(c, x, y, tx, ty):
    return layers.matmul(c.data("x", c.randn(*x)), c.data("y", c.randn(*y)), tx, ty)
# -- end unitops


# -- cvport: concat of inputs of different ranks (PaddleCV gan's CGAN)
@grad_case("concat")
def concat_different_ranks(c):
    return layers.concat([c.data("a", c.randn(2, 3)), c.data("b", c.randn(2, 2, 1, 1))], axis=1)
# -- end cvport


# -- nlp24: index_sample (TDM's per-row gather) --------------------------------------------------
@grad_case("index_sample")
def index_sample_rows(c):
    """A column taken twice in one row gets both weights back; untaken columns get zero."""
    from graphc.layers.tdm import index_sample
    x = c.data("x", c.randn(3, 5))
    index = c.data("index", np.array([[4, 4, 0], [1, 2, 3], [0, 0, 0]]), grad=False,
                   dtype="int64")
    c.check(index_sample(x, index))
# -- end nlp24


# -- seqtype: a sequence op on a feed declared dense re-types it as a LoD value (lod_demand)
@grad_case("sequence_pool", "tanh")
def sequence_pool_of_a_feed_declared_dense(c):
    from graphc.runtime.lod import create_lod_tensor
    x = graphc.data("x", [-1, 2], "float64")  # no lod_level, as Paddle's tests declare it
    x.stop_gradient = False
    out = layers.sequence_pool(layers.tanh(layers.scale(x, 1.5)), "sqrt")
    assert x.lod_level == 1
    _seq_check(c, out, {"x": create_lod_tensor(c.randn(6, 2), [[2, 0, 4]])}, ["x"])
# -- end seqtype


# -- stoppers24: squared_l2_norm (global-norm clipping's term for a row-sparse gradient)
@grad_case("squared_l2_norm")
def squared_l2_norm(c):
    block = c.program.global_block()
    out = block.create_var("out", None, "float64")
    block.append_op("squared_l2_norm", {"X": c.data("x", c.randn(2, 3))}, {"Out": out})
    return out
# -- end stoppers24


# -- where: gather_nd through layers.where's rows (a one-sequence LoD Index)
@grad_case("gather_nd", params=({"depth": 2}, {"depth": 1}))
def gather_nd_of_where_rows(c, depth):
    """Only the true elements (rows) get gradient; the LoD reductions see only those rows."""
    x = c.data("x", c.randn(3, 4))
    mask = np.array([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 1, 0]], "float64")
    m = c.data("m", mask if depth == 2 else mask.sum(1), grad=False)
    picked = layers.gather_nd(x, layers.where(m != 0))
    loss = layers.sums([layers.reduce_mean(layers.square(picked)),
                        layers.reduce_sum(layers.tanh(picked))])
    grads = c.check(loss=loss)
    keep = (mask != 0) if depth == 2 else (mask.sum(1, keepdims=True) != 0).repeat(4, 1)
    assert np.all(grads["x"][~keep] == 0) and np.all(grads["x"][keep] != 0)
# -- end where
