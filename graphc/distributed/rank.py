"""One rank of a ``graphc launch`` job: run the script as a child process, prefix each output
line with ``[rank N]``, copy it to the rank's log, and exit with the child's status.

The child dies with this process (Linux parent-death signal), and a SIGTERM from mpirun is
passed on, so a failed job leaves no training process behind. A child killed by a signal
exits here as 128 + signal, which mpirun sees as a failure and ends the other ranks for.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading

from .env import detect


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _pump(stream, out, log, prefix: bytes) -> None:
    for line in iter(stream.readline, b""):
        out.write(prefix + line)
        out.flush()
        if log is not None:
            log.write(line)
            log.flush()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m graphc.distributed.rank SCRIPT [ARGS]", file=sys.stderr)
        return 2
    env = detect()
    child_env = dict(os.environ)
    devices = child_env.get("GRAPHC_LAUNCH_DEVICES")
    if devices:  # an even share of the node's GPUs per local process
        ids = devices.split(",")
        per = max(len(ids) // max(env.local_size, 1), 1)
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(
            ids[env.local_rank * per:(env.local_rank + 1) * per])
    log_dir = child_env.get("GRAPHC_LAUNCH_LOG_DIR")
    log = open(os.path.join(log_dir, f"workerlog.{env.rank}"), "ab") if log_dir else None
    proc = subprocess.Popen([sys.executable, "-u", *argv], env=child_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_die_with_parent)

    def forward(signum, _frame):
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    prefix = f"[rank {env.rank}] ".encode()
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, log, prefix),
                              daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, log, prefix),
                              daemon=True)]
    for t in pumps:
        t.start()
    code = proc.wait()
    for t in pumps:
        t.join(timeout=2.0)
    if log is not None:
        log.close()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
