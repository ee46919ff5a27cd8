"""Probability distributions of Paddle 1.8's ``fluid.layers`` (``Uniform``, ``Normal``,
``Categorical``, ``MultivariateNormalDiag``), built from existing layers as Paddle builds them.

Parameters are Variables, or floats / lists / arrays (made float32 constants, broadcast to one
shape, as Paddle's ``_to_variable``); sampling uses the random layers' ``seed`` rule.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..ir.errors import ProgramError
from ..ir.program import Variable


def _layers():
    from .. import layers  # local: this module is imported while layers/__init__ runs
    return layers


class Distribution:
    """The interface: sample, entropy, log_prob, kl_divergence (each subclass has its own)."""

    def sample(self):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def kl_divergence(self, other):
        raise NotImplementedError

    def log_prob(self, value):
        raise NotImplementedError

    def _validate_args(self, *args) -> bool:
        """True when every argument is a Variable; a mix of Variables and constants is refused."""
        is_variable = [isinstance(a, Variable) for a in args]
        if any(is_variable) and not all(is_variable):
            raise ProgramError(f"{type(self).__name__}: if one argument is a Variable, all "
                               "arguments must be Variables")
        return all(is_variable)

    def _to_variable(self, *args):
        """float / list / ndarray arguments as float32 constant Variables of one broadcast shape."""
        arrays = []
        for arg in args:
            if not isinstance(arg, float | list | np.ndarray):  # Paddle refuses ints too
                raise ProgramError(f"{type(self).__name__}: arguments must be float, list, "
                                   f"numpy.ndarray or Variable, got {type(arg).__name__}")
            value = np.zeros(1) + arg if isinstance(arg, float) else np.array(arg)
            if str(value.dtype) != "float32":
                warnings.warn(f"{type(self).__name__}: arguments are float32; {value.dtype} "
                              "is converted", stacklevel=4)
                value = value.astype("float32")
            arrays.append(value)
        layers = _layers()
        return tuple(layers.assign(np.ascontiguousarray(a)) for a in np.broadcast_arrays(*arrays))


def _float_args(dist, a, b):
    """(a, b, batch_size_unknown, all_arg_is_float) as Paddle's constructors set them."""
    if dist._validate_args(a, b):
        return a, b, True, False
    all_float = isinstance(a, float) and isinstance(b, float)
    a, b = dist._to_variable(a, b)
    return a, b, False, all_float


class _Sampled(Distribution):
    """Uniform and Normal sample alike: unit noise of shape + batch_shape, scaled and shifted."""

    def _noise(self, shape, seed, batch_size_like):
        raise NotImplementedError

    def _sample(self, shape, seed, shift, spread):
        layers = _layers()
        shape = [int(d) for d in shape]
        batch_shape = list((shift + spread).shape)
        output_shape = shape + batch_shape
        if self.batch_size_unknown:
            # noise [batch..., shape...] with the parameters on the leading axes, then the
            # sample axes moved to the front (Paddle's trailing-axis broadcast here fails at
            # run time for a non-empty shape, and its final reshape would mix the rows)
            zero = layers.fill_constant_batch_size_like(shift + spread, batch_shape + shape,
                                                        shift.dtype, 0.0)
            trailing = list(range(len(batch_shape), len(batch_shape) + len(shape)))
            if trailing:
                shift, spread = (layers.unsqueeze(v, trailing) for v in (shift, spread))
            out = self._noise(list(zero.shape), seed, zero) * (zero + spread) + shift
            if not trailing:
                return out
            return layers.transpose(out, trailing + list(range(len(batch_shape))))
        out = (self._noise(output_shape, seed, None)
               * (layers.zeros(output_shape, shift.dtype) + spread) + shift)
        return layers.reshape(out, shape) if self.all_arg_is_float else out


class Uniform(_Sampled):
    """Uniform on [low, high): pdf 1 / (high - low)."""

    def __init__(self, low, high):
        self.low, self.high, self.batch_size_unknown, self.all_arg_is_float = \
            _float_args(self, low, high)

    def _noise(self, shape, seed, like):
        layers = _layers()
        if like is not None:
            return layers.uniform_random_batch_size_like(like, shape, min=0.0, max=1.0,
                                                         seed=seed)
        return layers.uniform_random(shape, min=0.0, max=1.0, seed=seed)

    def sample(self, shape, seed=0):
        return self._sample(shape, seed, self.low, self.high - self.low)

    def log_prob(self, value):
        layers = _layers()
        inside_low = layers.cast(layers.less_than(self.low, value), value.dtype)
        inside_high = layers.cast(layers.less_than(value, self.high), value.dtype)
        return layers.log(inside_low * inside_high) - layers.log(self.high - self.low)

    def entropy(self):
        return _layers().log(self.high - self.low)


class Normal(_Sampled):
    """Normal with mean loc and standard deviation scale. ``seed`` (the reference list's
    third argument): the seed of ``sample()`` calls that pass none (0: the program's)."""

    def __init__(self, loc, scale, seed=0):
        self.loc, self.scale, self.batch_size_unknown, self.all_arg_is_float = \
            _float_args(self, loc, scale)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ProgramError(f"Normal: seed must be an int, got {seed!r}")
        self.seed = seed

    def _noise(self, shape, seed, like):
        layers = _layers()
        if like is not None:
            return layers.gaussian_random_batch_size_like(like, shape, mean=0.0, std=1.0,
                                                          seed=seed)
        return layers.gaussian_random(shape, mean=0.0, std=1.0, seed=seed)

    def sample(self, shape, seed=0):
        return self._sample(shape, seed or self.seed, self.loc, self.scale)

    def entropy(self):
        layers = _layers()
        batch_shape = list((self.loc + self.scale).shape)
        zero = layers.fill_constant_batch_size_like(self.loc + self.scale, batch_shape,
                                                    self.loc.dtype, 0.0)
        return 0.5 + 0.5 * math.log(2 * math.pi) + layers.log(self.scale + zero)

    def log_prob(self, value):
        layers = _layers()
        var = self.scale * self.scale
        diff = value - self.loc
        return (-1.0 * (diff * diff) / (2.0 * var) - layers.log(self.scale)
                - math.log(math.sqrt(2.0 * math.pi)))

    def kl_divergence(self, other):
        if not isinstance(other, Normal):
            raise ProgramError(f"Normal.kl_divergence: other must be a Normal, got "
                               f"{type(other).__name__}")
        ratio = self.scale / other.scale
        ratio = ratio * ratio
        t1 = (self.loc - other.loc) / other.scale
        t1 = t1 * t1
        return 0.5 * (ratio + t1 - 1.0 - _layers().log(ratio))


def _softmax_parts(logits):
    """(shifted logits, their exp-sum z) along the last axis."""
    layers = _layers()
    shifted = logits - layers.reduce_max(logits, dim=-1, keep_dim=True)
    z = layers.reduce_sum(layers.exp(shifted), dim=-1, keep_dim=True)
    return shifted, z


class Categorical(Distribution):
    """Categorical over the last axis of unnormalised logits (Paddle 1.8: entropy and KL)."""

    def __init__(self, logits):
        self.logits = logits if self._validate_args(logits) else self._to_variable(logits)[0]

    def kl_divergence(self, other):
        if not isinstance(other, Categorical):
            raise ProgramError(f"Categorical.kl_divergence: other must be a Categorical, got "
                               f"{type(other).__name__}")
        layers = _layers()
        logits, z = _softmax_parts(self.logits)
        other_logits, other_z = _softmax_parts(other.logits)
        prob = layers.exp(logits) / z
        return layers.reduce_sum(prob * (logits - layers.log(z) - other_logits
                                         + layers.log(other_z)), dim=-1, keep_dim=True)

    def entropy(self):
        layers = _layers()
        logits, z = _softmax_parts(self.logits)
        prob = layers.exp(logits) / z
        return -1.0 * layers.reduce_sum(prob * (logits - layers.log(z)), dim=-1, keep_dim=True)


class MultivariateNormalDiag(Distribution):
    """Multivariate normal with mean loc [k] and a diagonal covariance matrix scale [k, k]."""

    def __init__(self, loc, scale):
        if self._validate_args(loc, scale):
            self.loc, self.scale = loc, scale
        else:  # each alone: loc [k] and scale [k, k] must not be broadcast together
            self.loc, self.scale = self._to_variable(loc)[0], self._to_variable(scale)[0]

    @staticmethod
    def _ones_and_eye(value):
        layers = _layers()
        shape = [int(d) for d in value.shape]
        if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 0:
            raise ProgramError(f"MultivariateNormalDiag: scale must be a known square [k, k] "
                               f"matrix, got shape {shape}")
        return layers.ones(shape, value.dtype), layers.diag(layers.ones([shape[0]], value.dtype))

    def _det(self, value):
        """Product of the diagonal (off-diagonal entries replaced by 1)."""
        ones, eye = self._ones_and_eye(value)
        return _layers().reduce_prod(value + ones - eye)

    def _inv(self, value):
        """The diagonal inverted (value ** -1 there, value ** 1 = 0 elsewhere)."""
        ones, eye = self._ones_and_eye(value)
        return _layers().elementwise_pow(value, ones - 2 * eye)

    def entropy(self):
        k = int(self.scale.shape[0])
        return 0.5 * (k * (1.0 + math.log(2 * math.pi)) + _layers().log(self._det(self.scale)))

    def kl_divergence(self, other):
        if not isinstance(other, MultivariateNormalDiag):
            raise ProgramError("MultivariateNormalDiag.kl_divergence: other must be a "
                               f"MultivariateNormalDiag, got {type(other).__name__}")
        layers = _layers()
        trace = layers.reduce_sum(self._inv(other.scale) * self.scale)
        diff = other.loc - self.loc
        quad = layers.matmul(layers.matmul(diff, self._inv(other.scale)), diff)
        k = int(self.scale.shape[0])
        ln_cov = layers.log(self._det(other.scale)) - layers.log(self._det(self.scale))
        return 0.5 * (trace + quad - k + ln_cov)
