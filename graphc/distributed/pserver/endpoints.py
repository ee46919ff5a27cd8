"""Where parameter-server processes meet and what they trust: endpoints, FLAGS_rpc_deadline, the
job secret and the CURVE keys derived from it (read by zmq_link.py)."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket

from .protocol import PServerError

SECRET_ENV = "GRAPHC_JOB_SECRET"
ENCRYPT_ENV = "GRAPHC_PS_ENCRYPT"  # "1": CURVE on loopback too (off loopback it always is)
DEADLINE_ENV, DEFAULT_DEADLINE_MS = "FLAGS_rpc_deadline", 180000.0  # Paddle's
# the largest frame a trainer takes from a server (a server's bound is its layout's largest
# message): a trainer learns the sizes from the server itself, so a bogus server could
# otherwise make it allocate whatever it announces
FRAME_ENV, DEFAULT_FRAME_MB = "GRAPHC_PS_MAX_FRAME_MB", 1024


def rpc_deadline(environ=None) -> float:
    """Seconds of ``FLAGS_rpc_deadline`` (milliseconds, default 180000 as in Paddle)."""
    raw = (os.environ if environ is None else environ).get(DEADLINE_ENV, "").strip()
    if not raw:
        return DEFAULT_DEADLINE_MS / 1000.0
    try:
        ms = float(raw)
    except ValueError:
        ms = float("nan")
    if not 0 < ms < float("inf"):
        raise PServerError(f"{DEADLINE_ENV} must be a number of milliseconds > 0, got '{raw}'")
    return ms / 1000.0


def trainer_frame_bound(environ=None) -> int:
    """Bytes of ``GRAPHC_PS_MAX_FRAME_MB`` (default 1024 MB): a trainer's largest frame."""
    raw = (os.environ if environ is None else environ).get(FRAME_ENV, "").strip()
    if not raw:
        return DEFAULT_FRAME_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not 0 < mb < float(1 << 40):
        raise PServerError(f"{FRAME_ENV} must be a number of megabytes > 0, got '{raw}'")
    return int(mb * (1 << 20))


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = str(endpoint).rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PServerError(f"parameter-server endpoint '{endpoint}' is not host:port")
    return host.strip("[]"), int(port)


def address(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        try:
            return socket.gethostbyname(host)
        except OSError as exc:
            raise PServerError(f"parameter-server host '{host}' does not resolve: {exc}"
                               ) from None


def is_loopback(endpoint: str) -> bool:
    return ipaddress.ip_address(address(split_endpoint(endpoint)[0])).is_loopback


def job_keys(secret: bytes) -> dict[str, bytes]:
    """CURVE key pairs of the job's servers and clients, derived from its secret: whoever
    lacks the secret can neither pose as a server nor be admitted as a client."""
    import zmq
    from zmq.utils import z85
    keys = {}
    for who in ("server", "client"):
        secret_key = z85.encode(hashlib.sha256(b"graphc pserver " + who.encode() + b"\0" +
                                               secret).digest())
        keys[who] = (zmq.curve_public(secret_key), secret_key)
    return keys


def plain_token(secret: bytes) -> bytes:
    """The PLAIN password of a loopback job with a secret: derived, so the secret itself never
    travels (on loopback only root could read it, and root is trusted anyway)."""
    return hashlib.sha256(b"graphc pserver plain\0" + secret).hexdigest().encode()


def encrypted(endpoints, environ=None) -> bool:
    """Whether a job with a secret uses CURVE (encrypted, about 4x slower on big blocks here)
    or PLAIN with a derived token (authenticated, not encrypted): CURVE as soon as one
    endpoint is off loopback, or when GRAPHC_PS_ENCRYPT=1."""
    forced = (os.environ if environ is None else environ).get(ENCRYPT_ENV, "").strip()
    return forced == "1" or not all(is_loopback(e) for e in endpoints)


def job_secret(endpoints, environ=None) -> bytes | None:
    """The job secret (GRAPHC_JOB_SECRET); without one every endpoint must be loopback."""
    secret = (os.environ if environ is None else environ).get(SECRET_ENV, "")
    if secret:
        return secret.encode()
    outside = [e for e in endpoints if not is_loopback(e)]
    if outside:
        raise PServerError(f"parameter-server endpoints {outside} are not loopback: set "
                           f"{SECRET_ENV} (the same on every process) so that only the job's "
                           "processes are admitted")
    return None
