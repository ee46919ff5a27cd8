"""Devices as the seeds describe them: CPU_NUM sets how many CPU replicas (XLA host devices)
graphc runs on, CUDA_VISIBLE_DEVICES which GPUs; cpu_places() / cuda_places() list them."""

from __future__ import annotations

import logging
import os

import jax

from ..ir.errors import GraphcError
from .places import CPUPlace, CUDAPinnedPlace, CUDAPlace, backends_started

log = logging.getLogger("graphc.runtime")


class DeviceError(GraphcError):
    """A device count or id that cannot be honoured (too late, not an int, not present)."""


def _backends_started() -> bool:
    return backends_started()


def _cpu_num_from_env() -> int | None:
    raw = os.environ.get("CPU_NUM")
    if raw is None or raw == "":
        return None
    try:
        n = int(raw)
    except ValueError:
        raise DeviceError(f"CPU_NUM must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise DeviceError(f"CPU_NUM must be a positive integer, got {n}")
    return n


def configure_cpu_devices(n: int | None = None) -> int:
    """Make JAX's CPU backend have ``n`` devices (default: $CPU_NUM, else leave it).

    XLA fixes the count when its CPU backend starts (the first jax.devices() or
    computation), so this must come first; later, asking for another count is an error
    naming what to do instead. Returns the count in force.
    """
    n = _cpu_num_from_env() if n is None else n
    if n is None:
        return jax.local_device_count("cpu") if _backends_started() else \
            max(jax.config.jax_num_cpu_devices, 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise DeviceError(f"the number of CPU devices must be a positive integer, got {n!r}")
    if _backends_started():
        have = len(jax.devices("cpu"))
        if have != n:
            raise DeviceError(
                f"asked for {n} CPU devices but JAX's CPU backend already started with {have}; "
                f"set CPU_NUM={n} in the environment before the program starts (or call "
                f"graphc.configure_cpu_devices({n}) before anything runs)")
        return n
    jax.config.update("jax_num_cpu_devices", n)
    return n


def cpu_places(device_count: int | None = None) -> list[CPUPlace]:
    """One CPUPlace per CPU replica: ``device_count``, else $CPU_NUM, else 1 (as Paddle).

    Before JAX starts this sets the device count; afterwards asking for at most as many
    devices as exist gives the first ones, asking for more gives places that a data-parallel
    program runs on one device (``cpu_devices``), as Paddle reads CPU_NUM late."""
    n = device_count if device_count is not None else (_cpu_num_from_env() or 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DeviceError(f"the number of CPU devices must be a positive integer, got {n!r}")
    if not _backends_started():
        configure_cpu_devices(n)
    return [CPUPlace(i) for i in range(n)]


def cpu_devices(n: int) -> list:
    """The JAX devices ``n`` data-parallel CPU places run on: the first ``n`` CPU devices,
    or, when XLA's CPU backend started with fewer, CPU device 0 named ``n`` times (the step
    then maps the places over one device: backends/jax/data_parallel.py; same numbers)."""
    if not _backends_started():
        configure_cpu_devices(n)
    have = jax.devices("cpu")
    if n <= len(have):
        return list(have[:n])
    log.info("%d CPU places on one device: XLA's CPU backend started with %d before CPU_NUM "
             "asked for %d (the same numbers as %d devices)", n, len(have), n, n)
    return [have[0]] * n


def place_devices(places: list) -> list:
    """The JAX device of each place; ``cpu_places(n)`` (CPUPlace 0..n-1) after XLA's CPU
    backend started with fewer devices: CPU device 0 for each (``cpu_devices``)."""
    if places and all(type(p) is CPUPlace for p in places) and \
            sorted(p.device_id for p in places) == list(range(len(places))) and \
            len(places) > len(jax.devices("cpu")):
        return cpu_devices(len(places))
    return [p.jax_device() for p in places]


def cuda_pinned_places(device_count: int | None = None) -> list[CUDAPinnedPlace]:
    """``device_count`` CUDAPinnedPlaces (else $CPU_NUM, else one per core, as Paddle). They
    are host memory, all one place: no XLA CPU devices are configured for them."""
    n = device_count if device_count is not None else (_cpu_num_from_env() or _core_count())
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise GraphcError(f"cuda_pinned_places: device_count must be a positive int, got {n!r}")
    return [CUDAPinnedPlace() for _ in range(n)]


def _core_count() -> int:
    return os.cpu_count() or 1


def default_cpu_place_count() -> int:
    """How many CPU places a data-parallel run takes when given none (ParallelExecutor,
    ``with_data_parallel()`` without ``places``): $CPU_NUM, else one per core, as Paddle.

    Without CPU_NUM it logs a warning, as Paddle prints one. XLA fixes its CPU device count
    when it starts: before that, this asks for one device per core (unless the count was
    already configured, e.g. ``jax_num_cpu_devices``); afterwards, or when configured with
    fewer, it takes what exists and says how to get every core."""
    n = _cpu_num_from_env()
    if n is not None:
        return n
    cores = _core_count()
    configured = jax.config.jax_num_cpu_devices
    if _backends_started():
        have, why = len(jax.devices("cpu")), "XLA's CPU backend started with"
    elif configured is not None and configured >= 1:
        have, why = configured, "XLA's CPU backend is configured for"
    else:
        configure_cpu_devices(cores)
        have, why = cores, ""
    n = min(cores, have)
    note = (f" ({why} {have} devices, fewer than the {cores} cores: set CPU_NUM={cores} "
            "before graphc starts to use them all)" if have < cores else
            " (one CPU place per core; set CPU_NUM to choose)")
    log.warning("CPU_NUM is not set, default to %d%s", n, note)
    return n


def cuda_places(device_ids=None) -> list[CUDAPlace]:
    """One CUDAPlace per visible GPU (CUDA_VISIBLE_DEVICES is honoured by the driver), or
    the given ids; an error when there is no GPU."""
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        raise DeviceError("cuda_places(): no GPU is visible to JAX on this machine") from None
    ids = list(range(len(gpus))) if device_ids is None else [int(i) for i in device_ids]
    for i in ids:
        if not 0 <= i < len(gpus):
            raise DeviceError(f"cuda_places(): GPU {i} is not visible ({len(gpus)} visible)")
    return [CUDAPlace(i) for i in ids]
