"""One process of tests/test_role_maker.py's jobs: ``python role_maker_job.py KIND OUT_DIR
[STORE_DIR]`` runs a role maker's collectives and writes what they gave to
OUT_DIR/<KIND>.<process>.json. KIND ``mpi`` (under graphc launch, 4 ranks):
MPISymetricRoleMaker, then the collective PaddleCloudRoleMaker; ``general`` (started alone
with Paddle's variables): GeneralRoleMaker meeting in STORE_DIR."""

from __future__ import annotations

import json
import os
import sys

from graphc.distributed.env import detect
from graphc.fluid.incubate.fleet.base import role_maker


def collectives(role, me: int) -> dict:
    got = {"gathered": role.all_gather(me), "worker": role.is_worker()}
    if role.is_worker():
        total, low = [0, 0, 0], [0, 0, 0]
        role.all_reduce_worker([me, 1, -me], total)
        role.all_reduce_worker([me, 1, -me], low, mode="min")
        role.barrier_worker()
        got.update(sum=total, min=low)
    role.barrier_all()
    return got


def main(kind: str, out_dir: str, store: str = "") -> None:
    results = {}
    if kind == "mpi":
        rank = detect().rank
        symetric = role_maker.MPISymetricRoleMaker()
        symetric.generate_role()
        results["symetric"] = collectives(symetric, rank)
        results["collective"] = collectives(
            role_maker.PaddleCloudRoleMaker(is_collective=True), rank)
        name = str(rank)
    else:
        role = role_maker.GeneralRoleMaker(path=store, run_timeout_seconds=60)
        role.generate_role()
        me = role.get_local_endpoint()
        results["general"] = collectives(role, int(me.rsplit(":", 1)[1]))
        results["general"]["to_string"] = role.to_string()
        name = me.replace(":", "_")
    with open(os.path.join(out_dir, f"{kind}.{name}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
