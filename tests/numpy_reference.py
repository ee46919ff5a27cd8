"""A NumPy re-implementation of Paddle's training formulas: the oracle for graphc's training.

Forward and backward of fc, relu, batch_norm (training mode), conv2d, max pooling and
softmax cross-entropy, the models of `graphc.models`, and SGD, Momentum, Adam, AdamW and
L2Decay, all in float64 and written from Paddle's kernels, independently of graphc's rules.

Parameters and optimizer state are dicts keyed by Paddle's names (`fc_0.w_0`,
`batch_norm_0.w_1`, `fc_0.w_0_velocity_0`, `fc_0.w_0_beta1_pow_acc_0`), so they compare
one to one with a `graphc.Scope`.
"""

from __future__ import annotations

import math

import numpy as np

# ----------------------------------------------------------------------------- layers
# Each forward returns (out, cache); each backward takes (dout, cache) and returns the
# input gradient plus the parameter gradients.


def fc_forward(x, w, b):
    """mul (x flattened to [N, prod(rest)]) + elementwise_add of the bias."""
    x2 = x.reshape(x.shape[0], -1)
    return x2 @ w + b, (x.shape, x2, w)


def fc_backward(dout, cache):
    shape, x2, w = cache
    return (dout @ w.T).reshape(shape), x2.T @ dout, dout.sum(axis=0)


def relu_forward(x):
    out = np.maximum(x, 0.0)
    return out, out


def relu_backward(dout, out):
    # Paddle's relu_grad: dout * (out > 0), so the gradient at 0 is 0.
    return dout * (out > 0)


def _channel_view(x):
    """(reduction axes, broadcast shape) for a channel axis 1 ([N, C] or NCHW)."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = [1] * x.ndim
    shape[1] = -1
    return axes, shape


def batch_norm_forward(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5):
    """Training mode: batch statistics with the biased variance; returns
    (y, new running mean, new running variance, cache). Paddle's update:
    running = running * momentum + batch * (1 - momentum)."""
    axes, shape = _channel_view(x)
    mean = x.mean(axis=axes)
    var = ((x - mean.reshape(shape)) ** 2).mean(axis=axes)
    inv = 1.0 / np.sqrt(var + eps)
    xhat = (x - mean.reshape(shape)) * inv.reshape(shape)
    y = xhat * scale.reshape(shape) + bias.reshape(shape)
    new_mean = running_mean * momentum + mean * (1 - momentum)
    new_var = running_var * momentum + var * (1 - momentum)
    return y, new_mean, new_var, (xhat, inv, scale)


def batch_norm_backward(dy, cache):
    """The gradient through the batch statistics (Paddle's training-mode batch_norm_grad)."""
    xhat, inv, scale = cache
    axes, shape = _channel_view(dy)
    m = dy.size // dy.shape[1]
    dbias = dy.sum(axis=axes)
    dscale = (dy * xhat).sum(axis=axes)
    dx = (scale * inv).reshape(shape) / m * (
        m * dy - dbias.reshape(shape) - xhat * dscale.reshape(shape))
    return dx, dscale, dbias


def conv2d_forward(x, w, stride=1, padding=0):
    """NCHW input, OIHW filter, symmetric zero padding, no dilation or groups (im2col)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
    cols = cols.reshape(n, c * kh * kw, oh * ow)
    out = np.einsum("ok,nkp->nop", w.reshape(o, -1), cols).reshape(n, o, oh, ow)
    return out, (x.shape, xp.shape, cols, w, stride, padding, oh, ow)


def conv2d_backward(dout, cache):
    xshape, xpshape, cols, w, stride, padding, oh, ow = cache
    n, c, _, _ = xshape
    o, _, kh, kw = w.shape
    d2 = dout.reshape(n, o, oh * ow)
    dw = np.einsum("nop,nkp->ok", d2, cols).reshape(w.shape)
    dcols = np.einsum("ok,nop->nkp", w.reshape(o, -1), d2).reshape(n, c, kh, kw, oh, ow)
    dxp = np.zeros(xpshape, dout.dtype)
    for i in range(kh):
        for j in range(kw):
            dxp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] += dcols[:, :, i, j]
    h, wd = xshape[2], xshape[3]
    return dxp[:, :, padding:padding + h, padding:padding + wd], dw


def max_pool_forward(x, k=2):
    """Max pooling with a k x k window and stride k, no padding (H, W divisible by k)."""
    n, c, h, w = x.shape
    win = x.reshape(n, c, h // k, k, w // k, k).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(n, c, h // k, w // k, k * k)
    # Paddle's max_pool2d_grad routes the gradient to the first maximum in the window.
    arg = win.argmax(axis=-1)
    out = np.take_along_axis(win, arg[..., None], axis=-1)[..., 0]
    return out, (x.shape, arg, k)


def max_pool_backward(dout, cache):
    (n, c, h, w), arg, k = cache
    dwin = np.zeros((n, c, h // k, w // k, k * k), dout.dtype)
    np.put_along_axis(dwin, arg[..., None], dout[..., None], axis=-1)
    dwin = dwin.reshape(n, c, h // k, w // k, k, k).transpose(0, 1, 2, 4, 3, 5)
    return dwin.reshape(n, c, h, w)


def softmax_cross_entropy_mean(logits, label):
    """mean(softmax_with_cross_entropy(logits, label)) for hard int labels [N, 1];
    returns (loss, dlogits)."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    idx = label.reshape(-1).astype(np.int64)
    n = logits.shape[0]
    loss = -logp[np.arange(n), idx].mean()
    dlogits = np.exp(logp)
    dlogits[np.arange(n), idx] -= 1.0
    return loss, dlogits / n


# ----------------------------------------------------------------------------- models


def as_float64(params: dict) -> dict:
    return {k: np.array(v, dtype=np.float64) for k, v in params.items()}


class MLP:
    """graphc.models.mlp: fc (+ batch_norm) + relu per hidden layer, then fc + softmax CE."""

    def __init__(self, n_hidden: int, batch_norm: bool, bn_momentum=0.9, bn_eps=1e-5):
        self.n_hidden, self.batch_norm = n_hidden, batch_norm
        self.bn_momentum, self.bn_eps = bn_momentum, bn_eps

    def trainable(self, params: dict) -> list[str]:
        return [k for k in params if not k.endswith((".w_1", ".w_2"))]

    def cancelled_by_batch_norm(self) -> list[str]:
        """Biases added right before a batch_norm: the normalisation subtracts them again, so
        the loss does not depend on them and their exact gradient is 0."""
        return [f"fc_{i}.b_0" for i in range(self.n_hidden)] if self.batch_norm else []

    def loss_and_grads(self, params: dict, x, label):
        """Runs forward and backward; updates the running statistics in ``params``."""
        caches, h = [], np.asarray(x, np.float64)
        for i in range(self.n_hidden):
            h, fc_cache = fc_forward(h, params[f"fc_{i}.w_0"], params[f"fc_{i}.b_0"])
            bn_cache = None
            if self.batch_norm:
                bn = f"batch_norm_{i}"
                h, params[f"{bn}.w_1"], params[f"{bn}.w_2"], bn_cache = batch_norm_forward(
                    h, params[f"{bn}.w_0"], params[f"{bn}.b_0"], params[f"{bn}.w_1"],
                    params[f"{bn}.w_2"], self.bn_momentum, self.bn_eps)
            h, relu_out = relu_forward(h)
            caches.append((fc_cache, bn_cache, relu_out))
        last = self.n_hidden
        logits, out_cache = fc_forward(h, params[f"fc_{last}.w_0"], params[f"fc_{last}.b_0"])
        loss, d = softmax_cross_entropy_mean(logits, label)
        grads = {}
        d, grads[f"fc_{last}.w_0"], grads[f"fc_{last}.b_0"] = fc_backward(d, out_cache)
        for i in reversed(range(self.n_hidden)):
            fc_cache, bn_cache, relu_out = caches[i]
            d = relu_backward(d, relu_out)
            if self.batch_norm:
                d, grads[f"batch_norm_{i}.w_0"], grads[f"batch_norm_{i}.b_0"] = \
                    batch_norm_backward(d, bn_cache)
            d, grads[f"fc_{i}.w_0"], grads[f"fc_{i}.b_0"] = fc_backward(d, fc_cache)
        return loss, grads


class DemoCNN:
    """graphc.models.demo_cnn: (conv 3x3 pad 1 no bias -> batch_norm -> relu -> max pool 2)
    per channel count, then fc + softmax CE."""

    def __init__(self, n_conv: int, bn_momentum=0.9, bn_eps=1e-5):
        self.n_conv, self.bn_momentum, self.bn_eps = n_conv, bn_momentum, bn_eps

    def trainable(self, params: dict) -> list[str]:
        return [k for k in params if not k.endswith((".w_1", ".w_2"))]

    def cancelled_by_batch_norm(self) -> list[str]:
        return []  # the convolutions have no bias

    def loss_and_grads(self, params: dict, x, label):
        caches, h = [], np.asarray(x, np.float64)
        for i in range(self.n_conv):
            bn = f"batch_norm_{i}"
            h, conv_cache = conv2d_forward(h, params[f"conv2d_{i}.w_0"], 1, 1)
            h, params[f"{bn}.w_1"], params[f"{bn}.w_2"], bn_cache = batch_norm_forward(
                h, params[f"{bn}.w_0"], params[f"{bn}.b_0"], params[f"{bn}.w_1"],
                params[f"{bn}.w_2"], self.bn_momentum, self.bn_eps)
            h, relu_out = relu_forward(h)
            h, pool_cache = max_pool_forward(h, 2)
            caches.append((conv_cache, bn_cache, relu_out, pool_cache))
        logits, out_cache = fc_forward(h, params["fc_0.w_0"], params["fc_0.b_0"])
        loss, d = softmax_cross_entropy_mean(logits, label)
        grads = {}
        d, grads["fc_0.w_0"], grads["fc_0.b_0"] = fc_backward(d, out_cache)
        for i in reversed(range(self.n_conv)):
            conv_cache, bn_cache, relu_out, pool_cache = caches[i]
            d = relu_backward(max_pool_backward(d, pool_cache), relu_out)
            d, grads[f"batch_norm_{i}.w_0"], grads[f"batch_norm_{i}.b_0"] = \
                batch_norm_backward(d, bn_cache)
            d, grads[f"conv2d_{i}.w_0"] = conv2d_backward(d, conv_cache)
        return loss, grads


# ----------------------------------------------------------------------------- optimizers


class Optimizer:
    """Paddle's update order: L2 decay (``g += c * p``, not scaled by the LR) into each
    gradient first, then one update per parameter with lr * (its ParamAttr learning_rate).

    ``state`` holds the accumulators under Paddle's names (``<param>_velocity_0``...)."""

    def __init__(self, learning_rate=0.01, l2_decay: float | None = None,
                 param_lr: dict | None = None):
        self.learning_rate = learning_rate
        self.l2_decay, self.param_lr = l2_decay, dict(param_lr or {})
        self.state: dict[str, np.ndarray] = {}

    def step(self, params: dict, grads: dict, learning_rate=None) -> None:
        lr = self.learning_rate if learning_rate is None else learning_rate
        if self.l2_decay is not None:
            grads = {k: g + self.l2_decay * params[k] for k, g in grads.items()}
        for name, g in grads.items():
            params[name] = self.update(name, params[name], g,
                                       lr * self.param_lr.get(name, 1.0))

    def _acc(self, param: str, kind: str, like, value=0.0):
        key = f"{param}_{kind}_0"
        if key not in self.state:
            self.state[key] = np.full_like(like, value, dtype=np.float64)
        return key

    def update(self, name, p, g, lr):
        raise NotImplementedError


class SGD(Optimizer):
    def update(self, name, p, g, lr):
        return p - lr * g


class Momentum(Optimizer):
    """v = mu * v + g; p -= lr * v, or with Nesterov p -= lr * (g + mu * v)."""

    def __init__(self, learning_rate, momentum, use_nesterov=False, **kw):
        super().__init__(learning_rate, **kw)
        self.mu, self.use_nesterov = momentum, use_nesterov

    def update(self, name, p, g, lr):
        key = self._acc(name, "velocity", p)
        v = self.state[key] = self.mu * self.state[key] + g
        return p - lr * (g + self.mu * v) if self.use_nesterov else p - lr * v


class Adam(Optimizer):
    """Paddle's adam kernel: the bias corrections fold into the step and scale epsilon;
    the beta-pow accumulators start at beta1, beta2 and are multiplied after each step."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, **kw):
        super().__init__(learning_rate, **kw)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def update(self, name, p, g, lr):
        m1 = self._acc(name, "moment1", p)
        m2 = self._acc(name, "moment2", p)
        b1p = self._acc(name, "beta1_pow_acc", np.zeros(1), self.beta1)
        b2p = self._acc(name, "beta2_pow_acc", np.zeros(1), self.beta2)
        s = self.state
        s[m1] = self.beta1 * s[m1] + (1 - self.beta1) * g
        s[m2] = self.beta2 * s[m2] + (1 - self.beta2) * g * g
        beta1_pow, beta2_pow = s[b1p][0], s[b2p][0]
        lr_t = lr * math.sqrt(1 - beta2_pow) / (1 - beta1_pow)
        p = p - lr_t * s[m1] / (np.sqrt(s[m2]) + self.epsilon * math.sqrt(1 - beta2_pow))
        s[b1p] = s[b1p] * self.beta1
        s[b2p] = s[b2p] * self.beta2
        return p


class AdamW(Adam):
    """Decoupled weight decay: p *= 1 - lr * coeff, then the Adam step on the decayed p."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 weight_decay=0.01, **kw):
        super().__init__(learning_rate, beta1, beta2, epsilon, **kw)
        self.coeff = weight_decay

    def update(self, name, p, g, lr):
        return super().update(name, p * (1 - lr * self.coeff), g, lr)


# ----------------------------------------------------------------------------- LR schedules
# Paddle's layer functions; ``step`` is the global step counter, 0 on the first run.


def piecewise_decay(step, boundaries, values):
    for b, v in zip(boundaries, values):
        if step < b:
            return v
    return values[-1]


def cosine_decay(step, learning_rate, step_each_epoch, epochs):
    epoch = math.floor(step / step_each_epoch)
    return learning_rate * 0.5 * (math.cos(epoch * math.pi / epochs) + 1)


def linear_lr_warmup(step, learning_rate, warmup_steps, start_lr, end_lr):
    if step < warmup_steps:
        return start_lr + (end_lr - start_lr) * step / warmup_steps
    return learning_rate
