"""One rank of a ``graphc launch`` job: run the script as a child process, prefix each output
line with ``[rank N]``, copy it to the rank's log, and exit with the child's status.

The script runs in its own process group, which this wrapper owns: a SIGTERM from mpirun, the
end of the script, or the launcher going away (its control connection closes, even when it
was SIGKILLed, on any node) kills that whole group, so no training process outlives the job.
The script also dies with this wrapper (Linux parent-death signal). Under ``graphc launch``
the wrapper reports to the launcher over that connection: its rank and host, the script's
collective status (watchdog.py), its role when it announces one (a parameter-server rank) and
its exit status, so the launcher can end the job as soon as one rank fails and say which.
A child killed by a signal exits here as 128 + signal.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from .control import MAX_LINE, keepalive, parent_death_signal
from .env import detect
from .loopback import remove as remove_loopback_shim

CONTROL_ENV = "GRAPHC_LAUNCH_CONTROL"  # host:port:token of the launcher (launch.py)
STATUS_FD_ENV = "GRAPHC_LAUNCH_STATUS_FD"  # the script's watchdog writes its state here
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "script_runner.py")
GRACE_S = 3.0  # SIGTERM, then SIGKILL for what is left of the script's group




def _pump(stream, out, log, prefix: bytes, on_line=None) -> None:
    for line in iter(stream.readline, b""):
        if on_line is not None:
            on_line(line)
        out.write(prefix + line)
        out.flush()
        if log is not None:
            log.write(line)
            log.flush()


class _Control:
    """The connection to the launcher; every send is one line, and never raises."""

    def __init__(self, address: str | None):
        self.sock = None
        self.lock = threading.Lock()
        if not address:
            return
        host, port, self.token = address.rsplit(":", 2)
        deadline = time.monotonic() + 30.0
        while True:
            try:
                self.sock = socket.create_connection((host, int(port)), timeout=10.0)
                self.sock.settimeout(None)
                keepalive(self.sock)  # a launcher whose node died counts as gone
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise SystemExit(f"graphc launch: rank wrapper cannot reach the launcher "
                                     f"at {host}:{port}: {exc}") from None
                time.sleep(0.2)

    def send(self, line: str) -> None:
        if self.sock is None:
            return
        with self.lock:
            try:
                # the launcher drops a connection whose line exceeds MAX_LINE
                data = line.replace("\n", " ").encode()[:MAX_LINE - 1]
                self.sock.sendall(data + b"\n")
            except OSError:
                pass

    def wait_closed(self) -> None:
        """Block until the launcher closes the connection (or goes away)."""
        try:
            while self.sock.recv(4096):
                pass
        except OSError:
            pass


class _Script:
    """The script's process and its group, which ``stop`` ends (TERM, then KILL)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.stopped = proc, False
        self._lock = threading.Lock()

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
        self.signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        self.signal_group(signal.SIGKILL)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m graphc.distributed.rank SCRIPT [ARGS]", file=sys.stderr)
        return 2
    env = detect()
    control = _Control(os.environ.get(CONTROL_ENV))
    child_env = dict(os.environ)
    child_env.pop(CONTROL_ENV, None)
    remove_loopback_shim(child_env)  # for mpirun's runtime only (loopback.py)
    devices = child_env.get("GRAPHC_LAUNCH_DEVICES")
    if devices:  # an even share of the node's GPUs per local process
        ids = devices.split(",")
        per = max(len(ids) // max(env.local_size, 1), 1)
        child_env["CUDA_VISIBLE_DEVICES"] = ",".join(
            ids[env.local_rank * per:(env.local_rank + 1) * per])
    from .pserver.roles import announced_role, from_environ  # Paddle's role variables
    child_env.update(from_environ(env.rank, child_env, env.size))
    log_dir = child_env.get("GRAPHC_LAUNCH_LOG_DIR")
    log = open(os.path.join(log_dir, f"workerlog.{env.rank}"), "ab") if log_dir else None
    status_r = status_w = None
    if control.sock is not None:
        status_r, status_w = os.pipe()
        child_env[STATUS_FD_ENV] = str(status_w)
    proc = subprocess.Popen([sys.executable, "-u", RUNNER, *argv], env=child_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            pass_fds=() if status_w is None else (status_w,),
                            process_group=0, preexec_fn=parent_death_signal(signal.SIGKILL))
    if status_w is not None:
        os.close(status_w)
    script = _Script(proc)
    host = socket.gethostname()
    control.send(f"hello {control.token} {env.rank} {host} {os.getpid()} {proc.pid}"
                 if control.sock is not None else "")
    terminated = threading.Event()

    def forward(signum, _frame):
        terminated.set()
        threading.Thread(target=script.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, forward)
    prefix = f"[rank {env.rank}] ".encode()

    def role_line(line: bytes) -> None:
        # a parameter-server rank says which role it took (protocol.py); the launcher then
        # names it by role, also in a job launched without --server_num/--worker_num
        if b"graphc pserver: rank " in line:
            found = announced_role(line.decode(errors="replace"))
            if found is not None and found[0] == env.rank:
                control.send(f"role {env.rank} {found[1]}")

    on_err = role_line if control.sock is not None else None
    threads = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout.buffer, log, prefix),
                                daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, sys.stderr.buffer, log, prefix,
                                                    on_err), daemon=True)]
    if control.sock is not None:
        def relay():  # the script's watchdog lines, to the launcher
            with os.fdopen(status_r, "r", errors="replace") as lines:
                for line in lines:
                    control.send(f"state {env.rank} {line.strip()}")

        def launcher_gone():  # the launcher closed the connection or died: end the script
            control.wait_closed()
            terminated.set()
            script.stop()

        threads += [threading.Thread(target=relay, daemon=True),
                    threading.Thread(target=launcher_gone, daemon=True)]
    for t in threads:
        t.start()
    code = proc.wait()
    ended = time.time()
    for t in threads[:2]:
        t.join(timeout=2.0)
    code = 128 - code if code < 0 else code
    # "stopped": this rank was ended from outside, so its status is not the job's cause
    how = "stopped" if terminated.is_set() else "own"
    control.send(f"exit {env.rank} {code} {ended:.3f} {how}")
    script.signal_group(signal.SIGKILL)  # whatever the script left running in its group
    if log is not None:
        log.close()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
