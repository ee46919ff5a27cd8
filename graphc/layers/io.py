"""``fluid.layers.io`` reader helpers that graphc serves: ``double_buffer`` hands the reader
back, since graphc's DataLoader/PyReader already prepare batches ahead on a thread."""

from __future__ import annotations

from ..ir.errors import ProgramError

__all__ = ["double_buffer"]


def double_buffer(reader, place=None, name=None):
    """Paddle wraps ``reader`` in a double-buffered reader; graphc's loaders already place
    the next batches on the device(s) while a step runs (capacity >= 2), so ``reader`` is
    returned as it is. ``place`` must be None or a Place, as Paddle's."""
    from ..runtime.places import Place
    if reader is None:
        raise ProgramError("double_buffer: reader is None; pass the reader "
                           "(fluid.io.DataLoader / PyReader) to double-buffer")
    if place is not None and not isinstance(place, Place):
        raise ProgramError(f"double_buffer: place must be a Place or None, got {place!r}")
    return reader


def __getattr__(name: str):
    # -- issue 25: Paddle's layers.io also holds ``data``, ``py_reader``, ``load``...: they
    # resolve in graphc.layers (looked up when asked for), the rest raise graphc's advice
    from .. import layers
    if not name.startswith("__") and name in layers.__all__:
        return getattr(layers, name)
    return layers.__getattr__(name)
