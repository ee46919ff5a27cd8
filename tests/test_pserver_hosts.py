"""A parameter-server job on two simulated hosts (127.0.0.2 and 127.0.0.3, loopback addresses
that Linux answers without setup): one ``fleetrun --servers --workers`` or ``graphc launch
--hosts --server_num`` per host (issue 27).

Each host's launcher starts only its own roles, meeting over ZeroMQ; sync losses equal local
training; every server listens on its own address only; a dead role ends both nodes, named.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from graphc.distributed import fleetrun, ps_node
from graphc.distributed.launch import LaunchError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import pserver_sync_job as job  # noqa: E402
from test_pserver_endpoints import free_ports, local_run  # noqa: E402

sys.path.pop(0)

pytestmark = [pytest.mark.xdist_group("pserver_endpoints")]
JOB = ROOT / "tests" / "pserver_endpoint_job.py"
HOSTS = ("127.0.0.2", "127.0.0.3")


def endpoints() -> tuple[list[str], list[str]]:
    """Server i and trainer i on HOSTS[i], on ports free now."""
    ports = free_ports(4)
    return ([f"{h}:{p}" for h, p in zip(HOSTS, ports[:2])],
            [f"{h}:{p}" for h, p in zip(HOSTS, ports[2:])])


def launch_endpoints() -> tuple[list[str], list[str]]:
    """What ``graphc launch --hosts HOSTS --server_num 1 --worker_num 1`` gives with
    FLAGS_START_PORT=P: server i on HOSTS[i]:P, trainer i on HOSTS[i]:P+1, both free now."""
    import socket
    for _ in range(50):
        port = free_ports(1)[0]
        socks = [socket.socket() for _ in range(4)]
        try:
            for s, (h, p) in zip(socks, [(h, port + d) for d in (0, 1) for h in HOSTS]):
                s.bind((h, p))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return ([f"{h}:{port}" for h in HOSTS], [f"{h}:{port + 1}" for h in HOSTS])
    raise AssertionError("no two free consecutive ports")


def node_env(**extra) -> dict[str, str]:
    env = dict(os.environ, CPU_NUM="1", PYTHONPATH=str(ROOT), FLAGS_rpc_deadline="60000",
               JAX_COMPILATION_CACHE_DIR=str(ROOT / ".pytest_cache" / "jax-compilation"))
    for name in [n for n in env if n.startswith(("OMPI_", "PMI_", "PMIX_", "SLURM_", "PADDLE_",
                                                 "TRAINING_ROLE", "POD_IP", "XLA_FLAGS"))]:
        del env[name]
    env.update(extra)
    return env


def start_node(host, servers, workers, out: Path, env, launcher="fleetrun") -> subprocess.Popen:
    """This host's launcher: fleetrun with every role's endpoint, or graphc launch with the
    hosts and role counts (its ports from FLAGS_START_PORT: the first server's)."""
    if launcher == "fleetrun":
        cmd = [sys.executable, "-m", "graphc.distributed.fleetrun", "--node_ip", host,
               "--servers", ",".join(servers), "--workers", ",".join(workers)]
    else:
        env = dict(env, FLAGS_START_PORT=servers[0].rsplit(":", 1)[1])
        cmd = [sys.executable, "-m", "graphc", "launch", "--node_ip", host, "--hosts",
               ",".join(HOSTS), "--server_num", "1", "--worker_num", "1"]
    cmd += ["--log_dir", str(out / f"log-{host}"), str(JOB), str(out)]
    return subprocess.Popen(cmd, env=env, stdout=open(out / f"{host}.out", "wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(procs) -> None:
    """Kill the fleetruns' and their roles' process groups (each role leads its own)."""
    for pgid in sessions_of(procs):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        p.wait(10)


def logs(out: Path) -> str:
    return "\n".join(f"--- {h}\n{(out / f'{h}.out').read_text()}" for h in HOSTS
                     if (out / f"{h}.out").exists())


def listening(pids: set[int]) -> set[str]:
    """host:port of every TCP socket in LISTEN that one of ``pids`` holds (/proc/net/tcp)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue  # gone meanwhile
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                addr, port = f[1].split(":")
                host = (".".join(str(b) for b in bytes.fromhex(addr)[::-1]) if len(addr) == 8
                        else f"[{addr}]")
                found.add(f"{host}:{int(port, 16)}")
    return found


def group_pids(pgids: set[int]) -> set[int]:
    """Every process in one of the process groups (sessions) ``pgids`` or led by a child's."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[3]) in pgids or int(stat[4]) in pgids:  # pgrp, session
                out.add(int(entry))
    return out


def sessions_of(procs) -> set[int]:
    """The fleetruns' sessions and those of their roles (each role has its own)."""
    ids = {p.pid for p in procs}
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) in ids:  # ppid
                kids.add(int(entry))
    return ids | kids


@pytest.mark.timeout(120)
def test_two_hosts_train_as_local_and_servers_bind_their_own_address(tmp_path):
    """Host .2 runs fleetrun, host .3 graphc launch --hosts --server_num: one implementation
    (ps_node.py), the same endpoints."""
    servers, workers = launch_endpoints()
    env = node_env(PS_TEST_STEP_SLEEP="0.4")
    procs = [start_node(h, servers, workers, tmp_path, env, launcher)
             for h, launcher in zip(HOSTS, ("fleetrun", "launch"))]
    seen: set[str] = set()
    try:
        end = time.monotonic() + 100
        while any(p.poll() is None for p in procs) and time.monotonic() < end:
            seen |= listening(group_pids(sessions_of(procs)))
            time.sleep(0.1)
        rcs = [p.poll() for p in procs]
    finally:
        stop(procs)
    assert rcs == [0, 0], logs(tmp_path)
    # the servers listened, each on exactly its endpoint; nothing else listened
    assert seen == set(servers), (seen, servers)
    for h, s, w, prog in zip(HOSTS, servers, workers, ("fleetrun", "graphc launch")):
        text = (tmp_path / f"{h}.out").read_text()
        i = HOSTS.index(h)
        assert f"{prog}: node {h} runs pserver {i} ({s}), trainer {i} ({w})" in text, text
        assert (tmp_path / f"log-{h}" / f"serverlog.{HOSTS.index(h)}").exists()
    losses, params, _ = local_run(job.STEPS)
    t0, t1 = (json.loads((tmp_path / f"trainer{t}.losses.json").read_text()) for t in (0, 1))
    np.testing.assert_allclose((np.array(t0) + np.array(t1)) / 2, losses, atol=1e-5)
    for t in (0, 1):
        final = np.load(tmp_path / f"trainer{t}.final.npz")
        for name, value in params.items():
            np.testing.assert_allclose(final[name], value, atol=1e-5, err_msg=name)


@pytest.mark.timeout(90)
def test_a_killed_server_ends_both_nodes_naming_a_role(tmp_path):
    """Server 1 (on 127.0.0.3) is killed mid-training: host .3's fleetrun exits non-zero naming
    it, host .2's within FLAGS_rpc_deadline naming its role that noticed; nothing is left."""
    deadline = 20.0
    servers, workers = endpoints()
    env = node_env(PS_TEST_STEPS="400", PS_TEST_STEP_SLEEP="0.05",
                   FLAGS_rpc_deadline=str(int(deadline * 1000)))
    procs = [start_node(h, servers, workers, tmp_path, env) for h in HOSTS]
    try:
        losses = tmp_path / "trainer1.losses.json"
        end = time.monotonic() + 60
        while not (losses.exists() and len(json.loads(losses.read_text() or "[]")) >= 2):
            assert time.monotonic() < end and all(p.poll() is None for p in procs), \
                logs(tmp_path)
            time.sleep(0.1)
        roles = sessions_of(procs) - {p.pid for p in procs}
        server1 = [pid for pid in roles
                   if "TRAINING_ROLE=PSERVER" in Path(f"/proc/{pid}/environ").read_bytes()
                   .decode(errors="replace") and f"PADDLE_PORT={servers[1].split(':')[1]}"
                   in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")]
        assert len(server1) == 1, roles
        os.kill(server1[0], signal.SIGKILL)
        killed = time.monotonic()
        for p in procs:
            p.wait(deadline + 10)
        took = time.monotonic() - killed
        left = group_pids(roles)
    finally:
        stop(procs)
    assert all(p.returncode != 0 for p in procs), logs(tmp_path)
    assert took < deadline, f"{took:.1f} s"
    assert not left, left
    three, two = ((tmp_path / f"{h}.out").read_text() for h in HOSTS[::-1])
    assert f"fleetrun: pserver 1 ({servers[1]}) was killed by SIGKILL" in three, logs(tmp_path)
    assert "fleetrun: pserver 0" in two or "fleetrun: trainer 0" in two, logs(tmp_path)


@pytest.mark.timeout(60)
def test_sigterm_to_a_node_stops_its_roles(tmp_path):
    """Host .2 alone (host .3 never comes): SIGTERM to its fleetrun ends it with 128 + 15 and
    leaves none of its roles running."""
    servers, workers = endpoints()
    node = start_node(HOSTS[0], servers, workers, tmp_path, node_env())
    try:
        end = time.monotonic() + 40
        while "listening on" not in (tmp_path / f"{HOSTS[0]}.out").read_text():
            assert time.monotonic() < end and node.poll() is None, logs(tmp_path)
            time.sleep(0.1)
        roles = sessions_of([node]) - {node.pid}
        assert len(roles) == 2, roles
        node.send_signal(signal.SIGTERM)
        code = node.wait(20)
        left = group_pids(roles)
    finally:
        stop([node])
    assert code == 128 + signal.SIGTERM, (tmp_path / f"{HOSTS[0]}.out").read_text()
    assert not left, left
    assert "got SIGTERM; stopping this node's roles" in (tmp_path / f"{HOSTS[0]}.out").read_text()


def test_which_roles_run_on_a_node_and_refusals(monkeypatch, capsys):
    servers, workers = ["127.0.0.2:7000", "127.0.0.3:7001"], ["127.0.0.2:7002", "127.0.0.3:7003"]
    roles = ps_node.local_roles(servers, workers, lambda h: h == "127.0.0.3")
    assert [label for label, _ in roles] == ["pserver 1 (127.0.0.3:7001)",
                                             "trainer 1 (127.0.0.3:7003)"]
    server, trainer = (env for _, env in roles)
    assert server["TRAINING_ROLE"] == "PSERVER" and server["POD_IP"] == "127.0.0.3"
    assert server["PADDLE_PORT"] == "7001" and server["PADDLE_PSERVER_ID"] == "1"
    assert trainer["PADDLE_TRAINER_ID"] == "1" and trainer["PADDLE_TRAINERS_NUM"] == "2"
    assert trainer["PADDLE_PSERVERS_IP_PORT_LIST"] == ",".join(servers)
    monkeypatch.delenv("POD_IP", raising=False)
    argv = ["--servers", ",".join(servers), "--workers", ",".join(workers), "t.py"]
    plan = fleetrun.multinode(argv)
    assert plan["node"] == "this host" and plan["mine"]("127.0.0.3")  # loopback: all here
    monkeypatch.setenv("POD_IP", "127.0.0.2")
    plan = fleetrun.multinode(argv)
    assert plan["mine"]("127.0.0.2") and not plan["mine"]("127.0.0.3")
    assert fleetrun.multinode(["--server_num", "1", "--worker_num", "1", "t.py"]) is None
    with pytest.raises(fleetrun.FleetrunError, match="--server_num does not go with"):
        fleetrun.multinode(["--server_num", "2", *argv])
    monkeypatch.delenv("GRAPHC_JOB_SECRET", raising=False)
    with pytest.raises(fleetrun.FleetrunError, match=r"\['192.0.2.7'\] are off loopback: "
                                                     "set GRAPHC_JOB_SECRET"):
        fleetrun.multinode(["--servers", "192.0.2.7:1", "--workers", "127.0.0.2:2", "t.py"])
    with pytest.raises(LaunchError, match=r"this node \(127.0.0.9\) runs no role"):
        ps_node.run(servers, workers, "127.0.0.9", lambda h: False, "t.py", [], "log")
    import argparse

    from graphc.distributed.launch import add_arguments, build_command, ps_hosts_plan
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(LaunchError, match="runs without mpirun"):
        build_command(p.parse_args(["--hosts", "a,b", "--server_num", "1", "--worker_num", "1",
                                    str(JOB)]))
    # graphc launch --hosts --server_num: S servers and W trainers per host, servers first
    monkeypatch.setenv("FLAGS_START_PORT", "7100")
    plan = ps_hosts_plan(p.parse_args(["--hosts", "127.0.0.2,127.0.0.3", "--server_num", "2",
                                       "--worker_num", "1", "--node_ip", "127.0.0.3",
                                       str(JOB)]))
    assert plan["servers"] == ["127.0.0.2:7100", "127.0.0.2:7101", "127.0.0.3:7100",
                               "127.0.0.3:7101"]
    assert plan["workers"] == ["127.0.0.2:7102", "127.0.0.3:7102"]
    assert [lbl for lbl, _ in ps_node.local_roles(plan["servers"], plan["workers"],
                                                  plan["mine"])] == [
        "pserver 2 (127.0.0.3:7100)", "pserver 3 (127.0.0.3:7101)", "trainer 1 (127.0.0.3:7102)"]
    for argv, message in [
            (["--hosts", "localhost,127.0.0.1", "--server_num", "1", "--worker_num", "1"],
             "names a node twice"),
            (["--hosts", "127.0.0.2", "--server_num", "1", "--worker_num", "1", "--devices",
              "0"], "parameter-server roles run on CPUs"),
            (["--hosts", "127.0.0.2,192.0.2.7", "--server_num", "1", "--worker_num", "1"],
             r"\['192.0.2.7'\] are off loopback: set GRAPHC_JOB_SECRET"),
            (["--hostfile", str(JOB), "--server_num", "1", "--worker_num", "1"],
             "name the nodes with --hosts")]:
        with pytest.raises(LaunchError, match=message):
            args = p.parse_args([*argv, str(JOB)])
            ps_hosts_plan(args) or build_command(args)
