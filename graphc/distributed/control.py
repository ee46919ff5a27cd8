"""The launcher's side of ``graphc launch``'s control connections: one TCP connection per rank
wrapper (rank.py) carrying its hello, the script's collective status and its exit status
(and the keepalive and parent-death helpers that the launcher and the wrappers share).

From these the launcher knows which rank failed first, which ranks wait in a collective and
which never arrived, and (in a parameter-server job) each rank's role and whether a server is
stuck outside any wait; closing the connections tells every wrapper to kill its script.

The control port listens on loopback for one node, else on this node's own address ($POD_IP,
else its host name's), never on every interface. Anyone who reaches it can connect, so what a
connection may cost is bounded:
its first line must be a short hello with the job's token, sent within ``hello_timeout``
seconds; no line may exceed ``MAX_LINE`` bytes. A connection that breaks a rule is dropped
with a logged reason, and the launcher goes on watching its ranks.
"""

from __future__ import annotations

import ctypes
import re
import secrets
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from .backend import own_address

# The longest line a wrapper sends (rank.py truncates to it): a state line names a wait and
# where it is, a few hundred bytes; the bound only has to stop a stream with no newline.
MAX_LINE = 64 * 1024
HELLO_LINE = 512  # "hello TOKEN RANK HOST PID PID" (a host name is at most 255 bytes)
HELLO_TIMEOUT_S = 30.0  # a wrapper says hello right after connecting and starting its script


def keepalive(sock: socket.socket, idle: int = 30, interval: int = 10, count: int = 3) -> None:
    """TCP keepalive on ``sock``: a peer whose node died (no FIN ever comes) is noticed after
    about ``idle + interval * count`` seconds, as a closed connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", count)):
        if hasattr(socket, name):  # Linux; elsewhere the system's defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def parent_death_signal(sig: int):
    """A preexec_fn that makes the child get ``sig`` when this process dies (Linux's
    PR_SET_PDEATHSIG), or None where libc cannot be loaded. libc is loaded here, before the
    fork: the child must not import or load anything."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    return lambda: libc.prctl(1, sig)


# the peers a wait's name mentions: "trainer 1", "trainers [0, 1]", "pserver 0"
_ROLE_IN_NAME = re.compile(r"\b(pserver|trainer)s? (\d+\b|\[[\d, ]*\])")


@dataclass
class RankInfo:
    rank: int
    host: str
    wrapper_pid: int
    script_pid: int
    state: str = ""  # the watchdog's last line: "wait EPISODE SECONDS NAME | WHERE" or "run ..."
    state_at: float = 0.0  # monotonic time it arrived
    code: int | None = None  # exit status, once reported
    exit_time: float = 0.0  # wall clock time the script exited (same clock on one node)
    stopped: bool = False  # ended from outside (the job was being stopped)
    lost: bool = False  # its connection closed without an exit report
    lost_at: float = 0.0
    role: str = ""  # "pserver I" / "trainer I" in a parameter-server job, else ""
    run_episode: int = -1  # the waits begun when it was last seen running (-1: waiting)
    run_since: float = 0.0  # monotonic time since which it runs with no new wait

    @property
    def who(self) -> str:
        """``rank R (HOST)``, or ``rank R (ROLE, HOST)`` when its role is known."""
        return f"rank {self.rank} ({self.role + ', ' if self.role else ''}{self.host})"

    def describe_exit(self) -> str:
        where = self.who
        if self.lost:
            return f"{where}: its wrapper process died without reporting a status"
        if self.code is not None and self.code > 128:
            try:
                name = signal.Signals(self.code - 128).name
                return f"{where} was killed by {name} (status {self.code})"
            except ValueError:
                pass
        return f"{where} exited with status {self.code}"


@dataclass
class Failure:
    info: RankInfo
    code: int

    def describe(self) -> str:
        return self.info.describe_exit()


@dataclass
class _Conn:
    peer: str = "?"
    accepted_at: float = 0.0  # monotonic
    buffer: bytes = b""
    rank: int | None = None
    exited: bool = False
    extra: dict = field(default_factory=dict)


def _log_drop(message: str) -> None:
    print(f"graphc launch: {message}", file=sys.stderr, flush=True)


class ControlServer:
    """Accepts the wrappers' connections; ``poll`` reads what they sent."""

    def __init__(self, multinode: bool = False, roles: dict[int, str] | None = None,
                 hello_timeout: float = HELLO_TIMEOUT_S, log=_log_drop):
        self.roles = dict(roles or {})  # rank -> role label, known from the launch
        self.hello_timeout, self.log = hello_timeout, log
        self.dropped: list[str] = []  # why each dropped connection was dropped
        self.token = secrets.token_hex(8)
        # this node's own address only (DistributedError where it has none other nodes reach)
        host = own_address() if multinode else "127.0.0.1"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((host, 0))
        self.sock.listen(256)
        self.sock.setblocking(False)
        self.address = f"{host}:{self.sock.getsockname()[1]}:{self.token}"
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        self.ranks: dict[int, RankInfo] = {}
        self.first_failure_at: float | None = None
        self.stopping = False
        self.hostname = socket.gethostname()

    # -- reading ---------------------------------------------------------------------------
    def poll(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if key.data is None:
                try:
                    conn, addr = self.sock.accept()
                except OSError:
                    continue
                conn.setblocking(False)
                keepalive(conn)
                peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
                self.selector.register(conn, selectors.EVENT_READ,
                                       _Conn(peer=peer, accepted_at=time.monotonic()))
                continue
            self._read(key.fileobj, key.data)
        self._drop_silent()

    def _drop_silent(self) -> None:
        """Drop the connections that did not say hello within ``hello_timeout`` seconds."""
        now = time.monotonic()
        for key in list(self.selector.get_map().values()):
            state = key.data
            if (state is not None and state.rank is None
                    and now - state.accepted_at > self.hello_timeout):
                self._drop(key.fileobj, state, f"no hello within {self.hello_timeout:g} s")

    def _drop(self, conn: socket.socket, state: _Conn, reason: str) -> None:
        who = f" (rank {state.rank})" if state.rank is not None else ""
        message = f"dropped a control connection from {state.peer}{who}: {reason}"
        self.dropped.append(message)
        self.log(message)
        state.buffer = b""
        self._closed(conn, state)  # a rank's wrapper dropped counts as lost

    def _read(self, conn: socket.socket, state: _Conn) -> None:
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._closed(conn, state)
            return
        # only the unfinished tail is kept, bounded: a stream without newlines costs one pass
        # over each byte and at most a line's bound of memory before it is dropped
        *lines, state.buffer = (state.buffer + data).split(b"\n")
        for line in lines:
            if len(line) > self._limit(state):
                self._drop(conn, state, f"a line longer than {self._limit(state)} bytes")
                return
            if not self._handle(state, line.decode(errors="replace")):
                self._drop(conn, state, "its first line is not a hello with the job's token")
                return
        if len(state.buffer) > self._limit(state):
            self._drop(conn, state, f"a line longer than {self._limit(state)} bytes")

    @staticmethod
    def _limit(state: _Conn) -> int:
        return MAX_LINE if state.rank is not None else HELLO_LINE

    def _handle(self, state: _Conn, line: str) -> bool:
        """Take one line; False: a connection that did not begin with a valid hello (it is
        dropped: nothing is believed from it)."""
        kind, _, rest = line.partition(" ")
        now = time.monotonic()
        if state.rank is None:
            try:
                token, rank, host, wrapper_pid, script_pid = rest.split(" ")
                if kind != "hello" or not secrets.compare_digest(
                        token.encode(errors="replace"), self.token.encode()):
                    return False
                info = RankInfo(int(rank), host, int(wrapper_pid), int(script_pid),
                                role=self.roles.get(int(rank), ""))
            except ValueError:
                return False
            state.rank = info.rank
            self.ranks[state.rank] = info
            return True
        try:
            if kind == "role":  # the script announced its role: "role RANK LABEL"
                _rank, _, label = rest.partition(" ")
                self.ranks[state.rank].role = label.strip()
            elif kind == "state":
                info = self.ranks[state.rank]
                info.state, info.state_at = rest.partition(" ")[2], now
                self._track_progress(info, now)
            elif kind == "exit":
                _rank, code, ended, how = rest.split(" ")
                info = self.ranks[state.rank]
                info.code, info.exit_time = int(code), float(ended)
                info.stopped = how == "stopped" or self.stopping
                state.exited = True
                if info.code != 0 and self.first_failure_at is None:
                    self.first_failure_at = now
        except (ValueError, KeyError):
            pass  # a malformed line: ignored, the connection's end still counts
        return True

    @staticmethod
    def _track_progress(info: RankInfo, now: float) -> None:
        """A running rank whose count of waits changes makes progress (its run_since moves)."""
        kind, _, rest = info.state.partition(" ")
        if kind != "run":
            info.run_episode = -1
            return
        try:
            episode = int(rest.split(" ", 1)[0])
        except ValueError:
            episode = -1
        if info.run_episode < 0 or episode != info.run_episode:
            info.run_episode, info.run_since = episode, now

    def _closed(self, conn: socket.socket, state: _Conn) -> None:
        self.selector.unregister(conn)
        conn.close()
        if state.rank is not None and not state.exited and not self.stopping:
            info = self.ranks[state.rank]
            info.lost, info.lost_at = True, time.monotonic()
            if self.first_failure_at is None:
                self.first_failure_at = info.lost_at

    def drain(self, seconds: float) -> None:
        """Read until every connection has closed, for at most ``seconds``."""
        end = time.monotonic() + seconds
        while len(self.selector.get_map()) > 1 and time.monotonic() < end:
            self.poll(0.1)

    # -- what it means -----------------------------------------------------------------------
    def failure(self, settle: float = 0.5) -> Failure | None:
        """The rank whose failure ended the job, once ``settle`` seconds passed since the first
        one (the others' failures it caused may arrive first): a rank that failed on its own
        before one that was stopped, the earliest exit first."""
        if self.first_failure_at is None or time.monotonic() - self.first_failure_at < settle:
            return None
        failed = [i for i in self.ranks.values() if i.lost or (i.code or 0) != 0]
        if not failed:
            return None
        failed.sort(key=lambda i: (i.stopped, i.lost, i.exit_time or i.lost_at, i.rank))
        first = failed[0]
        return Failure(first, 1 if first.lost else first.code)

    def hung(self, timeout: float) -> str | None:
        """Who hangs, who waits and who never arrived, when a rank waited in a collective
        longer than ``timeout`` seconds, or a parameter server ran that long without waiting
        for any trainer (its loop is stuck: it always waits between its updates); 0: never."""
        if timeout <= 0:
            return None
        now = time.monotonic()
        stuck = self._stuck_servers(timeout, now)
        if stuck:
            return "; ".join(stuck)
        waiting, late = [], False
        for info in self.ranks.values():
            if info.code is None and info.state.startswith("wait "):
                _kind, _episode, seconds, rest = info.state.split(" ", 3)
                waited = float(seconds) + now - info.state_at
                late = late or waited > timeout
                name, _, where = rest.partition(" | ")
                waiting.append((info, name, waited,
                                f"{info.who} waited {waited:.0f} s in {name} at {where}"))
        if not late:
            return None
        waiters = {info.rank for info, *_ in waiting}
        others = [self._whereabouts(i) for i in sorted(self.ranks.values(), key=lambda i: i.rank)
                  if i.rank not in waiters]
        text = "; ".join(t for *_, t in sorted(waiting, key=lambda w: w[0].rank))
        text += ("; never arrived: " + "; ".join(others) if others else
                 "; every rank is waiting")
        culprit = self._awaited(waiting, waiters)
        if culprit is not None:
            longest = max(w for _, _, w, _ in waiting)
            text = f"{culprit.who} hung: no progress for {longest:.0f} s; {text}"
        return text

    def _stuck_servers(self, timeout: float, now: float) -> list[str]:
        out = []
        for info in sorted(self.ranks.values(), key=lambda i: i.rank):
            if (info.role.startswith("pserver") and info.code is None and info.run_episode >= 0
                    and now - info.run_since > timeout):
                where = info.state.partition(" | ")[2]
                out.append(f"{info.who} hung: no progress for {now - info.run_since:.0f} s, "
                           f"still running at {where} without waiting for any trainer")
        return out

    def _awaited(self, waiting, waiters: set[int]) -> RankInfo | None:
        """The one rank, not waiting itself, whose role every waiting rank names in what it
        waits for ("... waiting for trainer 1"), if there is exactly one."""
        by_role = {i.role: i for i in self.ranks.values() if i.role}
        named = None
        for _info, name, _waited, _text in waiting:
            roles = {f"{k} {n}" for k, ids in _ROLE_IN_NAME.findall(name)
                     for n in re.findall(r"\d+", ids)}
            named = roles if named is None else named & roles
        candidates = [by_role[r] for r in (named or ()) if r in by_role
                      and by_role[r].rank not in waiters and by_role[r].code is None]
        return candidates[0] if len(candidates) == 1 else None

    @staticmethod
    def _whereabouts(info: RankInfo) -> str:
        who = info.who
        if info.code is not None:
            return f"{who}, which exited with status {info.code}"
        if info.state.startswith("run "):
            return f"{who}, still running at {info.state.partition(' | ')[2]}"
        if info.role:  # a parameter-server rank reports only where it waits on its peers
            return f"{who}, which reported no status"
        return f"{who}, which reported no status (no graphc.distributed.init()?)"

    def progress_summary(self) -> str:
        def waiting(info: RankInfo) -> str:
            name, _, where = info.state.split(" ", 3)[3].partition(" | ")
            return f"{info.who} waiting in {name} at {where}"

        parts = [self._whereabouts(i) if not i.state.startswith("wait ") else waiting(i)
                 for i in sorted(self.ranks.values(), key=lambda i: i.rank)
                 if i.code is None and i.state]
        return (" (" + "; ".join(parts) + ")") if parts else ""

    def lost_summary(self) -> str:
        silent = [str(i.rank) for i in self.ranks.values() if i.code is None]
        return f" (no exit status from rank {', '.join(silent)})" if silent else ""

    def local_script_groups(self) -> list[int]:
        """The process groups of the scripts on this node (each script leads its own)."""
        local = {self.hostname, "localhost", "127.0.0.1"}
        return [i.script_pid for i in self.ranks.values() if i.host in local]

    # -- ending ------------------------------------------------------------------------------
    def close_connections(self) -> None:
        """Every wrapper sees its connection close and kills its script."""
        self.stopping = True
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                self.selector.unregister(key.fileobj)
                key.fileobj.close()

    def close(self) -> None:
        self.close_connections()
        self.selector.close()
        self.sock.close()
