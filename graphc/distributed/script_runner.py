"""Runs a launched rank's training script as ``python SCRIPT ARGS`` would, except that a failing
exit is immediate: ``sys.exit(3)`` or an uncaught exception ends the process at once.

Run by path (``python -u script_runner.py SCRIPT ARGS``, so graphc is not imported for it).
Without this a rank that calls ``sys.exit(3)`` mid-training hangs in its interpreter's exit:
jax.distributed's shutdown waits for every other rank, while they wait in a collective for
this one, so the job never ends. A clean exit (status 0) still runs every atexit handler.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _status(code) -> int:
    """The process status ``sys.exit(code)`` gives (a message prints and means 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _ours(path: str) -> bool:
    return path in (__file__, runpy.__file__) or path.startswith("<frozen runpy")


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: script_runner.py SCRIPT [ARGS]", file=sys.stderr)
        os._exit(2)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        status = _status(exc.code)
        if status == 0:
            raise SystemExit(0) from None  # a normal exit: atexit handlers run
        _flush()
        os._exit(status)
    except BaseException as exc:  # noqa: BLE001 - any uncaught error ends the rank at once
        tb = exc.__traceback__
        while tb is not None and _ours(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next  # the user's frames only, as `python SCRIPT` shows them
        traceback.print_exception(type(exc), exc, tb)
        _flush()
        os._exit(130 if isinstance(exc, KeyboardInterrupt) else 1)


if __name__ == "__main__":
    main()
