"""The steps of a random program: each calls one layer function with drawn arguments that
are valid for its input; ``STEPS`` pairs each with the test deciding what it accepts."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import strategies as st

from .. import layers
from ..build.param_attr import ParamAttr
from ..ir.program import Variable
from .program_builder import MAX_DIM, _act, _Builder, _dtypes, _nonbatch_axes

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
    if kind == "vector":  # Paddle's 1-D Y is the column [K, 1]: transposed it is [1, K]
        ty = False
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

