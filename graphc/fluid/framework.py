"""``fluid.framework``: Program, Variable, Parameter, the default programs and guards, and
the mode and version checks Fluid scripts call (``in_dygraph_mode``, ``require_version``)."""

from __future__ import annotations

import contextlib
import re

from ..ir.default_programs import (
    default_main_program,
    default_startup_program,
    program_guard,
    switch_main_program,
    switch_startup_program,
)
from ..ir.errors import GraphcError
from ..ir.grad_defs import GRAD_SUFFIX
from ..ir.program import Block, Operator, Parameter, Program, Variable
from ..ir.program_compat import OP_NAMESCOPE
from ..runtime.devices import cpu_places, cuda_pinned_places, cuda_places
from ..runtime.places import is_compiled_with_cuda
from ._missing import MissingAPIError, advice_for, missing
from .flags import FlagError, get_flags, set_flags  # noqa: F401  (fluid.framework's names)

__all__ = ["Block", "Operator", "Parameter", "Program", "Variable", "cpu_places",
           "cuda_pinned_places", "cuda_places", "device_guard", "default_main_program",
           "default_startup_program",
           "disable_static", "enable_static", "in_dygraph_mode", "is_compiled_with_cuda",
           "name_scope", "program_guard", "require_version", "set_flags", "get_flags",
           "switch_main_program",
           "switch_startup_program"]

# The Paddle version whose Fluid API graphc follows: require_version compares against it.
PADDLE_COMPATIBLE_VERSION = "1.8.0"


class VersionError(GraphcError):
    """``require_version`` asked for a Paddle version outside what graphc follows."""


class VersionFormatError(GraphcError, ValueError):
    """A version string is not ``N``, ``N.N``, ``N.N.N`` or ``N.N.N.N``."""


class VersionTypeError(GraphcError, TypeError):
    """A version was not given as a string."""


def in_dygraph_mode() -> bool:
    """Always False: graphc builds static programs only."""
    return False


def enable_static() -> None:
    """Static mode is graphc's only mode, so this does nothing (Paddle 2.x scripts call it)."""


def disable_static(place=None) -> None:
    raise MissingAPIError(f"disable_static(): graphc lacks dygraph mode on purpose. "
                          f"{advice_for('dygraph')}")


# process: Paddle's name_scope nesting
_name_scopes: list[str] = []


@contextlib.contextmanager
def name_scope(prefix: str | None = None):
    """Paddle's name scopes only label ops for its visualiser; graphc keeps the nesting
    (``current_name_scope()``) but names variables as without it. Ops created inside record
    the path (``op.desc.attr('op_namescope')``, '/s1/s2/'); a scope entered again under the
    same parent of the main program is '<prefix>_1', '<prefix>_2', ... as Paddle's."""
    parent = OP_NAMESCOPE.get()
    token = None
    if prefix:
        # per main program (Paddle keeps one tree for the process): how often each child
        # of each path was entered
        seen = default_main_program().__dict__.setdefault("_name_scope_children", {})
        n = seen.get((parent, prefix), 0)
        seen[(parent, prefix)] = n + 1
        token = OP_NAMESCOPE.set(f"{parent}{prefix if n == 0 else f'{prefix}_{n}'}/")
    _name_scopes.append(prefix or "")
    try:
        yield
    finally:
        _name_scopes.pop()
        if token is not None:
            OP_NAMESCOPE.reset(token)


def current_name_scope() -> str:
    return "/".join(s for s in _name_scopes if s)


def _version_parts(version, what: str) -> list[int]:
    if not isinstance(version, str):
        raise VersionTypeError(f"require_version: {what} must be a str such as '1.8.0', got "
                               f"{type(version).__name__} {version!r}")
    if not re.fullmatch(r"\d+(\.\d+){0,3}", version):
        raise VersionFormatError(f"require_version: {what}={version!r} is not a version like "
                                 "'1', '1.8', '1.8.0' or '1.8.0.0'")
    parts = [int(p) for p in version.split(".")]
    return parts + [0] * (4 - len(parts))


def require_version(min_version, max_version=None) -> None:
    """Check that the Paddle API graphc follows (PADDLE_COMPATIBLE_VERSION, "1.8.0") is at
    least ``min_version`` and at most ``max_version``, as Paddle checks its own version."""
    low = _version_parts(min_version, "min_version")
    high = None if max_version is None else _version_parts(max_version, "max_version")
    have = _version_parts(PADDLE_COMPATIBLE_VERSION, "installed version")
    if have < low or (high is not None and have > high):
        wanted = f">= {min_version}" + ("" if high is None else f" and <= {max_version}")
        raise VersionError(f"require_version: the script needs Paddle {wanted}; graphc follows "
                           f"Paddle {PADDLE_COMPATIBLE_VERSION}'s Fluid API")


class DeviceGuardError(GraphcError, ValueError):
    """device_guard was given something other than 'cpu', 'gpu', 'gpu:N', '' or None."""


@contextlib.contextmanager
def device_guard(device=None):
    """Paddle 1.8 pins the ops built inside to ``device`` ('cpu', 'gpu' or 'gpu:N'; None or
    '': no preference). graphc compiles a whole step for its devices and XLA decides where
    each op runs, so the ops are built exactly as outside; the device is checked as Paddle
    checks it (a device id for 'cpu' is an error) and recorded on each op built inside
    (``op.device``, the innermost guard's), so PipelineOptimizer can name the sections."""
    if device is not None and not isinstance(device, str):
        raise DeviceGuardError(f"device_guard: device must be a str or None, got {device!r}")
    kind, _, index = (device or "").partition(":")
    if kind not in ("cpu", "gpu", ""):
        raise DeviceGuardError(f"device_guard: device must be 'cpu', 'gpu', 'gpu:N', '' or "
                               f"None, got {device!r}")
    if ":" in (device or "") and (kind != "gpu" or not index.isdigit()):
        raise DeviceGuardError(f"device_guard: only 'gpu' takes a device id ('gpu:0'), got "
                               f"{device!r}")
    block = default_main_program().current_block()
    start = len(block.ops)
    try:
        yield
    finally:
        for op in block.ops[start:]:
            if device and not getattr(op, "device", ""):  # an inner guard's device stays
                op.device = device


# -- issue 25: framework surface
def grad_var_name(var_name: str) -> str:
    """The name of ``var_name``'s gradient variable (``x`` -> ``x@GRAD``), as Paddle's."""
    return var_name + GRAD_SUFFIX
# -- end issue 25: framework surface


# -- unitfw
def convert_np_dtype_to_dtype_(np_dtype) -> str:
    """A numpy dtype (or its name) as the dtype variables carry: graphc's dtype name, which
    ``core.VarDesc.VarType``'s members are (FP32 is 'float32')."""
    from ..ir.types import normalize_dtype
    return normalize_dtype(np_dtype)
# -- end unitfw


# -- stoppers24
def _get_var(name: str, program=None) -> Variable:
    """The variable ``name`` of ``program``'s global block (default: the main program), as
    Paddle's private helper that widely used scripts call."""
    from ..ir.errors import ProgramError
    program = default_main_program() if program is None else program
    if not isinstance(name, str) or not isinstance(program, Program):
        raise ProgramError(f"_get_var: needs a name (str) and a Program, got {name!r}, "
                           f"{program!r}")
    return program.global_block().var(name)
# -- end stoppers24


def __getattr__(name: str):
    raise missing(__name__, name)
