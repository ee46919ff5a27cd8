"""Parameter initialisers (Paddle's): each appends one op to the startup program.

Constant, Uniform, Normal, Xavier (Glorot) and MSRA (He), with Paddle's fan rules.
"""

from __future__ import annotations

import math


def compute_fans(shape) -> tuple[int, int]:
    """Paddle's rule: [in, out] for matrices; [out, in, k...] for convolution filters."""
    shape = list(shape)
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    """Base class: ``init(var, block)`` appends the filling op to ``block`` (startup)."""

    def __call__(self, var, block):
        op_type, attrs = self.op(var)
        return block.append_op(op_type, outputs={"Out": var},
                               attrs={"shape": list(var.shape), "dtype": var.dtype, **attrs})

    def op(self, var) -> tuple[str, dict]:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class Constant(Initializer):
    def __init__(self, value: float = 0.0):
        self.value = float(value)

    def op(self, var):
        return "fill_constant", {"value": self.value}


class Uniform(Initializer):
    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0):
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def op(self, var):
        return "uniform_random", {"min": self.low, "max": self.high, "seed": self.seed}


class Normal(Initializer):
    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def op(self, var):
        return "gaussian_random", {"mean": self.loc, "std": self.scale, "seed": self.seed}


class Xavier(Initializer):
    """Glorot: U(+-sqrt(6 / (fan_in + fan_out))) or N(0, sqrt(2 / (fan_in + fan_out)))."""

    def __init__(self, uniform: bool = True, fan_in=None, fan_out=None, seed: int = 0):
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def op(self, var):
        f_in, f_out = compute_fans(var.shape)
        f_in = self.fan_in if self.fan_in is not None else f_in
        f_out = self.fan_out if self.fan_out is not None else f_out
        if self.uniform:
            limit = math.sqrt(6.0 / (f_in + f_out))
            return Uniform(-limit, limit, self.seed).op(var)
        return Normal(0.0, math.sqrt(2.0 / (f_in + f_out)), self.seed).op(var)


class MSRA(Initializer):
    """He: U(+-sqrt(6 / fan_in)) or N(0, sqrt(2 / fan_in))."""

    def __init__(self, uniform: bool = True, fan_in=None, seed: int = 0):
        self.uniform, self.fan_in, self.seed = uniform, fan_in, seed

    def op(self, var):
        f_in = self.fan_in if self.fan_in is not None else compute_fans(var.shape)[0]
        if self.uniform:
            limit = math.sqrt(6.0 / f_in)
            return Uniform(-limit, limit, self.seed).op(var)
        return Normal(0.0, math.sqrt(2.0 / f_in), self.seed).op(var)


# Paddle's long names
ConstantInitializer, UniformInitializer, NormalInitializer = Constant, Uniform, Normal
XavierInitializer, MSRAInitializer = Xavier, MSRA
