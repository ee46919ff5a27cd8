"""``fluid.unique_name``: Paddle-style name counters (``generate``, ``guard``, ``switch``),
the very ones graphc's layers use (graphc.ir.unique_name)."""

from ..ir.unique_name import UniqueNameGenerator, generate, guard, switch

__all__ = ["UniqueNameGenerator", "generate", "guard", "switch"]
