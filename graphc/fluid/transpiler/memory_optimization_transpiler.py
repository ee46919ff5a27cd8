"""``fluid.memory_optimize`` / ``release_memory`` (and their ``fluid.transpiler`` spellings):
deprecated no-ops since Paddle 1.6 that only warn; XLA plans and frees a step's buffers."""

from __future__ import annotations

import logging

__all__ = ["memory_optimize", "release_memory"]

_log = logging.getLogger("graphc.fluid")


def memory_optimize(input_program, skip_opt_set=None, print_log=False, level=0,
                    skip_grads=True):
    """Does nothing but warn, as Paddle 1.8: XLA plans buffers (in-place reuse is
    BuildStrategy.enable_inplace)."""
    _log.warning("fluid.memory_optimize is deprecated and does nothing: XLA plans buffers "
                 "(BuildStrategy.enable_inplace reuses them in place)")


def release_memory(input_program, skip_opt_set=None):
    """Does nothing but warn, as Paddle 1.8: XLA frees a step's buffers itself."""
    _log.warning("fluid.release_memory is deprecated and does nothing: XLA frees buffers "
                 "itself")
