"""`fleetrun` / `graphc fleetrun`: Paddle's launcher flags mapped onto graphc launch, refused
flags named with exit status 2, and real jobs whose ranks see Paddle's role variables."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from graphc import cli
from graphc.distributed import fleetrun
from graphc.distributed.fleetrun import RANK_SHIM, FleetrunError, translate

ROOT = Path(__file__).resolve().parent.parent


def test_parameter_server_counts_map_onto_launch():
    args, env = translate(["--server_num", "2", "--worker_num", "3", "train.py", "--lr", "1"])
    assert args == ["--log_dir", "log", "--server_num", "2", "--worker_num", "3", RANK_SHIM,
                    "train.py", "--lr", "1"]
    assert env == {fleetrun.SERVERS_ENV: "127.0.0.1:6170,127.0.0.1:6171",
                   fleetrun.WORKERS_ENV: "127.0.0.1:6172,127.0.0.1:6173,127.0.0.1:6174"}


def test_endpoint_lists_give_the_counts_and_paddles_worker_ports():
    args, env = translate(["--servers=127.0.0.1:7000,localhost:7001",
                           "--workers", "127.0.0.1,127.0.0.1:9000", "--log_dir", "L", "t.py"])
    assert args[:6] == ["--log_dir", "L", "--server_num", "2", "--worker_num", "2"]
    assert env[fleetrun.SERVERS_ENV] == "127.0.0.1:7000,localhost:7001"
    # a worker without a port gets Paddle's 6170 + servers + index
    assert env[fleetrun.WORKERS_ENV] == "127.0.0.1:6172,127.0.0.1:9000"
    args, _ = translate(["--server_num", "1", "--servers", f"{socket.gethostname()}:7000",
                         "--worker_num", "1", "t.py"])
    assert "--server_num" in args


def test_collective_flags_map_onto_launch():
    args, env = translate(["--gpus", "0,1", "--ips", "10.0.0.1,10.0.0.2", "t.py", "-x"])
    assert args == ["--log_dir", "log", "--devices", "0,1", "--hosts", "10.0.0.1,10.0.0.2",
                    "t.py", "-x"]
    assert env == {}
    # Paddle's default --ips (this node) and a plain script: one local process per launch
    args, _ = translate(["--ips", "127.0.0.1", "--nproc_per_node", "4", "--timeout", "30",
                         "t.py"])
    assert args == ["--log_dir", "log", "--timeout", "30", "--nproc_per_node", "4", "t.py"]
    assert translate(["--selected_gpus", "3", "t.py"])[0][2:4] == ["--devices", "3"]
    # a flag after the script is the script's own
    assert translate(["t.py", "--server_num", "2"])[0] == ["--log_dir", "log", "t.py",
                                                          "--server_num", "2"]


@pytest.mark.parametrize("argv, named", [
    (["--heter_worker_num", "1", "t.py"], "--heter_worker_num"),
    (["--heter_workers=127.0.0.1:1", "t.py"], "--heter_workers"),
    (["--run_mode", "ps-heter", "--server_num", "1", "t.py"], "ps-heter"),
    (["--xpus", "0", "t.py"], "--xpus"),
    (["--elastic_server", "e:1", "t.py"], "--elastic_server"),
    (["--enable_rank_mapping", "True", "t.py"], "--enable_rank_mapping"),
    (["--bogus", "1", "t.py"], "--bogus"),
    (["--run_mode", "ring", "t.py"], "--run_mode"),
    (["--run_mode", "collective", "--worker_num", "2", "t.py"], "--worker_num"),
    (["--server_num", "1", "t.py"], "--worker_num or --workers"),
    (["--worker_num", "1", "t.py"], "--server_num or --servers"),
    (["--server_num", "2", "--servers", "127.0.0.1:1", "--worker_num", "1", "t.py"],
     "--server_num 2 differs"),
    (["--server_num", "0", "--worker_num", "1", "t.py"], "--server_num"),
    (["--servers", "127.0.0.1", "--worker_num", "1", "t.py"], "has no port"),
    (["--servers", "192.0.2.7:6170", "--worker_num", "1", "t.py"], "not on this node"),
    (["--servers", "127.0.0.1:1,127.0.0.1:1", "--worker_num", "1", "t.py"], "twice"),
    (["--servers", "127.0.0.1:6171", "--worker_num", "1", "t.py"], "share endpoint"),
    (["--server_num", "1", "--worker_num", "1", "--gpus", "0", "t.py"], "--gpus"),
    (["--server_num", "1", "--worker_num", "1", "--ips", "10.0.0.1", "t.py"], "--ips"),
])
def test_refused_flags_are_named(argv, named, capsys):
    with pytest.raises(FleetrunError, match=named.replace(" ", ".")):
        translate(argv)
    assert fleetrun.main(argv) == 2  # argparse's status for a bad command line
    err = capsys.readouterr().err
    assert err.startswith("fleetrun: error:") and named in err
    assert cli.main(["fleetrun", *argv]) == 2  # `graphc fleetrun` is the same command


def test_missing_script_is_an_error(tmp_path, capsys):
    missing = str(tmp_path / "none.py")
    assert fleetrun.main(["--server_num", "1", "--worker_num", "1", missing]) == 1
    assert f"training script '{missing}' does not exist" in capsys.readouterr().err
    assert fleetrun.main([missing]) == 1  # graphc launch's own check
    assert "does not exist" in capsys.readouterr().err


def test_http_port_is_accepted():
    args, _ = translate(["--server_num", "1", "--worker_num", "1", "--http_port", "6769",
                         "t.py"])
    assert "--http_port" not in args


ROLE_SCRIPT = """\
import json, os, sys
from pathlib import Path
keys = ("TRAINING_ROLE", "PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_TRAINER_ENDPOINTS",
        "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID", "PADDLE_PSERVER_ID", "POD_IP",
        "PADDLE_PORT", "PADDLE_CURRENT_ENDPOINT")
me = os.environ.get("OMPI_COMM_WORLD_RANK", "?")
seen = {k: os.environ.get(k) for k in keys}
seen["argv"], seen["file"] = sys.argv[1:], Path(__file__).name
seen["path0"] = sys.path[0]
(Path(sys.argv[1]) / f"rank{me}.json").write_text(json.dumps(seen))
print("role", seen["TRAINING_ROLE"], seen["PADDLE_CURRENT_ENDPOINT"])
"""


def _run(argv, tmp_path) -> subprocess.CompletedProcess:
    script = tmp_path / "roles.py"
    script.write_text(ROLE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k in [k for k in env if k.startswith(("PADDLE_", "TRAINING_ROLE", "POD_IP"))]:
        env.pop(k)
    return subprocess.run([sys.executable, "-m", "graphc", "fleetrun", "--timeout", "60",
                           *argv, str(script), str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def _ranks(tmp_path, n) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(n)]


def test_parameter_server_job_sets_paddles_variables(tmp_path):
    proc = _run(["--servers", "127.0.0.1:7100", "--workers", "127.0.0.1:7200"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fleetrun: graphc launch --log_dir log --timeout 60 --server_num 1 --worker_num 1" \
        in proc.stderr
    server, trainer = _ranks(tmp_path, 2)
    common = {"PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:7100",
              "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:7200", "PADDLE_TRAINERS_NUM": "1",
              "argv": [str(tmp_path)], "file": "roles.py", "path0": str(tmp_path)}
    assert server == {**common, "TRAINING_ROLE": "PSERVER", "PADDLE_PSERVER_ID": "0",
                      "PADDLE_TRAINER_ID": None, "POD_IP": "127.0.0.1", "PADDLE_PORT": "7100",
                      "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:7100"}
    assert trainer == {**common, "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0",
                       "PADDLE_PSERVER_ID": None, "POD_IP": "127.0.0.1",
                       "PADDLE_PORT": "7200", "PADDLE_CURRENT_ENDPOINT": "127.0.0.1:7200"}
    # Paddle's default --log_dir: each rank's output in log/
    assert "role PSERVER 127.0.0.1:7100" in (tmp_path / "log" / "workerlog.0").read_text()
    assert "role TRAINER 127.0.0.1:7200" in (tmp_path / "log" / "workerlog.1").read_text()


def test_collective_job_sets_paddles_variables(tmp_path):
    proc = _run(["--nproc_per_node", "2", "--log_dir", str(tmp_path / "logs")], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = _ranks(tmp_path, 2)
    assert [r["PADDLE_TRAINER_ID"] for r in ranks] == ["0", "1"]
    assert {r["PADDLE_TRAINERS_NUM"] for r in ranks} == {"2"}
    assert {r["TRAINING_ROLE"] for r in ranks} == {None}
    assert sorted((tmp_path / "logs").iterdir()) == [tmp_path / "logs" / "workerlog.0",
                                                     tmp_path / "logs" / "workerlog.1"]
