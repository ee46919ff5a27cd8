"""The parameter server's messages over ZeroMQ, for processes that meet by endpoints (no MPI job):
each server binds a ROUTER on its endpoint only, each trainer connects a DEALER to every server."""

from __future__ import annotations

import collections
import itertools
import json
import struct
import sys
import time

import numpy as np

from .endpoints import (
    DEADLINE_ENV,
    FRAME_ENV,
    address,
    encrypted,
    job_keys,
    job_secret,
    plain_token,
    rpc_deadline,
    split_endpoint,
    trainer_frame_bound,
)
from .link import ANY
from .protocol import PServerError

HEADER = struct.Struct("<4sI")  # magic, tag
MAGIC = b"gps1"
TAG_HELLO, TAG_WELCOME, TAG_REFUSE, TAG_SUM = 60, 61, 62, 63
# what each tag carries (protocol.py), for messages naming what was awaited
WHAT = {40: "its layout", 41: "a control message", 42: "gradient blocks",
        43: "parameter blocks", 44: "a checkpoint path", 45: "a pull", 46: "pulled rows",
        47: "pushed rows", TAG_WELCOME: "its welcome", TAG_SUM: "a server sum"}
SLACK = 1 << 16  # over the layout's largest message: control words, JSON, a path
RCVHWM = 32  # messages queued per connection: with MAXMSGSIZE, its memory budget

# Peers are numbered as in an MPI job (servers 0..S-1, then trainers). A trainer's HELLO (its
# role, index and the job's shape) waits in ZeroMQ's queue until the server listens and
# WELCOMEs it; messages on a connection without an accepted HELLO are dropped. With
# GRAPHC_JOB_SECRET every connection is CURVE (keys derived from the secret; a ZAP handler
# admits only the job's client key), or on loopback PLAIN with a token derived from the secret
# (checked by the ZAP handler; no encryption cost); without it only loopback is allowed. Frames
# above a server's bound (MAXMSGSIZE: its layout's largest message + slack) end that
# connection; a trainer's connections to its servers have a bound too (GRAPHC_PS_MAX_FRAME_MB)
# and a queue limit, and whatever a server sends that is no message of ours ends the trainer
# naming that server (its connection is to that server alone). Heartbeats and socket events
# notice a dead or stopped peer; every wait ends by FLAGS_rpc_deadline. Threat model:
# docs/distributed.md.


class _Admit:
    """ZAP credentials check: the job's client key only."""

    def __init__(self, client_public: bytes):
        self.key = client_public

    def callback(self, domain, key) -> bool:
        return key == self.key


class _Recv:
    """A posted receive (``irecv``): completed by ``waitall``."""

    def __init__(self, buf, source: int, tag: int):
        self.buf, self.source, self.tag = buf, source, tag


class ZmqLink:
    """Tagged byte buffers between numbered peers (the MPI subset of link.py) over ZeroMQ."""

    name = "zmq"

    def __init__(self, rank: int, names: dict[int, str], deadline: float, secret: bytes | None,
                 encrypt: bool = True):
        import zmq
        self._zmq, self.rank, self.names, self.deadline = zmq, rank, names, deadline
        self.ctx = zmq.Context()
        self.keys = job_keys(secret) if secret and encrypt else None
        self.token = plain_token(secret) if secret and not encrypt else None
        self.auth = None
        self.router = None
        self.rank_of: dict[bytes, int] = {}  # router identity -> peer rank (after HELLO)
        self.ident_of: dict[int, bytes] = {}
        self.dealers: dict[int, object] = {}  # server rank -> DEALER
        self.monitors: dict[object, int] = {}  # monitor socket -> server rank (-1: ours)
        self.fd_of: dict[int, int] = {}  # peer rank -> its connection's fd on our ROUTER
        self.welcomed: set[int] = set()
        self.dead: dict[int, str] = {}  # peer rank -> what happened to it
        self.retired: set[int] = set()
        self.broken: str | None = None
        self.stash: dict[tuple[int, int], collections.deque] = collections.defaultdict(
            collections.deque)
        self._seq = itertools.count()
        self.dropped = 0  # messages from connections that are no peer of the job
        self.hello_check = None  # server: hello dict -> (rank, None) or (None, reason)
        self.frame_bound = 0  # the largest frame our DEALERs take (0: zmq's default, none)
        self.shook: set[int] = set()  # servers whose handshake succeeded

    # -- setup -------------------------------------------------------------------------
    def _options(self, sock) -> None:
        zmq, ms = self._zmq, int(self.deadline * 1000)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)  # a send never blocks: the protocol bounds what waits
        # a stopped or unreachable peer stops answering heartbeats: the connection drops
        sock.setsockopt(zmq.HEARTBEAT_IVL, max(100, min(ms // 10, 5000)))
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(1000, min(ms // 2, 60000)))
        sock.setsockopt(zmq.HEARTBEAT_TTL, max(1000, min(ms // 2, 60000)))

    def listen(self, endpoint: str, max_bytes: int) -> None:
        """Bind this server's endpoint (only it) and admit the job's peers."""
        zmq = self._zmq
        host, port = split_endpoint(endpoint)
        self.router = sock = self.ctx.socket(zmq.ROUTER)
        self._options(sock)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a gone peer is an error
        sock.setsockopt(zmq.MAXMSGSIZE, int(max_bytes) + SLACK)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        # a connection that ends (its process died, or stopped answering heartbeats): the
        # event's fd names the peer that said HELLO on it (ROUTER_NOTIFY is a draft API)
        self.monitors[sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)] = -1
        if self.keys is not None or self.token is not None:
            from zmq.auth.thread import ThreadAuthenticator
            self.auth = ThreadAuthenticator(self.ctx)
            self.auth.start()
        if self.keys is not None:
            self.auth.configure_curve_callback("*", _Admit(self.keys["client"][0]))
            sock.curve_server = True
            sock.curve_publickey, sock.curve_secretkey = self.keys["server"]
        elif self.token is not None:
            self.auth.configure_plain("*", {"graphc": self.token.decode()})
            sock.plain_server = True
        try:
            sock.bind(f"tcp://{address(host)}:{port}")
        except zmq.ZMQError as exc:
            raise PServerError(f"{self.names[self.rank]} cannot listen on {endpoint}: {exc}"
                               ) from None

    def connect(self, server: int, endpoint: str, hello: dict) -> None:
        """A DEALER to server ``server`` (zmq retries until it listens) and our HELLO."""
        zmq = self._zmq
        host, port = split_endpoint(endpoint)
        sock = self.ctx.socket(zmq.DEALER)
        self._options(sock)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        if self.frame_bound:  # a bigger frame ends the connection before it is allocated
            sock.setsockopt(zmq.MAXMSGSIZE, self.frame_bound)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        if self.keys is not None:
            sock.curve_serverkey = self.keys["server"][0]
            sock.curve_publickey, sock.curve_secretkey = self.keys["client"]
        elif self.token is not None:
            sock.plain_username, sock.plain_password = b"graphc", self.token
        events = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED |
                  zmq.EVENT_HANDSHAKE_FAILED_AUTH |
                  zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        self.monitors[sock.get_monitor_socket(events)] = server
        sock.connect(f"tcp://{address(host)}:{port}")
        self.dealers[server] = sock
        self.send(json.dumps(hello).encode(), server, TAG_HELLO)

    def wait_welcomed(self, servers) -> None:
        """Until every server in ``servers`` accepted our HELLO."""
        end = time.monotonic() + self.deadline
        for s in servers:
            self._take(s, TAG_WELCOME, "waiting for it to listen", end=end)
            self.welcomed.add(s)

    def wait_peers(self, ranks) -> None:
        """Server: until each peer in ``ranks`` said an accepted HELLO."""
        end = time.monotonic() + self.deadline
        while any(r not in self.ident_of for r in ranks):
            left = end - time.monotonic()
            if left <= 0:
                missing = [self.names[r] for r in ranks if r not in self.ident_of]
                raise PServerError(f"{self.names[self.rank]}: {', '.join(missing)} never "
                                   f"connected within {DEADLINE_ENV}={self.deadline * 1000:g} "
                                   "ms")
            self._pump(left)

    # -- the MPI subset ------------------------------------------------------------------
    def send(self, buf, dest: int, tag: int) -> None:
        zmq = self._zmq
        if dest in self.dead:
            self._fail(f"{self.names[dest]} {self.dead[dest]}")
        frames = [HEADER.pack(MAGIC, tag), memoryview(np.ascontiguousarray(buf)).cast("B")
                  if not isinstance(buf, bytes) else buf]
        try:
            if dest in self.dealers:
                self.dealers[dest].send_multipart(frames, copy=False)
            else:
                self.router.send_multipart([self.ident_of[dest], *frames], copy=False)
        except (zmq.ZMQError, KeyError) as exc:
            self._fail(f"{self.names[dest]} cannot be reached ({exc})")

    def isend(self, buf, dest: int, tag: int):
        self.send(buf, dest, tag)  # zmq queues it: done at once
        return None

    def recv(self, buf, source: int, tag: int, among=None) -> int:
        src, data = self._take(source, tag, f"waiting for {WHAT.get(tag, tag)}", among)
        view = buf.reshape(-1).view(np.uint8)
        if len(data) != view.size:
            self._fail(f"{self.names[src]} sent {len(data)} bytes where {view.size} were "
                       "expected: trainer and server programs disagree")
        view[...] = np.frombuffer(data, np.uint8)
        return src

    def irecv(self, buf, source: int, tag: int):
        return _Recv(buf, source, tag)

    def recv_bytes(self, source: int, tag: int) -> np.ndarray:
        data = self._take(source, tag, f"waiting for {WHAT.get(tag, tag)}")[1]
        return np.frombuffer(data, np.uint8).copy()

    def waitall(self, requests) -> None:
        for r in requests:
            if isinstance(r, _Recv):
                self.recv(r.buf, r.source, r.tag)

    def done(self, request) -> bool:
        return not isinstance(request, _Recv)

    def server_sum(self, x: np.ndarray) -> np.ndarray:
        """``x`` summed over the servers, through server 0 (in server order)."""
        servers = [r for r, n in self.names.items() if n.startswith("pserver")]
        if len(servers) == 1:
            return x
        if self.rank != 0:
            self.send(x, 0, TAG_SUM)
            out = np.empty_like(x)
            self.recv(out, 0, TAG_SUM)
            return out
        total = np.array(x, copy=True)
        for s in servers[1:]:
            part = np.empty_like(x)
            self.recv(part, s, TAG_SUM)
            total += part
        for s in servers[1:]:
            self.send(total, s, TAG_SUM)
        return total

    def retire(self, rank: int) -> None:
        """Peer ``rank`` completed: its leaving is no failure."""
        self.retired.add(rank)

    def close(self) -> None:
        """Deliver what is queued (unless a peer failed), then close every socket."""
        linger = 0 if self.broken else int(min(self.deadline, 10.0) * 1000)
        for sock in self.monitors:
            sock.close(0)
        for sock in [*self.dealers.values(), self.router]:
            if sock is not None:
                sock.close(linger)
        if self.auth is not None:
            self.auth.stop()
        # destroy, not term: a socket left open (an error between creating and keeping it)
        # would make term wait forever
        self.ctx.destroy(linger)

    # -- receiving -----------------------------------------------------------------------
    def _fail(self, why: str):
        self.broken = why
        raise PServerError(f"{self.names[self.rank]}: {why}")

    def _take(self, source: int, tag: int, what: str, among=None,
              end: float | None = None) -> tuple[int, bytes]:
        """The next message ``tag`` from ``source`` (ANY: the earliest from ``among``, or from
        anyone), by the deadline; a peer we wait for that is gone is an error naming it."""
        end = time.monotonic() + self.deadline if end is None else end
        while True:
            found = self._stashed(source, tag)
            if found is not None:
                return found
            waited = ([source] if source != ANY else
                      list(among) if among is not None else list(self.ident_of))
            gone = [r for r in waited if r in self.dead and r not in self.retired]
            if gone:
                self._drain()  # what it sent before it went still counts
                found = self._stashed(source, tag)
                if found is not None:
                    return found
                self._fail(f"{self.names[gone[0]]} {self.dead[gone[0]]} while {what}")
            left = end - time.monotonic()
            if left <= 0:
                peers = ", ".join(self.names[r] for r in waited) or "any peer"
                self._fail(f"no message from {peers} within {DEADLINE_ENV}="
                           f"{self.deadline * 1000:g} ms while {what}")
            self._pump(left)

    def _stashed(self, source: int, tag: int):
        if source != ANY:
            q = self.stash.get((source, tag))
            return (source, q.popleft()[1]) if q else None
        queues = [(q[0][0], src) for (src, t), q in self.stash.items() if t == tag and q]
        if not queues:
            return None
        src = min(queues)[1]
        return src, self.stash[(src, tag)].popleft()[1]

    def _sockets(self) -> list:
        # messages before events: a peer's last messages are read before its disconnection
        return [s for s in [self.router, *self.dealers.values(), *self.monitors] if s]

    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a socket to be readable, then read everything."""
        poller = self._zmq.Poller()
        for s in self._sockets():
            poller.register(s, self._zmq.POLLIN)
        poller.poll(max(1, int(min(timeout, 1.0) * 1000)))
        self._drain()

    def _drain(self) -> None:
        zmq = self._zmq
        for s in self._sockets():
            while True:
                try:
                    frames = s.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                if s is self.router:
                    self._from_router(frames)
                elif s in self.monitors:
                    self._event(self.monitors[s], [f.bytes for f in frames])
                else:
                    self._from_dealer(next(r for r, d in self.dealers.items() if d is s),
                                      frames)

    def _from_router(self, frames: list) -> None:
        ident = frames[0].bytes
        tag = self._header(frames[1:])
        if tag is None:
            self.dropped += 1
            return
        if tag == TAG_HELLO:
            self._hello(ident, frames[2])
        elif ident in self.rank_of:
            self.stash[(self.rank_of[ident], tag)].append((next(self._seq), frames[2].buffer))
        else:
            self.dropped += 1  # no HELLO accepted on this connection: a stranger

    def _from_dealer(self, server: int, frames: list) -> None:
        tag = self._header(frames)
        if tag is None:  # this connection is to that server alone: it is no server of ours
            size = sum(len(f) for f in frames)
            self._fail(f"{self.names[server]} sent {len(frames)} frame(s) of {size} bytes "
                       "that are no graphc parameter-server message: not a server of this "
                       "job (another program listens on its endpoint?)")
        elif tag == TAG_REFUSE:
            self._fail(f"{self.names[server]} refused this process: "
                       f"{frames[1].bytes.decode(errors='replace')}")
        else:
            if tag == TAG_WELCOME:  # (before a disconnection read in the same drain)
                self.welcomed.add(server)
            queue = self.stash[(server, tag)]
            if len(queue) >= RCVHWM:  # a server answers what it is asked, one at a time
                self._fail(f"{self.names[server]} sent more than {RCVHWM} messages "
                           f"(tag {tag}) that were not asked for")
            queue.append((next(self._seq), frames[1].buffer))

    @staticmethod
    def _header(frames: list):
        if len(frames) != 2 or len(frames[0]) != HEADER.size:
            return None
        magic, tag = HEADER.unpack(frames[0].bytes)
        return tag if magic == MAGIC else None

    def _hello(self, ident: bytes, frame) -> None:
        try:
            hello = json.loads(frame.bytes)
            rank, reason = self.hello_check(hello)
        except (ValueError, TypeError, KeyError, AttributeError):
            self.dropped += 1  # not one of ours
            return
        if rank is not None and rank in self.ident_of and self.ident_of[rank] != ident:
            rank, reason = None, f"{self.names[rank]} is already connected"
        if rank is None:
            print(f"graphc pserver: {self.names[self.rank]} refused a peer: {reason}",
                  file=sys.stderr, flush=True)
            self._reply(ident, TAG_REFUSE, reason.encode())
            return
        self.rank_of[ident], self.ident_of[rank] = rank, ident
        self.fd_of[rank] = frame.get(self._zmq.SRCFD)
        self._reply(ident, TAG_WELCOME, b"")

    def _reply(self, ident: bytes, tag: int, payload: bytes) -> None:
        try:
            self.router.send_multipart([ident, HEADER.pack(MAGIC, tag), payload])
        except self._zmq.ZMQError:
            pass  # it has gone already: nothing to answer

    def _event(self, server: int, frames: list) -> None:
        from zmq.utils.monitor import parse_monitor_message
        message = parse_monitor_message(frames)
        event, zmq = message["event"], self._zmq
        if server == -1:  # our ROUTER: which peer's connection was it
            for rank, fd in list(self.fd_of.items()):
                if fd == message["value"]:
                    del self.fd_of[rank]  # (its identity stays: its last messages count)
                    self.dead.setdefault(rank, "disconnected (its process ended or stopped "
                                               "answering heartbeats)")
            return
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.shook.add(server)
        elif event == zmq.EVENT_DISCONNECTED:
            bound = (f", or it sent a frame over this process's bound of {self.frame_bound} "
                     f"bytes ({FRAME_ENV})" if self.frame_bound else "")
            if server in self.welcomed:
                self.dead.setdefault(server, "disconnected (its process ended or stopped "
                                             f"answering heartbeats{bound})")
            elif server in self.shook:  # a peer spoke ZeroMQ there, then closed: no retry
                self.dead.setdefault(server, "closed the connection before welcoming this "
                                             f"process (its process ended{bound}; no graphc "
                                             "parameter server of this job)")
            # else it is not up yet: zmq retries
        elif server not in self.dead:
            self.dead[server] = ("refused the handshake: its GRAPHC_JOB_SECRET differs from "
                                 "this process's" if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH
                                 else "failed the handshake (not a graphc parameter server "
                                 "of this job, or a different GRAPHC_JOB_SECRET)")
            self._fail(f"{self.names[server]} {self.dead[server]}")


JOB = "graphc-pserver/1"  # what a HELLO says it is


def join(role: str, index: int, endpoints: list[str], trainers: int, max_bytes: int,
         server_peers: bool, environ=None) -> tuple[ZmqLink, list[int], list[int]]:
    """This process's link to the job by endpoints: a server listens on its endpoint and waits
    for every trainer's HELLO (and, with ``server_peers``, server 0 for the other servers'); a
    trainer connects to every server and waits for each one's WELCOME. ``environ``: where
    FLAGS_rpc_deadline and GRAPHC_JOB_SECRET are read (os.environ)."""
    from .protocol import SERVER, TRAINER
    n = len(endpoints)
    names = {s: f"pserver {s} ({ep})" for s, ep in enumerate(endpoints)}
    names.update({n + t: f"trainer {t}" for t in range(trainers)})
    rank = index if role == SERVER else n + index
    link = ZmqLink(rank, names, rpc_deadline(environ), job_secret(endpoints, environ),
                   encrypted(endpoints, environ))
    # a trainer learns every size from its servers: its own bound caps what one may send
    link.frame_bound = trainer_frame_bound(environ) if role != SERVER else 0
    hello = {"job": JOB, "role": role, "index": int(index), "endpoints": endpoints,
             "trainers": int(trainers)}

    def check(h: dict):
        if h["job"] != JOB:
            raise ValueError(h["job"])
        who = f"{str(h['role']).lower()} {h['index']}"
        if h["endpoints"] != endpoints or h["trainers"] != trainers:
            return None, (f"{who} was transpiled for servers {h['endpoints']} and "
                          f"{h['trainers']} trainers, {names[rank]} for {endpoints} and "
                          f"{trainers}")
        i = h["index"]
        if h["role"] == TRAINER and isinstance(i, int) and 0 <= i < trainers:
            return n + i, None
        if h["role"] == SERVER and index == 0 and isinstance(i, int) and 0 < i < n:
            return i, None
        return None, f"this job has no {who}"

    try:
        if role == SERVER:
            link.hello_check = check
            link.listen(endpoints[index], max_bytes)
            if server_peers and index > 0:
                link.connect(0, endpoints[0], hello)
            _announce(rank, role, index, n, trainers, f"listening on {endpoints[index]}")
            peers = [n + t for t in range(trainers)]
            link.wait_peers(peers + (list(range(1, n)) if server_peers and index == 0 else []))
            if server_peers and index > 0:
                link.wait_welcomed([0])
        else:
            for s, ep in enumerate(endpoints):
                link.connect(s, ep, hello)
            _announce(rank, role, index, n, trainers, f"connecting to {','.join(endpoints)}")
            link.wait_welcomed(range(n))
    except BaseException:
        link.broken = link.broken or "setup failed"
        link.close()
        raise
    return link, list(range(n)), [n + t for t in range(trainers)]


def _announce(rank: int, role: str, index: int, servers: int, trainers: int, where: str):
    # the same line as over MPI (roles.announced_role reads it)
    print(f"graphc pserver: rank {rank} is {role.lower()} {index} ({servers} servers, "
          f"{trainers} trainers), {where} over zmq", file=sys.stderr, flush=True)
