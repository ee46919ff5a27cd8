"""The collective deadline: a rank that waits in a collective (a multi-process step, a barrier)
longer than ``GRAPHC_COLLECTIVE_TIMEOUT`` seconds (default 1800; 0: none) ends the job.

Paddle's ``FLAGS_rpc_deadline`` (milliseconds) is the deadline where GRAPHC_COLLECTIVE_TIMEOUT
is not set: in Paddle a parameter-server RPC that waits longer fails, here the wait does.

A thread reports this rank's state (waiting in which collective for how long, or where its
main thread is) to its ``graphc launch`` wrapper every second, so the launcher can name the
rank that never arrived; without a launcher the thread itself ends a rank that waited too long.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

ENV = "GRAPHC_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = 1800.0  # torch.distributed's default; a big model's first step compiles
STATUS_FD_ENV = "GRAPHC_LAUNCH_STATUS_FD"  # set by the rank wrapper (rank.py)
EXIT_HUNG = 124  # as timeout(1) and --timeout
RPC_DEADLINE_ENV = "FLAGS_rpc_deadline"  # Paddle's, in milliseconds

_GRAPHC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple({os.path.dirname(os.__file__), sys.prefix, sys.base_prefix,
                       _GRAPHC_DIR})


def parse_timeout(raw: str | None, what: str = ENV) -> float:
    """Seconds from ``raw`` (None or empty: ``FLAGS_rpc_deadline``'s milliseconds if set, else
    the default; 0: no deadline); ValueError names ``what`` (or FLAGS_rpc_deadline) when it is
    not a number >= 0."""
    return setting(raw, what)[0]


def setting(raw: str | None, what: str = ENV, environ=None) -> tuple[float, str]:
    """(seconds, where they came from: ``WHAT=S s``, ``FLAGS_rpc_deadline=MS ms`` or ``default
    S s``) of the deadline ``raw`` (as parse_timeout)."""
    if raw is None or not str(raw).strip():
        rpc = (os.environ if environ is None else environ).get(RPC_DEADLINE_ENV, "")
        if not rpc.strip():
            return DEFAULT_TIMEOUT, f"default {DEFAULT_TIMEOUT:g} s"
        ms = _number(rpc, RPC_DEADLINE_ENV, "milliseconds")
        return ms / 1000.0, f"{RPC_DEADLINE_ENV}={ms:g} ms"
    value = _number(raw, what, "seconds")
    return value, f"{what}={value:g} s"


def _number(raw, what: str, unit: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{what} must be a number of {unit} >= 0 (0: no deadline), "
                         f"got '{raw}'")
    return value


class _State:
    """What the main thread is doing; set by ``waiting`` (cheap: no I/O on the hot path)."""

    def __init__(self):
        self.episode = 0
        self.name: str | None = None
        self.since = 0.0


# process: the watchdog watches this process's main thread and ends the process
_STATE = _State()
# process: its one thread per process (started once)
_STARTED: dict = {"thread": None}


@contextmanager
def waiting(name: str):
    """Marks the main thread as waiting in the collective ``name`` (for the deadline)."""
    if _STATE.name is not None or threading.current_thread() is not threading.main_thread():
        yield  # nested: the outer collective is what is being waited on; other threads: not
        return  # tracked (the deadline is about the main thread)
    _STATE.episode += 1
    _STATE.since = time.monotonic()
    _STATE.name = name
    try:
        yield
    finally:
        _STATE.name = None


def user_location(frame) -> str:
    """``file:line in function`` of the innermost frame of the user's own code."""
    innermost = frame
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_LIBRARY_DIRS) and not path.startswith("<frozen"):
            return f"{os.path.basename(path)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    if innermost is None:
        return "unknown"
    return f"{os.path.basename(innermost.f_code.co_filename)}:{innermost.f_lineno}"


def _report(main_ident: int) -> tuple[str, float, str, str]:
    """(status line, seconds waited, collective, where): the line is ``wait EPISODE SECONDS
    NAME | WHERE`` in a collective, else ``run EPISODES 0 - | WHERE`` (EPISODES: how many
    waits began so far, so the launcher can tell a rank that goes on from one that is stuck)."""
    frame = sys._current_frames().get(main_ident)
    where = user_location(frame) if frame is not None else "main thread gone"
    name, episode, since = _STATE.name, _STATE.episode, _STATE.since
    if name is None:
        return f"run {episode} 0 - | {where}", 0.0, "-", where
    waited = time.monotonic() - since
    return f"wait {episode} {waited:.1f} {name} | {where}", waited, name, where


def start(rank: int, timeout: float, interval: float = 1.0, peers: str = "",
          source: str = "") -> None:
    """Start the watchdog thread (once per process). ``peers`` names who this rank waits
    for (default "another rank"), ``source`` where the timeout came from."""
    if _STARTED["thread"] is not None:
        return
    fd = os.environ.get(STATUS_FD_ENV)
    out = None
    if fd and fd.isdigit():
        try:
            out = os.fdopen(int(fd), "w", buffering=1)
        except OSError:
            out = None
    main_ident = threading.main_thread().ident
    # under graphc launch the launcher ends the job (naming every rank); this thread only
    # acts if it cannot (a launcher that is gone, a plain mpirun/srun job)
    own_deadline = timeout + 30.0 if out is not None else timeout

    def loop():
        nonlocal out
        while True:
            time.sleep(interval)
            line, waited, name, where = _report(main_ident)
            if out is not None:
                try:
                    out.write(line + "\n")
                except (OSError, ValueError):
                    out = None
            if timeout > 0 and waited > own_deadline:
                sys.stderr.write(
                    f"graphc: rank {rank} waited {waited:.0f} s in {name} at {where}: "
                    f"{peers or 'another rank'} never arrived ({source or f'{ENV}={timeout:g}'}"
                    "); ending this rank\n")
                sys.stderr.flush()
                os._exit(EXIT_HUNG)

    thread = threading.Thread(target=loop, name="graphc-collective-watchdog", daemon=True)
    thread.start()
    _STARTED["thread"] = thread
