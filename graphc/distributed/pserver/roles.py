"""Paddle's parameter-server role variables for one rank of a ``graphc launch --server_num S
--worker_num W`` job (what fleetrun exports): ranks 0..S-1 are servers, the rest trainers.

Light on purpose (no jax, no graphc IR): the launcher's per-rank wrapper imports it.
"""

from __future__ import annotations

import re

SERVER_NUM_ENV, WORKER_NUM_ENV = "GRAPHC_PS_SERVER_NUM", "GRAPHC_PS_WORKER_NUM"
HOST, FIRST_PORT = "127.0.0.1", 6170  # endpoints name servers; MPI carries the messages


def endpoints(servers: int) -> list[str]:
    return [f"{HOST}:{FIRST_PORT + i}" for i in range(servers)]


def role_label(rank: int, servers: int, workers: int) -> str:
    """``pserver I`` or ``trainer I``: what the launcher calls ``rank`` in its messages."""
    if not 0 <= rank < servers + workers:
        return ""
    return f"pserver {rank}" if rank < servers else f"trainer {rank - servers}"


def labels_from_environ(environ) -> dict[int, str]:
    """Each rank's role label in a ``--server_num/--worker_num`` launch (else empty)."""
    s, w = environ.get(SERVER_NUM_ENV), environ.get(WORKER_NUM_ENV)
    if not (s and w and s.isdigit() and w.isdigit()):
        return {}
    return {r: role_label(r, int(s), int(w)) for r in range(int(s) + int(w))}


# the line every parameter-server rank prints when it joins (protocol.Cluster.join)
_ANNOUNCED = re.compile(r"graphc pserver: rank (\d+) is (pserver|trainer) (\d+)\b")


def announced_role(line: str) -> tuple[int, str] | None:
    """(rank, ``pserver I`` / ``trainer I``) from a rank's line announcing its role."""
    m = _ANNOUNCED.search(line)
    return (int(m.group(1)), f"{m.group(2)} {m.group(3)}") if m else None


def role_env(rank: int, servers: int, workers: int) -> dict[str, str]:
    """TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM and PADDLE_TRAINER_ID
    (a trainer) or POD_IP / PADDLE_PORT / PADDLE_PSERVER_ID (a server) for ``rank``."""
    eps = endpoints(servers)
    env = {"PADDLE_PSERVERS_IP_PORT_LIST": ",".join(eps), "PADDLE_TRAINERS_NUM": str(workers),
           "PADDLE_PSERVER_NUMS": str(servers)}
    if rank < servers:
        host, port = eps[rank].split(":")
        env.update(TRAINING_ROLE="PSERVER", POD_IP=host, PADDLE_PORT=port,
                   PADDLE_PSERVER_ID=str(rank), PADDLE_CURRENT_ENDPOINT=eps[rank])
    else:
        env.update(TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(rank - servers))
    return env


ENDPOINTS_ENV = "GRAPHC_LAUNCH_ENDPOINTS"  # every rank's host:port, set by the launcher


def collective_env(rank: int, size: int, environ) -> dict[str, str]:
    """Paddle's collective variables (fleetrun's): PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM,
    PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT, and FLAGS_selected_gpus when the rank
    has GPUs. Endpoints come from the launcher (its --hosts), else this node's."""
    listed = environ.get(ENDPOINTS_ENV, "")
    eps = [e for e in listed.split(",") if e] or [f"{HOST}:{FIRST_PORT + i}"
                                                  for i in range(size)]
    env = {"PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(size)}
    if len(eps) == size:
        env.update(PADDLE_TRAINER_ENDPOINTS=",".join(eps), PADDLE_CURRENT_ENDPOINT=eps[rank])
    if environ.get("CUDA_VISIBLE_DEVICES"):
        env["FLAGS_selected_gpus"] = environ["CUDA_VISIBLE_DEVICES"]
    return env


def from_environ(rank: int, environ, size: int = 0) -> dict[str, str]:
    """The role variables for this rank: a parameter-server job's when the launcher asked
    for servers and workers, else the collective ones; a variable the user set is kept."""
    s, w = environ.get(SERVER_NUM_ENV), environ.get(WORKER_NUM_ENV)
    if s and w:
        env = role_env(rank, int(s), int(w))
    elif size > 0:
        env = collective_env(rank, size, environ)
    else:
        return {}
    return {k: v for k, v in env.items() if k not in environ}
