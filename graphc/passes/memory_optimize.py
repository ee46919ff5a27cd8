"""memory-optimize: enable-inplace's plan plus reuse across ops (BuildStrategy.memory_optimize).

Besides the in-place pairs, an output that gets no pair takes a temporary buffer that died
earlier in the stable topological order and has the same dtype and size (the most recently
freed first), as Paddle's memory reuse does. Persistable state and arguments never enter
the pool. The plan replaces ``graph.memory_plan``; the graph itself is not changed.
"""

from __future__ import annotations

from typing import ClassVar

from .enable_inplace import EnableInplace
from .infra.base import register_pass


@register_pass
class MemoryOptimize(EnableInplace):
    """Plan in-place pairs and reuse of dead temporaries' buffers; report predicted bytes."""

    name = "memory-optimize"
    reuse_pool: ClassVar[bool] = True
