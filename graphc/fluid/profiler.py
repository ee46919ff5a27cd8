"""``fluid.profiler`` on JAX's profiler: ``profiler(state, sorted_key, profile_path)`` traces
the XLA steps into ``profile_path`` (TensorBoard/Perfetto's format) and prints per-run times."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

import jax

from ..ir.errors import GraphcError
from ..runtime.host_services import process_services

__all__ = ["cuda_profiler", "profiler", "reset_profiler", "start_profiler", "stop_profiler"]

_STATES = ("CPU", "GPU", "All")
_SORT_KEYS = (None, "calls", "total", "max", "min", "ave")
_TRACER_OPTIONS = ("Default", "OpDetail", "AllOpDetail")


class ProfilerError(GraphcError, ValueError):
    """A profiler state, sort key or tracer option Paddle does not have, or stopping a
    profiler that was never started."""


class _Session:
    """The profiling session: where JAX writes its trace and each event's run times."""

    def __init__(self):
        self.trace_dir: str | None = None
        self.times: dict[str, list[float]] = {}

    @contextlib.contextmanager
    def timer(self, label: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times.setdefault(label, []).append(time.perf_counter() - t0)


# process: the one profiling session (Paddle's profiler is process-wide, as JAX's trace is)
_SESSION = _Session()


def _check(value, allowed, what: str) -> None:
    if value not in allowed:
        raise ProfilerError(f"{what} must be one of {', '.join(map(repr, allowed))}, got "
                            f"{value!r}")


def reset_profiler() -> None:
    """Forget the run times recorded so far (the trace goes on)."""
    _SESSION.times.clear()


def start_profiler(state, tracer_option="Default") -> None:
    """Start JAX's trace (``state`` 'CPU', 'GPU' or 'All': JAX traces the host and every
    device at once) and time every ``Executor.run`` until ``stop_profiler``."""
    _check(state, _STATES, "state")
    _check(tracer_option, _TRACER_OPTIONS, "tracer_option")
    if _SESSION.trace_dir is not None:
        return  # already on, as Paddle: a second start changes nothing
    trace_dir = tempfile.mkdtemp(prefix="graphc-profile-")
    jax.profiler.start_trace(trace_dir)
    _SESSION.trace_dir = trace_dir
    reset_profiler()
    process_services().run_timer = _SESSION.timer


def stop_profiler(sorted_key=None, profile_path="/tmp/profile") -> None:
    """Stop the trace, move it to ``profile_path`` (a folder, replaced whole: open it with
    TensorBoard's profile plugin or Perfetto) and print the run times, sorted by
    ``sorted_key`` ('calls', 'total', 'max', 'min', 'ave'; None: first run first)."""
    _check(sorted_key, _SORT_KEYS, "sorted_key")
    if _SESSION.trace_dir is None:
        raise ProfilerError("stop_profiler: the profiler was not started (start_profiler)")
    trace_dir, _SESSION.trace_dir = _SESSION.trace_dir, None
    process_services().run_timer = None
    jax.profiler.stop_trace()
    _replace_dir(trace_dir, os.fspath(profile_path))
    print(_report(_SESSION.times, sorted_key, profile_path))


def _replace_dir(src: str, dest: str) -> None:
    """``src`` becomes ``dest``: moved beside it first, then swapped in, so ``dest`` is
    never half-written."""
    dest = os.path.abspath(dest)
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".graphc-profile-", dir=os.path.dirname(dest))
    os.rmdir(staged)
    shutil.move(src, staged)
    if os.path.isdir(dest) and not os.path.islink(dest):
        shutil.rmtree(dest)
    elif os.path.lexists(dest):
        os.remove(dest)
    os.replace(staged, dest)


def _report(times: dict[str, list[float]], sorted_key, profile_path) -> str:
    rows = [(label, len(ts), sum(ts), max(ts), min(ts), sum(ts) / len(ts))
            for label, ts in times.items() if ts]
    column = {"calls": 1, "total": 2, "max": 3, "min": 4, "ave": 5}.get(sorted_key)
    if column is not None:
        rows.sort(key=lambda r: r[column], reverse=True)
    lines = ["-------------------------  graphc profiling report  -------------------------",
             f"XLA trace: {profile_path} (TensorBoard profile plugin or Perfetto)",
             f"{'Event':<24}{'Calls':>8}{'Total(ms)':>12}{'Max(ms)':>12}{'Min(ms)':>12}"
             f"{'Ave(ms)':>12}"]
    lines += [f"{label:<24}{calls:>8}{total * 1e3:>12.3f}{hi * 1e3:>12.3f}{lo * 1e3:>12.3f}"
              f"{ave * 1e3:>12.3f}" for label, calls, total, hi, lo, ave in rows]
    return "\n".join(lines)


@contextlib.contextmanager
def profiler(state, sorted_key=None, profile_path="/tmp/profile", tracer_option="Default"):
    """``with profiler('CPU', 'total', '/tmp/profile'):`` profiles the runs inside."""
    start_profiler(state, tracer_option)
    try:
        yield
    finally:
        stop_profiler(sorted_key, profile_path)


_OUTPUT_MODES = (None, "kvp", "csv")


@contextlib.contextmanager
def cuda_profiler(output_file, output_mode=None, config=None):
    """Paddle's nvprof wrapper: here JAX's trace (which holds the GPU kernels on a GPU) of
    the runs inside, written to the folder ``output_file``; ``config`` is nvprof's and is
    not used."""
    _check(output_mode, _OUTPUT_MODES, "output_mode")
    with profiler("All", None, output_file):
        yield
