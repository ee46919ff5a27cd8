"""``paddle.fluid.op`` (Paddle's kernel-test module): it imports, so a ported unit-test file
loads, and its ``Operator`` refuses with advice, since graphc has no per-op C++ kernels."""

from __future__ import annotations

from ._missing import MissingAPIError

_ADVICE = ("fluid.op.Operator runs one Paddle C++ kernel on a core.Scope (Paddle's kernel "
           "tests); graphc has no per-op kernels: append the op to a Program "
           "(block.append_op) and run the program with fluid.Executor")


class Operator:
    """Paddle's single-kernel runner; constructing one is a MissingAPIError with advice."""

    def __init__(self, type=None, **kwargs):
        raise MissingAPIError(f"fluid.op.Operator({type!r}): graphc lacks this on purpose. "
                              f"{_ADVICE}")
