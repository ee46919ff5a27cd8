"""``fluid.contrib.memory_usage``: Paddle 1.8's estimate of a program's activation memory
from its variables' declared shapes (a rough guide; XLA's buffer assignment decides)."""

from __future__ import annotations

import numpy as np

from ...ir.errors import ArgumentTypeError, ArgumentValueError
from ...ir.program import Program

__all__ = ["memory_usage"]


def memory_usage(program, batch_size: int):
    """(lower, upper, unit): the bytes of every dense tensor an op of the global block
    writes, a -1 dimension counted as ``batch_size``, scaled to B/KB/MB, with 5% and 10%
    added for what the estimate leaves out (Paddle's bounds)."""
    if not isinstance(program, Program):
        raise ArgumentTypeError(f"memory_usage: program must be a Program, got "
                                f"{type(program).__name__}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ArgumentValueError(f"memory_usage: batch_size must be a positive int, got "
                                 f"{batch_size!r}")
    block = program.global_block()
    seen, total = set(), 0
    for op in block.ops:
        for name in op.output_arg_names:
            var = block.vars.get(name)
            if name in seen or var is None or var.shape is None or var.selected_rows \
                    or var.is_array:
                continue
            seen.add(name)
            unknown = [d for d in var.shape if d < 0]
            if len(unknown) > 1:
                raise ArgumentValueError(f"memory_usage: variable '{name}' has more than one "
                                         f"unknown dimension: {list(var.shape)}")
            count = 1
            for d in var.shape:
                count *= batch_size * -d if d < 0 else d
            total += count * (2 if var.dtype == "bfloat16" else np.dtype(var.dtype).itemsize)
    size, unit = float(total), "B"
    for bigger in ("KB", "MB"):
        if size <= 1024:
            break
        size, unit = size / 1024, bigger
    size = round(size, 3)
    return size * 1.05, size * 1.1, unit
