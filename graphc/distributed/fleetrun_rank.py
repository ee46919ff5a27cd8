"""One rank of a ``fleetrun`` parameter-server job: sets the endpoints fleetrun was given in
Paddle's role variables, then runs the training script as ``python SCRIPT ARGS`` would.

Run by path (``script_runner.py fleetrun_rank.py SCRIPT ARGS``), after graphc launch's wrapper
set the rank's role (TRAINING_ROLE, PADDLE_PSERVER_ID or PADDLE_TRAINER_ID; pserver/roles.py).
Paddle gives every process PADDLE_PSERVERS_IP_PORT_LIST and PADDLE_TRAINER_ENDPOINTS, and
each its own POD_IP and PADDLE_PORT; this does the same with fleetrun's lists.
"""

from __future__ import annotations

import os
import runpy
import sys

SERVERS_ENV, WORKERS_ENV = "GRAPHC_FLEETRUN_SERVERS", "GRAPHC_FLEETRUN_WORKERS"


def role_env(environ) -> dict[str, str]:
    """This rank's endpoint variables, from fleetrun's lists and the rank's role."""
    servers = environ[SERVERS_ENV].split(",")
    workers = environ[WORKERS_ENV].split(",")
    env = {"PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers),
           "PADDLE_TRAINER_ENDPOINTS": ",".join(workers),
           "PADDLE_TRAINERS_NUM": str(len(workers))}
    if environ.get("TRAINING_ROLE") == "PSERVER":
        me = servers[int(environ["PADDLE_PSERVER_ID"])]
    else:
        me = workers[int(environ["PADDLE_TRAINER_ID"])]
    host, port = me.rsplit(":", 1)
    env.update(POD_IP=host, PADDLE_PORT=port, PADDLE_CURRENT_ENDPOINT=me)
    return env


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: fleetrun_rank.py SCRIPT [ARGS]", file=sys.stderr)
        sys.exit(2)
    os.environ.update(role_env(os.environ))
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
