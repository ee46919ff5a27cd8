"""Layers that call Python on the host from inside the compiled step: ``py_func`` (a user's
function as an op) and ``Print`` (prints a value, and its gradient, at run time)."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..ir.program import Variable
from ..ops.host.defs import host_callables
from .helper import LayerHelper, check_variable

__all__ = ["py_func", "Print"]


def _variables(layer: str, arg: str, value) -> list[Variable]:
    if value is None:
        return []
    items = list(value) if isinstance(value, list | tuple) else [value]
    for v in items:
        if not isinstance(v, Variable):
            raise ProgramError(f"{layer}: '{arg}' must be Variables, got {type(v).__name__}")
    return items


def py_func(func, x, out, backward_func=None, skip_vars_in_backward_input=None):
    """Paddle's py_func: ``out = func(*x)`` run on the host (NumPy arrays in and out) inside
    the jitted step. ``out`` are Variables made with ``create_var`` (their shape and dtype
    are the outputs'; a leading -1 takes x[0]'s leading size); None: ``func`` runs for its
    effect. ``backward_func(*x, *out, *out_grads)`` (less ``skip_vars_in_backward_input``)
    returns x's gradients (None: zeros); without it ``out`` has no gradient."""
    if not callable(func):
        raise ProgramError(f"py_func: func must be callable, got {type(func).__name__}")
    if backward_func is not None and not callable(backward_func):
        raise ProgramError("py_func: backward_func must be callable or None")
    xs = _variables("py_func", "x", x)
    outs = _variables("py_func", "out", out)
    for v in outs:
        if v.shape is None:
            raise ProgramError(f"py_func: out '{v.name}' needs a shape (create_var(shape=...))")
    skip = {v.name if isinstance(v, Variable) else v
            for v in _variables("py_func", "skip_vars_in_backward_input",
                                skip_vars_in_backward_input)}
    known = {v.name for v in xs + outs}
    if not skip <= known:
        raise ProgramError(f"py_func: skip_vars_in_backward_input {sorted(skip - known)} are "
                           "neither in x nor in out")
    registry = host_callables()
    attrs = {"forward_callable_id": registry.add(func),
             "backward_callable_id": registry.add(backward_func),
             "backward_skip_x": [i for i, v in enumerate(xs) if v.name in skip],
             "backward_skip_out": [i for i, v in enumerate(outs) if v.name in skip],
             "out_ranks": [len(v.shape) for v in outs],
             "out_dims": [int(d) for v in outs for d in v.shape],
             "out_dtypes": [v.dtype for v in outs]}
    if backward_func is None:
        for v in outs:  # Paddle appends no grad op: nothing flows back through func
            v.stop_gradient = True
    LayerHelper("py_func").append_op("py_func", {"X": xs}, {"Out": outs}, attrs)
    return out


def Print(input, first_n=-1, message=None, summarize=20, print_tensor_name=True,  # noqa: N802
          print_tensor_type=True, print_tensor_shape=True, print_tensor_lod=True,
          print_phase="both"):
    """Paddle's Print: returns ``input`` unchanged and prints it on the host each time the
    step runs (name, message, shape, dtype, the first ``summarize`` values; -1: all), only
    the first ``first_n`` times when > 0. ``print_phase`` 'backward' or 'both' also prints
    its gradient when the backward pass reaches it (the value passes through unchanged)."""
    check_variable("Print", "input", input)
    phase = str(print_phase).lower()
    if phase not in ("forward", "backward", "both"):
        raise ProgramError(f"Print: print_phase must be 'forward', 'backward' or 'both', got "
                           f"{print_phase!r}")
    helper = LayerHelper("print")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("print", {"In": input}, {"Out": out},
                     {"first_n": int(first_n), "message": message or "",
                      "summarize": int(summarize), "print_tensor_name": bool(print_tensor_name),
                      "print_tensor_type": bool(print_tensor_type),
                      "print_tensor_shape": bool(print_tensor_shape),
                      "print_tensor_lod": bool(print_tensor_lod), "print_phase": phase,
                      "tensor_name": input.name, "counter_id": host_callables().new_key()})
    return out
