"""Hypothesis strategies for random *valid* Paddle-style programs, built through graphc.layers.

Round-trip, verifier, pass and backend property tests all draw their programs from here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

from .. import layers
from ..build.param_attr import ParamAttr
from ..ir import Graph, Program, lower, program_guard, unique_name
from ..ir.program import Variable
from ..ir.types import FLOAT_DTYPES

DEFAULT_DTYPES = ("float32", "float64")  # float16 would need looser tolerances
MAX_DIM = 6  # dims of feeds, filters and fc sizes: small so later tests can execute fast
# Results past these bounds (concat of concats, big reshapes) are fetched, never reused.
POOL_MAX_DIM = 64
POOL_MAX_NUMEL = 2048


@dataclass
class GeneratedProgram:
    """A drawn program pair and what it takes to run it.

    ``feeds`` maps each data name to ``(shape, dtype)``; every -1 is the same batch size
    at run time, and integer feeds (ids, labels) must stay below ``int_feed_high[name]``.
    ``fetch`` lists the variables no later layer read; ``loss`` (also fetched) is a ``[1]``
    mean when one was asked for.
    """

    main: Program
    startup: Program
    feeds: dict[str, tuple[tuple[int, ...], str]]
    fetch: list[str]
    loss: str | None = None
    int_feed_high: dict[str, int] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)  # layer steps taken, for failure reports

    def graph(self) -> Graph:
        return lower(self.main)

    def startup_graph(self) -> Graph:
        return lower(self.startup)

    def __repr__(self) -> str:
        return (f"GeneratedProgram(steps={self.steps}, feeds={self.feeds}, "
                f"fetch={self.fetch}, loss={self.loss})\n{self.main.to_text()}")

    def _repr_pretty_(self, p, cycle) -> None:  # what hypothesis shows for a failing example
        p.text(repr(self))


def _poolable(var: Variable) -> bool:
    """Later steps reuse only float tensors whose sole unknown dim is the leading batch."""
    shape = var.shape
    if var.dtype not in FLOAT_DTYPES or not shape:
        return False
    known = shape[1:] if shape[0] == -1 else shape
    return (all(1 <= d <= POOL_MAX_DIM for d in known)
            and math.prod(known) <= POOL_MAX_NUMEL)


class _Builder:
    """State of one draw: the reusable variables, feeds, and which results were consumed."""

    def __init__(self, draw, cast_dtypes: Sequence[str]):
        self.draw = draw
        self.cast_dtypes = tuple(cast_dtypes)
        self.pool: list[Variable] = []
        self.produced: list[Variable] = []
        self.consumed: set[str] = set()
        self.feeds: dict[str, tuple[tuple[int, ...], str]] = {}
        self.int_feed_high: dict[str, int] = {}
        self._feed_ids: dict[str, int] = {}

    # -- helpers shared by the steps ---------------------------------------------------
    def pick(self, options):
        return self.draw(st.sampled_from(list(options)))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def dim(self, lo: int = 1, hi: int = MAX_DIM) -> int:
        return self.draw(st.integers(lo, hi))

    def feed(self, prefix: str, shape, dtype: str = "float32", high: int | None = None):
        n = self._feed_ids.get(prefix, 0)
        self._feed_ids[prefix] = n + 1
        var = layers.data(f"{prefix}{n}", list(shape), append_batch_size=False, dtype=dtype)
        self.feeds[var.name] = (tuple(var.shape), var.dtype)
        if high is not None:
            self.int_feed_high[var.name] = high
        return var

    def use(self, *vars: Variable) -> None:
        self.consumed.update(v.name for v in vars)

    def add(self, *vars: Variable, reusable: bool = True) -> None:
        for v in vars:
            self.produced.append(v)
            if reusable and _poolable(v):
                self.pool.append(v)

    def operand(self, shape: tuple[int, ...], dtype: str) -> Variable:
        """A second operand of exactly ``shape``: a pool variable, a constant or a new feed."""
        same = [v for v in self.pool if tuple(v.shape) == shape and v.dtype == dtype]
        known = all(d > 0 for d in shape)
        kinds = (["pool"] if same else []) + (["const"] if known else []) + ["feed"]
        kind = self.pick(kinds)
        if kind == "pool":
            return self.pick(same)
        if kind == "const":
            # Non-zero so that a division by it stays finite.
            value = self.pick([1.0, 2.0, -0.5])
            c = layers.fill_constant(list(shape), dtype, value)
            self.add(c)
            return c
        return self.feed("y", shape, dtype)

    def float_feed(self, rank: int | None = None, lo: int = 1) -> Variable:
        rank = rank or self.draw(st.integers(2, 4))
        dtype = self.pick(_dtypes(self, prefer="float32"))
        return self.feed("x", (-1,) + tuple(self.dim(lo) for _ in range(rank - 1)), dtype)


def _dtypes(b: _Builder, prefer: str | None = None, avoid: str | None = None) -> list[str]:
    """The allowed float dtypes, ``prefer`` first or ``avoid`` last (hypothesis shrinks
    towards the first)."""
    return sorted(set(b.cast_dtypes) | {"float32"}, key=lambda d: (d != prefer, d == avoid, d))


def _act(b: _Builder):
    return b.pick([None, "relu", "tanh", "sigmoid"])


def _nonbatch_axes(x: Variable) -> list[int]:
    return [i for i, d in enumerate(x.shape) if d > 0]


# ----------------------------------------------------------------------------- the steps
# Each step takes the builder and one pool variable (or None for steps that need none),
# calls one layer function with drawn arguments that are valid for that variable, and
# records what it produced. ``_STEPS`` pairs each with the test deciding what it accepts.


def _activation(b: _Builder, x: Variable):
    kind = b.pick(["relu", "sigmoid", "tanh", "gelu", "leaky_relu"])
    if kind == "gelu":
        out = layers.gelu(x, approximate=b.flag())
    elif kind == "leaky_relu":
        out = layers.leaky_relu(x, alpha=b.pick([0.02, 0.1]))
    else:
        out = getattr(layers, kind)(x)
    b.use(x)
    b.add(out)


def _scale(b: _Builder, x: Variable):
    out = layers.scale(x, scale=b.pick([2.0, 1.0, -0.5]), bias=b.pick([0.0, 1.0]),
                       bias_after_scale=b.flag(), act=b.pick([None, "relu"]))
    b.use(x)
    b.add(out)


def _softmax(b: _Builder, x: Variable):
    out = layers.softmax(x, axis=b.draw(st.integers(-x.ndim, x.ndim - 1)))
    b.use(x)
    b.add(out)


def _elementwise(b: _Builder, x: Variable):
    op = b.pick(["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"])
    rank = x.ndim
    if b.flag():
        y, axis = b.operand(tuple(x.shape), x.dtype), -1
    else:
        # Y covers x.shape[start:start+length], some dims broadcast as 1; Paddle's axis says
        # where Y starts, and -1 means trailing alignment.
        start = b.draw(st.integers(0, rank - 1))
        length = b.draw(st.integers(1, rank - start))
        dims = [1 if b.flag() else d for d in x.shape[start:start + length]]
        trailing = start + length == rank
        axis = -1 if trailing and b.flag() else start
        if axis != -1 and trailing and b.flag():
            dims.append(1)  # Paddle trims trailing 1s of Y that overhang X
        y = b.operand(tuple(dims), x.dtype)
    swap = y.ndim < x.ndim and b.draw(st.integers(0, 3)) == 0  # the smaller operand first
    lhs, rhs = (y, x) if swap else (x, y)
    out = getattr(layers, op)(lhs, rhs, axis=axis, act=b.pick([None, "relu"]))
    b.use(x, y)
    b.add(out)


def _matmul(b: _Builder, x: Variable):
    tx, ty = b.flag(), b.flag()
    xs = tuple(x.shape)
    k = xs[-2] if tx else xs[-1]  # the contracting dim (-1 when x^T of a batch)
    alpha = b.pick([1.0, 0.5])
    batch = xs[:-2]
    kind = b.pick(["matrix", "self", "vector", "batched"] if batch else
                  ["matrix", "self", "vector"])
    if kind == "self":
        y, ty = x, not tx  # x^T x or x x^T
    else:
        n = b.dim()
        core = (k,) if kind == "vector" else ((n, k) if ty else (k, n))
        y = b.operand(batch + core if kind == "batched" else core, x.dtype)
    out = layers.matmul(x, y, transpose_x=tx, transpose_y=ty, alpha=alpha)
    b.use(x, y)
    b.add(out)


def _factorize(b: _Builder, total: int, parts: int) -> list[int]:
    """``parts`` dims whose product is ``total`` (prime factors dealt out at random)."""
    dims = [1] * parts
    n, p = total, 2
    while n > 1:
        while n % p == 0:
            dims[b.draw(st.integers(0, parts - 1))] *= p
            n //= p
        p += 1
    return dims


def _reshape(b: _Builder, x: Variable):
    batched = x.shape[0] == -1
    known = math.prod(x.shape[1:] if batched else x.shape)
    parts = b.draw(st.integers(0 if known == 1 else 1, 3))
    dims = _factorize(b, known, parts) if parts else []
    if batched:
        target = [b.pick([0, -1])] + dims  # 0 copies the batch dim, -1 infers it
    else:
        target = dims or [1]
        if b.flag():
            target[b.draw(st.integers(0, len(target) - 1))] = -1
    out = layers.reshape(x, target, act=b.pick([None, "relu"]))
    b.use(x)
    b.add(out)


def _transpose(b: _Builder, x: Variable):
    if x.shape[0] == -1 and b.draw(st.integers(0, 3)):
        perm = [0] + list(b.draw(st.permutations(range(1, x.ndim))))
    else:
        perm = list(b.draw(st.permutations(range(x.ndim))))
    out = layers.transpose(x, perm)
    b.use(x)
    b.add(out)


def _concat(b: _Builder, x: Variable):
    axis = b.draw(st.integers(0, x.ndim - 1))

    def fits(v):
        return (v.dtype == x.dtype and v.ndim == x.ndim and all(
            i == axis or a == c for i, (a, c) in enumerate(zip(v.shape, x.shape)))
            and (v.shape[axis] > 0) == (x.shape[axis] > 0))

    others = [v for v in b.pool if fits(v)]  # includes x itself
    inputs = [x] + [b.pick(others) for _ in range(b.draw(st.integers(1, 2)))]
    out = layers.concat(inputs, axis=axis - x.ndim if b.flag() else axis)
    b.use(*inputs)
    # along the batch its -1 means k * batch at run time: never mix it with batch tensors
    b.add(out, reusable=x.shape[axis] > 0)


def _split(b: _Builder, x: Variable):
    axis = b.pick([i for i in _nonbatch_axes(x) if x.shape[i] >= 2])
    size = x.shape[axis]
    dim = axis - x.ndim if b.flag() else axis
    if b.flag():
        parts = b.pick([n for n in range(1, size + 1) if size % n == 0])
    else:
        cuts = sorted(b.draw(st.sets(st.integers(1, size - 1), min_size=1, max_size=2)))
        parts = [hi - lo for lo, hi in zip([0] + cuts, cuts + [size])]
        if b.flag():
            parts[b.draw(st.integers(0, len(parts) - 1))] = -1
    outs = layers.split(x, parts, dim=dim)
    b.use(x)
    b.add(*outs)


def _cast(b: _Builder, x: Variable):
    out = layers.cast(x, b.pick(_dtypes(b, avoid=x.dtype)))
    b.use(x)
    b.add(out)


def _mean(b: _Builder, x: Variable):
    out = layers.mean(x)
    b.use(x)
    b.add(out)


def _reduce(b: _Builder, x: Variable):
    fn = b.pick([layers.reduce_sum, layers.reduce_mean, layers.reduce_max])
    how = b.pick(["one", "some", "all"])
    if how == "all":
        dim = None
    elif how == "one":
        dim = b.draw(st.integers(-x.ndim, x.ndim - 1))
    else:
        dim = sorted(b.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1)))
    out = fn(x, dim=dim, keep_dim=b.flag())
    b.use(x)
    b.add(out)


def _fc(b: _Builder, x: Variable):
    nfd = b.draw(st.integers(1, x.ndim - 1))
    inputs = [x]
    if b.flag():  # two inputs: one mul each, then a sum op
        lead = tuple(x.shape[:nfd])
        inputs.append(b.pick([v for v in b.pool if v.dtype == x.dtype and v.ndim > nfd
                              and tuple(v.shape[:nfd]) == lead]))
    param_attr = b.pick([None, ParamAttr(learning_rate=0.5), ParamAttr(trainable=False)])
    out = layers.fc(inputs if len(inputs) > 1 else x, b.dim(), num_flatten_dims=nfd,
                    param_attr=param_attr, bias_attr=b.pick([None, False]), act=_act(b))
    b.use(*inputs)
    b.add(out)


def _window_fits(size: int, k: int, stride: int, pad: int, dilation: int = 1) -> bool:
    return size + 2 * pad >= dilation * (k - 1) + 1 and stride >= 1


def _conv2d(b: _Builder, x: Variable):
    layout = b.pick(["NCHW", "NHWC"])
    ch = x.shape[3] if layout == "NHWC" else x.shape[1]
    hw = x.shape[1:3] if layout == "NHWC" else x.shape[2:4]
    proper = [g for g in range(2, ch) if ch % g == 0]
    groups = b.pick([1] + ([ch] if ch > 1 else []) + proper)  # ch: depthwise_conv2d
    num_filters = groups * b.draw(st.integers(1, max(1, MAX_DIM // groups)))
    ksize = [b.draw(st.integers(1, 3)) for _ in range(2)]
    stride, dilation = b.draw(st.integers(1, 2)), b.draw(st.integers(1, 2))
    padding = b.pick([0, 1, [1, 0], "SAME", "VALID"])
    pads = [0, 0] if isinstance(padding, str) else (
        padding if isinstance(padding, list) else [padding, padding])
    if not all(_window_fits(hw[i], ksize[i], stride, pads[i], dilation) for i in range(2)):
        padding = "SAME"  # always yields at least one window
    out = layers.conv2d(x, num_filters, ksize, stride=stride, padding=padding,
                        dilation=dilation, groups=groups, bias_attr=b.pick([None, False]),
                        act=_act(b), data_format=layout)
    b.use(x)
    b.add(out)


def _pool2d(b: _Builder, x: Variable):
    layout = b.pick(["NCHW", "NHWC"])
    hw = x.shape[1:3] if layout == "NHWC" else x.shape[2:4]
    pool_type = b.pick(["max", "avg"])
    if b.draw(st.integers(0, 4)) == 0:
        out = layers.pool2d(x, pool_type=pool_type, global_pooling=True, data_format=layout)
    else:
        k = b.draw(st.integers(1, 3))
        stride = b.draw(st.integers(1, 2))
        # padding below the window size, and ceil_mode only with padding + stride <= k, so
        # that no window lies entirely in the padding (max would be -inf, avg divide by 0)
        padding = b.pick(list(range(k)) + ["SAME", "VALID"])
        if not all(_window_fits(d, k, stride, 0 if isinstance(padding, str) else padding)
                   for d in hw):
            padding = "SAME"
        ceil_mode = not isinstance(padding, str) and padding + stride <= k and b.flag()
        out = layers.pool2d(x, k, pool_type, stride, padding, ceil_mode=ceil_mode,
                            exclusive=b.flag(), data_format=layout)
    b.use(x)
    b.add(out)


def _batch_norm(b: _Builder, x: Variable):
    out = layers.batch_norm(x, act=_act(b), is_test=b.flag(), momentum=b.pick([0.9, 0.5]),
                            epsilon=b.pick([1e-5, 1e-3]),
                            data_layout=b.pick(["NCHW", "NHWC"]))
    b.use(x)
    b.add(out)


def _layer_norm(b: _Builder, x: Variable):
    out = layers.layer_norm(x, scale=b.flag(), shift=b.flag(),
                            begin_norm_axis=b.draw(st.integers(1, x.ndim - 1)),
                            epsilon=b.pick([1e-5, 1e-3]), act=_act(b))
    b.use(x)
    b.add(out)


def _dropout(b: _Builder, x: Variable):
    out = layers.dropout(x, b.pick([0.5, 0.0, 0.25]), is_test=b.flag(),
                         seed=b.pick([None, 7]),
                         dropout_implementation=b.pick(["downgrade_in_infer",
                                                        "upscale_in_train"]))
    b.use(x)
    b.add(out)


def _embedding(b: _Builder, _):
    vocab = b.draw(st.integers(2, 8))
    shape = (-1, 1) if b.flag() else (-1, b.dim(1, 4), 1)
    ids = b.feed("ids", shape, "int64", high=vocab)
    padding_idx = b.pick([None, 0, -1])
    out = layers.embedding(ids, [vocab, b.dim()], is_sparse=b.flag(), padding_idx=padding_idx,
                           dtype=b.pick(_dtypes(b, prefer="float32")))
    b.add(out)


def _fill_constant(b: _Builder, _):
    shape = [b.dim() for _ in range(b.draw(st.integers(1, 3)))]
    out = layers.fill_constant(shape, b.pick(_dtypes(b, prefer="float32")),
                               b.pick([1.0, 0.5, -2.0]))
    b.add(out)


def _lr_schedule(b: _Builder, _):
    # all schedules share one persistable step counter, incremented in place (new versions)
    kind = b.pick(["piecewise_decay", "cosine_decay", "linear_lr_warmup"])
    if kind == "piecewise_decay":
        out = layers.piecewise_decay([2, 5], [0.1, 0.01, 0.001])
    elif kind == "cosine_decay":
        out = layers.cosine_decay(0.1, b.dim(), b.dim())
    else:
        out = layers.linear_lr_warmup(b.pick([0.1, 0.5]), b.dim(), 0.0, 0.1)
    b.add(out)


def _probabilities(b: _Builder, x: Variable, axis: int = -1) -> Variable:
    """softmax(x): losses and metrics read probabilities, so their logs stay finite."""
    p = layers.softmax(x, axis=axis)
    b.use(x)
    b.add(p)
    return p


def _softmax_with_cross_entropy(b: _Builder, x: Variable):
    axis = b.pick([-1] + [i for i in _nonbatch_axes(x) if i != x.ndim - 1])
    classes = x.shape[axis]
    if b.flag():
        label = _probabilities(b, b.feed("soft_label", tuple(x.shape), x.dtype), axis)
        soft = True
    else:
        shape = tuple(1 if i == axis % x.ndim else d for i, d in enumerate(x.shape))
        label, soft = b.feed("label", shape, "int64", high=classes), False
    res = layers.softmax_with_cross_entropy(x, label, soft_label=soft,
                                            return_softmax=b.flag(), axis=axis)
    b.use(x, label)
    b.add(*(res if isinstance(res, tuple) else (res,)))


def _cross_entropy(b: _Builder, x: Variable):
    p = _probabilities(b, x)
    if b.flag():
        label = _probabilities(b, b.feed("soft_label", tuple(x.shape), x.dtype))
        out = layers.cross_entropy(p, label, soft_label=True)
    else:
        label = b.feed("label", tuple(x.shape[:-1]) + (1,), "int64", high=x.shape[-1])
        out = layers.cross_entropy(p, label)
    b.use(p, label)
    b.add(out)


def _accuracy(b: _Builder, x: Variable):
    label = b.feed("label", (x.shape[0], 1), "int64", high=x.shape[1])
    p = _probabilities(b, x)
    acc = layers.accuracy(p, label, k=b.draw(st.integers(1, x.shape[1])))
    b.use(p, label)
    b.add(acc, reusable=False)  # a metric: nothing differentiable should hang off it


def _topk(b: _Builder, x: Variable):
    values, indices = layers.topk(x, b.draw(st.integers(1, x.shape[-1])))
    b.use(x)
    b.add(values, indices, reusable=False)


def _sums(b: _Builder, x: Variable):
    same = [v for v in b.pool if tuple(v.shape) == tuple(x.shape) and v.dtype == x.dtype]
    inputs = [x] + [b.pick(same) for _ in range(b.draw(st.integers(1, 2)))]
    out = layers.sums(inputs)
    b.use(*inputs)
    b.add(out)


def _assign(b: _Builder, x: Variable):
    out = layers.assign(x)
    b.use(x)
    b.add(out)


def _rank(lo: int, hi: int = 99) -> Callable[[Variable], bool]:
    return lambda v: lo <= v.ndim <= hi


def _splittable(v: Variable) -> bool:
    return any(d >= 2 for d in v.shape)


def _any(v: Variable) -> bool:
    return True


# step name -> (build, which pool variables it accepts; None: it needs no input)
_STEPS: dict[str, tuple[Callable, Callable[[Variable], bool] | None]] = {
    # simplest first: hypothesis shrinks a failing choice towards the front of the list
    "activation": (_activation, _any),
    "scale": (_scale, _any),
    "fill_constant": (_fill_constant, None),
    "elementwise": (_elementwise, _any),
    "fc": (_fc, _rank(2)),
    "softmax": (_softmax, _any),
    "matmul": (_matmul, _rank(2)),
    "reshape": (_reshape, _any),
    "transpose": (_transpose, _rank(2)),
    "concat": (_concat, _any),
    "split": (_split, _splittable),
    "cast": (_cast, _any),
    "mean": (_mean, _any),
    "reduce": (_reduce, _any),
    "sums": (_sums, _any),
    "assign": (_assign, _any),
    "conv2d": (_conv2d, _rank(4, 4)),
    "pool2d": (_pool2d, _rank(4, 4)),
    "batch_norm": (_batch_norm, _rank(2, 4)),
    "layer_norm": (_layer_norm, _rank(2)),
    "dropout": (_dropout, _any),
    "embedding": (_embedding, None),
    "lr_schedule": (_lr_schedule, None),
    "softmax_with_cross_entropy": (_softmax_with_cross_entropy, lambda v: v.ndim >= 2),
    "cross_entropy": (_cross_entropy, _rank(2)),
    "accuracy": (_accuracy, _rank(2, 2)),
    "topk": (_topk, lambda v: v.shape[-1] > 0),
}
STEP_NAMES = tuple(_STEPS)


def _computed_from_parameters(main: Program) -> set[str]:
    block = main.global_block()
    reached = {p.name for p in block.all_parameters() if p.trainable}
    for op in block.ops:
        if reached.intersection(op.input_arg_names):
            reached.update(op.output_arg_names)
    return reached


def _usable(names: list[str], pool: list[Variable]) -> list[str]:
    return [n for n in names if _STEPS[n][1] is None or any(_STEPS[n][1](v) for v in pool)]


class _Probe:
    """Stands in for a feed of a given rank when asking steps what they would accept."""

    def __init__(self, rank: int):
        self.shape, self.dtype = (-1,) + (2,) * (rank - 1), "float32"
        self.ndim = rank


def _ranks_accepted(names: list[str]) -> list[int]:
    return [r for r in (2, 3, 4) if any(_STEPS[n][1] is None or _STEPS[n][1](_Probe(r))
                                        for n in names)]


def random_programs(max_ops: int = 8, min_ops: int = 1, steps: Sequence[str] | None = None,
                    with_loss: bool | None = None,
                    cast_dtypes: Sequence[str] = DEFAULT_DTYPES
                    ) -> st.SearchStrategy[GeneratedProgram]:
    """Draw a valid (main, startup) program pair built with graphc's layer functions.

    ``max_ops``/``min_ops`` bound the number of layer calls (one call appends 1-4 ops:
    fc adds mul + elementwise_add + an activation). ``steps`` restricts the layer kinds to
    names from ``STEP_NAMES``; ``with_loss`` forces (True) or forbids (False) a final
    ``mean`` loss (None: drawn); ``cast_dtypes`` are the float dtypes casts and feeds may
    use. Feeds have a batch dimension of -1 and other dims in 1..6. Names are Paddle's
    and deterministic: the program is built inside ``unique_name.guard()``.
    """
    names = list(steps) if steps is not None else list(STEP_NAMES)
    unknown = sorted(set(names) - set(_STEPS))
    if unknown:
        raise ValueError(f"unknown steps {unknown}; expected names from {STEP_NAMES}")
    if not set(cast_dtypes) <= FLOAT_DTYPES:
        raise ValueError(f"cast_dtypes must be float dtypes, got {list(cast_dtypes)}")
    if not 0 <= min_ops <= max_ops:
        raise ValueError(f"need 0 <= min_ops <= max_ops, got {min_ops} and {max_ops}")
    return _programs(max_ops, min_ops, names, with_loss, tuple(cast_dtypes))


@st.composite
def _programs(draw, max_ops: int, min_ops: int, names: list[str], with_loss: bool | None,
              cast_dtypes: tuple[str, ...]) -> GeneratedProgram:
    main, startup = Program(), Program()
    main.random_seed = draw(st.sampled_from([0, 42]))
    b = _Builder(draw, cast_dtypes)
    taken: list[str] = []
    with program_guard(main, startup), unique_name.guard():
        for _ in range(draw(st.integers(1, 2))):
            b.add(b.float_feed())
        for _ in range(draw(st.integers(min_ops, max_ops))):
            usable = _usable(names, b.pool)
            if not usable:  # e.g. only conv2d asked for and no 4-D tensor yet
                # dims >= 2, as the probes have: split needs one
                b.add(b.float_feed(b.pick(_ranks_accepted(names)), lo=2))
                usable = _usable(names, b.pool)
            name = draw(st.sampled_from(usable))
            build, accepts = _STEPS[name]
            x = None if accepts is None else draw(st.sampled_from(
                [v for v in b.pool if accepts(v)]))
            build(b, x)
            taken.append(name)
        loss = None
        if with_loss if with_loss is not None else draw(st.booleans()):
            # the latest reusable result computed from a trainable parameter, if any, so
            # that minimize() has something to train
            trained = _computed_from_parameters(main)
            target = ([v for v in b.pool if v.name in trained] or b.pool)[-1]
            loss_var = layers.mean(target)
            b.use(target)
            b.add(loss_var)
            loss = loss_var.name
    fetch = list(dict.fromkeys(v.name for v in b.produced
                               if v.name not in b.consumed and v.name not in b.feeds))
    if not fetch:  # only feeds were left unread (no steps ran): fetch the last result
        fetch = [b.produced[-1].name]
    return GeneratedProgram(main, startup, dict(b.feeds), fetch, loss, dict(b.int_feed_high),
                            taken)


def random_graphs(**kwargs) -> st.SearchStrategy[Graph]:
    """Lowered SSA graphs of ``random_programs(**kwargs)`` (same arguments)."""
    return random_programs(**kwargs).map(lambda p: lower(p.main))
