"""``fluid.layers.device``: ``get_places``, which in Fluid 1.x lists the devices a program
may run on; graphc returns the places themselves (usable as DataLoader ``places=``)."""

from __future__ import annotations

from ..ir.errors import ProgramError
from ..runtime.devices import cpu_places, cuda_places
from ..runtime.places import is_compiled_with_cuda

__all__ = ["get_places"]


def get_places(device_count: int | None = None, device_type: str | None = None):
    """``device_count`` places of ``device_type`` ("CPU" or "CUDA"; None: CUDA when a GPU is
    visible, else CPU). Paddle returns a place-list variable for its removed ParallelDo;
    graphc returns a list of CPUPlace/CUDAPlace."""
    kind = (device_type or ("CUDA" if is_compiled_with_cuda() else "CPU")).upper()
    if kind == "CPU":
        return cpu_places(device_count)
    if kind in ("CUDA", "GPU"):
        places = cuda_places()
        return places if device_count is None else places[:int(device_count)]
    raise ProgramError(f"get_places: device_type must be 'CPU' or 'CUDA', got {device_type!r}")
