"""A Dataset's ``set_pipe_command``: each data file goes to the user's command on stdin (through
the shell, as Paddle's ``cat file | command``); its stdout lines are the samples."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from .multislot import DatasetError

# The command runs in its own process group with a wall-clock limit per file; on an error, a
# timeout, a stop or an early close, the whole group is killed and reaped. A non-zero exit
# raises DatasetError naming the command, the file and the end of its stderr.
__all__ = ["DEFAULT_PIPE_TIMEOUT_S", "piped_lines"]

DEFAULT_PIPE_TIMEOUT_S = 3600.0
_STDERR_TAIL = 2000
_POLL_S = 0.05


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


def _tail(f) -> str:
    f.seek(0)
    text = f.read().decode("utf-8", "replace").strip()
    return text[-_STDERR_TAIL:]


def piped_lines(path: str, command: str | None, timeout: float = DEFAULT_PIPE_TIMEOUT_S,
                stop: threading.Event | None = None, download_cmd: str | None = None):
    """The text lines ``command`` writes for ``path`` on its stdin (a generator); setting
    ``stop`` kills the command (its reader then sees the output end). With ``download_cmd``
    the file is ``download_cmd path``'s output (piped into ``command`` if there is one)."""
    shell = None
    if download_cmd:
        fetch = f"{download_cmd} {shlex.quote(path)}"
        command = f"{fetch} | {command}" if command else fetch
        shell = shutil.which("bash")
        if shell is not None:  # a failed download fails the pipeline graphc built
            command = f"set -o pipefail; {command}"
        stdin = open(os.devnull, "rb")
    else:
        try:
            stdin = open(path, "rb")
        except OSError as exc:
            raise DatasetError(f"{path}: cannot read the data file "
                               f"({exc.strerror or exc})") from None
    with stdin, tempfile.TemporaryFile() as stderr:
        try:
            proc = subprocess.Popen(command, shell=True, executable=shell, stdin=stdin,
                                    stdout=subprocess.PIPE, stderr=stderr,
                                    start_new_session=True)
        except OSError as exc:
            raise DatasetError(f"pipe command {command!r} for {path}: cannot start it "
                               f"({exc})") from None
        timed_out, done = threading.Event(), threading.Event()
        deadline = time.monotonic() + timeout

        def kill():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

        def watch():
            # kills the group when the shell fails (its background children would keep
            # stdout from ever ending), when the reader is told to stop (it may be blocked
            # reading a silent command), and past the deadline
            while not done.is_set():
                try:
                    rc = proc.wait(_POLL_S)
                except subprocess.TimeoutExpired:
                    rc = None
                if rc not in (None, 0):
                    kill()
                    return
                if stop is not None and stop.is_set():
                    kill()
                    return
                if time.monotonic() > deadline:
                    timed_out.set()
                    kill()
                    return
                if rc == 0:
                    done.wait(_POLL_S)  # exited; stdout still open: wait without spinning

        watcher = threading.Thread(target=watch, daemon=True,
                                   name=f"graphc-pipe-watch-{os.path.basename(path)}")
        watcher.start()
        finished = False
        try:
            for lineno, raw in enumerate(proc.stdout, 1):
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DatasetError(f"pipe command {command!r} for {path}: output line "
                                       f"{lineno} is not UTF-8 text ({exc})") from None
            proc.stdout.close()
            rc = proc.wait()
            finished = True
            done.set()
            if stop is not None and stop.is_set():
                return
            if timed_out.is_set():
                raise DatasetError(f"pipe command {command!r} for {path}: still running after "
                                   f"{timeout:g} s; it was stopped")
            if rc != 0:
                raise DatasetError(
                    f"pipe command {command!r} failed for {path} (exit status {rc}); its "
                    f"stderr ends:\n{_tail(stderr) or '(empty)'}")
        finally:
            if not finished:  # an error, a timeout or an early stop: leave nothing running
                proc.stdout.close()
                _kill_group(proc)
            done.set()
            watcher.join()
