"""graphc.distributed's error: its own module so that the modules ``__init__`` imports can
raise it too."""

from __future__ import annotations

from ..ir.errors import GraphcError


class DistributedError(GraphcError):
    """The distributed runtime cannot start, or was asked for too late."""

    __module__ = "graphc.distributed"  # where users import it from
