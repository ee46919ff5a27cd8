"""Parameter initialisers (Paddle's): each appends its op(s) to the startup program.

Constant, Uniform, Normal, TruncatedNormal, Xavier (Glorot), MSRA (He) with Paddle's fan
rules, Bilinear and NumpyArrayInitializer; init_on_cpu/force_init_on_cpu.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np

from ..ir.errors import ProgramError

# Paddle's init_on_cpu flag, scoped to the ``with`` block (a context variable, not a global)
_ON_CPU: contextvars.ContextVar[bool] = contextvars.ContextVar("graphc_init_on_cpu",
                                                               default=False)


def force_init_on_cpu() -> bool:
    """True inside ``init_on_cpu()``. Paddle then fills constants in host memory; graphc's
    startup values are placed by XLA with the rest of the step, so this is only reported."""
    return _ON_CPU.get()


@contextlib.contextmanager
def init_on_cpu():
    """Paddle's "initialise on the CPU" block. A no-op for placement on XLA (the compiled
    startup puts every value on the step's devices); ``force_init_on_cpu()`` is True inside
    and Constant initialisers record ``force_cpu`` as Paddle's do."""
    token = _ON_CPU.set(True)
    try:
        yield
    finally:
        _ON_CPU.reset(token)


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
    """``force_cpu`` is recorded on the op as Paddle's (placement is XLA's: init_on_cpu)."""

    def __init__(self, value: float = 0.0, force_cpu: bool = False):
        self.value, self.force_cpu = float(value), bool(force_cpu)

    def op(self, var):
        return "fill_constant", {"value": self.value,
                                 "force_cpu": self.force_cpu or force_init_on_cpu()}


class Uniform(Initializer):
    """U[low, high); with ``diag_num`` > 0, the flat elements i * (diag_step + 1) for
    i < diag_num are then set to ``diag_val`` (Paddle's uniform_random diagonal)."""

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0, diag_num: int = 0,
                 diag_step: int = 0, diag_val: float = 1.0):
        self.low, self.high, self.seed = float(low), float(high), int(seed)
        self.diag_num, self.diag_step, self.diag_val = int(diag_num), int(diag_step), \
            float(diag_val)

    def op(self, var):
        return "uniform_random", {"min": self.low, "max": self.high, "seed": self.seed}

    def __call__(self, var, block):
        op = super().__call__(var, block)
        if self.diag_num > 0:
            _set_diagonal(block, var, self.diag_num, self.diag_step, self.diag_val)
        return op


def _set_diagonal(block, var, num: int, step: int, val: float) -> None:
    """var = var * (1 - mask) + val * mask, mask marking the diagonal's flat elements: exact
    on both (x * 1 + 0, x * 0 + val), from ops every backend has."""
    size = math.prod(var.shape)
    if size <= (num - 1) * (step + 1):
        raise ProgramError(f"Uniform(diag_num={num}, diag_step={step}): '{var.name}' has only "
                           f"{size} elements")
    mask = np.zeros(size, np.float32)
    mask[np.arange(num) * (step + 1)] = 1.0
    names = {k: f"{var.name}@DIAG_{k}" for k in ("mask", "keep", "kept", "diag")}
    for n in names.values():
        block.create_var(n, var.shape, "float32")
    block.append_op("assign_value", outputs={"Out": names["mask"]},
                    attrs={"shape": list(var.shape), "dtype": "float32",
                           "fp32_values": mask.tolist()})
    block.append_op("scale", {"X": names["mask"]}, {"Out": names["keep"]},
                    {"scale": -1.0, "bias": 1.0})
    block.append_op("elementwise_mul", {"X": var, "Y": names["keep"]}, {"Out": names["kept"]})
    block.append_op("scale", {"X": names["mask"]}, {"Out": names["diag"]}, {"scale": val})
    block.append_op("elementwise_add", {"X": names["kept"], "Y": names["diag"]}, {"Out": var})


class Normal(Initializer):
    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def op(self, var):
        return "gaussian_random", {"mean": self.loc, "std": self.scale, "seed": self.seed}


class TruncatedNormal(Initializer):
    """N(loc, scale^2) with values beyond 2 standard deviations drawn again (Paddle's
    truncated_gaussian_random): the normal distribution truncated to loc +- 2 * scale."""

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def op(self, var):
        return "truncated_gaussian_random", {"mean": self.loc, "std": self.scale,
                                             "seed": self.seed}


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


class NumpyArrayInitializer(Initializer):
    """The variable takes ``value`` (a NumPy array of its shape) through an assign_value op."""

    def __init__(self, value):
        self._value = np.asarray(value)

    @property
    def value(self):
        return self._value

    def op(self, var):
        value = self._value
        if list(value.shape) != [int(d) for d in var.shape]:
            raise ProgramError(f"NumpyArrayInitializer: '{var.name}' has shape "
                               f"{list(var.shape)}, the array {list(value.shape)}")
        return _assign_value_attrs(value, var.dtype)

    def __repr__(self) -> str:
        return f"NumpyArrayInitializer(shape={list(self._value.shape)})"


def _assign_value_attrs(value, dtype: str) -> tuple[str, dict]:
    slot = {"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values",
            "bool": "bool_values"}.get(dtype)
    if slot is None:
        raise ProgramError(f"an array initialiser cannot fill a {dtype} variable (float32, "
                           "int32, int64 or bool)")
    cast = {"fp32_values": float, "bool_values": int}.get(slot, int)
    return "assign_value", {slot: [cast(v) for v in np.ravel(value).tolist()]}


class Bilinear(Initializer):
    """The bilinear-upsampling kernel for a conv2d_transpose filter [C_out, C_in, K, K]:
    w[.., y, x] = (1 - |x / f - c|) * (1 - |y / f - c|), f = ceil(K / 2),
    c = (2f - 1 - f % 2) / (2f), the same for every channel pair (Paddle's)."""

    def op(self, var):
        shape = [int(d) for d in var.shape]
        if len(shape) != 4:
            raise ProgramError(f"Bilinear: '{var.name}' must be 4-D [C_out, C_in, K, K], got "
                               f"{shape}")
        if shape[2] != shape[3]:
            raise ProgramError(f"Bilinear: '{var.name}' must have a square kernel, got {shape}")
        size = shape[3]
        f = math.ceil(size / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        line = 1 - np.abs(np.arange(size) / f - c)
        kernel = np.outer(line, line).astype(np.float32)
        return _assign_value_attrs(np.broadcast_to(kernel, shape), var.dtype)

    def __repr__(self) -> str:
        return "Bilinear()"


# Paddle's long names
ConstantInitializer, UniformInitializer, NormalInitializer = Constant, Uniform, Normal
XavierInitializer, MSRAInitializer = Xavier, MSRA
TruncatedNormalInitializer, BilinearInitializer = TruncatedNormal, Bilinear
NumpyArray = NumpyArrayInitializer
