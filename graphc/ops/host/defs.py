"""Host-callback ops: ``py_func`` (a user's Python function) and ``print`` (Paddle's Print),
run on the host from inside the compiled step; their callables are named by id."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ...ir.opdef import HOST_CALLBACK, register
from ...ir.types import TensorType


# An op names its Python callable by an integer id into the process's HostCallables (Paddle's
# PyFuncRegistry: forward_callable_id / backward_callable_id), so programs stay printable and
# parsable; print keeps its first_n counter there too.
class HostCallables:
    """The Python callables host ops name by id, and the run counts of ``print`` ops."""

    __slots__ = ("_funcs", "_counts", "_ids")

    def __init__(self):
        self._funcs: dict[int, Callable] = {}
        self._counts: dict[tuple[int, str], int] = {}
        self._ids = itertools.count()

    def add(self, fn: Callable | None) -> int:
        """An id for ``fn`` (a new one per call, as Paddle's registry); -1 for None."""
        if fn is None:
            return -1
        key = next(self._ids)
        self._funcs[key] = fn
        return key

    def new_key(self) -> int:
        """A fresh id naming no callable (a print op's counter)."""
        return next(self._ids)

    def get(self, key: int) -> Callable:
        try:
            return self._funcs[key]
        except KeyError:
            raise KeyError(f"no Python callable has id {key} in this process (a program "
                           "with py_func runs only in the process that built it)") from None

    def tick(self, key: int, phase: str) -> int:
        """How many times (key, phase) ran before this call; counts this one."""
        n = self._counts.get((key, phase), 0)
        self._counts[(key, phase)] = n + 1
        return n


# process: Paddle's PyFuncRegistry is one table per process, and a program names its
# callables by index into it; the callables live as long as the process, as in Paddle
_CALLABLES = HostCallables()


def host_callables() -> HostCallables:
    return _CALLABLES


def unflatten_shapes(ranks, dims) -> list[tuple[int, ...]]:
    out, at = [], 0
    for r in ranks:
        out.append(tuple(int(d) for d in dims[at:at + r]))
        at += r
    return out


def _py_func(c):
    ranks, dims, dtypes = c["out_ranks"], c["out_dims"], c["out_dtypes"]
    c.check(len(ranks) == len(dtypes) and sum(ranks) == len(dims),
            f"out_ranks {list(ranks)}, out_dims {list(dims)} and out_dtypes {list(dtypes)} "
            "do not describe the same outputs")
    c.check(c["forward_callable_id"] >= 0, "forward_callable_id must name a callable")
    return {"Out": [TensorType(s, d) for s, d in zip(unflatten_shapes(ranks, dims), dtypes)]}


register("py_func", "X*?", "Out*?",
         {"forward_callable_id": "int", "backward_callable_id": ("int", -1),
          "backward_skip_x": ("ints", []), "backward_skip_out": ("ints", []),
          "out_ranks": ("ints", []), "out_dims": ("ints", []), "out_dtypes": ("strs", [])},
         infer=_py_func, traits=(HOST_CALLBACK,), grad_reads=("X", "Out"),
         doc="Out = func(*X), a Python function run on the host (Paddle's py_func); its "
             "gradient is backward_func(X, Out, Out@GRAD) minus the skipped ones")

_PHASES = ("forward", "backward", "both")


def _print(c):
    t = c.x("In")
    c.check(c["print_phase"] in _PHASES,
            f"print_phase must be one of {_PHASES}, got {c['print_phase']!r}")
    c.check(c["summarize"] >= -1, f"summarize must be -1 (all) or >= 0, got {c['summarize']}")
    return {"Out": t}


register("print", "In", "Out",
         {"first_n": ("int", -1), "message": ("str", ""), "summarize": ("int", 20),
          "print_tensor_name": ("bool", True), "print_tensor_type": ("bool", True),
          "print_tensor_shape": ("bool", True), "print_tensor_lod": ("bool", True),
          "print_phase": ("str", "both"), "tensor_name": ("str", ""),
          "counter_id": ("int", -1)},
         infer=_print, traits=(HOST_CALLBACK,), grad_reads=(), grad_type_from={"In": "Out@GRAD"},
         lod_inputs=("In",), lod="aware",  # prints a LoD value's real tokens and its LoD
         doc="Out = In, printing In on the host (and In's gradient in the backward pass)")
