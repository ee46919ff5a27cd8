"""Places say where a program runs: CPUPlace() or CUDAPlace(i), as in Paddle.

A place maps to a JAX device; CUDAPlace needs a GPU backend and says so clearly if absent.
"""

from __future__ import annotations

import importlib.util
import os

import jax

from ..ir.errors import GraphcError


class PlaceError(GraphcError):
    """A place names a device this machine does not have."""


class Place:
    kind = "cpu"

    def __init__(self, device_id: int = 0):
        self.device_id = int(device_id)

    def jax_device(self):
        try:
            devices = jax.devices(self.kind)
        except RuntimeError:
            raise PlaceError(f"{self!r}: no {self.kind.upper()} devices are available "
                             f"(JAX backends: {jax.default_backend()})") from None
        index = self.device_id
        if self.kind == "gpu":
            index = node_local_gpu(self.device_id, len(devices), os.environ)
        if not 0 <= index < len(devices):
            raise PlaceError(f"{self!r}: only {len(devices)} {self.kind} device(s) visible")
        return devices[index]

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self.device_id == other.device_id

    def __hash__(self) -> int:
        return hash((self.kind, self.device_id))

    def __repr__(self) -> str:
        shown = "" if self.kind == "cpu" and self.device_id == 0 else self.device_id
        return f"{type(self).__name__}({shown})"


def node_local_gpu(device_id: int, visible: int, environ) -> int:
    """The index among this process's ``visible`` GPUs that ``CUDAPlace(device_id)`` names.
    A launcher (Paddle's, fleetrun, graphc launch) gives each rank its GPUs in
    ``FLAGS_selected_gpus`` and scripts write ``CUDAPlace(int(FLAGS_selected_gpus))``; where
    the launcher also narrowed CUDA_VISIBLE_DEVICES to those GPUs, the selected ids are the
    process's devices in order (GPU 2 is its device 0). Any other id is an index as is."""
    listed = str(environ.get("FLAGS_selected_gpus", "")).split(",")
    try:
        selected = [int(x) for x in listed if x.strip()]
    except ValueError:
        raise PlaceError(f"FLAGS_selected_gpus={environ.get('FLAGS_selected_gpus')!r}: "
                         "expected comma-separated GPU ids") from None
    if device_id in selected and len(selected) == visible:
        return selected.index(device_id)
    return device_id


class CPUPlace(Place):
    """A CPU device; with CPU_NUM > 1 there are several (``cpu_places()``)."""

    kind = "cpu"

    def __init__(self, device_id: int = 0):
        super().__init__(device_id)


class CUDAPlace(Place):
    kind = "gpu"


class CUDAPinnedPlace(CPUPlace):
    """Paddle's page-locked host memory, from which it copies feeds to a GPU. graphc's
    host side is the CPU device (JAX stages host-to-device copies itself), so this is
    CPUPlace(0) under Paddle's name: usable wherever a CPUPlace is."""

    def __init__(self):
        super().__init__(0)

    def __repr__(self) -> str:
        return "CUDAPinnedPlace()"


def backends_started() -> bool:
    from jax._src import xla_bridge
    return xla_bridge.backends_are_initialized()


# JAX's CUDA backends come as plugins (jax[cuda12] / jax[cuda13])
_CUDA_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12",
                 "jax_plugins.xla_cuda13")


def _cuda_backend_possible() -> bool:
    """Whether JAX could start a GPU backend, judged without starting one (starting it would
    fix XLA's CPU device count before a script sets CPU_NUM): a CUDA plugin installed, a
    driver loaded, and neither JAX_PLATFORMS nor CUDA_VISIBLE_DEVICES ruling GPUs out."""
    platforms = jax.config.jax_platforms or os.environ.get("JAX_PLATFORMS", "")
    if platforms and not {"cuda", "gpu"} & {p.strip() for p in platforms.split(",")}:
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() in ("-1",) or \
            os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    if not os.path.exists("/proc/driver/nvidia/version"):
        return False
    for name in _CUDA_PLUGINS:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def gpu_count() -> int:
    """Visible GPUs; before JAX's backends started, only a sure 0 is answered without
    starting them (a GPU backend that could start is started to count its devices)."""
    if not backends_started() and not _cuda_backend_possible():
        return 0
    try:
        return len(jax.devices("gpu"))
    except RuntimeError:
        return 0


def is_compiled_with_cuda() -> bool:
    return gpu_count() > 0
